"""Lightning wrappers of the behavior policies on the shared core (`python train.py task=behavior`).

`BehaviorTask` is what `conf/task/behavior.yaml` names. Building the model
reads the demonstrations (`cfg.env.dataset`: a LeRobot dataset folder, or a
`_target_` that collects Meta-World demonstrations on first use and returns
its folder), fits the action tokenizer on the normalised training chunks and
writes it to `RUN_DIR/tokenizer/` (the weights, with the normalisation
statistics as buffers, go to `model.safetensors` like every run's). Building a
phase's data reads the demonstrations again and encodes their chunks with the
policy's codec (and, for a frozen camera encoder, its features once). The only
part a phase trains is `policy`.

What the policy observes comes from the env config: `env.state_key` (default
`observation.state`; null: no state) and `env.cameras` (image or video
features, default none; they need `policy.vision`, e.g. `policy=gpt_image`).
A dataset is *simulated* when the env has a simulator (`env.simulator`,
default `metaworld`) and every dataset task is one of its tasks: its runs are
rolled out, and the task list is the env's. Otherwise the task list is the
dataset's own task strings, there is nothing to roll out, and `env.holdout`
(default 0.1 then, 0 for a simulated dataset) of each task's episodes is held
out: the phase's figures carry the held-out action metrics (behavior/heldout.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from hydra.utils import instantiate
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from torch import nn

from behavior.codec import ActionCodec
from behavior.dataset import STATE, DemoDataset, Demonstrations, build_demonstrations, heldout_episodes, identity
from behavior.heldout import heldout_metrics
from behavior.inference import build_policy, save_policy_spec
from behavior.metaworld import task_names
from behavior.tokenizers import tokenizer_from_config
from core.data import StreamDataModule
from core.module import TrainModule
from data.lerobot import LeRobotData, read_dataset

console = Console()
FEATURE_BATCH = 256  # frames per encoder call when a frozen encoder's features are computed up front


def dataset_path(node) -> str:
    """`env.dataset`: a folder (`env.dataset=DIR`) or a config whose `_target_` returns one (collecting it first)."""
    if isinstance(node, str):
        return str(Path(node).expanduser())
    if OmegaConf.is_config(node) and "_target_" in node:
        return str(instantiate(node))
    raise ValueError(f"env.dataset={node!r}: give a LeRobot dataset folder (env.dataset=DIR) or a config with a _target_")


def simulated_tasks(cfg: DictConfig, data: LeRobotData) -> list[str] | None:
    """The env's task list when the dataset is simulated (module docstring), else None."""
    if cfg.env.get("simulator", "metaworld") is None or cfg.env.get("tasks") is None:
        return None
    tasks = task_names(cfg.env.tasks)
    return tasks if set(data.tasks) <= set(tasks) else None


def holdout_fraction(cfg: DictConfig, simulated: bool) -> float:
    value = cfg.env.get("holdout")
    return float(value) if value is not None else (0.0 if simulated else 0.1)


class BehaviorModule(TrainModule):
    def parts(self):
        return {"policy": self.model}

    def apply_trainable(self) -> None:
        super().apply_trainable()
        vision = getattr(self.model, "vision", None)
        if vision is not None and vision.freeze:
            vision.encoder.requires_grad_(False)

    def train(self, mode: bool = True):
        super().train(mode)
        vision = getattr(self.model, "vision", None)
        if mode and vision is not None and vision.freeze:
            vision.encoder.eval()
        return self

    def compute_loss(self, batch):
        return self.model.loss(batch)

    def sample_losses(self, batch):
        return self.model.sample_losses(batch)

    def batch_tokens(self, batch) -> int | None:
        tokens = batch.get("tokens")
        return None if tokens is None else int((tokens >= 0).sum()) + tokens.shape[0] * self.model.context

    def flops_per_token(self) -> float | None:
        """6·N per token for the GPT (its sequences are a handful of tokens, so attention is negligible). N leaves
        out a camera encoder: frozen, it does not run in training (its features are computed once); fine-tuned,
        its FLOPs are per image, not per token, and are not counted."""
        if not hasattr(self.model, "codec"):
            return None
        return 6.0 * sum(p.numel() for n, p in self.model.named_parameters() if not n.startswith("vision.encoder."))


class BehaviorDataModule(StreamDataModule):
    """The training samples as tensors; `report` adds the held-out action metrics of the trained policy when
    episodes were held out (the core calls it after the phase's training)."""

    def __init__(self, tensors: dict[str, torch.Tensor], micro_batch_size: int, seed: int, policy: nn.Module | None = None,
                 heldout: tuple[dict[str, torch.Tensor], np.ndarray, int] | None = None):
        super().__init__(micro_batch_size, seed)
        self.tensors, self.policy, self.heldout = tensors, policy, heldout
        self.num_samples = len(next(iter(tensors.values())))

    def setup(self, stage: str | None = None) -> None:
        self.train_dataset = DemoDataset(self.tensors)
        self.collate_fn = identity

    def report(self) -> dict:
        figures = {"samples": self.num_samples}
        if self.heldout is not None and self.policy is not None:
            figures.update({f"heldout/{k}": v for k, v in heldout_metrics(self.policy, *self.heldout).items()})
        return figures


