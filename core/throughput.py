"""Throughput and MFU, logged with the loss at every log step (`perf/*` columns of metrics.csv).

Per window of optimizer steps since the previous log (figures of this rank,
i.e. per device; `samples_per_sec` is for all ranks together):
- `perf/step_time`: seconds per optimizer step (data loading included);
- `perf/samples_per_sec`, `perf/tokens_per_sec_per_device` (non-padding
  tokens, from `TrainModule.batch_tokens`);
- `perf/data_wait`: the fraction of the time spent waiting for the next batch;
- `perf/mfu`: model FLOPs (`TrainModule.batch_flops`) per second ÷ the device
  peak (core/flops.py; on CPU only when `trainer.peak_flops` is given).

The phase's totals (`total_flops`: model FLOPs of every rank, None when the module counts none;
`total_samples`) are kept in the
checkpoint (`state_dict`), so a resumed phase reports the same totals as an uninterrupted one;
core.run writes them to results.json (`train.<phase>/train_flops`).

What a batch counts is the task's business (the module's hooks); this
callback only adds up and divides. On GPU it synchronises once per log step.
It follows the loop through public Trainer state only: a micro-batch ends an
optimizer step when `trainer.global_step` moved during it, and the metrics are
logged on the steps Lightning writes logs for (`global_step` a multiple of
`log_every_n_steps`, or the run stopping).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import lightning as L
import torch

from core.flops import device_peak_flops


def _add(total, value):
    return total if value is None else total + value


class ThroughputMonitor(L.Callback):
    """Adds the `perf/*` metrics of each window of optimizer steps between two log steps."""

    def __init__(self, peak_flops: float | None = None, fp8: bool = False):
        super().__init__()
        self.peak_override, self.fp8 = peak_flops, fp8
        self.peak: float | None = None
        self.total_flops: float | None = None
        self.total_samples = 0

    def state_dict(self) -> dict:
        return {"total_flops": self.total_flops, "total_samples": self.total_samples}

    def load_state_dict(self, state_dict: dict) -> None:
        self.total_flops = state_dict.get("total_flops")
        self.total_samples = int(state_dict.get("total_samples", 0))

    def on_train_start(self, trainer, pl_module):
        self.peak = device_peak_flops(trainer.strategy.root_device, str(trainer.precision), self.fp8, self.peak_override)
        self._reset(time.perf_counter())
        self._batch_end = self._window_start

    def _reset(self, now: float) -> None:
        self._window_start, self._steps, self._samples, self._wait = now, 0, 0, 0.0
        self._tokens, self._flops, self._has_tokens, self._has_flops = 0, 0.0, False, False

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._wait += time.perf_counter() - self._batch_end  # the loop fetched this batch since the last one ended
        self._step_before_batch = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if getattr(pl_module, "step_batch", None) is not None:  # the batch it trained on (a sifter's, not the loop's)
            batch = pl_module.step_batch
        tokens, flops = pl_module.batch_tokens(batch), pl_module.batch_flops(batch)
        self._has_tokens |= tokens is not None
        self._has_flops |= flops is not None
        self._tokens, self._flops = _add(self._tokens, tokens), _add(self._flops, flops)
        self._samples += _batch_size(batch)
        self.total_samples += _batch_size(batch) * trainer.world_size
        if flops is not None:
            self.total_flops = (self.total_flops or 0.0) + float(flops) * trainer.world_size
        self._batch_end = time.perf_counter()
        if trainer.global_step == self._step_before_batch:
            return  # gradient accumulation: the optimizer step is not over yet
        self._steps += 1
        if not _logs_now(trainer):
            return
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()
        now = time.perf_counter()
        seconds = max(now - self._window_start, 1e-9)
        metrics = {
            "perf/step_time": seconds / self._steps,
            "perf/samples_per_sec": self._samples * trainer.world_size / seconds,
            "perf/data_wait": min(1.0, self._wait / seconds),
        }
        if self._has_tokens:
            metrics["perf/tokens_per_sec_per_device"] = float(self._tokens) / seconds
        if self._has_flops and self.peak:
            metrics["perf/mfu"] = float(self._flops) / seconds / self.peak
        pl_module.log_dict(metrics, on_step=True, on_epoch=False, rank_zero_only=True)
        self._reset(now)
        self._batch_end = now


def _logs_now(trainer) -> bool:
    """Whether Lightning writes the step just taken to the loggers (its `log_every_n_steps` cadence)."""
    every = trainer.log_every_n_steps
    return every > 0 and (trainer.global_step % every == 0 or trainer.should_stop)


def _batch_size(batch) -> int:
    if isinstance(batch, Mapping):
        batch = next((v for v in batch.values() if isinstance(v, torch.Tensor)), None)
    elif isinstance(batch, (list, tuple)):
        batch = batch[0] if batch else None
    return int(batch.shape[0]) if isinstance(batch, torch.Tensor) and batch.ndim else 0
