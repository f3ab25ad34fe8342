"""Checkpoint files that survive crashes.

`AtomicCheckpointIO` writes every checkpoint to a temporary file, syncs it to
disk and renames it into place, so a kill during a write leaves the previous
checkpoint intact (and a stray `*.tmp`, which `remove_stray_tmp` clears); the
checksum of each checkpoint written into a run's `checkpoints/` is recorded in the
run's checksums.json (core/weights.py).
`resume_checkpoint` picks what a restarted run continues from: `last.ckpt`, or
when that cannot be read or fails its checksum, the newest good `step=N.ckpt`;
when checkpoints exist but none is good it raises `CheckpointError` (restarting
from step 0 would silently throw the run's progress away). `peek` reads a
checkpoint's small bookkeeping entries without unpickling code (for an FSDP
sharded checkpoint, a directory, from its `meta.pt`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from safetensors.torch import save_model

from core.weights import record_file, verify_file
from data.atomic import atomic_file


class CheckpointError(RuntimeError):
    """The run has checkpoints, but none it can continue from."""


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint, path, storage_options=None):
        path = Path(path)
        with atomic_file(path, fsync=True) as tmp:
            super().save_checkpoint(checkpoint, tmp, storage_options)
        if path.parent.name == "checkpoints":  # a run's checkpoint: <run_dir>/checkpoints/NAME.ckpt
            record_file(path.parent.parent, path)


def peek(path: Path) -> dict:
    """The checkpoint's phase, global step and data position (weights_only load, memory-mapped)."""
    path = Path(path)
    if path.is_dir():  # FSDP sharded checkpoint: metadata next to the shards
        ckpt = torch.load(path / "meta.pt", map_location="cpu", weights_only=True)
    else:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    return {"phase": ckpt.get("phase"), "global_step": ckpt.get("global_step", 0), "consumed_batches": ckpt.get("consumed_batches", 0),
            "last_step_metrics": ckpt.get("last_step_metrics")}


def save_weights_atomic(model: torch.nn.Module, path: Path) -> None:
    """Model weights as safetensors, written to a temporary file then renamed into place."""
    with atomic_file(path) as tmp:
        save_model(model, str(tmp))


def step_of(path: Path) -> int:
    """`step=12.ckpt` -> 12 (-1 for other names)."""
    stem = Path(path).name.removesuffix(".ckpt")
    return int(stem.split("=", 1)[1]) if stem.startswith("step=") and stem.split("=", 1)[1].isdigit() else -1


def resume_checkpoint(ckpt_dir: Path) -> Path | None:
    """`last.ckpt` if it can be read and matches its checksum, else the newest such `step=N.ckpt`; None when there
    is no checkpoint; CheckpointError when there are checkpoints but none of them is good."""
    ckpt_dir = Path(ckpt_dir)
    steps = sorted((p for p in ckpt_dir.glob("step=*.ckpt") if step_of(p) >= 0), key=step_of, reverse=True)
    bad = []
    for path in [ckpt_dir / "last.ckpt", *steps]:
        if not path.exists():
            continue
        try:
            if path.is_file():
                verify_file(ckpt_dir.parent, path)
            peek(path)
            return path
        except Exception as err:  # a truncated or corrupt file: fall back to an older checkpoint
            reason = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
            print(f"checkpoint {path} cannot be used ({type(err).__name__}: {reason}); trying an older one")
            bad.append(f"{path.name} ({reason})")
    if bad:
        raise CheckpointError(f"{ckpt_dir}: no checkpoint the run can continue from: {'; '.join(bad)}. Restarting at step 0 "
                              "would discard the run's progress, so it stops here. Fix: restore a good copy of "
                              f"{ckpt_dir / 'last.ckpt'}, or delete {ckpt_dir} to train the unfinished phase from its start")
    return None


def remove_stray_tmp(ckpt_dir: Path) -> None:
    """Delete the `*.tmp` files an interrupted write left behind."""
    for tmp in Path(ckpt_dir).glob("*.tmp*"):
        tmp.unlink(missing_ok=True)
