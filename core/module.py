"""The LightningModule base every refract task trains through.

`TrainModule` owns what is common to all tasks and nothing about images or
actions: AdamW with no weight decay on biases and norm weights, per-part
learning-rate scales, linear warmup (by ratio) then cosine decay (or another
transformers schedule, `optim.scheduler`), the count of
micro-batches consumed (the data position a resumed run continues from) and the
RNG states stored in every checkpoint (one set per rank under DDP). Subclasses
implement `compute_loss` and `parts` (the named sub-modules that a phase may
train or freeze), and may implement `batch_tokens` / `batch_flops` (what the
throughput callback counts; see core/throughput.py) and `sample_losses` (one
loss per sample, for smart sifting: core/sifting.py).

With a sifter (`sifting.enabled`, set by core.run) the loop's batches are only
micro-batch counts: each training step asks the sifter for the micro-batch it
trains on; `sift/forwarded`, `sift/backpropagated` (samples, all ranks) and
`sift/kept_fraction` are logged once per optimizer step, and the sifter's state
is in every checkpoint.

`train/loss` is logged once per optimizer step: the mean of the step's
micro-batch losses over gradient accumulation and over ranks, i.e. the loss of
the global batch, the same figure whether it was split over processes or
accumulated in one. A non-finite global-batch loss stops training with a
FloatingPointError before the optimizer applies it (never a NaN run that exits 0). A micro-batch whose loss
reaches no trainable parameter (text-only samples in a phase that trains only the projector) is a NoGradientError
naming the phase and the fix, not autograd's "does not require grad".
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

import lightning as L
import numpy as np
import torch
from torch import nn
from transformers import get_scheduler

from core.sifting import check_strategy


class NoGradientError(ValueError):
    """A micro-batch's loss depends on no trainable parameter: the phase's data and `trainable` do not fit."""


class TrainModule(L.LightningModule):
    """Base for task modules. `phase` is one phase of `cfg.stage.phases` (name, trainable, optim)."""

    def __init__(self, model: nn.Module, phase: Mapping, total_steps: int):
        super().__init__()
        self.model = model
        self.phase_name = str(phase["name"])
        self.optim = dict(phase["optim"])
        self.trainable = list(phase["trainable"])
        self.total_steps = int(total_steps)
        self.consumed_batches = 0  # micro-batches taken from the data stream; restored on resume
        self._step_losses: list[torch.Tensor] = []
        self.sifter = None  # a core.sifting.Sifter when `sifting.enabled`
        self.step_batch = None  # the micro-batch the latest training step trained on (what core.throughput counts)
        self.skipped_records = 0  # samples skipped as undecodable (a batch's `skipped_records`) in this process's batches
        self.apply_trainable()
        self.train()  # Lightning keeps modules in the mode they come in (HF loads models in eval mode)

    # --- what subclasses provide -------------------------------------------------------------
    def parts(self) -> dict[str, nn.Module]:
        """Named sub-modules that phases refer to in `trainable` and `lr_scale`."""
        raise NotImplementedError

    def compute_loss(self, batch) -> torch.Tensor:
        raise NotImplementedError

    def sample_losses(self, batch) -> torch.Tensor:
        """One loss per sample of a micro-batch (shape: rows), what smart sifting ranks samples by."""
        raise NotImplementedError(f"{type(self).__name__} gives no per-sample losses (sample_losses), which smart "
                                  "sifting needs; implement it or run with sifting.enabled=false")

    def batch_tokens(self, batch) -> int | None:
        """Non-padding tokens of a micro-batch (None: the task has no tokens). Default: `attention_mask.sum()`."""
        mask = batch.get("attention_mask") if isinstance(batch, Mapping) else None
        return int(mask.sum()) if mask is not None else None

    def batch_flops(self, batch) -> float | None:
        """Training FLOPs (forward + backward) of a micro-batch, for MFU; None leaves MFU out.
        Default: `flops_per_token() * batch_tokens(batch)` when the task gives `flops_per_token`."""
        per_token, tokens = self.flops_per_token(), self.batch_tokens(batch)
        return None if per_token is None or tokens is None else float(per_token) * tokens

    def flops_per_token(self) -> float | None:
        """Training FLOPs per token (e.g. core.flops.decoder_flops_per_token); None when unknown."""
        return None

    # --- freezing ----------------------------------------------------------------------------
    def apply_trainable(self) -> None:
        parts = self.parts()
        unknown = set(self.trainable) - set(parts)
        if unknown:
            raise ValueError(f"trainable names {sorted(unknown)} are not parts of this model; choose from {sorted(parts)}")
        for name, part in parts.items():
            part.requires_grad_(name in self.trainable)

    def train(self, mode: bool = True):
        """Frozen parts stay in eval mode (no dropout / norm statistics updates) while the rest trains."""
        super().train(mode)
        if mode:
            for name, part in self.parts().items():
                if name not in self.trainable:
                    part.eval()
        return self

    # --- training ----------------------------------------------------------------------------
    def training_step(self, batch, batch_idx):
        if self.sifter is not None:
            batch = self._sifted_batch()
        elif isinstance(batch, Mapping) and "skipped_records" in batch:
            self.skipped_records += int(batch.pop("skipped_records"))
        self.step_batch = batch
        loss = self.compute_loss(batch)
        if torch.is_grad_enabled() and not loss.requires_grad:
            raise NoGradientError(
                f"phase {self.phase_name}: micro-batch {self.consumed_batches} has a loss that no trainable part "
                f"({self.trainable}) takes part in, e.g. text-only samples while only the projector trains; drop those "
                "splits from the phase's `data` or add the part they train (e.g. backbone) to its `trainable`")
        self.consumed_batches += 1
        self._step_losses.append(loss.detach())
        if self.consumed_batches % self.trainer.accumulate_grad_batches == 0:  # the step's last micro-batch
            step_loss = torch.stack(self._step_losses).mean()
            self._step_losses = []
            global_loss = self.trainer.strategy.reduce(step_loss.clone(), reduce_op="mean")  # every rank decides alike
            if not torch.isfinite(global_loss):  # stop before the optimizer applies it: never finish a NaN run with exit 0
                raise FloatingPointError(f"phase {self.phase_name}: the training loss is {float(global_loss)} at optimizer "
                                         f"step {self.global_step}; training stopped before applying it. Check the data "
                                         "for non-finite values; lower the learning rate or train in float32")
            self._last_step_loss = step_loss
            self.log("train/loss", step_loss, prog_bar=True, on_step=True, on_epoch=False, sync_dist=True)
            if self.sifter is not None:
                self._log_sifting()
        return loss

    # --- smart sifting (core/sifting.py) -------------------------------------------------------
    def on_train_start(self) -> None:
        if self.sifter is not None:
            check_strategy(self.trainer.strategy)
            self.sifter.setup(self.global_rank, self.trainer.world_size, self.trainer.accumulate_grad_batches)

    def _sifted_batch(self):
        world, accumulate = self.trainer.world_size, self.trainer.accumulate_grad_batches
        lane = self.sifter.lane_of(self.consumed_batches, self.global_rank, world, accumulate)
        return self.sifter.next_batch(lane, self.global_step, self._score,
                                      lambda b: self.transfer_batch_to_device(b, self.device, 0))

    def _score(self, batch) -> torch.Tensor:
        """Per-sample losses without gradients, in eval mode, leaving the global RNG as it was (a kept sample trains
        exactly as it would have without sifting)."""
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            self.eval()
            try:
                return self.sample_losses(batch)
            finally:
                self.train()

    def _log_sifting(self) -> None:
        self.log_dict(self._sift_counts(self.sifter.take_step_counts()), on_step=True, on_epoch=False)

    def sifting_totals(self) -> dict[str, float]:
        """The phase's `sift/forwarded` and `sift/backpropagated` samples (all ranks) and scoring seconds (rank 0's)."""
        counts = self._sift_counts(self.sifter.totals())
        return {**counts, "sift/forwarded": int(counts["sift/forwarded"]),
                "sift/backpropagated": int(counts["sift/backpropagated"]),
                "sift/score_seconds": round(self.sifter.score_seconds, 3)}

    def _sift_counts(self, counts: tuple[int, int]) -> dict[str, float]:
        """(forwarded, backpropagated) of this rank summed over all ranks, with the kept fraction."""
        summed = torch.tensor(counts, dtype=torch.float64, device=self.device)
        forwarded, backpropagated = self.trainer.strategy.reduce(summed, reduce_op="sum").tolist()
        return {"sift/forwarded": forwarded, "sift/backpropagated": backpropagated,
                "sift/kept_fraction": backpropagated / forwarded if forwarded else 1.0}

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        """Under FSDP the norm spans every rank's shards: torch's FSDP root module clips (Lightning's plugin refuses)."""
        root = self.trainer.model
        if gradient_clip_val and gradient_clip_algorithm in (None, "norm") and hasattr(root, "clip_grad_norm_"):
            root.clip_grad_norm_(gradient_clip_val)
            return
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def configure_optimizers(self):
        groups = optimizer_groups(self.parts(), self.trainable, self.optim)
        opt = torch.optim.AdamW(
            groups,
            lr=self.optim["lr"],
            betas=tuple(self.optim.get("betas", (0.9, 0.999))),
            eps=self.optim.get("eps", 1e-8),
        )
        warmup = math.ceil(self.optim.get("warmup_ratio", 0.0) * self.total_steps)
        # optim.scheduler: a transformers schedule name ("cosine" default; "constant_with_warmup", "linear", ...)
        sched = get_scheduler(self.optim.get("scheduler", "cosine"), opt, num_warmup_steps=warmup,
                              num_training_steps=max(self.total_steps, 1))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # --- resume state ------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["phase"] = self.phase_name
        checkpoint["consumed_batches"] = self.consumed_batches
        checkpoint["rng"] = collect_rng_states()
        # Lightning logs a step's metrics after the checkpoint of that step is saved: keep the step's loss in
        # the checkpoint (core.loggers restores the row if a kill lost it) and flush what was logged so far.
        if getattr(self, "_last_step_loss", None) is not None:
            value = self.trainer.strategy.reduce(self._last_step_loss.detach(), reduce_op="mean")
            checkpoint["last_step_metrics"] = {"train/loss": float(value)}
        for logger in self.trainer.loggers:
            logger.save()
        rank, world = _rank_world()
        sifter = self.sifter.state() if self.sifter is not None else None
        if world > 1:  # every rank's RNG states (only rank 0 writes the file); all ranks take part in a save
            every = [None] * world
            torch.distributed.all_gather_object(every, checkpoint["rng"])
            checkpoint["rng_per_rank"] = every
            if sifter is not None:
                lanes = [None] * world
                torch.distributed.all_gather_object(lanes, sifter)
                sifter = [lane for per_rank in lanes for lane in per_rank]
        if sifter is not None:
            checkpoint["sifter"] = {"lanes": sifter, "num_lanes": self.sifter.num_lanes}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.consumed_batches = int(checkpoint.get("consumed_batches", 0))
        if self.sifter is not None:
            if "sifter" not in checkpoint:
                raise ValueError("the checkpoint was written without smart sifting, and this run sifts: resume with the "
                                 "settings the run was started with (sifting.enabled=false)")
            self.sifter.load(checkpoint["sifter"]["lanes"], int(checkpoint["sifter"]["num_lanes"]))
        per_rank = checkpoint.get("rng_per_rank") or []
        rank, world = _rank_world()
        if world > 1 and len(per_rank) == world:
            set_rng_states(per_rank[rank])
        elif "rng" in checkpoint:
            set_rng_states(checkpoint["rng"])


def _rank_world() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_no_decay(name: str, param: nn.Parameter) -> bool:
    """Biases, norm weights and other 1-D parameters (and position/scale vectors) get no weight decay."""
    return param.ndim < 2 or name.endswith(".bias") or "norm" in name.lower()


def declared_no_decay(module: nn.Module) -> set[str]:
    """Parameter names that sub-modules exclude from weight decay themselves (timm's `no_weight_decay()`
    convention, e.g. a ViT's position embeddings and class token), as names relative to `module`."""
    names = set()
    for prefix, sub in module.named_modules():
        method = getattr(sub, "no_weight_decay", None)
        if callable(method):
            names |= {f"{prefix}.{n}" if prefix else n for n in method()}
    return names


def optimizer_groups(parts: Mapping[str, nn.Module], trainable: list[str], optim: Mapping) -> list[dict]:
    """AdamW parameter groups: for each trainable part, a decay and a no-decay group at lr * lr_scale[part]."""
    lr_scale = dict(optim.get("lr_scale") or {})
    groups = []
    for name in trainable:
        decay, no_decay = [], []
        declared = declared_no_decay(parts[name])
        for pname, p in parts[name].named_parameters():
            if p.requires_grad:
                (no_decay if is_no_decay(pname, p) or pname in declared else decay).append(p)
        lr = optim["lr"] * float(lr_scale.get(name, 1.0))
        if decay:
            groups.append({"params": decay, "weight_decay": optim.get("weight_decay", 0.0), "lr": lr, "name": f"{name}/decay"})
        if no_decay:
            groups.append({"params": no_decay, "weight_decay": 0.0, "lr": lr, "name": f"{name}/no_decay"})
    if not groups:
        raise ValueError(f"no trainable parameters in parts {trainable}")
    return groups


def collect_rng_states() -> dict:
    """torch / numpy / python RNG states as plain tensors, lists and numbers (loadable with weights_only=True)."""
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": [np_name, torch.from_numpy(np_keys.astype(np.int64)), int(np_pos), int(np_has_gauss), float(np_gauss)],
        "python": [py_version, list(py_state), py_gauss],
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = states["numpy"]
    np.random.set_state((np_name, np_keys.numpy().astype(np.uint32), np_pos, np_has_gauss, np_gauss))
    py_version, py_state, py_gauss = states["python"]
    random.setstate((py_version, tuple(py_state), py_gauss))
    if states.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
