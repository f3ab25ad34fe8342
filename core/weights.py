"""Weights that are damaged, or that no longer match their run's config, are detected before they are used.

A run directory keeps `checksums.json`:
- `files`: the SHA-256 and size of `model.safetensors` and of every checkpoint, recorded by the writer right
  after the file is in place (`record_file`) and verified by every reader (`verify_file`): a copy that lost
  its tail or flipped a bit fails, naming the file, instead of loading silently wrong numbers;
- `config`: a digest of each value of the config the weights were trained with (`record_config`, at the end
  of every phase), so that a loader can name the key of a hand-edited `config.yaml` (`verify_config`) —
  a different prompt format, say, which changes no tensor shape.
Runs written before this record existed load as before (nothing to verify).

`load_weights(model, path)` reads a safetensors file into a model: the checksum first, then the file itself
(a truncated or corrupted header, a value that is NaN or infinite), then the tensors' names and shapes against
the model the config built, each failure a `WeightsError` naming the file and the tensor or config key.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from safetensors import safe_open
from safetensors.torch import load_model

from data.atomic import read_json, write_json

CHECKSUMS = "checksums.json"
# config values that do not change what the weights mean: where a component is read from and how it runs
RELOCATABLE = ("model_id", "model_name", "pretrained", "dtype", "attn_implementation", "gradient_checkpointing",
               "trust_remote_code", "max_length", "load_kwargs", "config_key")


class WeightsError(ValueError):
    """Weights that cannot be used: damaged, non-finite, or not those of the run's config."""


def sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _read_record(run_dir: Path) -> dict:
    path = Path(run_dir) / CHECKSUMS
    try:
        return read_json(path, default={})
    except (ValueError, OSError) as err:
        raise WeightsError(f"{path} cannot be read ({err}); it is rewritten by the next training of the run, or "
                           "delete it to load the run's files unverified") from None


def record_file(run_dir: Path, path: Path) -> None:
    """Record the checksum of `path` (a file inside `run_dir`) in the run's checksums.json; entries of files that
    no longer exist (checkpoints rotated out) are dropped. A directory (an FSDP sharded checkpoint) is skipped."""
    run_dir, path = Path(run_dir), Path(path)
    if not path.is_file():
        return
    record = _read_record(run_dir)
    files = {k: v for k, v in record.get("files", {}).items() if (run_dir / k).exists()}
    files[path.relative_to(run_dir).as_posix()] = {"sha256": sha256(path), "size": path.stat().st_size}
    write_json(run_dir / CHECKSUMS, {**record, "files": files})


def verify_file(run_dir: Path, path: Path) -> None:
    """Raise WeightsError if `path` differs from the checksum its run recorded (nothing recorded: nothing to do)."""
    run_dir, path = Path(run_dir), Path(path)
    try:
        key = path.resolve().relative_to(run_dir.resolve()).as_posix()
    except ValueError:
        return
    want = _read_record(run_dir).get("files", {}).get(key)
    if not want or not path.is_file():
        return
    size = path.stat().st_size
    if size != want["size"]:
        raise WeightsError(f"{path} has {size} bytes, the run recorded {want['size']} ({run_dir / CHECKSUMS}): the file is "
                           "truncated or was replaced. Copy it again from the run's source, or retrain")
    if sha256(path) != want["sha256"]:
        raise WeightsError(f"{path} does not match the SHA-256 its run recorded ({run_dir / CHECKSUMS}): the file is "
                           "corrupted or was replaced. Copy it again from the run's source, or retrain")


def _leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        return {k: v for key, value in node.items() for k, v in _leaves(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: node}


def _digest(value: Any) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:12]


def record_config(run_dir: Path, cfg: DictConfig) -> None:
    """Record a digest of every value of `cfg` (resolved) as the config the run's weights were trained with."""
    leaves = _leaves(OmegaConf.to_container(cfg, resolve=True))
    record = _read_record(run_dir)
    write_json(Path(run_dir) / CHECKSUMS, {**record, "config": {k: _digest(v) for k, v in leaves.items()}})


