"""Trajectories in the LeRobotDataset layout: write v3.0, read v3.0 and v2.1.

Plain numpy + pyarrow (pandas only for meta/tasks.parquet, written the way
LeRobot writes it: the task string as the DataFrame index, so
`pd.read_parquet` gives LeRobot's task -> task_index table).

v3.0 layout written by `write_dataset` (as LeRobot's `LeRobotDatasetMetadata`
and the v2.1 -> v3.0 converter write it; no videos):

    meta/info.json      codebase_version "v3.0", robot_type, total_episodes,
                        total_frames, total_tasks, chunks_size,
                        data_files_size_in_mb, video_files_size_in_mb, fps,
                        splits {"train": "0:N"}, data_path, video_path null,
                        features {name: {dtype, shape, names, fps}}
    meta/stats.json     {feature: {min, max, mean, std, count, q01, q10, q50,
                        q90, q99}} over all frames (exact: np.quantile over the
                        frames; LeRobot itself averages per-episode histogram
                        quantiles, an approximation of the same numbers)
    meta/tasks.parquet  task (index) + task_index
    meta/episodes/chunk-000/file-000.parquet
                        one row per episode: episode_index, tasks (list of
                        str), length, data/chunk_index, data/file_index,
                        dataset_from_index, dataset_to_index,
                        meta/episodes/chunk_index, meta/episodes/file_index,
                        stats/{feature}/{stat} (per-episode stats) and the
                        episode's `extra` metadata as plain columns
    data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet
                        one row per frame: observation.state and action as
                        fixed-size lists of float32, [next.reward float32],
                        [next.success bool], timestamp float32 (frame_index /
                        fps), frame_index, episode_index, index, task_index
                        (int64). Whole episodes per file; a new file starts
                        when a file would pass data_files_size_in_mb.

v2.1 (read only): meta/info.json (data_path
"data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet", chunks of
chunks_size episodes), meta/episodes.jsonl, meta/tasks.jsonl and
meta/episodes_stats.jsonl, whose per-episode stats are aggregated like
LeRobot's `aggregate_stats` (min of mins, max of maxes, count-weighted mean,
pooled std); quantiles, absent in v2.1, are computed from the frames. A v3.0
stats.json without quantiles (written before LeRobot added them) gets them the
same way.

The output directory is written to a temporary sibling and renamed into place
(replacing an existing dataset there), so a crash never leaves a half dataset.
Bad input raises `LeRobotDataError` naming the file and what is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from data.atomic import atomic_directory
from data.lerobot_stats import (  # noqa: F401  (compute_stats and aggregate_stats are part of this module's API)
    QUANTILES, aggregate_stats, compute_stats, qkey, stats_from_json, stats_to_json)
from data.errors import DataError

CODEBASE_VERSION = "v3.0"
SUPPORTED_VERSIONS = ("v3.0", "v2.1")
DEFAULT_CHUNK_SIZE = 1000
DEFAULT_DATA_FILE_SIZE_IN_MB = 100
DEFAULT_VIDEO_FILE_SIZE_IN_MB = 500
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
INDEX_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")
RESERVED_EPISODE_KEYS = {"episode_index", "tasks", "length", "dataset_from_index", "dataset_to_index"}
RESERVED_PREFIXES = ("data/", "meta/", "stats/", "videos/")


class LeRobotDataError(DataError):
    """Not a readable LeRobot dataset; the message names the file and what is wrong."""


@dataclass
class Episode:
    observation_state: np.ndarray  # (T, S) float32
    action: np.ndarray  # (T, A) float32
    task: str  # natural-language task / task name, e.g. "reach-v3"
    success: np.ndarray | None = None  # (T,) bool, stored as next.success
    reward: np.ndarray | None = None  # (T,) float32, stored as next.reward
    extra: dict | None = None  # per-episode metadata, stored as columns of meta/episodes


# --------------------------------------------------------------------------- writing

def _write_table(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="snappy")


def _write_json(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=4, ensure_ascii=False) + "\n")


def _vector_column(x: np.ndarray) -> pa.Array:
    return pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1), type=pa.float32()), x.shape[1])


def _check_episodes(episodes: list[Episode]) -> list[dict[str, np.ndarray]]:
    """Validated per-episode arrays; raises ValueError naming the episode and field."""
    if not isinstance(episodes, (list, tuple)) or not episodes:
        raise ValueError("write_dataset needs a non-empty list of Episode")
    out, dims = [], None
    for i, ep in enumerate(episodes):
        where = f"episode {i}"
        if not isinstance(ep, Episode):
            raise ValueError(f"{where}: expected an Episode, got {type(ep).__name__}")
        state = np.asarray(ep.observation_state, dtype=np.float32)
        action = np.asarray(ep.action, dtype=np.float32)
        if state.ndim != 2 or action.ndim != 2:
            raise ValueError(f"{where}: observation_state {state.shape} and action {action.shape} must be 2-D (T, S) and (T, A)")
        T = state.shape[0]
        if T == 0 or action.shape[0] != T:
            raise ValueError(f"{where}: observation_state has {T} frames and action {action.shape[0]}; "
                             "both need the same number of frames, at least one")
        if dims is None:
            dims = (state.shape[1], action.shape[1], ep.success is not None, ep.reward is not None)
        if (state.shape[1], action.shape[1]) != dims[:2]:
            raise ValueError(f"{where}: state/action sizes {state.shape[1]}/{action.shape[1]} differ from "
                             f"episode 0's {dims[0]}/{dims[1]}")
        if (ep.success is not None, ep.reward is not None) != dims[2:]:
            raise ValueError(f"{where}: success/reward given for some episodes but not others; give them for all or none")
        if not (np.isfinite(state).all() and np.isfinite(action).all()):
            raise ValueError(f"{where}: observation_state or action contains NaN or inf")
        if not isinstance(ep.task, str) or not ep.task:
            raise ValueError(f"{where}: task must be a non-empty string, got {ep.task!r}")
        arrays = {"observation.state": state, "action": action}
        if ep.reward is not None:
            arrays["next.reward"] = np.asarray(ep.reward, dtype=np.float32)
        if ep.success is not None:
            arrays["next.success"] = np.asarray(ep.success)
            if arrays["next.success"].dtype != bool:
                raise ValueError(f"{where}: success must be a bool array, got {arrays['next.success'].dtype}")
        for key in ("next.reward", "next.success"):
            if key in arrays and arrays[key].shape != (T,):
                raise ValueError(f"{where}: {key} has shape {arrays[key].shape}, expected ({T},)")
        extra = ep.extra or {}
        if not isinstance(extra, dict):
            raise ValueError(f"{where}: extra must be a dict, got {type(extra).__name__}")
        for key in extra:
            if not isinstance(key, str) or key in RESERVED_EPISODE_KEYS or key.startswith(RESERVED_PREFIXES):
                raise ValueError(f"{where}: extra key {key!r} is reserved by the LeRobot episodes table "
                                 f"({sorted(RESERVED_EPISODE_KEYS)} and {RESERVED_PREFIXES}); rename it")
        out.append(arrays)
    return out


def _names(names, size: int, what: str):
    if names is None:
        return None
    names = list(names)
    if len(names) != size:
        raise ValueError(f"{what} has {len(names)} entries but the feature has {size} dimensions")
    return names


def write_dataset(out_dir, episodes: list[Episode], fps: int, robot_type: str = "sawyer",
                  state_names=None, action_names=None, *, chunks_size: int = DEFAULT_CHUNK_SIZE,
                  data_files_size_in_mb: float = DEFAULT_DATA_FILE_SIZE_IN_MB) -> Path:
    """Write episodes as a LeRobotDataset v3.0 at out_dir (replaced atomically if it exists)."""
    per_ep = _check_episodes(episodes)
    if not (isinstance(fps, (int, np.integer)) and fps > 0):
        raise ValueError(f"fps must be a positive integer, got {fps!r}")
    fps = int(fps)
    S, A = per_ep[0]["observation.state"].shape[1], per_ep[0]["action"].shape[1]
    features = {
        "observation.state": {"dtype": "float32", "shape": [S], "names": _names(state_names, S, "state_names")},
        "action": {"dtype": "float32", "shape": [A], "names": _names(action_names, A, "action_names")},
    }
    if "next.reward" in per_ep[0]:
        features["next.reward"] = {"dtype": "float32", "shape": [1], "names": None}
    if "next.success" in per_ep[0]:
        features["next.success"] = {"dtype": "bool", "shape": [1], "names": None}
    for key in INDEX_COLUMNS:
        features[key] = {"dtype": "float32" if key == "timestamp" else "int64", "shape": [1], "names": None}
    for ft in features.values():
        ft["fps"] = fps

    tasks = list(dict.fromkeys(ep.task for ep in episodes))
    task_index = {t: i for i, t in enumerate(tasks)}
    start = 0
    for i, (ep, arrays) in enumerate(zip(episodes, per_ep)):
        T = arrays["action"].shape[0]
        arrays["timestamp"] = (np.arange(T) / fps).astype(np.float32)
        arrays["frame_index"] = np.arange(T, dtype=np.int64)
        arrays["episode_index"] = np.full(T, i, dtype=np.int64)
        arrays["index"] = np.arange(start, start + T, dtype=np.int64)
        arrays["task_index"] = np.full(T, task_index[ep.task], dtype=np.int64)
        start += T
    total = start

    # Whole episodes per data file; a new file once the next episode would pass the size limit.
    bytes_per_frame = sum(a[:1].nbytes for a in per_ep[0].values())
    limit = data_files_size_in_mb * 1024 ** 2
    files, chunk, file, size = [[]], 0, 0, 0
    locations = []
    for arrays in per_ep:
        ep_bytes = arrays["action"].shape[0] * bytes_per_frame
        if files[-1] and size + ep_bytes >= limit:
            files.append([])
            chunk, file = (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)
            size = 0
        files[-1].append(arrays)
        locations.append((chunk, file))
        size += ep_bytes

    episode_rows = []
    for i, (ep, arrays) in enumerate(zip(episodes, per_ep)):
        T = arrays["action"].shape[0]
        row = {"episode_index": i, "tasks": [ep.task], "length": T,
               "data/chunk_index": locations[i][0], "data/file_index": locations[i][1],
               "dataset_from_index": int(arrays["index"][0]), "dataset_to_index": int(arrays["index"][0]) + T,
               "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0}
        for key, st in compute_stats(arrays).items():
            row.update({f"stats/{key}/{s}": np.asarray(v).tolist() for s, v in st.items()})
        row.update(ep.extra or {})
        episode_rows.append(row)
    try:
        episodes_table = pa.Table.from_pylist(episode_rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise ValueError(f"episode extra metadata must be JSON-like values of one type per key across episodes: {err}") from err

    all_frames = {k: np.concatenate([a[k] for a in per_ep]) for k in per_ep[0]}
    info = {
        "codebase_version": CODEBASE_VERSION, "robot_type": robot_type, "total_episodes": len(episodes),
        "total_frames": total, "total_tasks": len(tasks), "chunks_size": chunks_size,
        "data_files_size_in_mb": data_files_size_in_mb, "video_files_size_in_mb": DEFAULT_VIDEO_FILE_SIZE_IN_MB,
        "fps": fps, "splits": {"train": f"0:{len(episodes)}"}, "data_path": DATA_PATH, "video_path": None,
        "features": features,
    }

    import pandas as pd  # LeRobot's tasks table is a DataFrame indexed by the task string

    out = Path(out_dir).expanduser().resolve()
    with atomic_directory(out) as tmp:
        for group, (c, f) in zip(files, dict.fromkeys(locations)):
            cols = {k: np.concatenate([a[k] for a in group]) for k in group[0]}
            table = pa.table({k: _vector_column(v) if v.ndim == 2 else pa.array(v) for k, v in cols.items()})
            _write_table(table, tmp / DATA_PATH.format(chunk_index=c, file_index=f))
        _write_table(episodes_table, tmp / EPISODES_PATH.format(chunk_index=0, file_index=0))
        tasks_df = pd.DataFrame({"task_index": np.arange(len(tasks), dtype=np.int64)}, index=pd.Index(tasks, name="task"))
        _write_table(pa.Table.from_pandas(tasks_df), tmp / "meta/tasks.parquet")
        _write_json(stats_to_json(compute_stats(all_frames)), tmp / "meta/stats.json")
        _write_json(info, tmp / "meta/info.json")
    return out


# --------------------------------------------------------------------------- reading

def _load_json(path: Path):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as err:
        raise LeRobotDataError(f"{path}: file not found; a LeRobot dataset needs it") from err
    except json.JSONDecodeError as err:
        raise LeRobotDataError(f"{path}: not valid JSON ({err})") from err


def _load_jsonl(path: Path) -> list[dict]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError as err:
        raise LeRobotDataError(f"{path}: file not found; a LeRobot v2.1 dataset needs it") from err
    rows = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise LeRobotDataError(f"{path}: line {n} is not valid JSON ({err})") from err
    return rows


def _read_parquet(path: Path) -> pa.Table:
    try:
        return pq.read_table(path)
    except FileNotFoundError as err:
        raise LeRobotDataError(f"{path}: file not found; the dataset's metadata refers to it") from err
    except (pa.ArrowInvalid, OSError) as err:
        raise LeRobotDataError(f"{path}: not a readable parquet file ({err})") from err


def _column_to_numpy(col: pa.ChunkedArray, name: str, path: Path) -> np.ndarray:
    """A frame column as numpy: scalars -> (N,), equal-length numeric lists -> (N, D),
    anything else (strings, image structs) -> an object array of Python values."""
    if col.null_count:
        raise LeRobotDataError(f"{path}: column {name!r} has {col.null_count} missing values")
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return col.to_numpy()
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) and (
            pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type) or pa.types.is_boolean(t.value_type)):
        arr = col.combine_chunks()
        lengths = pc.list_value_length(arr).to_numpy()
        if len(lengths) and (lengths != lengths[0]).any():
            raise LeRobotDataError(f"{path}: column {name!r} holds vectors of different lengths "
                                   f"({sorted(set(lengths.tolist()))[:5]}); every frame needs the same size")
        width = int(lengths[0]) if len(lengths) else 0
        return arr.flatten().to_numpy(zero_copy_only=False).reshape(len(arr), width)
    values = col.to_pylist()
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _read_frames(paths: list[Path], features: dict) -> dict[str, np.ndarray]:
    needed = [k for k, ft in features.items() if ft.get("dtype") != "video"]
    for key in INDEX_COLUMNS:
        if key not in needed:
            needed.append(key)
    parts = []
    for path in paths:
        table = _read_parquet(path)
        missing = [k for k in needed if k not in table.column_names]
        if missing:
            raise LeRobotDataError(f"{path}: missing columns {missing} (meta/info.json features and the LeRobot "
                                   f"index columns {list(INDEX_COLUMNS)} must all be in every data file)")
        parts.append({k: _column_to_numpy(table.column(k), k, path) for k in table.column_names})
    keys = [k for k in parts[0] if all(k in p for p in parts)]
    frames = {k: np.concatenate([p[k] for p in parts]) for k in keys}
    for v in frames.values():
        v.flags.writeable = False
    return frames


def _tasks_v3(root: Path) -> list[str]:
    path = root / "meta/tasks.parquet"
    table = _read_parquet(path)
    name = next((c for c in ("task", "__index_level_0__") if c in table.column_names), None)
    if name is None or "task_index" not in table.column_names:
        raise LeRobotDataError(f"{path}: expected columns 'task' (or a task index) and 'task_index', "
                               f"found {table.column_names}")
    return _task_list(table.column(name).to_pylist(), table.column("task_index").to_pylist(), path)


def _task_list(tasks: list, indices: list, path: Path) -> list[str]:
    if sorted(indices) != list(range(len(indices))):
        raise LeRobotDataError(f"{path}: task_index values must be 0..{len(indices) - 1}, found {sorted(indices)[:10]}")
    out = [None] * len(indices)
    for t, i in zip(tasks, indices):
        out[i] = t
    return out


def _read_v3(root: Path, info: dict):
    tasks = _tasks_v3(root)
    ep_paths = sorted((root / "meta/episodes").glob("*/*.parquet"))
    if not ep_paths:
        raise LeRobotDataError(f"{root / 'meta/episodes'}: no episode metadata files (chunk-*/file-*.parquet)")
    table = pa.concat_tables([_read_parquet(p) for p in ep_paths], promote_options="default")
    need = ["episode_index", "tasks", "length", "data/chunk_index", "data/file_index",
            "dataset_from_index", "dataset_to_index"]
    missing = [k for k in need if k not in table.column_names]
    if missing:
        raise LeRobotDataError(f"{ep_paths[0].parent.parent}: episode metadata lacks columns {missing}")
    keep = [c for c in table.column_names if not c.startswith("stats/")]
    episodes = [{k: v for k, v in row.items() if v is not None or k in need}
                for row in table.select(keep).to_pylist()]
    episodes.sort(key=lambda e: e["episode_index"])
    locs = sorted(dict.fromkeys((e["data/chunk_index"], e["data/file_index"]) for e in episodes))
    paths = [root / info["data_path"].format(chunk_index=c, file_index=f) for c, f in locs]
    frames = _read_frames(paths, info["features"])
    stats = stats_from_json(_load_json(root / "meta/stats.json")) if (root / "meta/stats.json").exists() else {}
    return tasks, episodes, frames, stats, paths[0].parent.parent


def _read_v21(root: Path, info: dict):
    tasks_path = root / "meta/tasks.jsonl"
    rows = _load_jsonl(tasks_path)
    try:
        tasks = _task_list([r["task"] for r in rows], [r["task_index"] for r in rows], tasks_path)
    except KeyError as err:
        raise LeRobotDataError(f"{tasks_path}: every line needs 'task_index' and 'task' (missing {err})") from err
    ep_path = root / "meta/episodes.jsonl"
    episodes = sorted(_load_jsonl(ep_path), key=lambda e: e.get("episode_index", -1))
    for n, e in enumerate(episodes):
        if not {"episode_index", "tasks", "length"} <= set(e):
            raise LeRobotDataError(f"{ep_path}: episode line {n} lacks 'episode_index', 'tasks' or 'length': {e}")
    start = 0
    for e in episodes:
        e["dataset_from_index"], e["dataset_to_index"] = start, start + e["length"]
        start += e["length"]
    chunks_size = info.get("chunks_size", DEFAULT_CHUNK_SIZE)
    paths = [root / info["data_path"].format(episode_chunk=e["episode_index"] // chunks_size,
                                             episode_index=e["episode_index"]) for e in episodes]
    frames = _read_frames(paths, info["features"])
    stats_path = root / "meta/episodes_stats.jsonl"
    per_ep = []
    for n, row in enumerate(_load_jsonl(stats_path)):
        if not isinstance(row.get("stats"), dict):
            raise LeRobotDataError(f"{stats_path}: line {n + 1} lacks a 'stats' object")
        per_ep.append(stats_from_json(row["stats"]))
    return tasks, episodes, frames, aggregate_stats(per_ep), root / "data"


class LeRobotData:
    """A LeRobot dataset read into memory (frames as read-only numpy arrays)."""

    def __init__(self, root: Path, info: dict, stats: dict, tasks: list[str], episodes: list[dict],
                 frames: dict[str, np.ndarray]):
        self.root, self.info, self.stats, self.tasks, self.episodes = root, info, stats, tasks, episodes
        self._frames = frames
        self._by_index = {e["episode_index"]: e for e in episodes}

    @property
    def fps(self) -> int:
        return self.info["fps"]

    @property
    def num_frames(self) -> int:
        return len(self._frames["index"])

    def frames(self) -> dict[str, np.ndarray]:
        """column -> array over all frames, in dataset order (row i has index i)."""
        return dict(self._frames)

    def episode(self, i: int) -> dict[str, np.ndarray]:
        """column -> array over the frames of the episode with episode_index i."""
        if i not in self._by_index:
            raise IndexError(f"{self.root}: no episode with episode_index {i} "
                             f"(the dataset has {len(self.episodes)} episodes)")
        e = self._by_index[i]
        return {k: v[e["dataset_from_index"]:e["dataset_to_index"]] for k, v in self._frames.items()}

    def __repr__(self) -> str:
        return (f"LeRobotData({str(self.root)!r}, {self.info.get('codebase_version')}, "
                f"{len(self.episodes)} episodes, {self.num_frames} frames, {len(self.tasks)} tasks)")


def read_dataset(path) -> LeRobotData:
    """Read a LeRobotDataset (v3.0 or v2.1 layout) from a local directory."""
    root = Path(path).expanduser()
    info_path = root / "meta/info.json"
    if not info_path.is_file():
        raise LeRobotDataError(f"{root}: not a LeRobot dataset ({info_path} does not exist)")
    info = _load_json(info_path)
    version = info.get("codebase_version") if isinstance(info, dict) else None
    if version not in SUPPORTED_VERSIONS:
        raise LeRobotDataError(f"{info_path}: unsupported codebase_version {version!r}; this reader handles "
                               f"{', '.join(SUPPORTED_VERSIONS)} (convert older datasets with LeRobot's converters)")
    missing = [k for k in ("fps", "features", "data_path") if k not in info]
    if missing:
        raise LeRobotDataError(f"{info_path}: missing keys {missing}")
    tasks, episodes, frames, stats, data_dir = (_read_v3 if version == "v3.0" else _read_v21)(root, info)

    # Frames must line up with the episode table: rows in index order, each episode contiguous.
    n = sum(e["length"] for e in episodes)
    if len(frames["index"]) != n or not np.array_equal(frames["index"], np.arange(n)):
        raise LeRobotDataError(f"{data_dir}: the data files hold {len(frames['index'])} frames whose 'index' column "
                               f"is not 0..{n - 1} in order, but the episode metadata lists {n} frames")
    starts = np.array([e["dataset_from_index"] for e in episodes])
    lengths = np.array([e["length"] for e in episodes])
    if not (np.array_equal(starts, np.concatenate([[0], np.cumsum(lengths)[:-1]]))
            and np.array_equal(frames["episode_index"], np.repeat([e["episode_index"] for e in episodes], lengths))):
        raise LeRobotDataError(f"{data_dir}: the frames' episode_index column does not match the episode "
                               "metadata (episode lengths / dataset_from_index)")
    if frames["task_index"].size and (frames["task_index"].min() < 0 or frames["task_index"].max() >= len(tasks)):
        raise LeRobotDataError(f"{data_dir}: task_index values outside 0..{len(tasks) - 1} (the tasks table)")

    # Quantiles (and any feature without stats) come from the frames.
    stats = {k: dict(v) for k, v in stats.items()}
    wanted = {"min", "max", "mean", "std", "count", *map(qkey, QUANTILES)}
    todo = {k: v for k, v in frames.items() if v.dtype.kind in "biuf" and not wanted <= set(stats.get(k, {}))}
    for key, st in compute_stats(todo).items():
        stats[key] = {**st, **stats.get(key, {})}
    return LeRobotData(root, info, stats, tasks, episodes, frames)
