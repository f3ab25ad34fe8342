"""Read a LeRobotDataset folder, v3.0 or v2.1 (`read_dataset` -> `LeRobotData`); the layout is described in data/lerobot.py.

Every data file is checked as it is read (`check_frames`): a non-finite value (NaN, inf) in any numeric column,
and frames out of order within an episode (`frame_index` or `timestamp` not strictly increasing from one row of
the episode to the next), raise `LeRobotDataError` naming the file, the column, the episode and the frame: a policy
must not train on them. Stored statistics (meta/stats.json, meta/episodes_stats.jsonl) that are not finite are
refused too, naming the file, the feature and the statistic (a policy normalises its inputs with them).

Camera features (dtype image / video, `LeRobotData.camera_keys`) are decoded only when asked for
(`LeRobotData.camera_frames`): image columns are kept as their encoded structs {bytes, path} (checked at read time:
the column's type, a bytes or path in every row, and the first frame's size against meta/info.json's shape, read from
its header), video files are checked to exist and the episode table to name them. Decoding checks every frame's size,
an undecodable image, and (data/lerobot_video.py) a video frame missing at a frame's timestamp, each raising
`LeRobotDataError` naming the file, the feature, the episode and the frame. Those checks and decoders live in
data/lerobot_cameras.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from data import lerobot_cameras as cameras
from data.lerobot_format import CAMERA_DTYPES, DEFAULT_CHUNK_SIZE, INDEX_COLUMNS, SUPPORTED_VERSIONS, LeRobotDataError
from data.lerobot_stats import QUANTILES, aggregate_stats, compute_stats, qkey, stats_from_json
from data.lerobot_video import decode_at


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


def check_frames(part: dict[str, np.ndarray], path: Path) -> None:
    """Raise LeRobotDataError on a non-finite numeric value or an episode whose frames are out of order (the
    module docstring); `part` is one data file's columns."""
    episodes = part["episode_index"]

    def where(row: int) -> str:
        return f"episode {episodes[row]}, frame_index {part['frame_index'][row]} (row {row} of the file)"

    for name, values in part.items():
        if values.dtype.kind != "f":
            continue
        bad = ~np.isfinite(values.reshape(len(values), -1)).all(axis=1)
        if bad.any():
            row = int(np.argmax(bad))
            raise LeRobotDataError(f"{path}: column {name!r} holds a non-finite value in {where(row)}: "
                                   f"{values[row].tolist()}; fix or drop that episode")
    same_episode = episodes[1:] == episodes[:-1]
    for name in ("frame_index", "timestamp"):
        back = same_episode & (part[name][1:] <= part[name][:-1])
        if back.any():
            row = int(np.argmax(back)) + 1
            raise LeRobotDataError(f"{path}: frames out of order in episode {episodes[row]}: {name} goes from "
                                   f"{part[name][row - 1]} to {part[name][row]} at row {row} of the file; the frames "
                                   f"of an episode must be stored in time order ({name} increasing)")


def finite_stats(stats: dict, where: str) -> dict:
    """`stats` (feature -> statistic -> array), or LeRobotDataError naming `where`, the feature and the statistic."""
    for feature, named in stats.items():
        for name, value in named.items():
            if not np.isfinite(value).all():
                raise LeRobotDataError(f"{where}: the stored {name!r} of {feature!r} is not finite ({value.tolist()}); "
                                       "fix the statistics or delete them (they are then computed from the frames)")
    return stats


def _read_frames(paths: list[Path], features: dict) -> tuple[dict[str, np.ndarray], dict[str, list]]:
    """The frame columns (camera columns left out) and, per image feature, [(data file, its image column)]."""
    needed = [k for k, ft in features.items() if ft.get("dtype") != "video"]
    image_keys = [k for k, ft in features.items() if ft.get("dtype") == "image"]
    for key in INDEX_COLUMNS:
        if key not in needed:
            needed.append(key)
    parts, images = [], {k: [] for k in image_keys}
    for path in paths:
        table = _read_parquet(path)
        missing = [k for k in needed if k not in table.column_names]
        if missing:
            raise LeRobotDataError(f"{path}: missing columns {missing} (meta/info.json features and the LeRobot "
                                   f"index columns {list(INDEX_COLUMNS)} must all be in every data file)")
        for key in image_keys:
            images[key].append((path, cameras.image_column(table.column(key), key, features[key], path)))
        part = {k: _column_to_numpy(table.column(k), k, path) for k in table.column_names if k not in image_keys}
        check_frames(part, path)
        parts.append(part)
    keys = [k for k in parts[0] if all(k in p for p in parts)]
    frames = {k: np.concatenate([p[k] for p in parts]) for k in keys}
    for v in frames.values():
        v.flags.writeable = False
    return frames, images


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
    frames, images = _read_frames(paths, info["features"])
    stats_path = root / "meta/stats.json"
    stats = finite_stats(stats_from_json(_load_json(stats_path)), str(stats_path)) if stats_path.exists() else {}
    return tasks, episodes, frames, images, stats, paths[0].parent.parent


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
    frames, images = _read_frames(paths, info["features"])
    stats_path = root / "meta/episodes_stats.jsonl"
    per_ep = []
    for n, row in enumerate(_load_jsonl(stats_path)):
        if not isinstance(row.get("stats"), dict):
            raise LeRobotDataError(f"{stats_path}: line {n + 1} lacks a 'stats' object")
        per_ep.append(finite_stats(stats_from_json(row["stats"]), f"{stats_path}: line {n + 1}"))
    return tasks, episodes, frames, images, aggregate_stats(per_ep), root / "data"


