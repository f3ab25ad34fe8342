"""Write a LeRobotDataset v3.0 folder (`write_dataset`), atomically; the layout is described in data/lerobot.py.

Camera frames (`Episode.images`) are stored as LeRobot stores them: `image_format="image"` embeds one PNG per frame
in the data files (HF datasets' Image struct {bytes, path}), `image_format="video"` encodes one mp4 per camera per
video file (data/lerobot_video.py), episodes one after another. Their stats are LeRobot's per-channel pixel stats
over a subsample of frames (data/lerobot_stats.py).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from data.atomic import atomic_directory
from PIL import Image

from data.lerobot_format import (CODEBASE_VERSION, DATA_PATH, DEFAULT_CHUNK_SIZE, DEFAULT_DATA_FILE_SIZE_IN_MB,
                                 DEFAULT_VIDEO_FILE_SIZE_IN_MB, EPISODES_PATH, IMAGE_FORMATS, INDEX_COLUMNS,
                                 RESERVED_EPISODE_KEYS, RESERVED_PREFIXES, VIDEO_PATH, Episode)
from data.lerobot_stats import compute_stats, pixel_histogram, pixel_stats, sample_frames, stats_to_json
from data.lerobot_video import VideoEncoder, video_info

IMAGE_STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])  # HF datasets' Image feature


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


def _check_images(episodes: list[Episode], per_ep: list[dict[str, np.ndarray]]) -> dict[str, tuple[int, int]]:
    """Validated camera frames, {key: (H, W)}; raises ValueError naming the episode and the key. Every episode
    needs the same cameras, each (T, H, W, 3) uint8 with T its number of frames and one (H, W) per camera."""
    sizes: dict[str, tuple[int, int]] = {}
    for i, (ep, arrays) in enumerate(zip(episodes, per_ep)):
        images = ep.images or {}
        if not isinstance(images, dict):
            raise ValueError(f"episode {i}: images must be a dict of camera name -> (T, H, W, 3) uint8, "
                             f"got {type(images).__name__}")
        if i == 0:
            for key in images:
                if not isinstance(key, str) or not key or "/" in key or key in arrays or key in INDEX_COLUMNS:
                    raise ValueError(f"episode 0: camera key {key!r} must be a non-empty name without '/' that is "
                                     "not another feature's (e.g. 'observation.images.corner2')")
        elif list(images) != list(sizes):
            raise ValueError(f"episode {i}: cameras {sorted(images)} differ from episode 0's {sorted(sizes)}; "
                             "every episode needs the same cameras")
        T = arrays["action"].shape[0]
        for key, frames in images.items():
            frames = np.asarray(frames)
            if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[3] != 3:
                raise ValueError(f"episode {i}: images[{key!r}] is {frames.dtype} {frames.shape}; "
                                 "camera frames must be (T, H, W, 3) uint8 RGB")
            if frames.shape[0] != T:
                raise ValueError(f"episode {i}: images[{key!r}] has {frames.shape[0]} frames but the episode's "
                                 f"actions have {T}")
            if i == 0:
                sizes[key] = frames.shape[1:3]
            elif frames.shape[1:3] != sizes[key]:
                raise ValueError(f"episode {i}: images[{key!r}] frames are {frames.shape[1]}x{frames.shape[2]} "
                                 f"(HxW) but episode 0's are {sizes[key][0]}x{sizes[key][1]}; a camera keeps its size")
    return sizes


def _png(rgb: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buffer, format="PNG", compress_level=1)  # LeRobot's image_writer level
    return buffer.getvalue()


def _image_column(pngs: list[bytes], frame_index: np.ndarray) -> pa.Array:
    """Image structs as LeRobot v3.0 embeds them: the PNG bytes and the file name the frame had."""
    return pa.array([{"bytes": b, "path": f"frame-{int(f):06d}.png"} for b, f in zip(pngs, frame_index)],
                    type=IMAGE_STRUCT)


def _camera_stats(frames: np.ndarray) -> tuple[np.ndarray, int]:
    """(histogram, sampled frames) of one episode's camera frames (data/lerobot_stats.py)."""
    sampled = sample_frames(frames)
    return pixel_histogram(sampled), len(sampled)


