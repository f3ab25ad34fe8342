"""Demonstrations as training samples: (observation history, task, action chunk) per frame.

Read from a LeRobotDataset (`data.lerobot.read_dataset`): for frame t of an
episode the sample holds the states t-n_obs+1..t (the first frame repeated
before the episode starts), the task's index in the environment's task list,
and the actions t..t+H-1 (the last action repeated past the episode's end).
Actions are normalised to [-1, 1] with the dataset's q01/q99 statistics
(`meta/stats.json`), then tokenised once, up front, by the policy's codec.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset

from behavior.normalize import ActionNormalizer
from data.lerobot import LeRobotData

STATE, ACTION = "observation.state", "action"


@dataclass
class Demonstrations:
    states: np.ndarray   # (N, n_obs, S) float32
    task: np.ndarray     # (N,) int64, index into the env's task list
    chunks: np.ndarray   # (N, H, D) float32, raw actions
    obs_mean: np.ndarray
    obs_std: np.ndarray
    normalizer: ActionNormalizer

    def __len__(self) -> int:
        return len(self.task)

    def normalised_chunks(self) -> np.ndarray:
        return self.normalizer.normalize(self.chunks).astype(np.float32)


def build_demonstrations(data: LeRobotData, tasks: list[str], n_obs: int, chunk_size: int) -> Demonstrations:
    frames = data.frames()
    for key in (STATE, ACTION, "episode_index", "task_index"):
        if key not in frames:
            raise ValueError(f"{data.root}: frames have no {key!r} column (columns: {sorted(frames)})")
    names = [data.tasks[i] for i in frames["task_index"]] if len(data.tasks) else []
    unknown = sorted(set(names) - set(tasks))
    if unknown:
        raise ValueError(f"{data.root}: dataset tasks {unknown} are not in the environment's task list {tasks}; "
                         "pick the env config that matches the dataset")
    lookup = {name: i for i, name in enumerate(tasks)}
    state, action = frames[STATE].astype(np.float32), frames[ACTION].astype(np.float32)
    episode = frames["episode_index"]
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    ends = np.r_[starts[1:], len(episode)]
    start_of, end_of = np.repeat(starts, ends - starts), np.repeat(ends, ends - starts)
    index = np.arange(len(episode))
    hist = np.clip(index[:, None] + np.arange(-n_obs + 1, 1)[None], start_of[:, None], None)
    ahead = np.minimum(index[:, None] + np.arange(chunk_size)[None], end_of[:, None] - 1)
    stats = data.stats
    normalizer = ActionNormalizer(q01=stats[ACTION]["q01"], q99=stats[ACTION]["q99"])
    return Demonstrations(
        states=state[hist], task=np.asarray([lookup[n] for n in names], dtype=np.int64), chunks=action[ahead],
        obs_mean=np.asarray(stats[STATE]["mean"], np.float32), obs_std=np.asarray(stats[STATE]["std"], np.float32),
        normalizer=normalizer,
    )


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