def verify_config(run_dir: Path, cfg: DictConfig, keys: Iterable[str]) -> None:
    """Raise WeightsError naming every value under `keys` (top-level config keys, e.g. `backbone`) that differs from
    the config the weights were trained with; values that only say where a component is read from (`RELOCATABLE`)
    may differ."""
    recorded = _read_record(run_dir).get("config")
    if not recorded:
        return
    now = {k: _digest(v) for k, v in _leaves(OmegaConf.to_container(cfg, resolve=True)).items()}
    def mine(k: str) -> bool:
        parts = k.split(".")
        return parts[0] in keys and not any(p in RELOCATABLE for p in parts[1:])
    changed = sorted(k for k in set(now) | set(recorded) if mine(k) and now.get(k) != recorded.get(k))
    if changed:
        raise WeightsError(f"{Path(run_dir) / 'config.yaml'}: {', '.join(changed)} {'differs' if len(changed) == 1 else 'differ'} "
                           "from the config the weights were "
                           f"trained with (recorded in {Path(run_dir) / CHECKSUMS}); the model it would build is not the "
                           "trained one. Restore the value(s), or train a run with the new setting")


def check_file(path: Path) -> None:
    """Raise WeightsError if the safetensors file cannot be read or holds a NaN or infinite value."""
    try:
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                tensor = f.get_tensor(key)
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    bad = int((~torch.isfinite(tensor)).sum())
                    raise WeightsError(f"{path}: tensor {key} holds {bad} NaN or infinite value(s); the weights are "
                                       "damaged (or the training diverged): use an earlier checkpoint or retrain")
    except WeightsError:
        raise
    except Exception as err:  # safetensors' own errors: a truncated file, a corrupted header
        raise WeightsError(f"{path} is not a readable safetensors file ({type(err).__name__}: {err}); it is truncated or "
                           "corrupted: copy it again from the run's source, or retrain") from None


def load_weights(model: torch.nn.Module, path: Path, run_dir: Path | None = None, device: str | torch.device = "cpu",
                 part_key: Callable[[str], str] = lambda name: name.split(".")[0]) -> None:
    """Load the safetensors file `path` into `model`, every check of the module docstring first. `run_dir`: the run
    whose checksums.json covers `path` (default: its folder); `part_key(tensor name)`: the config key that builds
    that tensor, named when a shape differs."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: {path.parent} has no finished training (train it with train.py first)")
    verify_file(run_dir or path.parent, path)
    check_file(path)
    model_shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    with safe_open(str(path), framework="pt") as f:
        shapes = {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}
    wrong = [(k, shape) for k, shape in shapes.items() if k in model_shapes and model_shapes[k] != shape]
    if wrong:
        keys = ", ".join(f"`{k}`" for k in sorted({part_key(k) for k, _ in wrong}))
        shown = "; ".join(f"tensor {k} has shape {shape}, the model config.yaml builds {model_shapes[k]}" for k, shape in wrong[:4])
        raise WeightsError(f"{path}: {shown}{'; ...' if len(wrong) > 4 else ''}: config.yaml's {keys} not what the weights "
                           "were trained with; restore it")
    try:
        load_model(model, str(path), device=str(device))
    except RuntimeError as err:  # torch's report of the tensors missing from / unexpected in the file
        found = {kind: re.findall(r'"([^"]+)"', line) for line in str(err).splitlines()
                 for kind in ("Missing", "Unexpected") if line.strip().startswith(kind)}
        names = found.get("Missing", []) + found.get("Unexpected", [])
        keys = ", ".join(f"`{k}`" for k in sorted({part_key(n) for n in names})) or "model keys"
        raise WeightsError(f"{path} does not hold the tensors of the model config.yaml builds (missing: "
                           f"{found.get('Missing', [])[:4]}, not in the model: {found.get('Unexpected', [])[:4]}): "
                           f"config.yaml's {keys} not what the weights were trained with; restore it") from None
