"""Checkpoint files that survive crashes.

`AtomicCheckpointIO` writes every checkpoint to a temporary file and renames it
into place, so a kill during a write leaves the previous checkpoint intact.
`peek` reads a checkpoint's small bookkeeping entries without unpickling code.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from safetensors.torch import save_model


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint, path, storage_options=None):
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        super().save_checkpoint(checkpoint, tmp, storage_options)
        os.replace(tmp, path)


def peek(path: Path) -> dict:
    """The checkpoint's phase, global step and data position (weights_only load, memory-mapped)."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    return {"phase": ckpt.get("phase"), "global_step": ckpt.get("global_step", 0), "consumed_batches": ckpt.get("consumed_batches", 0)}


def save_weights_atomic(model: torch.nn.Module, path: Path) -> None:
    """Model weights as safetensors, written to a temporary file then renamed into place."""
    tmp = path.with_name(path.name + ".tmp")
    save_model(model, str(tmp))
    os.replace(tmp, path)