def _next_location(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


def _write_videos(tmp: Path, key: str, episodes_frames: list[np.ndarray], fps: int, chunks_size: int,
                  limit_bytes: float) -> tuple[list[dict], dict]:
    """Encode one camera's episodes into videos/{key}/chunk-*/file-*.mp4, episodes one after another; a new file
    starts once the current one holds `limit_bytes` (measured after each episode, as muxed so far). Returns the
    episodes-table columns of each episode and the feature's info (read back from the first file)."""
    rows, chunk, file, encoder, first = [], 0, 0, None, None
    try:
        for frames in episodes_frames:
            if encoder is None:
                encoder = VideoEncoder(tmp / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file),
                                       fps, frames.shape[1], frames.shape[2])
                first = first or encoder.path
            start = encoder.frames
            encoder.write(frames)
            rows.append({f"videos/{key}/chunk_index": chunk, f"videos/{key}/file_index": file,
                         f"videos/{key}/from_timestamp": start / fps, f"videos/{key}/to_timestamp": encoder.frames / fps})
            if encoder.bytes_written() >= limit_bytes:
                encoder.close()
                encoder = None
                chunk, file = _next_location(chunk, file, chunks_size)
    finally:
        if encoder is not None:
            encoder.close()
    return rows, video_info(first, fps)


