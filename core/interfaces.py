"""The interfaces the core drives, as `typing.Protocol`s: a training task and a benchmark.

A task (`cfg.task._target_`, e.g. `vlm.lightning.VLMTask`, `behavior.lightning.BehaviorTask`)
builds what `core.run.train` trains, phase by phase; a benchmark (`cfg.benchmark._target_`, e.g.
`eval.runners.vqa.VQAv2`, `behavior.rollout.RolloutBenchmark`) is what `core.run.evaluate` calls on
a run directory. Both are structural: a class conforms by having the members below, and
`isinstance(obj, Task)` checks it at run time (names only, not signatures).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import lightning as L
from omegaconf import DictConfig
from torch import nn


@runtime_checkable
class TaskDataModule(Protocol):
    """A phase's data: a LightningDataModule that knows its size and what it skipped."""

    num_samples: int

    def setup(self, stage: str | None = None) -> None: ...

    def report(self) -> dict[str, Any]:
        """Counts for results.json (samples, skipped records by reason, ...)."""
        ...


@runtime_checkable
class Task(Protocol):
    """What `core.run.train` drives. Every method receives what it needs explicitly (the run directory
    included); nothing is passed between methods through the task object."""

    name: str

    def build_model(self, cfg: DictConfig, run_dir: Path) -> nn.Module:
        """The plain `nn.Module` trained by every phase (random or pretrained parts, no Lightning)."""
        ...

    def build_datamodule(self, cfg: DictConfig, phase: DictConfig, model: nn.Module, run_dir: Path,
                         micro_batch_size: int, seed: int) -> TaskDataModule:
        ...

    def build_module(self, cfg: DictConfig, phase: DictConfig, model: nn.Module, total_steps: int) -> L.LightningModule:
        """The phase's LightningModule (a `core.module.TrainModule`) around `model`."""
        ...

    def init_from(self, model: nn.Module, source: Path) -> bool:
        """Load `source` into `model` if the task recognises its format (e.g. an HF Llava folder) and return True;
        False leaves it to the core, which loads `source/model.safetensors`."""
        ...

    # Optional, not part of the protocol: `input_identities(cfg) -> dict[str, str]`, the identity of what the model
    # starts from that the config does not pin (vlm: each `tiny:NAME` flavour's weight fingerprint); the core
    # records it in the run directory and refuses to resume or reuse the run on other inputs (core.run.check_inputs).


@runtime_checkable
class Benchmark(Protocol):
    """`benchmark(run_dir, cfg) -> metrics`: evaluates the run in `run_dir`; `cfg` is the evaluation config."""

    name: str

    def __call__(self, run_dir: Path, cfg: DictConfig) -> dict[str, Any]: ...
