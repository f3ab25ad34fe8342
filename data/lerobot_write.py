"""Write a LeRobotDataset v3.0 folder (`write_dataset`), atomically; the layout is described in data/lerobot.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from data.atomic import atomic_directory
from data.lerobot_format import (CODEBASE_VERSION, DATA_PATH, DEFAULT_CHUNK_SIZE, DEFAULT_DATA_FILE_SIZE_IN_MB,
                                 DEFAULT_VIDEO_FILE_SIZE_IN_MB, EPISODES_PATH, INDEX_COLUMNS, RESERVED_EPISODE_KEYS,
                                 RESERVED_PREFIXES, Episode)
from data.lerobot_stats import compute_stats, stats_to_json


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
