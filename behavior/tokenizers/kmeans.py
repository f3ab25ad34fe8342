"""BeT-style k-means action tokenizer: one token per whole action vector.

fit: deterministic k-means in numpy (k-means++ seeding from
``np.random.default_rng(seed)``, then Lloyd iterations until assignments stop
changing or ``n_iter`` is reached; an emptied cluster is re-seeded with the
point farthest from its current centre). Same data + seed -> same centres.

encode: (..., D) float -> (...,) int64 nearest-centre ids. NOTE the output
drops the last axis, since one token codes the whole D-vector (unlike the
per-dimension tokenizers).
encode_with_offsets: -> (ids (...,), offsets (..., D)) with offsets = x - centre.
decode(ids, offsets=None): centres[ids] (+ offsets). With the offsets from
encode_with_offsets the reconstruction equals x up to one float rounding
((x - c) + c). Ids are not clipped: an out-of-range id raises IndexError.
``vocab_size == k``. NaN inputs raise ValueError. ``kind`` is CLUSTER: the codec
adds the offsets, which the policy predicts with a head of its own.
"""

from __future__ import annotations

import numpy as np

from .base import CLUSTER, ActionTokenizer, as_float, require_fitted


def _sqdist(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances (N, K), computed without cancellation issues."""
    return ((x[:, None, :] - c[None, :, :]) ** 2).sum(-1)


def nearest_centre(x: np.ndarray, c: np.ndarray, block: int = 4096) -> np.ndarray:
    """Index of the nearest row of `c` for every row of `x` (N,), in blocks of `block` rows to bound memory."""
    out = np.empty(x.shape[0], dtype=np.int64)
    for s in range(0, x.shape[0], block):
        out[s:s + block] = _sqdist(x[s:s + block], c).argmin(1)
    return out


def kmeans(x: np.ndarray, k: int, seed: int = 0, n_iter: int = 100) -> np.ndarray:
    """Deterministic k-means of the rows of `x` (N, D) -> centres (k, D) (algorithm: module docstring)."""
    n = x.shape[0]
    if n < k:
        raise ValueError(f"k-means needs at least k={k} samples, got {n}")
    rng = np.random.default_rng(seed)
    # k-means++ seeding
    centres = np.empty((k, x.shape[1]))
    centres[0] = x[rng.integers(n)]
    d2 = _sqdist(x, centres[:1])[:, 0]
    for j in range(1, k):
        total = d2.sum()
        idx = rng.choice(n, p=d2 / total) if total > 0 else rng.integers(n)
        centres[j] = x[idx]
        d2 = np.minimum(d2, _sqdist(x, centres[j:j + 1])[:, 0])
    assign = None
    for _ in range(n_iter):
        new = nearest_centre(x, centres)
        if assign is not None and np.array_equal(new, assign):
            break
        assign = new
        counts = np.bincount(assign, minlength=k)
        sums = np.zeros_like(centres)
        np.add.at(sums, assign, x)
        nonempty = counts > 0
        centres[nonempty] = sums[nonempty] / counts[nonempty, None]
        for j in np.nonzero(~nonempty)[0]:
            far = ((x - centres[assign]) ** 2).sum(1).argmax()
            centres[j] = x[far]
            assign[far] = j
    return centres


class KMeansTokenizer(ActionTokenizer):
    kind = CLUSTER

    def __init__(self, k: int = 64, seed: int = 0, n_iter: int = 100) -> None:
        self.k, self.seed, self.n_iter = int(k), int(seed), int(n_iter)
        self.centers = None  # (k, D)

    @property
    def vocab_size(self) -> int:
        return self.k

    def fit(self, actions) -> KMeansTokenizer:
        a = as_float(actions)
        self.centers = kmeans(a.reshape(-1, a.shape[-1]), self.k, self.seed, self.n_iter)
        return self

    def _flat(self, actions):
        require_fitted(self.centers is not None, self)
        x = as_float(actions)
        if x.shape[-1] != self.centers.shape[1]:
            raise ValueError(f"last dim {x.shape[-1]} != fitted dim {self.centers.shape[1]}")
        return x, x.reshape(-1, x.shape[-1])

    def encode(self, actions) -> np.ndarray:
        x, flat = self._flat(actions)
        return nearest_centre(flat, self.centers).reshape(x.shape[:-1])

    def encode_with_offsets(self, actions):
        x, flat = self._flat(actions)
        ids = nearest_centre(flat, self.centers)
        offsets = flat - self.centers[ids]
        return ids.reshape(x.shape[:-1]), offsets.reshape(x.shape)

    def decode(self, ids, offsets=None) -> np.ndarray:
        require_fitted(self.centers is not None, self)
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.k):
            raise IndexError(f"cluster ids must lie in 0..{self.k - 1}")
        out = self.centers[ids]
        if offsets is not None:
            out = out + np.asarray(offsets, dtype=np.float64)
        return out

    def get_config(self) -> dict:
        return {"k": self.k, "seed": self.seed, "n_iter": self.n_iter}

    def get_arrays(self):
        require_fitted(self.centers is not None, self)
        return {"centers": self.centers}

    def set_arrays(self, arrays) -> None:
        self.centers = np.asarray(arrays["centers"], dtype=np.float64)
