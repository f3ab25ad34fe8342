"""Feature statistics of LeRobot datasets (meta/stats.json): min, max, mean, std, count and quantiles.

`compute_stats` computes them over frames; `aggregate_stats` combines per-episode
statistics the way LeRobot does (v2.1's episodes_stats.jsonl); the JSON helpers
convert to and from the file's lists.

Camera features (image / video) get per-channel statistics of pixel values scaled
to [0, 1], each of shape (3, 1, 1), the way LeRobot's `compute_episode_stats` does:
over a subsample of an episode's frames (`sample_frames`: LeRobot's
`sample_indices`, every frame of an episode up to 100 frames, then ~T^0.75 evenly
spaced ones, at most 10,000; frames 300 pixels or larger on a side are strided
down to about 150), and `count` is the number of sampled frames. They are computed
exactly from per-channel histograms of the 256 pixel values (`pixel_histogram`,
`pixel_stats`), which add up across episodes, so the dataset's stats are exact
over all episodes' samples (quantiles as np.quantile's linear method).
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


def sample_indices(length: int) -> np.ndarray:
    """LeRobot's `sample_indices`: the frames of an episode of `length` frames its image stats are computed on."""
    n = length if length < 100 else max(100, min(int(length ** 0.75), 10_000))
    return np.round(np.linspace(0, length - 1, n)).astype(int)


def sample_frames(frames: np.ndarray) -> np.ndarray:
    """The (n, h, w, 3) uint8 subsample of (T, H, W, 3) frames that camera stats use (module docstring)."""
    frames = frames[sample_indices(len(frames))]
    height, width = frames.shape[1:3]
    if max(height, width) >= 300:  # LeRobot's auto_downsample_height_width (target 150, threshold 300)
        step = int(max(height, width) / 150)
        frames = frames[:, ::step, ::step]
    return frames


def pixel_histogram(frames: np.ndarray) -> np.ndarray:
    """(3, 256) int64 counts of each channel's pixel values in (n, h, w, 3) uint8 frames."""
    flat = frames.reshape(-1, frames.shape[-1])
    return np.stack([np.bincount(flat[:, c], minlength=256) for c in range(flat.shape[1])]).astype(np.int64)


def pixel_stats(histogram: np.ndarray, num_frames: int) -> dict[str, np.ndarray]:
    """min, max, mean, std, count (= num_frames) and q01..q99 of each channel, pixel values / 255, shape (3, 1, 1)."""
    values = np.arange(histogram.shape[1], dtype=np.float64)
    n = histogram.sum(1)
    if (n == 0).any():
        raise ValueError("pixel_stats: no pixels counted")
    cum = np.cumsum(histogram, 1)

    def value_at(rank: np.ndarray) -> np.ndarray:  # the rank-th smallest pixel value per channel (0-based)
        return np.array([np.searchsorted(cum[c], rank[c], side="right") for c in range(len(cum))], dtype=np.float64)

    mean = (histogram * values).sum(1) / n
    std = np.sqrt((histogram * (values[None] - mean[:, None]) ** 2).sum(1) / n)
    out = {"min": value_at(np.zeros_like(n)), "max": value_at(n - 1), "mean": mean, "std": std}
    for p in QUANTILES:
        pos = p * (n - 1)
        lo = np.floor(pos).astype(np.int64)
        low, high = value_at(lo), value_at(np.minimum(lo + 1, n - 1))
        out[qkey(p)] = low + (pos - lo) * (high - low)
    out = {k: (v / 255.0).reshape(-1, 1, 1) for k, v in out.items()}
    out["count"] = np.array([num_frames], dtype=np.int64)
    return out