class LeRobotData:
    """A LeRobot dataset read into memory (frames as read-only numpy arrays; camera frames decoded on demand)."""

    def __init__(self, root: Path, info: dict, stats: dict, tasks: list[str], episodes: list[dict],
                 frames: dict[str, np.ndarray], images: dict[str, list] | None = None,
                 videos: dict[str, dict[Path, list]] | None = None):
        self.root, self.info, self.stats, self.tasks, self.episodes = root, info, stats, tasks, episodes
        self._frames = frames
        self._by_index = {e["episode_index"]: e for e in episodes}
        self._images, self._videos = images or {}, videos or {}

    @property
    def fps(self) -> int:
        return self.info["fps"]

    @property
    def num_frames(self) -> int:
        return len(self._frames["index"])

    @property
    def camera_keys(self) -> list[str]:
        """The camera features (dtype image or video), in meta/info.json's order."""
        return [k for k, ft in self.info["features"].items() if ft.get("dtype") in CAMERA_DTYPES]

    def feature(self, key: str) -> dict:
        """meta/info.json's description of feature `key` (dtype, shape, names, and a video's info)."""
        if key not in self.info["features"]:
            raise LeRobotDataError(f"{self.root / 'meta/info.json'}: no feature {key!r}; the features are "
                                   f"{list(self.info['features'])}")
        return dict(self.info["features"][key])

    def frames(self) -> dict[str, np.ndarray]:
        """column -> array over all frames, in dataset order (row i has index i); camera features are not here
        (`camera_frames`)."""
        return dict(self._frames)

    def episode(self, i: int) -> dict[str, np.ndarray]:
        """column -> array over the frames of the episode with episode_index i."""
        if i not in self._by_index:
            raise IndexError(f"{self.root}: no episode with episode_index {i} "
                             f"(the dataset has {len(self.episodes)} episodes)")
        e = self._by_index[i]
        return {k: v[e["dataset_from_index"]:e["dataset_to_index"]] for k, v in self._frames.items()}

    def camera_frames(self, key: str, transform: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
        """Every frame of camera feature `key`, decoded, in dataset order (row i = the frame with index i):
        (N, H, W, 3) uint8, or (N, *shape) of what `transform` ((H, W, 3) uint8 -> an array of one fixed shape)
        returns, applied to each frame as it is decoded (so full-size frames are never all held)."""
        if key not in self.camera_keys:
            raise LeRobotDataError(f"{self.root / 'meta/info.json'}: {key!r} is not a camera feature; the camera "
                                   f"features are {self.camera_keys}")
        height, width = cameras.frame_size(self.info["features"][key], key, self.root / "meta/info.json")
        out = cameras.FrameSink(self.num_frames, key, (height, width), transform)
        if key in self._images:
            self._decode_images(key, out)
        else:
            self._decode_videos(key, out)
        return out.result()

    def _label(self, key: str, row: int, file_row: int | None = None) -> str:
        at = f" (row {file_row} of the file)" if file_row is not None else ""
        return (f"feature {key!r}, episode {self._frames['episode_index'][row]}, "
                f"frame_index {self._frames['frame_index'][row]}{at}")

    def _decode_images(self, key: str, out: cameras.FrameSink) -> None:
        row = 0
        for path, col in self._images[key]:
            for n, (data, rel) in enumerate(zip(col.field("bytes").to_pylist(), col.field("path").to_pylist())):
                where = f"{path}: {self._label(key, row, n)}"
                out.put(row, cameras.decode_image_struct(data, rel, self.root, where), where)
                row += 1

    def _decode_videos(self, key: str, out: cameras.FrameSink) -> None:
        timestamps = self._frames["timestamp"].astype(np.float64)
        for path, held in self._videos[key].items():
            rows = np.concatenate([np.arange(self._by_index[i]["dataset_from_index"],
                                             self._by_index[i]["dataset_to_index"]) for i, _ in held])
            starts = np.concatenate([np.full(self._by_index[i]["length"], start) for i, start in held])
            decode_at(path, starts + timestamps[rows],
                      emit=lambda j, rgb: out.put(int(rows[j]), rgb, f"{path}: {self._label(key, int(rows[j]))}"),
                      describe=lambda j: self._label(key, int(rows[j])))

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
    tasks, episodes, frames, images, stats, data_dir = (_read_v3 if version == "v3.0" else _read_v21)(root, info)
    videos = cameras.video_files(root, info, episodes, version)

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
    return LeRobotData(root, info, stats, tasks, episodes, frames, images, videos)
