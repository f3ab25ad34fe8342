"""Tiny flavours: real checkpoints written locally, loaded through the same code as hub models.

A config names one as `tiny:NAME` (e.g. `model_id: tiny:tiny_llama`); the
component loaders turn that into the local folder `ensure_tiny(NAME)`, written
on first load in `$REFRACT_CACHE/tiny/NAME-vVERSION/` (default
`~/.cache/refract/tiny/`) and reused afterwards. Composing, resolving or
hashing a config writes nothing.

VERSION changes every flavour's folder (a new LM chain rewrites them all). A
flavour whose own recipe changes sets `revision: N` in its yaml instead: its
folder becomes `NAME-vVERSION-rN` and no other flavour's cache moves (revision 1,
the default, keeps the plain name). A flavour started from it (`lm_pretrain.init=tiny:NAME`, `encoder_pretrain.init=tiny:NAME`) raises its own
revision with it (tests/vlm/test_pretrain.py checks that none lags behind).

Each flavour is registered by conf/tiny/NAME.yaml, whose `_target_` is its
writer: vlm/tiny/vision.py (timm and open_clip image encoders) or
vlm/tiny/text.py (transformers language backbones), seeded, with tokenizers
trained on the shared corpus (vlm/tiny/corpus.py).
`python -m vlm.tiny` writes them all.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from core.conf import group_option, group_options
from core.weights import sha256
from data.atomic import atomic_directory, write_json
from data.cache import cache_root

# 8: the LM chain's scene stages add generated questions for every family (RefCOCO's answered by a box) and the
# sign's word in its slot, and the instruct stage keeps half scene samples (docs/reproduction.md, runs 233 ff.).
# Version 7 (the committed study's components) is what commit b42f71f writes.
VERSION = 8


def flavours() -> list[str]:
    """The tiny flavours: one conf/tiny/NAME.yaml each, whose `_target_` is the function writing the checkpoint."""
    return group_options("tiny")


def ensure_tiny(name: str, root: Path | None = None) -> Path:
    """Folder of the tiny checkpoint `name`, written (atomically) on first use. Writing seeds its own RNG
    inside `torch.random.fork_rng`: whether the cache existed never changes the caller's random state."""
    writer = group_option("tiny", name)  # ValueError naming the choices for an unknown flavour
    revision = int(writer.pop("revision", 1))  # the flavour's own recipe changes; not the writer's argument
    smoke = "-smoke" if "smoke_overrides" in writer and os.environ.get("REFRACT_TINY_SMOKE") == "1" else ""  # pretrained.py
    out = (root or cache_root()) / "tiny" / f"{name}-v{VERSION}{f'-r{revision}' if revision != 1 else ''}{smoke}"
    if not (out / "done.json").exists():
        with atomic_directory(out) as tmp, torch.random.fork_rng(devices=[]):
            instantiate(writer, out=tmp)
            write_json(tmp / "done.json", {"name": name, "version": VERSION, "revision": revision})
    return out


def fingerprint(name: str, root: Path | None = None) -> str:
    """The weights of flavour `name` in one string: the sha256 of its `*.safetensors` files' digests (written first
    if missing). A seeded one-thread pretraining writes the same weights again on one kind of CPU but not across
    kinds (docs/reproduction.md), so a study records this to tell which components its cells were trained on."""
    folder = ensure_tiny(name, root)
    files = sorted(folder.rglob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"tiny flavour {name!r}: no *.safetensors in {folder}; delete the folder to rewrite it")
    listing = "\n".join(f"{p.relative_to(folder).as_posix()} {sha256(p)}" for p in files)
    return hashlib.sha256(listing.encode()).hexdigest()[:16]


def fingerprints_in(*nodes) -> dict[str, str]:
    """{NAME: fingerprint} of every tiny flavour a config node names (a string value `tiny:NAME` anywhere in it,
    after resolving): what a run's name alone does not pin, since a flavour rebuilt or moved to a new revision
    keeps its `tiny:NAME`."""
    from vlm.hub import TINY_PREFIX

    def strings(value):
        if isinstance(value, dict):
            for v in value.values():
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)
        elif isinstance(value, str):
            yield value

    names = {value.removeprefix(TINY_PREFIX) for node in nodes if node is not None
             for value in strings(OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node)
             if value.startswith(TINY_PREFIX)}
    return {name: fingerprint(name) for name in sorted(names)}
