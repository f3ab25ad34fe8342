"""The LeRobotDataset layout's constants, its error type and the `Episode` a writer takes (see data/lerobot.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from data.errors import DataError

CODEBASE_VERSION = "v3.0"
SUPPORTED_VERSIONS = ("v3.0", "v2.1")
DEFAULT_CHUNK_SIZE = 1000
DEFAULT_DATA_FILE_SIZE_IN_MB = 100
DEFAULT_VIDEO_FILE_SIZE_IN_MB = 500
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
CAMERA_DTYPES = ("image", "video")  # features holding camera frames (PNG/JPEG structs in the data files, or mp4s)
IMAGE_FORMATS = CAMERA_DTYPES  # write_dataset(image_format=...)
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
    images: dict[str, np.ndarray] | None = None  # camera feature name, e.g. "observation.images.corner2" -> (T, H, W, 3) uint8
