"""The run directory of a published checkpoint evaluated without training (`evaluate.py init_from=DIR`).

`imported_run_dir(cfg)` makes `<imported.root>/imported-<folder name>-<8 hex digits>/` and writes its
`config.yaml`: `imported.source` (the folder, absolute), the import settings (`image_strategy`,
`prompt_format`, `dtype`) and `imported.weights` (name, size and mtime of the folder's weight files). The
digest hashes the folder's path, its `config.json` and those settings, so the same command finds the same
directory again (and the benchmark runner resumes its predictions log, whose `_meta` hashes this config: new
weights in the folder start the log over), while another folder or other settings get their own directory. The model itself is built by the task's loader from
`imported.source` (VLM: vlm/inference.py); the core only records where it comes from.

`init_from` may be a hub id (`llava-hf/llava-1.5-7b-hf`) instead of a folder: then, and only then, it is
downloaded (huggingface_hub's cache) because the user named it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from data.atomic import atomic_file

SETTINGS = ("image_strategy", "prompt_format", "dtype")


class UsageError(ValueError):
    """An evaluation command that names no model, or two (`run=` and `init_from=`)."""


def resolve_source(init_from: str) -> Path:
    """`init_from` as a local folder: an existing path, or a hub id `ORG/NAME` downloaded on request."""
    path = Path(init_from).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"init_from={init_from}: {path} has no config.json; pass an HF Llava folder "
                                    "(e.g. a download of llava-hf/llava-1.5-7b-hf) or run=RUN_DIR for a trained run")
        return path.resolve()
    if init_from.count("/") != 1 or init_from.startswith((".", "/", "~")):
        raise FileNotFoundError(f"init_from={init_from}: no such folder (and not a hub id ORG/NAME)")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(init_from))
    except Exception as err:
        raise FileNotFoundError(f"init_from={init_from}: not a local folder, and the hub download failed ({err}). Fix: "
                                f"`hf download {init_from} --local-dir DIR`, then init_from=DIR") from err


def imported_run_dir(cfg: DictConfig) -> Path:
    """Create (or find again) the run directory of `cfg.init_from` and write its config.yaml; return it."""
    source = resolve_source(str(cfg.init_from))
    settings = {k: cfg.get("imported", {}).get(k) for k in SETTINGS}
    key = json.dumps({"source": str(source), "settings": settings}, sort_keys=True).encode()
    digest = hashlib.sha1((source / "config.json").read_bytes() + key).hexdigest()[:8]
    run_dir = Path(cfg.get("imported", {}).get("root") or "runs") / f"imported-{source.name}-{digest}"
    weights = sorted(p for p in source.iterdir() if p.suffix in (".safetensors", ".bin"))
    record = {"imported": {"source": str(source), **settings,
                           "weights": [f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in weights]}}
    run_dir.mkdir(parents=True, exist_ok=True)
    text = OmegaConf.to_yaml(OmegaConf.create(record))
    config = run_dir / "config.yaml"
    if not config.exists() or config.read_text() != text:
        with atomic_file(config) as tmp:
            tmp.write_text(text)
    return run_dir