def _episodes_table(rows: list[dict]) -> pa.Table:
    try:
        return pa.Table.from_pylist(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise ValueError(f"episode extra metadata must be JSON-like values of one type per key across episodes: {err}") from err


def _names(names, size: int, what: str):
    if names is None:
        return None
    names = list(names)
    if len(names) != size:
        raise ValueError(f"{what} has {len(names)} entries but the feature has {size} dimensions")
    return names


def write_dataset(out_dir, episodes: list[Episode], fps: int, robot_type: str = "sawyer",
                  state_names=None, action_names=None, *, chunks_size: int = DEFAULT_CHUNK_SIZE,
                  data_files_size_in_mb: float = DEFAULT_DATA_FILE_SIZE_IN_MB, image_format: str = "image",
                  video_files_size_in_mb: float = DEFAULT_VIDEO_FILE_SIZE_IN_MB) -> Path:
    """Write episodes as a LeRobotDataset v3.0 at out_dir (replaced atomically if it exists).

    Camera frames (`Episode.images`) become image features (`image_format="image"`: PNG bytes in the data files)
    or video features (`"video"`: mp4 files under videos/, data/lerobot_video.py)."""
    per_ep = _check_episodes(episodes)
    if not (isinstance(fps, (int, np.integer)) and fps > 0):
        raise ValueError(f"fps must be a positive integer, got {fps!r}")
    if image_format not in IMAGE_FORMATS:
        raise ValueError(f"image_format={image_format!r}; choose one of {IMAGE_FORMATS}")
    cameras = _check_images(episodes, per_ep)
    if image_format == "video":
        odd = {k: hw for k, hw in cameras.items() if hw[0] % 2 or hw[1] % 2}
        if odd:
            raise ValueError(f"cameras {odd} have an odd height or width (HxW); yuv420p video needs even sizes: "
                             "crop or pad the frames, or write them with image_format='image'")
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
    for key, (height, width) in cameras.items():
        names = ["height", "width", "channel"] if image_format == "image" else ["height", "width", "channels"]
        features[key] = {"dtype": image_format, "shape": [height, width, 3], "names": names}
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

    # Camera stats per episode (LeRobot's subsample), and the PNGs of image features.
    camera_hist = [{k: _camera_stats(np.asarray(ep.images[k])) for k in cameras} for ep in episodes]
    pngs = [{k: [_png(rgb) for rgb in np.asarray(ep.images[k])] for k in cameras} if image_format == "image" else {}
            for ep in episodes]

    # Whole episodes per data file; a new file once the next episode would pass the size limit.
    bytes_per_frame = sum(a[:1].nbytes for a in per_ep[0].values())
    limit = data_files_size_in_mb * 1024 ** 2
    files, chunk, file, size = [[]], 0, 0, 0
    locations = []
    for i, arrays in enumerate(per_ep):
        ep_bytes = arrays["action"].shape[0] * bytes_per_frame + sum(len(b) for bs in pngs[i].values() for b in bs)
        if files[-1] and size + ep_bytes >= limit:
            files.append([])
            chunk, file = _next_location(chunk, file, chunks_size)
            size = 0
        files[-1].append(i)
        locations.append((chunk, file))
        size += ep_bytes

    episode_rows = []
    for i, (ep, arrays) in enumerate(zip(episodes, per_ep)):
        T = arrays["action"].shape[0]
        row = {"episode_index": i, "tasks": [ep.task], "length": T,
               "data/chunk_index": locations[i][0], "data/file_index": locations[i][1],
               "dataset_from_index": int(arrays["index"][0]), "dataset_to_index": int(arrays["index"][0]) + T,
               "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0}
        ep_stats = compute_stats(arrays)
        ep_stats.update({k: pixel_stats(*camera_hist[i][k]) for k in cameras})
        for key, st in ep_stats.items():
            row.update({f"stats/{key}/{s}": np.asarray(v).tolist() for s, v in st.items()})
        row.update(ep.extra or {})
        episode_rows.append(row)

    _episodes_table(episode_rows)  # refuse bad extra metadata before anything is encoded
    all_frames = {k: np.concatenate([a[k] for a in per_ep]) for k in per_ep[0]}
    stats = compute_stats(all_frames)
    for key in cameras:  # histograms add up: exact stats over every episode's sampled frames
        stats[key] = pixel_stats(sum(h[key][0] for h in camera_hist), sum(h[key][1] for h in camera_hist))
    info = {
        "codebase_version": CODEBASE_VERSION, "robot_type": robot_type, "total_episodes": len(episodes),
        "total_frames": total, "total_tasks": len(tasks), "chunks_size": chunks_size,
        "data_files_size_in_mb": data_files_size_in_mb, "video_files_size_in_mb": video_files_size_in_mb,
        "fps": fps, "splits": {"train": f"0:{len(episodes)}"}, "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if cameras and image_format == "video" else None,
        "features": features,
    }

    import pandas as pd  # LeRobot's tasks table is a DataFrame indexed by the task string

    out = Path(out_dir).expanduser().resolve()
    with atomic_directory(out) as tmp:
        if image_format == "video":
            for key in cameras:
                rows, features[key]["info"] = _write_videos(tmp, key, [np.asarray(ep.images[key]) for ep in episodes],
                                                            fps, chunks_size, video_files_size_in_mb * 1024 ** 2)
                for row, video_row in zip(episode_rows, rows):
                    row.update(video_row)
        episodes_table = _episodes_table(episode_rows)  # with the video columns
        for group, (c, f) in zip(files, dict.fromkeys(locations)):
            cols = {k: np.concatenate([per_ep[i][k] for i in group]) for k in per_ep[group[0]]}
            columns = {k: _vector_column(v) if v.ndim == 2 else pa.array(v) for k, v in cols.items()}
            if image_format == "image":
                for key in cameras:
                    columns[key] = _image_column([b for i in group for b in pngs[i][key]], cols["frame_index"])
            table = pa.table({k: columns[k] for k in features if k in columns})  # info.json's feature order
            _write_table(table, tmp / DATA_PATH.format(chunk_index=c, file_index=f))
        _write_table(episodes_table, tmp / EPISODES_PATH.format(chunk_index=0, file_index=0))
        tasks_df = pd.DataFrame({"task_index": np.arange(len(tasks), dtype=np.int64)}, index=pd.Index(tasks, name="task"))
        _write_table(pa.Table.from_pandas(tasks_df), tmp / "meta/tasks.parquet")
        _write_json(stats_to_json(stats), tmp / "meta/stats.json")
        _write_json(info, tmp / "meta/info.json")
    return out
