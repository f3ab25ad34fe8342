"""The action-tokenizer interface (`ActionTokenizer`) and the (non-pickle) files a tokenizer is saved as.

A tokenizer maps actions normalised to [-1, 1] (`behavior.normalize`) to int64 ids in
``0 .. vocab_size - 1`` and back. Its class attribute ``kind`` says how ids are laid out,
which is all `behavior.codec.ActionCodec` needs to know:

- ``PER_VECTOR``: every action vector gets a fixed number of ids on the last axis,
  ``encode`` (..., D) -> (..., W), ``decode`` (..., W) -> (..., D); W = D for the
  per-dimension bins (openvla, uniform, quantile), W = the number of levels for residual VQ.
- ``CLUSTER``: one cluster id per action vector, ``encode`` (..., D) -> (...,), plus a
  continuous residual offset (``encode_with_offsets``; ``decode(ids, offsets)``), as BeT.
- ``SEQUENCE``: a chunk (T, D) becomes a variable-length 1-D id array (FAST); a batch
  (N, T, D) a list of them.

Every tokenizer implements ``fit(actions) -> self`` (a no-op for the data-independent
ones), ``encode``, ``decode``, ``vocab_size``, ``get_config`` (its constructor arguments
plus fitted scalars) and, when fitted arrays exist, ``get_arrays`` / ``set_arrays``.
``roundtrip_bound()`` states the largest absolute error ``decode(encode(x)) - x`` for
``x`` inside the range the tokenizer covers, or None where none holds a priori (the
vector quantisers, whose error depends on the data).

``save(dir)`` writes ``config.json`` (``{"_target_": "<module>.<Class>", **get_config()}``)
and ``arrays.safetensors``; `behavior.tokenizers.load_tokenizer` restores it. Inputs are
handled as float64; decoded values are float64.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

import numpy as np

from data.atomic import atomic_file, read_json, write_json

CONFIG_FILE = "config.json"
ARRAYS_FILE = "arrays.safetensors"

PER_VECTOR, CLUSTER, SEQUENCE = "per_vector", "cluster", "sequence"
KINDS = (PER_VECTOR, CLUSTER, SEQUENCE)


class ActionTokenizer(ABC):
    #: how ids are laid out (PER_VECTOR, CLUSTER or SEQUENCE; see the module docstring); every class sets it
    kind: ClassVar[str]

    @abstractmethod
    def fit(self, actions: np.ndarray) -> ActionTokenizer:
        """Fit on normalised actions (no-op for data-independent tokenizers); returns self."""

    @abstractmethod
    def encode(self, actions: np.ndarray):
        """Normalised actions -> int64 token ids (layout given by ``kind``)."""

    @abstractmethod
    def decode(self, ids):
        """Token ids -> float64 actions (inverse of encode up to quantisation)."""

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Size of the id space the tokenizer emits into."""

    @abstractmethod
    def get_config(self) -> dict:
        """JSON-serialisable constructor kwargs (plus fitted scalars)."""

    def roundtrip_bound(self) -> float | None:
        """Largest |decode(encode(x)) - x| for x in the covered range; None when no bound holds a priori."""
        return None

    def get_arrays(self) -> dict[str, np.ndarray]:
        """Fitted arrays to store in safetensors (empty if none)."""
        return {}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore fitted arrays after construction from config."""

    @classmethod
    def target(cls) -> str:
        """The import path written as ``_target_`` into config.json."""
        return f"{cls.__module__}.{cls.__qualname__}"

    def save(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        write_json(Path(directory) / CONFIG_FILE, {"_target_": self.target(), **self.get_config()})
        arrays = self.get_arrays()
        if arrays:
            save_arrays(os.path.join(directory, ARRAYS_FILE), arrays)

    @classmethod
    def load(cls, directory: str) -> ActionTokenizer:
        """Restore a tokenizer of exactly this class from `directory` (see `load_tokenizer` for any class)."""
        from behavior.tokenizers import saved_class

        cfg = read_json(Path(directory) / CONFIG_FILE)
        saved = saved_class(cfg, directory)
        if saved is not cls:
            raise ValueError(f"{directory} holds a {saved.__name__}, not a {cls.__name__}; "
                             "use behavior.tokenizers.load_tokenizer to load any tokenizer")
        tok = cls(**{k: v for k, v in cfg.items() if k not in ("_target_", "name")})
        tok.restore_files(directory)
        return tok

    def restore_files(self, directory: str) -> None:
        """Read the fitted state saved next to config.json (the arrays; FAST overrides this)."""
        path = os.path.join(directory, ARRAYS_FILE)
        if os.path.exists(path):
            self.set_arrays(load_arrays(path))


def save_arrays(path: str, arrays: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    with atomic_file(Path(path)) as tmp:
        save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(tmp))


def load_arrays(path: str) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(path)


def as_float(actions, check_finite: bool = True) -> np.ndarray:
    x = np.asarray(actions, dtype=np.float64)
    if check_finite and np.isnan(x).any():
        raise ValueError("NaN in actions")
    return x


def require_fitted(ok: bool, tokenizer: object) -> None:
    if not ok:
        raise RuntimeError(f"{type(tokenizer).__name__} is not fitted: call fit(actions) or load_tokenizer(dir)")
