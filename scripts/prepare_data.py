"""Prepare a recipe's training data once (Ray Data) into the cache training reads, and print where it is.

    python scripts/prepare_data.py <the same overrides as train.py>   # e.g. data=llava_v15 data.root=DIR

Every phase of the recipe's stage is prepared (its splits' sources, with the phase's prompt format), as the
training run would on its rank 0; `data.cache` defaults to `${cache_dir}/prepared` here when the config leaves it
null. Run again with the same overrides, it says it reused the cache (same key: data files, tokenizer, prompt
format, max length, image settings). Pass the printed `data.cache=...` to train.py to train from it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import open_dict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> None:
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=argv)
    with open_dict(cfg):
        if not cfg.data.get("cache"):
            cfg.data.cache = str(Path(cfg.cache_dir).expanduser() / "prepared")
    from vlm.lightning import VLMTask

    task = VLMTask()
    model = task.build_model(cfg, Path("."))
    folders = set()
    for name, phase in cfg.stage.phases.items():
        dm = task.build_datamodule(cfg, phase, model, Path("."), micro_batch_size=1, seed=int(cfg.get("seed", 0)))
        dm.setup("fit")
        folders.update(str(p.folder) for part in dm.train_dataset.samples.parts for p in part.parts)
        print(f"phase {name}: {dm.num_samples} samples")
    for folder in sorted(folders):
        print(f"prepared: {folder}")
    print(f"data.cache={cfg.data.cache}")


if __name__ == "__main__":
    main(sys.argv[1:])
