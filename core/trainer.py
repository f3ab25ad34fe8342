"""The Lightning Trainer of one phase, built from `cfg.trainer` (conf/trainer/*.yaml).

- strategy: a name (`auto`, `ddp`, ...) or a `_target_` factory such as
  `core.strategies.fsdp_strategy`; processes are launched by Lightning (or by
  srun / torchrun, which it detects);
- under SLURM, Lightning's own requeue is off: `sbatch --requeue` reruns the
  command, which resumes from `last.ckpt` like any restart;
- checkpoints: `checkpoints/last.ckpt` every `checkpoint_every` steps, plus
  `checkpoints/step=N.ckpt` (N counts steps over the whole run) keeping the
  newest `keep_last_k` when it is above 0; every write is atomic;
- `core.throughput.ThroughputMonitor` (`perf/*` metrics) unless `throughput: false`;
- progress (`progress_bar: true`): Lightning's Rich bar when stdout is a terminal; otherwise (SLURM, nohup,
  CI) the bar is off and `core.progress_lines.ProgressLines` prints a plain line every `progress_every` steps;
- `profile: true`: Lightning's PyTorchProfiler over `profile_steps` steps
  (after one wait and one warm-up step), writing a Chrome trace and
  `profile/fit-summary.txt` (top operators, fraction of time waiting for data)
  into the run directory.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import ModelCheckpoint, RichProgressBar
from lightning.pytorch.plugins.environments import SLURMEnvironment
from lightning.pytorch.profilers import PyTorchProfiler
from omegaconf import DictConfig

from core.checkpoint import AtomicCheckpointIO
from core.progress import interactive
from core.progress_lines import ProgressLines
from core.resolvers import register_resolvers
from core.throughput import ThroughputMonitor

register_resolvers()  # the presets' ${gpu_or_cpu:...}: whatever trains a composed config imports this module

DATA_WAIT = "train_dataloader_next"


class _StepProgressBar(RichProgressBar):
    """The data stream is endless, so the bar counts towards the phase's last step."""

    @property
    def total_train_batches(self):
        return self.trainer.max_steps * self.trainer.accumulate_grad_batches


class StepCheckpoint(ModelCheckpoint):
    """`step=N.ckpt` files named by the run-wide step (earlier phases' steps added), the newest k kept.

    The newest k are the k highest phase steps (`monitor="step"`, `mode="max"`); only the file name
    carries the offset, through the public `format_checkpoint_name`."""

    def __init__(self, step_offset: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.step_offset = step_offset

    def format_checkpoint_name(self, metrics, filename=None, ver=None, prefix=None) -> str:
        if "step" in metrics:
            metrics = {**metrics, "step": metrics["step"] + self.step_offset}
        return super().format_checkpoint_name(metrics, filename=filename, ver=ver, prefix=prefix)


class SummarisedProfiler(PyTorchProfiler):
    """PyTorchProfiler whose text summary (`summary.txt`) adds the fraction of step time spent waiting for data."""

    def summary(self) -> str:
        table = super().summary()
        events = self.function_events
        if not table or events is None:
            return table
        wait = step = 0.0
        for e in events:
            if e.name.startswith("ProfilerStep"):  # one whole training step (data, compute, checkpointing, hooks)
                step += e.cpu_time_total
            elif e.name.startswith("[pl][profile]") and e.name.endswith(DATA_WAIT):
                wait += e.cpu_time_total
        share = wait / step if step else float("nan")
        return f"data wait: {share:.1%} of the profiled steps' time was spent waiting for the next batch\n\n{table}"


def build_profiler(t: DictConfig, run_dir: Path):
    if not t.get("profile", False):
        return None
    steps = int(t.get("profile_steps", 5))
    return SummarisedProfiler(
        dirpath=run_dir / "profile",
        filename="summary",
        row_limit=25,
        sort_by_key="cuda_time_total" if torch.cuda.is_available() else "cpu_time_total",
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=steps, repeat=1),
    )


def build_trainer(cfg: DictConfig, phase: DictConfig, run_dir: Path, max_steps: int, accumulate: int, loggers,
                  step_offset: int = 0) -> L.Trainer:
    t = cfg.trainer
    every = int(t.checkpoint_every)
    keep = int(t.get("keep_last_k", 0) or 0)
    ckpt = dict(dirpath=run_dir / "checkpoints", every_n_train_steps=every, save_last=True, enable_version_counter=False)
    if keep > 0:
        callbacks = [StepCheckpoint(step_offset, filename="step={step}", auto_insert_metric_name=False,
                                    monitor="step", mode="max", save_top_k=keep, **ckpt)]
    else:
        callbacks = [ModelCheckpoint(save_top_k=0, **ckpt)]
    if t.get("throughput", True):
        callbacks.append(ThroughputMonitor(peak_flops=t.get("peak_flops"), fp8=bool(t.get("fp8", False))))
    progress, bar = bool(t.get("progress_bar", True)), False
    if progress and interactive():
        callbacks.append(_StepProgressBar())
        bar = True
    elif progress:  # no terminal: a bar would only appear at the end of the log
        callbacks.append(ProgressLines(every=int(t.get("progress_every") or 10), phase=phase.name))
    return L.Trainer(
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=t.get("num_nodes", 1),
        strategy=instantiate(t.strategy) if isinstance(t.strategy, DictConfig) else t.strategy,
        precision=t.precision,
        max_steps=max_steps,
        accumulate_grad_batches=accumulate,
        gradient_clip_val=phase.optim.get("gradient_clip_val", 1.0),
        log_every_n_steps=t.log_every_n_steps,
        callbacks=callbacks,
        logger=loggers,
        # under SLURM a requeued job reruns the same command and resumes from last.ckpt (not Lightning's hpc_ckpt)
        plugins=[AtomicCheckpointIO(), *([SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else [])],
        default_root_dir=run_dir,
        profiler=build_profiler(t, run_dir),
        enable_progress_bar=bar,
        enable_model_summary=False,
        use_distributed_sampler=False,  # core.data.StreamSampler shards by rank itself
        num_sanity_val_steps=0,
        deterministic=t.get("deterministic", False),
    )


def world_size(t: DictConfig) -> int:
    """Processes in the job: devices per node (`auto`/-1: every visible GPU, or 1 on CPU; a list: its length) x nodes."""
    devices = t.devices
    if isinstance(devices, str) and devices.isdigit():
        devices = int(devices)
    if devices in ("auto", -1, "-1"):
        gpu = str(t.accelerator) in ("gpu", "cuda", "auto") and torch.cuda.is_available()
        devices = torch.cuda.device_count() if gpu else 1
    elif not isinstance(devices, int):
        devices = len(list(devices))
    return int(devices) * int(t.get("num_nodes", 1) or 1)
