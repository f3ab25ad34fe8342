"""Where a data config's files are: `resolve(data_cfg)` → image root, split files, test file.

A data config either names its files directly (`data=llava`: `json`,
`image_root`) or carries a `generator` (a Hydra `_target_` returning a folder,
e.g. `data.sort_of_clevr.ensure`), in which case the dataset is generated on
first use and the split files are taken relative to that folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hydra.utils import instantiate


@dataclass
class DataSource:
    image_root: Path
    splits: dict[str, Path]
    test: Path | None


def resolve(data_cfg) -> DataSource:
    if data_cfg.get("generator"):
        root = Path(instantiate(data_cfg.generator))
        splits = {name: root / rel for name, rel in data_cfg.splits.items()}
        test = root / data_cfg.test if data_cfg.get("test") else None
        return DataSource(root, splits, test)
    return DataSource(Path(data_cfg.image_root), {k: Path(v) for k, v in data_cfg.splits.items()}, None)
