"""Lightning wrappers of the behavior policies on the shared core (`python train.py task=behavior`).

`BehaviorTask` is what `conf/task/behavior.yaml` names. Building the model
reads the demonstrations (collected on first use, `cfg.env.dataset`), fits the
action tokenizer on the normalised training chunks and writes it to
`RUN_DIR/tokenizer/` (the weights, with the normalisation statistics as
buffers, go to `model.safetensors` like every run's). Building a phase's data
reads the demonstrations again and encodes their chunks with the policy's
codec. The only part a phase trains is `policy`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from hydra.utils import instantiate
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig
from rich.console import Console
from torch import nn

from behavior.codec import ActionCodec
from behavior.inference import build_policy, save_policy_spec
from behavior.dataset import DemoDataset, Demonstrations, build_demonstrations, identity
from behavior.metaworld import task_names
from behavior.tokenizers import tokenizer_from_config
from core.data import StreamDataModule
from core.module import TrainModule
from data.lerobot import read_dataset

console = Console()


class BehaviorModule(TrainModule):
    def parts(self):
        return {"policy": self.model}

    def compute_loss(self, batch):
        return self.model.loss(batch)

    def sample_losses(self, batch):
        return self.model.sample_losses(batch)

    def batch_tokens(self, batch) -> int | None:
        tokens = batch.get("tokens")
        return None if tokens is None else int((tokens >= 0).sum()) + tokens.shape[0] * self.model.context

    def flops_per_token(self) -> float | None:
        """6·N per token for the GPT (its sequences are a handful of tokens, so attention is negligible)."""
        return 6.0 * sum(p.numel() for p in self.model.parameters()) if hasattr(self.model, "codec") else None


class BehaviorDataModule(StreamDataModule):
    def __init__(self, tensors: dict[str, torch.Tensor], micro_batch_size: int, seed: int):
        super().__init__(micro_batch_size, seed)
        self.tensors = tensors
        self.num_samples = len(next(iter(tensors.values())))

    def setup(self, stage: str | None = None) -> None:
        self.train_dataset = DemoDataset(self.tensors)
        self.collate_fn = identity

    def report(self) -> dict:
        return {"samples": self.num_samples}


class BehaviorTask:
    """The behavior policies as a `core.interfaces.Task` (`task=behavior`, conf/task/behavior.yaml): builds the
    policy (and its action codec, fitted on the demonstrations) and the data module of the demonstrations."""

    def __init__(self, name: str = "behavior"):
        self.name = name

    @staticmethod
    def load_demonstrations(cfg: DictConfig) -> Demonstrations:
        """The demonstrations of `cfg.env` (collected into the cache on first use) as training samples."""
        path = instantiate(cfg.env.dataset)
        data = read_dataset(path)
        demos = build_demonstrations(data, task_names(cfg.env.tasks), int(cfg.policy.n_obs), int(cfg.tokenizer.chunk_size))
        console.print(f"demonstrations {path}: {len(data.episodes)} episodes, {len(demos)} samples")
        return demos

    def build_model(self, cfg: DictConfig, run_dir: Path) -> nn.Module:
        """The policy with its normalisation statistics and, when tokenized, its codec fitted on the normalised
        action chunks; rank 0 writes what `behavior.inference.load(run_dir)` needs besides the weights to `run_dir`."""
        demos = self.load_demonstrations(cfg)
        chunks = demos.normalised_chunks()
        kwargs = dict(state_dim=demos.states.shape[-1], num_tasks=len(task_names(cfg.env.tasks)), n_obs=int(cfg.policy.n_obs))
        shape = {"action_dim": chunks.shape[-1], "chunk_size": int(cfg.tokenizer.chunk_size)}
        codec = None
        if cfg.policy.tokenized:
            codec = ActionCodec(tokenizer_from_config(cfg.tokenizer),
                                shape["chunk_size"], shape["action_dim"]).fit(chunks)
            shape["max_tokens"] = codec.max_tokens
        policy = build_policy(cfg.policy, kwargs, shape, codec)
        policy.norm.set(demos.obs_mean, demos.obs_std, demos.normalizer.q01, demos.normalizer.q99)
        if rank_zero_only.rank == 0:
            save_policy_spec(run_dir, kwargs, shape, codec)
        return policy

    def build_datamodule(self, cfg: DictConfig, phase: DictConfig, model: nn.Module, run_dir: Path,
                         micro_batch_size: int, seed: int) -> BehaviorDataModule:
        """The demonstrations as tensors: states and task, plus the action chunks encoded by the policy's codec
        (`tokens`, and `offsets` where the tokenizer has them) or, for a continuous policy, the chunks (`actions`)."""
        demos = self.load_demonstrations(cfg)
        chunks = demos.normalised_chunks()
        tensors = {"states": torch.from_numpy(demos.states), "task": torch.from_numpy(demos.task)}
        codec = getattr(model, "codec", None)
        if codec is None:
            tensors["actions"] = torch.from_numpy(chunks)
        else:
            ids, offsets = codec.encode(chunks)
            tensors["tokens"] = torch.from_numpy(ids)
            if offsets is not None:
                tensors["offsets"] = torch.from_numpy(offsets)
        return BehaviorDataModule(tensors, micro_batch_size, seed)

    def build_module(self, cfg: DictConfig, phase: DictConfig, model: nn.Module, total_steps: int) -> BehaviorModule:
        return BehaviorModule(model, phase, total_steps)

    def init_from(self, model: nn.Module, source: Path) -> bool:
        """Behavior runs know no other checkpoint format: the core loads `source/model.safetensors`."""
        return False
