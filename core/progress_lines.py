"""Plain progress lines for training where there is no terminal (SLURM, nohup, CI): a Lightning callback.

core/trainer.py adds `ProgressLines` instead of Lightning's Rich bar when stdout is not a TTY
(`core.progress.interactive`) and `trainer.progress_bar` is on. Every `trainer.progress_every` optimizer
steps, and at the phase's last step, rank 0 prints one line:

    phase finetune step: 40/500 (8%), 61 s, ETA 702 s, loss 1.8342, lr 2.00e-05, tokens/s/device 10345

(`tokens/s/device` is the latest `perf/tokens_per_sec_per_device` of core.throughput, absent when
`trainer.throughput: false`). Only public Lightning state is read: `trainer.global_step`, `max_steps`,
`callback_metrics`, `optimizers`, `is_global_zero`.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

import lightning as L

from core.progress import eta_line


class ProgressLines(L.Callback):
    """Prints `eta_line` progress every `every` optimizer steps (and at the last one) on rank 0."""

    def __init__(self, every: int = 10, phase: str = "", stream: TextIO | None = None):
        super().__init__()
        if every < 1:
            raise ValueError(f"trainer.progress_every must be at least 1, got {every}")
        self.every, self.stream = int(every), stream
        self.description = f"phase {phase} step" if phase else "step"

    def on_train_start(self, trainer, pl_module):
        self._start, self._first = time.monotonic(), trainer.global_step  # a resumed phase starts past 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._step_before = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step == self._step_before or not trainer.is_global_zero:
            return  # gradient accumulation: the optimizer step is not over yet
        if step % self.every and step != trainer.max_steps:
            return
        print(eta_line(self.description, step, trainer.max_steps, time.monotonic() - self._start, since=self._first,
                       extra=self.figures(trainer)), file=self.stream or sys.stdout, flush=True)

    @staticmethod
    def figures(trainer) -> dict[str, str]:
        """loss, lr and tokens/s of the step just taken (those the run has)."""
        metrics, out = trainer.callback_metrics, {}
        if "train/loss" in metrics:
            out["loss"] = f"{float(metrics['train/loss']):.4f}"
        if trainer.optimizers:
            out["lr"] = f"{trainer.optimizers[0].param_groups[0]['lr']:.2e}"
        if "perf/tokens_per_sec_per_device" in metrics:
            out["tokens/s/device"] = f"{float(metrics['perf/tokens_per_sec_per_device']):.0f}"
        return out
