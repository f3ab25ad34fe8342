"""Camera features of a LeRobot dataset (dtype image / video), for data/lerobot_read.py: checking an image column and
the video files at read time, decoding an image struct, and collecting decoded frames.

- `frame_size`: a camera feature's (height, width) from meta/info.json;
- `image_column`: an image feature's parquet column checked without decoding it (struct type, a bytes or path in
  every row, the first frame's size from its header against meta/info.json);
- `video_files`: per video feature, the files and the episodes (with their start times) each holds, checked to exist;
- `decode_image_struct`: one {bytes, path} struct → (H, W, 3) uint8 RGB;
- `FrameSink`: the output of `LeRobotData.camera_frames`, checking every frame's size and a transform's shape.
Each failure raises `LeRobotDataError` naming the file, the feature and, where one is at fault, the episode and frame.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from PIL import Image, ImageOps

from data.image_decode import ImageDecodeError, decode_image, image_path, to_rgb
from data.lerobot_format import DEFAULT_CHUNK_SIZE, LeRobotDataError


def frame_size(feature: dict, key: str, where) -> tuple[int, int]:
    """(height, width) of a camera feature of meta/info.json: by its `names` ("height", "width") when it has them,
    else its shape read as [H, W, C] (LeRobot's convention)."""
    shape, names = feature.get("shape"), feature.get("names")
    if not (isinstance(shape, list) and len(shape) == 3 and all(isinstance(n, int) and n > 0 for n in shape)):
        raise LeRobotDataError(f"{where}: feature {key!r} has shape {shape!r}; a camera feature needs [H, W, 3]")
    if isinstance(names, list) and "height" in names and "width" in names:
        return shape[names.index("height")], shape[names.index("width")]
    return shape[0], shape[1]


def image_column(col: pa.ChunkedArray, key: str, feature: dict, path: Path) -> pa.ChunkedArray:
    """An image feature's column, checked (module docstring) but not decoded."""
    t = col.type
    fields = {t.field(i).name: t.field(i).type for i in range(t.num_fields)} if pa.types.is_struct(t) else {}
    binary = (pa.types.is_binary, pa.types.is_large_binary)
    text = (pa.types.is_string, pa.types.is_large_string)
    if not ("bytes" in fields and "path" in fields and any(f(fields["bytes"]) for f in binary)
            and any(f(fields["path"]) for f in text)):
        raise LeRobotDataError(f"{path}: column {key!r} is {t}, but meta/info.json says it is an image feature, "
                               "stored as image structs {bytes: binary, path: string} (HF datasets' Image)")
    if col.null_count:
        raise LeRobotDataError(f"{path}: column {key!r} has {col.null_count} missing images")
    col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    empty = pc.and_(pc.is_null(col.field("bytes")), pc.is_null(col.field("path")))
    if pc.any(empty).as_py():
        row = int(np.argmax(empty.to_numpy(zero_copy_only=False)))
        raise LeRobotDataError(f"{path}: column {key!r} row {row} has neither image bytes nor a path")
    height, width = frame_size(feature, key, path)
    first = col[0].as_py() if len(col) else None
    if first and first["bytes"] is not None:
        try:
            with Image.open(io.BytesIO(first["bytes"])) as im:
                size = im.size
        except Exception as err:
            raise LeRobotDataError(f"{path}: column {key!r} row 0: undecodable image bytes ({type(err).__name__}: "
                                   f"{err})") from err
        if size != (width, height):
            raise LeRobotDataError(f"{path}: column {key!r} holds {size[1]}x{size[0]} (HxW) images but "
                                   f"meta/info.json's features[{key!r}] shape says {height}x{width}")
    return col


def video_files(root: Path, info: dict, episodes: list[dict], version: str) -> dict[str, dict[Path, list]]:
    """Per video feature: video file -> [(episode_index, from_timestamp)] of the episodes it holds, in order;
    every file checked to exist."""
    keys = [k for k, ft in info["features"].items() if ft.get("dtype") == "video"]
    if not keys:
        return {}
    if not isinstance(info.get("video_path"), str):
        raise LeRobotDataError(f"{root / 'meta/info.json'}: features {keys} are videos but video_path is "
                               f"{info.get('video_path')!r}")
    chunks_size = info.get("chunks_size", DEFAULT_CHUNK_SIZE)
    out = {}
    for key in keys:
        files: dict[Path, list] = {}
        for e in episodes:
            i = e["episode_index"]
            if version == "v3.0":
                cols = [f"videos/{key}/{c}" for c in ("chunk_index", "file_index", "from_timestamp")]
                if any(e.get(c) is None for c in cols):
                    raise LeRobotDataError(f"{root / 'meta/episodes'}: episode {i} lacks {cols} for the video "
                                           f"feature {key!r}")
                path = root / info["video_path"].format(video_key=key, chunk_index=e[cols[0]], file_index=e[cols[1]])
                start = float(e[cols[2]])
            else:
                path = root / info["video_path"].format(episode_chunk=i // chunks_size, video_key=key, episode_index=i)
                start = 0.0
            if path not in files and not path.is_file():
                raise LeRobotDataError(f"{path}: video file not found (feature {key!r}, episode {i}); the dataset's "
                                       "metadata refers to it")
            files.setdefault(path, []).append((i, start))
        out[key] = files
    return out


def decode_image_struct(data: bytes | None, rel: str | None, root: Path, where: str) -> np.ndarray:
    """The (H, W, 3) uint8 pixels of one image struct: its bytes, else its file (a path inside the dataset root)."""
    try:
        if data is not None:
            with Image.open(io.BytesIO(data)) as im:
                return np.asarray(to_rgb(ImageOps.exif_transpose(im), where))
        file = Path(rel) if Path(rel).is_absolute() and Path(rel).resolve().is_relative_to(root.resolve()) \
            else image_path(root, rel)
        return np.asarray(decode_image(file, max_pixels=None))
    except ImageDecodeError as err:
        raise LeRobotDataError(f"{where}: {err}") from err
    except Exception as err:  # truncated, corrupt, not an image
        what = "bytes" if data is not None else f"file {rel!r}"
        raise LeRobotDataError(f"{where}: undecodable image {what} "
                               f"({type(err).__name__}: {err})") from err


class FrameSink:
    """The output array of `camera_frames`, allocated at the first frame (its shape after `transform`)."""

    def __init__(self, n: int, key: str, size: tuple[int, int], transform):
        self.n, self.key, self.size, self.transform, self.array = n, key, size, transform, None

    def put(self, row: int, rgb: np.ndarray, where: str) -> None:
        if rgb.shape != (*self.size, 3):
            raise LeRobotDataError(f"{where}: the frame is {rgb.shape[0]}x{rgb.shape[1]} (HxW) but meta/info.json's "
                                   f"features[{self.key!r}] shape says {self.size[0]}x{self.size[1]}")
        value = np.asarray(self.transform(rgb)) if self.transform is not None else rgb
        if self.array is None:
            self.array = np.empty((self.n, *value.shape), dtype=value.dtype)
        elif value.shape != self.array.shape[1:]:
            raise ValueError(f"camera_frames({self.key!r}): transform returned shape {value.shape} at {where}, but "
                             f"{self.array.shape[1:]} for the first frame; it must return one fixed shape")
        self.array[row] = value

    def result(self) -> np.ndarray:
        if self.array is None:
            return np.empty((self.n, *self.size, 3), dtype=np.uint8)
        return self.array
