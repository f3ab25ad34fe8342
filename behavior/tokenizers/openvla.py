"""OpenVLA's uniform-bin action tokenizer, reproducing its arithmetic exactly.

Inputs are assumed already normalised to [-1, 1] (OpenVLA normalises outside
the tokenizer; see :mod:`behavior.normalize`).

- edges   = linspace(-1, 1, n_bins)            (256 edges)
- centres = (edges[:-1] + edges[1:]) / 2       (255 centres)
- encode: d = digitize(clip(x, -1, 1), edges)  in 1..n_bins;  id = vocab_size - d
- decode: idx = clip(vocab_size - id - 1, 0, n_bins - 2); value = centres[idx]

Consequences (all identical to OpenVLA):
- ids lie in [vocab_size - n_bins, vocab_size - 1] (32000 -> 31744..31999);
- x = -1 -> d = 1 -> id = vocab_size - 1 -> centres[0];
- x = 1 (and anything above, after the clip) -> d = n_bins -> lowest id, which
  decodes to the same value as d = n_bins - 1 (centres[-1]): n_bins ids but only
  n_bins - 1 distinct decoded values;
- a value exactly on an interior edge belongs to the bin above it (digitize
  with right=False);
- NaN survives the clip and digitize puts it after every edge (d = n_bins), so
  NaN encodes like +1 to the lowest id. No error is raised, as in OpenVLA;
- decoding any id outside the range is clipped to the first/last centre.

``fit`` is a no-op. ``vocab_size`` is the *base* vocabulary size that the ids
count back from (32000 for Llama-2), not the number of bins; the default 256
makes the ids 0..255.
"""

from __future__ import annotations

import numpy as np

from .base import PER_VECTOR, ActionTokenizer


class OpenVLATokenizer(ActionTokenizer):
    kind = PER_VECTOR

    def __init__(self, vocab_size: int = 256, n_bins: int = 256) -> None:
        if n_bins < 2:
            raise ValueError("n_bins must be >= 2")
        if vocab_size < n_bins:
            raise ValueError(f"vocab_size {vocab_size} < n_bins {n_bins}: ids would be negative")
        self._vocab_size = int(vocab_size)
        self.n_bins = int(n_bins)
        self.bins = np.linspace(-1.0, 1.0, self.n_bins)
        self.bin_centers = (self.bins[:-1] + self.bins[1:]) / 2.0

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def min_token_id(self) -> int:
        return self._vocab_size - self.n_bins

    def roundtrip_bound(self) -> float:
        """Half a bin width, 1 / (n_bins - 1), on [-1, 1]."""
        return 1.0 / (self.n_bins - 1)

    def fit(self, actions=None) -> OpenVLATokenizer:
        return self

    def encode(self, actions) -> np.ndarray:
        x = np.clip(np.asarray(actions, dtype=np.float64), -1.0, 1.0)
        d = np.digitize(x, self.bins)
        return (self._vocab_size - d).astype(np.int64)

    def decode(self, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        idx = np.clip(self._vocab_size - ids - 1, 0, self.bin_centers.shape[0] - 1)
        return self.bin_centers[idx]

    def get_config(self) -> dict:
        return {"vocab_size": self._vocab_size, "n_bins": self.n_bins}
