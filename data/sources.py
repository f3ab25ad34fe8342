"""Where a data config's files are: `resolve(data_cfg)` → per split, its sources (a LLaVA JSON file + its image root).

A data config names its splits under `splits`; each entry is one of
- a plain path: a LLaVA JSON file whose images are under `data.image_root` (`data=llava`);
- a source `{json: PATH, image_root: DIR}`: the file with its own image folder (`data=llava_v15`: LCS-558K's
  `LLaVA-Pretrain/images`, mix665k's folder holding coco/ gqa/ ocr_vqa/ textvqa/ vg/);
- a list of those: one split made of several files (`data=llava_lvis4v_lrv`: mix665k + LVIS-Instruct-4V + LRV).
Or the config carries a `generator` (a Hydra `_target_` returning a folder, e.g. `data.sort_of_clevr.ensure`):
the dataset is generated on first use and the split files are taken relative to that folder.

`require_files(data_cfg, splits)` checks, without opening any image, that every JSON file and every image root of
the named splits exists, and raises `DataError` naming the first missing one and the command that prepares it
(`data.prepare`). Callers run it before any weights load, so a missing dataset fails in well under a second.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig

from data.errors import DataError


@dataclass(frozen=True)
class Source:
    json: Path
    image_root: Path


@dataclass
class DataSource:
    image_root: Path | None  # the default image root (a generated folder, or `data.image_root`)
    splits: dict[str, list[Source]]
    test: Path | None


def _sources(name: str, entry, base: Path | None, default_root: Path | None) -> list[Source]:
    """The sources of one `splits` entry (a path, a {json, image_root} mapping, or a list of them)."""
    if isinstance(entry, (list, tuple, ListConfig)):
        return [s for item in entry for s in _sources(name, item, base, default_root)]
    if isinstance(entry, (dict, DictConfig)):
        if not entry.get("json"):
            raise DataError(f"data.splits.{name}: a source needs `json` (and `image_root`); got {dict(entry)}")
        json, root = Path(str(entry["json"])), entry.get("image_root")
        root = Path(str(root)) if root else default_root
    else:
        json, root = Path(str(entry)), default_root
    if base is not None and not json.is_absolute():
        json = base / json
    if root is None:
        raise DataError(f"data.splits.{name}: {json} has no image root; give the split an `image_root` or set data.image_root")
    if base is not None and not root.is_absolute():
        root = base / root
    return [Source(json, root)]


def resolve(data_cfg) -> DataSource:
    if data_cfg.get("generator"):
        root = Path(instantiate(data_cfg.generator))
        splits = {name: _sources(name, entry, root, root) for name, entry in data_cfg.splits.items()}
        test = root / data_cfg.test if data_cfg.get("test") else None
        return DataSource(root, splits, test)
    default_root = Path(str(data_cfg.image_root)) if data_cfg.get("image_root") else None
    splits = {name: _sources(name, entry, None, default_root) for name, entry in data_cfg.splits.items()}
    return DataSource(default_root, splits, None)


def split_names(splits) -> list[str]:
    """The split names of a phase's `data` (a list of names or a {name: weight} mapping)."""
    if isinstance(splits, str):
        return [splits]
    return list(splits.keys()) if hasattr(splits, "keys") else list(splits)


def require_files(data_cfg, splits: Iterable[str] | dict) -> None:
    """Raise `DataError` naming the first missing JSON file or image root of the named splits (and how to prepare
    them); a generated dataset (`data.generator`) is made on first use and is not checked. Stats only: fast."""
    if data_cfg.get("generator"):
        return
    names = split_names(splits)
    unknown = [n for n in names if n not in data_cfg.splits]
    if unknown:
        raise DataError(f"data {data_cfg.get('name')!r}: split(s) {unknown} named by the phase are not in data.splits "
                        f"({sorted(data_cfg.splits)}); fix the phase's `data` or the data config")
    source = resolve(data_cfg)
    prepare = data_cfg.get("prepare")
    fix = "set data.json / data.image_root (or data.splits) to existing paths"
    if prepare:
        fix = f"prepare it with: {prepare}" + (" (or point data.root at an existing copy)" if data_cfg.get("root") else "")
    for name in names:
        for src in source.splits[name]:
            for kind, path, ok in (("file", src.json, src.json.is_file()), ("image folder", src.image_root, src.image_root.is_dir())):
                if not ok:
                    raise DataError(f"data {data_cfg.get('name')!r}, split {name!r}: {kind} {path} does not exist; {fix}")
