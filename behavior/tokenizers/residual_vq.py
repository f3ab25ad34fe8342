"""Residual vector quantisation of action vectors (the action codes of VQ-BeT), with k-means codebooks.

fit: level 0 is k-means (`behavior.tokenizers.kmeans.kmeans`, seed ``seed``) on the
action vectors; each further level l is k-means (seed ``seed + l``) on what the levels
before it left over, r_l = x - sum_{j<l} codebook_j[id_j]. Same data + seed -> same codebooks.

encode: (..., D) float -> (..., n_levels) int64: at each level the nearest code to the
current residual, which is then subtracted. decode: (..., n_levels) -> (..., D), the sum
of the selected code vectors. Ids lie in 0 .. codebook_size - 1 at every level (the
position of an id says its level), so ``vocab_size == codebook_size``; an out-of-range id
raises IndexError. With a policy's chunk of H actions a chunk is H x n_levels ids.

No a-priori bound on the round-trip error (``roundtrip_bound`` is None): on the data it
was fitted on, every level's k-means centres are the means of their cells, so the mean
squared error never exceeds the data's total variance and does not grow with the levels.
NaN inputs raise ValueError. Codebooks are saved as one (n_levels, codebook_size, D) array.
"""

from __future__ import annotations

import numpy as np

from .base import PER_VECTOR, ActionTokenizer, as_float, require_fitted
from .kmeans import kmeans, nearest_centre


class ResidualVQTokenizer(ActionTokenizer):
    kind = PER_VECTOR

    def __init__(self, n_levels: int = 4, codebook_size: int = 32, seed: int = 0, n_iter: int = 100) -> None:
        if n_levels < 1 or codebook_size < 1:
            raise ValueError(f"need n_levels >= 1 and codebook_size >= 1, got {n_levels}, {codebook_size}")
        self.n_levels, self.codebook_size = int(n_levels), int(codebook_size)
        self.seed, self.n_iter = int(seed), int(n_iter)
        self.codebooks = None  # (n_levels, codebook_size, D)

    @property
    def vocab_size(self) -> int:
        return self.codebook_size

    def fit(self, actions) -> ResidualVQTokenizer:
        a = as_float(actions)
        residual = a.reshape(-1, a.shape[-1]).copy()
        books = []
        for level in range(self.n_levels):
            book = kmeans(residual, self.codebook_size, self.seed + level, self.n_iter)
            residual -= book[nearest_centre(residual, book)]
            books.append(book)
        self.codebooks = np.stack(books)
        return self

    def encode(self, actions) -> np.ndarray:
        require_fitted(self.codebooks is not None, self)
        x = as_float(actions)
        if x.shape[-1] != self.codebooks.shape[2]:
            raise ValueError(f"last dim {x.shape[-1]} != fitted dim {self.codebooks.shape[2]}")
        residual = x.reshape(-1, x.shape[-1]).copy()
        ids = np.empty((residual.shape[0], self.n_levels), dtype=np.int64)
        for level, book in enumerate(self.codebooks):
            ids[:, level] = nearest_centre(residual, book)
            residual -= book[ids[:, level]]
        return ids.reshape(*x.shape[:-1], self.n_levels)

    def decode(self, ids) -> np.ndarray:
        require_fitted(self.codebooks is not None, self)
        ids = np.asarray(ids, dtype=np.int64)
        if ids.shape[-1:] != (self.n_levels,):
            raise ValueError(f"ids must end in one id per level ({self.n_levels}), got shape {ids.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.codebook_size):
            raise IndexError(f"code ids must lie in 0..{self.codebook_size - 1}")
        return sum(self.codebooks[level][ids[..., level]] for level in range(self.n_levels))

    def get_config(self) -> dict:
        return {"n_levels": self.n_levels, "codebook_size": self.codebook_size, "seed": self.seed, "n_iter": self.n_iter}

    def get_arrays(self):
        require_fitted(self.codebooks is not None, self)
        return {"codebooks": self.codebooks}

    def set_arrays(self, arrays) -> None:
        self.codebooks = np.asarray(arrays["codebooks"], dtype=np.float64)
