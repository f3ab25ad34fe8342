"""The pretrained tiny flavours' writer: a pretraining run of this project, its export copied into the flavour.

conf/tiny/mini_*.yaml name `write_pretrained` with the `train.py` overrides that produce the flavour (e.g.
`[task=encoder_pretrain, encoder_pretrain.objective=siglip]`) and the benchmark giving its quality figure.
Writing one composes conf/train.yaml with those overrides (the run under a temporary `run.root`, csv
logger, one thread, `eval.benchmarks=[benchmark]`), runs `core.run.train` in this process, and copies the
run's `export/` (a timm or transformers folder) into the flavour folder with `pretraining.json` (the
overrides, training loss and quality figures). Training is seeded and runs on one thread, so a rewrite
gives the same files. `vlm.tiny.ensure_tiny` caches the folder as for every flavour; a flavour that starts
from another (`lm_pretrain.init=tiny:mini_llama_base`) writes that one first through the same cache.

Smoke mode (`REFRACT_TINY_SMOKE=1`, set by the tests): the flavour's `smoke_overrides` are added (a small
world, a few steps) and `ensure_tiny` caches it under `NAME-vV-smoke`, so a real cache never holds smoke weights.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from data.atomic import read_json, write_json

SMOKE_ENV = "REFRACT_TINY_SMOKE"


def smoke_mode() -> bool:
    return os.environ.get(SMOKE_ENV) == "1"


def finite(figures: dict) -> dict:
    """The figures without NaN (a loss never logged in a short run), which JSON cannot hold."""
    return {k: v for k, v in figures.items() if not (isinstance(v, float) and v != v)}


def write_pretrained(out: Path, overrides: list[str], benchmark: str, smoke_overrides: list[str] = ()) -> None:
    """Train the run `train.py OVERRIDES` describes and write its export and quality figures to `out`."""
    from core.conf import compose_config
    from core.run import train

    overrides = [str(o) for o in overrides] + ([str(o) for o in smoke_overrides] if smoke_mode() else [])
    threads, env = torch.get_num_threads(), dict(os.environ)
    py_state, np_state = random.getstate(), np.random.get_state()
    with tempfile.TemporaryDirectory(prefix="refract-pretrain-") as root:
        cfg = compose_config("train", [*overrides, f"run.root={root}", "run.name=pretrain", "logger=csv", "trainer.threads=1",
                             "trainer.progress_bar=false", f"eval.benchmarks=[{benchmark}]"])
        try:
            train(cfg)
        finally:  # training seeds Python / numpy and sets threads and seed variables: leave the caller's as they were
            torch.set_num_threads(threads)
            random.setstate(py_state)
            np.random.set_state(np_state)
            for key in set(os.environ) - set(env):
                del os.environ[key]
            os.environ.update(env)
        run_dir = Path(root) / "pretrain"
        shutil.copytree(run_dir / "export", out, dirs_exist_ok=True)
        results = read_json(run_dir / "results.json")
        write_json(Path(out) / "pretraining.json", {
            "overrides": overrides, "smoke": smoke_mode(), "train": finite(results.get("train", {})),
            "benchmark": benchmark, "quality": results.get("benchmarks", {}).get(benchmark, {})})
