"""Per-dimension q01/q99 action normaliser (OpenVLA "BOUNDS_Q99" convention).

normalize:   x_n = clip(2 (x - q01) / (q99 - q01) - 1, -1, 1)
unnormalize: x   = 0.5 (x_n + 1)(q99 - q01) + q01          (no clipping, as OpenVLA)

Rules
- Dimensions with q01 == q99 (constant / unused) normalise to exactly 0 and
  unnormalise to q01 (the constant).
- ``mask`` is an optional per-dimension boolean array; ``False`` leaves that
  dimension untouched in both directions (e.g. an already-binary gripper).
  The constant-dimension rule applies only to masked-in (True) dimensions.
- NaN inputs propagate as NaN (np.clip keeps NaN).
- ``eps`` (default 0.0) is added to the denominator; OpenVLA's RLDS pipeline
  uses 1e-8 there, which makes ``unnormalize`` only approximately the inverse.
  The default 0.0 keeps the two maps exact inverses on [q01, q99].

Statistics are fitted with ``np.quantile`` (linear interpolation) over all
leading axes, i.e. an array of shape (..., D) contributes all its vectors.
Saved as ``normalizer.json`` in a directory (floats round-trip exactly).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from data.atomic import read_json, write_json

FILENAME = "normalizer.json"


class ActionNormalizer:
    def __init__(
        self,
        q01: Sequence[float] | None = None,
        q99: Sequence[float] | None = None,
        mask: Sequence[bool] | None = None,
        eps: float = 0.0,
    ) -> None:
        if (q01 is None) != (q99 is None):
            raise ValueError("give both q01 and q99, or neither (then call fit)")
        self.q01 = None if q01 is None else np.asarray(q01, dtype=np.float64).reshape(-1)
        self.q99 = None if q99 is None else np.asarray(q99, dtype=np.float64).reshape(-1)
        self.mask = None if mask is None else np.asarray(mask, dtype=bool).reshape(-1)
        self.eps = float(eps)
        if self.q01 is not None:
            self._check()

    # ------------------------------------------------------------------ stats
    def fit(self, actions: np.ndarray) -> ActionNormalizer:
        a = np.asarray(actions, dtype=np.float64)
        if a.ndim < 1 or a.size == 0:
            raise ValueError("fit needs a non-empty array of shape (..., D)")
        a = a.reshape(-1, a.shape[-1])
        self.q01 = np.quantile(a, 0.01, axis=0)
        self.q99 = np.quantile(a, 0.99, axis=0)
        self._check()
        return self

    def _check(self) -> None:
        if self.q01.shape != self.q99.shape:
            raise ValueError(f"q01 {self.q01.shape} and q99 {self.q99.shape} differ in shape")
        if np.any(self.q99 < self.q01):
            raise ValueError("q99 must be >= q01 in every dimension")
        if self.mask is not None and self.mask.shape != self.q01.shape:
            raise ValueError(f"mask shape {self.mask.shape} != stats shape {self.q01.shape}")

    @property
    def dim(self) -> int:
        self._require_fitted()
        return int(self.q01.shape[0])

    def _require_fitted(self) -> None:
        if self.q01 is None:
            raise RuntimeError("normaliser has no statistics: call fit() or pass q01/q99")

    def _masks(self):
        self._require_fitted()
        use = np.ones_like(self.q01, dtype=bool) if self.mask is None else self.mask
        const = self.q01 == self.q99
        return use, const

    # -------------------------------------------------------------- transform
    def normalize(self, actions: np.ndarray) -> np.ndarray:
        x = np.asarray(actions, dtype=np.float64)
        use, const = self._masks()
        if x.shape[-1] != self.q01.shape[0]:
            raise ValueError(f"last dim {x.shape[-1]} != {self.q01.shape[0]}")
        span = self.q99 - self.q01
        safe = np.where(const, 1.0, span + self.eps)
        y = np.clip(2.0 * (x - self.q01) / safe - 1.0, -1.0, 1.0)
        y = np.where(const, np.where(np.isnan(x), np.nan, 0.0), y)
        return np.where(use, y, x)

    def unnormalize(self, normalized: np.ndarray) -> np.ndarray:
        y = np.asarray(normalized, dtype=np.float64)
        use, _ = self._masks()
        if y.shape[-1] != self.q01.shape[0]:
            raise ValueError(f"last dim {y.shape[-1]} != {self.q01.shape[0]}")
        x = 0.5 * (y + 1.0) * (self.q99 - self.q01) + self.q01
        return np.where(use, x, y)

    # ------------------------------------------------------------------- io
    def to_dict(self) -> dict:
        self._require_fitted()
        return {
            "q01": self.q01.tolist(),
            "q99": self.q99.tolist(),
            "mask": None if self.mask is None else self.mask.tolist(),
            "eps": self.eps,
        }

    @classmethod
    def from_dict(cls, d: dict) -> ActionNormalizer:
        return cls(q01=d["q01"], q99=d["q99"], mask=d.get("mask"), eps=d.get("eps", 0.0))

    def save(self, directory: str) -> str:
        path = os.path.join(directory, FILENAME)
        write_json(Path(path), self.to_dict())
        return path

    @classmethod
    def load(cls, directory: str) -> ActionNormalizer:
        return cls.from_dict(read_json(Path(directory) / FILENAME))


__all__ = ["ActionNormalizer"]
