"""Tiny flavours: real checkpoints written locally, loaded through the same code as hub models.

A config names one as `tiny:NAME` (e.g. `model_id: tiny:tiny_llama`); the
component loaders turn that into the local folder `ensure_tiny(NAME)`, written
on first load in `$REFRACT_CACHE/tiny/NAME-vVERSION/` (default
`~/.cache/refract/tiny/`) and reused afterwards. Composing, resolving or
hashing a config writes nothing.

Each flavour is registered by conf/tiny/NAME.yaml, whose `_target_` is its
writer: vlm/tiny/vision.py (timm and open_clip image encoders) or
vlm/tiny/text.py (transformers language backbones), seeded, with tokenizers
trained on the shared corpus (vlm/tiny/corpus.py).
`python -m vlm.tiny` writes them all.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from hydra.utils import instantiate

from core.conf import group_option, group_options
from data.atomic import atomic_directory, write_json
from data.cache import cache_root

# 7: what ensure_tiny writes from this code; the version-6 LM folders of the earlier sessions' caches were
# calibration runs' exports copied in, which an empty cache does not give back (docs/reproduction.md).
VERSION = 7


def flavours() -> list[str]:
    """The tiny flavours: one conf/tiny/NAME.yaml each, whose `_target_` is the function writing the checkpoint."""
    return group_options("tiny")


def ensure_tiny(name: str, root: Path | None = None) -> Path:
    """Folder of the tiny checkpoint `name`, written (atomically) on first use. Writing seeds its own RNG
    inside `torch.random.fork_rng`: whether the cache existed never changes the caller's random state."""
    writer = group_option("tiny", name)  # ValueError naming the choices for an unknown flavour
    smoke = "-smoke" if "smoke_overrides" in writer and os.environ.get("REFRACT_TINY_SMOKE") == "1" else ""  # pretrained.py
    out = (root or cache_root()) / "tiny" / f"{name}-v{VERSION}{smoke}"
    if not (out / "done.json").exists():
        with atomic_directory(out) as tmp, torch.random.fork_rng(devices=[]):
            instantiate(writer, out=tmp)
            write_json(tmp / "done.json", {"name": name, "version": VERSION})
    return out
