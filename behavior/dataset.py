"""Demonstrations as training samples: (observation history, camera frames, task, action chunk) per frame.

Read from a LeRobotDataset (`data.lerobot.read_dataset`, v3.0 or v2.1, written by refract or by LeRobot): for
frame t of an episode the sample holds the states t-n_obs+1..t of the `state` feature (the first frame
repeated before the episode starts; no state feature: `state=None`, S = 0), the current frame of each camera
feature (`cameras`, image or video features, preprocessed by `frame_transform`), the index of the frame's task
string in the task list, and the actions t..t+H-1 (the last action repeated past the episode's end). Actions
are normalised to [-1, 1] with the dataset's q01/q99 statistics and states with its mean/std
(`meta/stats.json`), then tokenised once, up front, by the policy's codec.

The task list is the dataset's own task strings (meta/tasks) unless `tasks` is given (a Meta-World env's task
names, in the env's order); a dataset task missing from a given list is an error.

`heldout_mask` marks the samples of held-out episodes: the last `fraction` of each task's episodes (at least
one when the task has two or more), for a run without an environment to roll out in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset

from behavior.normalize import ActionNormalizer
from data.lerobot import LeRobotData, LeRobotDataError

STATE, ACTION = "observation.state", "action"


@dataclass
class Demonstrations:
    states: np.ndarray   # (N, n_obs, S) float32 (S = 0 without a state feature)
    task: np.ndarray     # (N,) int64, index into `tasks`
    chunks: np.ndarray   # (N, H, D) float32, raw actions
    obs_mean: np.ndarray
    obs_std: np.ndarray
    normalizer: ActionNormalizer
    tasks: list[str]
    episode: np.ndarray  # (N,) int64, the episode_index of each sample
    images: np.ndarray | None = None  # (N, C, ...) float32: each camera's frame through `frame_transform`
    cameras: tuple[str, ...] = ()
    simulated: bool = False  # the tasks are a simulator's (the run can be rolled out); set by the behavior task

    def __len__(self) -> int:
        return len(self.task)

    def normalised_chunks(self) -> np.ndarray:
        return self.normalizer.normalize(self.chunks).astype(np.float32)


def _feature(data: LeRobotData, key: str, what: str) -> None:
    features = data.info.get("features", {})
    if key not in features:
        raise LeRobotDataError(f"{data.root / 'meta/info.json'}: no feature {key!r} ({what}); the dataset's features are "
                               f"{sorted(features)}. Fix: set the env's observation keys (env.state_key, env.cameras) "
                               "to features it has")


def build_demonstrations(data: LeRobotData, n_obs: int, chunk_size: int, state: str | None = STATE,
                         cameras: Sequence[str] = (), frame_transform: Callable | None = None,
                         tasks: Sequence[str] | None = None, images: bool = True) -> Demonstrations:
    """The samples of `data`; `images=False` leaves the camera frames undecoded (shapes and statistics only)."""
    _feature(data, ACTION, "the actions")
    if state is not None:
        _feature(data, state, "the state observation")
    for key in cameras:
        _feature(data, key, "a camera observation")
        if key not in data.camera_keys:
            raise LeRobotDataError(f"{data.root / 'meta/info.json'}: feature {key!r} is not an image or video feature "
                                   f"(camera features: {data.camera_keys})")
    if state is None and not cameras:
        raise ValueError(f"{data.root}: a policy needs an observation: set env.state_key, env.cameras or both")
    frames = data.frames()
    for key in ((state,) if state else ()) + (ACTION, "episode_index", "task_index"):
        if key not in frames:
            raise LeRobotDataError(f"{data.root}: frames have no {key!r} column (columns: {sorted(frames)})")
    names = [data.tasks[i] for i in frames["task_index"]]
    tasks = list(data.tasks) if tasks is None else list(tasks)
    unknown = sorted(set(names) - set(tasks))
    if unknown:
        raise ValueError(f"{data.root}: dataset tasks {unknown} are not in the task list {tasks}; "
                         "pick the env config that matches the dataset")
    lookup = {name: i for i, name in enumerate(tasks)}
    action = frames[ACTION].astype(np.float32).reshape(len(names), -1)
    episode = frames["episode_index"]
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    ends = np.r_[starts[1:], len(episode)]
    start_of, end_of = np.repeat(starts, ends - starts), np.repeat(ends, ends - starts)
    index = np.arange(len(episode))
    hist = np.clip(index[:, None] + np.arange(-n_obs + 1, 1)[None], start_of[:, None], None)
    ahead = np.minimum(index[:, None] + np.arange(chunk_size)[None], end_of[:, None] - 1)
    stats = data.stats
    if state is not None:
        states = frames[state].astype(np.float32).reshape(len(names), -1)[hist]
        obs_mean = np.asarray(stats[state]["mean"], np.float32).reshape(-1)
        obs_std = np.asarray(stats[state]["std"], np.float32).reshape(-1)
    else:
        states = np.zeros((len(names), n_obs, 0), np.float32)
        obs_mean = obs_std = np.zeros(0, np.float32)
    pixels = None
    if cameras and images:
        pixels = np.stack([data.camera_frames(key, transform=frame_transform) for key in cameras], 1).astype(np.float32)
    normalizer = ActionNormalizer(q01=np.asarray(stats[ACTION]["q01"]).reshape(-1), q99=np.asarray(stats[ACTION]["q99"]).reshape(-1))
    return Demonstrations(
        states=states, task=np.asarray([lookup[n] for n in names], dtype=np.int64), chunks=action[ahead],
        obs_mean=obs_mean, obs_std=obs_std, normalizer=normalizer, tasks=tasks,
        episode=np.asarray(episode, dtype=np.int64), images=pixels, cameras=tuple(cameras),
    )


def heldout_episodes(demos: Demonstrations, fraction: float) -> list[int]:
    """The held-out episodes: per task, the last `fraction` of its episodes (rounded up; at least one, and never
    all, when the task has two or more episodes)."""
    if not 0 <= fraction < 1:
        raise ValueError(f"env.holdout={fraction}: the held-out fraction of episodes must be in [0, 1)")
    if fraction == 0:
        return []
    out = []
    for t in np.unique(demos.task):
        episodes = np.unique(demos.episode[demos.task == t])
        if len(episodes) >= 2:
            out += episodes[-min(len(episodes) - 1, max(1, math.ceil(fraction * len(episodes)))):].tolist()
    return sorted(int(e) for e in out)


class DemoDataset(Dataset):
    """Tensors of every sample, fetched a whole micro-batch at a time (`__getitems__`)."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = tensors
        self.size = len(next(iter(tensors.values())))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict:
        return {k: v[index] for k, v in self.tensors.items()}

    def __getitems__(self, indices: list[int]) -> dict:
        idx = torch.as_tensor(indices)
        return {k: v[idx] for k, v in self.tensors.items()}


def identity(batch):
    return batch
