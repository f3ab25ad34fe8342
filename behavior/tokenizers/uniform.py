"""Uniform per-dimension binning on [low, high] (default [-1, 1], 256 bins).

Bin i covers [low + i w, low + (i + 1) w) with w = (high - low) / n_bins; the
last bin also holds ``high``. Values outside the range are clipped into the
first/last bin. ids are 0..n_bins-1 (``vocab_size == n_bins``); decode returns
bin midpoints, so in-range round-trip error is at most w / 2. Ids outside
0..n_bins-1 are clipped when decoding. NaN inputs raise ValueError.
Shapes: (..., D) -> int64 (..., D) -> float64 (..., D). ``fit`` is a no-op.
"""

from __future__ import annotations

import numpy as np

from .base import PER_VECTOR, ActionTokenizer, as_float


class UniformTokenizer(ActionTokenizer):
    kind = PER_VECTOR

    def __init__(self, n_bins: int = 256, low: float = -1.0, high: float = 1.0) -> None:
        if n_bins < 1 or not high > low:
            raise ValueError("need n_bins >= 1 and high > low")
        self.n_bins, self.low, self.high = int(n_bins), float(low), float(high)
        self.edges = np.linspace(self.low, self.high, self.n_bins + 1)
        self.centers = (self.edges[:-1] + self.edges[1:]) / 2.0

    @property
    def vocab_size(self) -> int:
        return self.n_bins

    @property
    def bin_width(self) -> float:
        return (self.high - self.low) / self.n_bins

    def roundtrip_bound(self) -> float:
        """Half a bin width on [low, high]."""
        return self.bin_width / 2.0

    def fit(self, actions=None) -> UniformTokenizer:
        return self

    def encode(self, actions) -> np.ndarray:
        x = as_float(actions)
        # interior edges only: result is already in 0..n_bins-1 (clipping)
        return np.searchsorted(self.edges[1:-1], x, side="right").astype(np.int64)

    def decode(self, ids) -> np.ndarray:
        ids = np.clip(np.asarray(ids, dtype=np.int64), 0, self.n_bins - 1)
        return self.centers[ids]

    def get_config(self) -> dict:
        return {"n_bins": self.n_bins, "low": self.low, "high": self.high}
