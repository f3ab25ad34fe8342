"""Tiny flavours: real checkpoints written locally, loaded through the same code as hub models.

A config names one as `tiny:NAME` (e.g. `model_id: tiny:tiny_llama`); the
component loaders turn that into the local folder `ensure_tiny(NAME)`, written
on first load in `$REFRACT_CACHE/tiny/NAME-vVERSION/` (default
`~/.cache/refract/tiny/`) and reused afterwards. Composing, resolving or
hashing a config writes nothing.

The writers, one dict per modality: vlm/tiny/vision.py (timm and open_clip
image encoders), vlm/tiny/text.py (transformers language backbones), both
trained or initialised from the shared corpus (vlm/tiny/corpus.py) and seeded.
`python -m vlm.tiny` writes them all.
"""

from __future__ import annotations

from pathlib import Path

import torch

from data.atomic import atomic_directory, write_json
from data.cache import cache_root
from vlm.tiny.text import WRITERS as TEXT_WRITERS
from vlm.tiny.vision import WRITERS as VISION_WRITERS

VERSION = 3
WRITERS = {**VISION_WRITERS, **TEXT_WRITERS}


def ensure_tiny(name: str, root: Path | None = None) -> Path:
    """Folder of the tiny checkpoint `name`, written (atomically) on first use. Writing seeds its own RNG
    inside `torch.random.fork_rng`: whether the cache existed never changes the caller's random state."""
    if name not in WRITERS:
        raise ValueError(f"unknown tiny flavour {name!r}; choose from {sorted(WRITERS)}")
    out = (root or cache_root()) / "tiny" / f"{name}-v{VERSION}"
    if not (out / "done.json").exists():
        with atomic_directory(out) as tmp, torch.random.fork_rng(devices=[]):
            WRITERS[name](tmp)
            write_json(tmp / "done.json", {"name": name, "version": VERSION})
    return out
