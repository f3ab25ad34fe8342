"""Per-dimension empirical-quantile binning (equal-mass bins fitted on data).

fit: for each dimension d, edges[d] = quantile(actions[..., d], linspace(0, 1, n_bins + 1))
(numpy linear interpolation), so edges[d, 0] / edges[d, -1] are the data min/max.
encode: id = number of interior edges <= x (searchsorted side="right"), i.e. bin i
is [edges[i], edges[i+1]); values below/above the fitted range fall into the
first/last bin. With tied data some bins have zero width and are never produced
by encode except at the tie (x equal to a repeated edge goes to the highest of
those bins).

decode: ``decode_to="midpoint"`` (default) returns (edges[i] + edges[i+1]) / 2,
which bounds the in-range round-trip error by half the bin's width.
``decode_to="median"`` returns the median of the fitted samples that fell into
the bin (empty bins fall back to the midpoint); lower typical error on skewed
data, but the bound is then the full bin width. Both tables are stored.

Shapes: (..., D) -> int64 (..., D); ``vocab_size == n_bins``. NaN raises.
"""

from __future__ import annotations

import numpy as np

from .base import PER_VECTOR, ActionTokenizer, as_float, require_fitted


class QuantileTokenizer(ActionTokenizer):
    kind = PER_VECTOR

    def __init__(self, n_bins: int = 256, decode_to: str = "midpoint") -> None:
        if n_bins < 1:
            raise ValueError("n_bins must be >= 1")
        if decode_to not in ("midpoint", "median"):
            raise ValueError("decode_to must be 'midpoint' or 'median'")
        self.n_bins = int(n_bins)
        self.decode_to = decode_to
        self.edges = None  # (D, n_bins + 1)
        self.medians = None  # (D, n_bins)

    @property
    def vocab_size(self) -> int:
        return self.n_bins

    @property
    def midpoints(self) -> np.ndarray:
        require_fitted(self.edges is not None, self)
        return (self.edges[:, :-1] + self.edges[:, 1:]) / 2.0

    def roundtrip_bound(self) -> float:
        """Inside the fitted range: half the widest bin (midpoint decoding), the widest bin (median decoding)."""
        require_fitted(self.edges is not None, self)
        widest = float(np.diff(self.edges, axis=1).max())
        return widest / 2.0 if self.decode_to == "midpoint" else widest

    def fit(self, actions) -> QuantileTokenizer:
        a = as_float(actions)
        a = a.reshape(-1, a.shape[-1])
        qs = np.linspace(0.0, 1.0, self.n_bins + 1)
        self.edges = np.quantile(a, qs, axis=0).T.copy()  # (D, n+1)
        mids = (self.edges[:, :-1] + self.edges[:, 1:]) / 2.0
        ids = self._bin(a)  # (N, D)
        med = mids.copy()
        for d in range(a.shape[1]):
            order = np.argsort(ids[:, d], kind="stable")
            sid, vals = ids[order, d], a[order, d]
            starts = np.searchsorted(sid, np.arange(self.n_bins), side="left")
            stops = np.searchsorted(sid, np.arange(self.n_bins), side="right")
            for b in np.nonzero(stops > starts)[0]:
                med[d, b] = np.median(vals[starts[b]:stops[b]])
        self.medians = med
        return self

    def _bin(self, x: np.ndarray) -> np.ndarray:
        D = self.edges.shape[0]
        if x.shape[-1] != D:
            raise ValueError(f"last dim {x.shape[-1]} != fitted dim {D}")
        out = np.empty(x.shape, dtype=np.int64)
        for d in range(D):
            out[..., d] = np.searchsorted(self.edges[d, 1:-1], x[..., d], side="right")
        return out

    def encode(self, actions) -> np.ndarray:
        require_fitted(self.edges is not None, self)
        return self._bin(as_float(actions))

    def decode(self, ids) -> np.ndarray:
        require_fitted(self.edges is not None, self)
        ids = np.clip(np.asarray(ids, dtype=np.int64), 0, self.n_bins - 1)
        table = self.midpoints if self.decode_to == "midpoint" else self.medians
        D = table.shape[0]
        if ids.shape[-1] != D:
            raise ValueError(f"last dim {ids.shape[-1]} != fitted dim {D}")
        return table[np.arange(D), ids]

    def get_config(self) -> dict:
        return {"n_bins": self.n_bins, "decode_to": self.decode_to}

    def get_arrays(self):
        require_fitted(self.edges is not None, self)
        return {"edges": self.edges, "medians": self.medians}

    def set_arrays(self, arrays) -> None:
        self.edges = np.asarray(arrays["edges"], dtype=np.float64)
        self.medians = np.asarray(arrays["medians"], dtype=np.float64)
