"""Feature statistics of LeRobot datasets (meta/stats.json): min, max, mean, std, count and quantiles.

`compute_stats` computes them over frames; `aggregate_stats` combines per-episode
statistics the way LeRobot does (v2.1's episodes_stats.jsonl); the JSON helpers
convert to and from the file's lists.
"""

from __future__ import annotations

import numpy as np

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)  # LeRobot's DEFAULT_QUANTILES -> q01, q10, q50, q90, q99


def compute_stats(arrays: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Per-feature min, max, mean, std (population), q01..q99 and count over the
    first axis. A (N,) array gives stats of shape (1,), a (N, D) array shape (D,)
    (LeRobot's convention); count is [N]. Booleans count as 0/1; arrays that are
    not numeric (strings, images stored as objects) are skipped."""
    stats = {}
    for key, arr in arrays.items():
        arr = np.asarray(arr)
        if arr.dtype.kind not in "biuf":
            continue
        if arr.ndim == 0 or arr.shape[0] == 0:
            raise ValueError(f"compute_stats: feature {key!r} has no frames (shape {arr.shape})")
        x = arr.astype(np.float64).reshape(arr.shape[0], -1)
        q = np.quantile(x, QUANTILES, axis=0)
        stats[key] = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0),
                      "count": np.array([x.shape[0]], dtype=np.int64),
                      **{qkey(p): q[i] for i, p in enumerate(QUANTILES)}}
    return stats


def aggregate_stats(stats_list: list[dict[str, dict]]) -> dict[str, dict[str, np.ndarray]]:
    """Dataset stats from per-episode stats: min of mins, max of maxes,
    count-weighted mean and pooled std (the parallel-variance formula)."""
    out = {}
    for key in dict.fromkeys(k for s in stats_list for k in s):
        parts = [s[key] for s in stats_list if key in s]
        counts = np.array([float(np.asarray(p["count"]).reshape(-1)[0]) for p in parts])
        means = np.stack([np.asarray(p["mean"], dtype=np.float64) for p in parts])
        var = np.stack([np.asarray(p["std"], dtype=np.float64) ** 2 for p in parts])
        w = counts.reshape(-1, *([1] * (means.ndim - 1)))
        mean = (means * w).sum(0) / counts.sum()
        out[key] = {"min": np.min(np.stack([np.asarray(p["min"], dtype=np.float64) for p in parts]), 0),
                    "max": np.max(np.stack([np.asarray(p["max"], dtype=np.float64) for p in parts]), 0),
                    "mean": mean, "std": np.sqrt(((var + (means - mean) ** 2) * w).sum(0) / counts.sum()),
                    "count": np.array([int(counts.sum())], dtype=np.int64)}
    return out


def qkey(p: float) -> str:
    return f"q{int(round(p * 100)):02d}"


def stats_to_json(stats: dict) -> dict:
    return {k: {s: np.asarray(v).tolist() for s, v in d.items()} for k, d in stats.items()}


def stats_from_json(obj: dict) -> dict:
    return {k: {s: np.asarray(v, dtype=np.int64 if s == "count" else np.float64) for s, v in d.items()}
            for k, d in obj.items()}