class BehaviorTask:
    """The behavior policies as a `core.interfaces.Task` (`task=behavior`, conf/task/behavior.yaml): builds the
    policy (and its action codec, fitted on the demonstrations) and the data module of the demonstrations."""

    def __init__(self, name: str = "behavior"):
        self.name = name

    @staticmethod
    def load_demonstrations(cfg: DictConfig, frame_transform=None, images: bool = True) -> Demonstrations:
        """The demonstrations of `cfg.env` as training samples (all episodes, held-out ones included)."""
        path = dataset_path(cfg.env.dataset)
        data = read_dataset(path)
        demos = build_demonstrations(data, int(cfg.policy.n_obs), int(cfg.tokenizer.chunk_size),
                                     state=cfg.env.get("state_key", STATE), cameras=list(cfg.env.get("cameras") or []),
                                     frame_transform=frame_transform, tasks=simulated_tasks(cfg, data), images=images)
        demos.simulated = simulated_tasks(cfg, data) is not None
        console.print(f"demonstrations {path}: {len(data.episodes)} episodes, {len(demos)} samples, "
                      f"{len(demos.tasks)} tasks" + (f", cameras {list(demos.cameras)}" if demos.cameras else ""))
        return demos

    def build_model(self, cfg: DictConfig, run_dir: Path) -> nn.Module:
        """The policy with its normalisation statistics and, when tokenized, its codec fitted on the normalised
        training chunks; rank 0 writes what `behavior.inference.load(run_dir)` needs besides the weights to `run_dir`."""
        demos = self.load_demonstrations(cfg, images=False)
        simulated = demos.simulated
        held = heldout_episodes(demos, holdout_fraction(cfg, simulated))
        train = ~np.isin(demos.episode, held)
        chunks = demos.normalised_chunks()[train]
        kwargs = dict(state_dim=demos.states.shape[-1], num_tasks=len(demos.tasks), n_obs=int(cfg.policy.n_obs))
        shape = {"action_dim": chunks.shape[-1], "chunk_size": int(cfg.tokenizer.chunk_size), "cameras": list(demos.cameras)}
        codec = None
        if cfg.policy.tokenized:
            codec = ActionCodec(tokenizer_from_config(cfg.tokenizer),
                                shape["chunk_size"], shape["action_dim"]).fit(chunks)
            shape["max_tokens"] = codec.max_tokens
        policy = build_policy(cfg.policy, kwargs, shape, codec)
        policy.norm.set(demos.obs_mean, demos.obs_std, demos.normalizer.q01, demos.normalizer.q99)
        if rank_zero_only.rank == 0:
            save_policy_spec(run_dir, kwargs, shape, codec,
                             {"tasks": demos.tasks, "simulated": simulated, "heldout_episodes": held})
        return policy

    @staticmethod
    def tensors(demos: Demonstrations, policy: nn.Module, rows: np.ndarray) -> dict[str, torch.Tensor]:
        """The policy's inputs and targets for the samples `rows`: states and task, camera inputs (for a frozen
        encoder its pooled features, computed here once), and the action chunks encoded by the policy's codec
        (`tokens`, and `offsets` where the tokenizer has them) or, for a continuous policy, the chunks (`actions`)."""
        chunks = demos.normalised_chunks()[rows]
        tensors = {"states": torch.from_numpy(demos.states[rows]), "task": torch.from_numpy(demos.task[rows])}
        vision = getattr(policy, "vision", None)
        if vision is not None:
            pixels = demos.images[rows]
            if vision.freeze:
                with torch.no_grad():
                    vision.encoder.eval()
                    tensors["image_features"] = torch.cat([vision.features(torch.from_numpy(pixels[i:i + FEATURE_BATCH]))
                                                           for i in range(0, len(pixels), FEATURE_BATCH)])
            else:
                tensors["images"] = torch.from_numpy(pixels)
        codec = getattr(policy, "codec", None)
        if codec is None:
            tensors["actions"] = torch.from_numpy(chunks)
        else:
            ids, offsets = codec.encode(chunks)
            tensors["tokens"] = torch.from_numpy(ids)
            if offsets is not None:
                tensors["offsets"] = torch.from_numpy(offsets)
        return tensors

    @classmethod
    def heldout_tensors(cls, cfg: DictConfig, policy: nn.Module, demos: Demonstrations | None = None):
        """(tensors, raw chunks, episodes) of the episodes the run held out (`policy.heldout_episodes`), or None."""
        held = list(getattr(policy, "heldout_episodes", None) or [])
        if not held:
            return None
        vision = getattr(policy, "vision", None)
        demos = demos or cls.load_demonstrations(cfg, frame_transform=vision.pixels if vision is not None else None)
        rows = np.flatnonzero(np.isin(demos.episode, held))
        return cls.tensors(demos, policy, rows), demos.chunks[rows], len(held)

    def build_datamodule(self, cfg: DictConfig, phase: DictConfig, model: nn.Module, run_dir: Path,
                         micro_batch_size: int, seed: int) -> BehaviorDataModule:
        """The training samples (held-out episodes excluded) as tensors (`tensors`), and the held-out ones."""
        vision = getattr(model, "vision", None)
        demos = self.load_demonstrations(cfg, frame_transform=vision.pixels if vision is not None else None)
        model.heldout_episodes = heldout_episodes(demos, holdout_fraction(cfg, demos.simulated))
        train = np.flatnonzero(~np.isin(demos.episode, model.heldout_episodes))
        heldout = self.heldout_tensors(cfg, model, demos)
        return BehaviorDataModule(self.tensors(demos, model, train), micro_batch_size, seed, policy=model, heldout=heldout)

    def build_module(self, cfg: DictConfig, phase: DictConfig, model: nn.Module, total_steps: int) -> BehaviorModule:
        return BehaviorModule(model, phase, total_steps)

    def init_from(self, model: nn.Module, source: Path) -> bool:
        """Behavior runs know no other checkpoint format: the core loads `source/model.safetensors`."""
        return False
