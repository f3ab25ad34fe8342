"""Shared test set-up: hermetic caches, no hub access, and Hydra config composition helpers.

`composed(*overrides)` is `compose_cfg` cached (read it, do not change it);
`config_options(group)` lists a conf/ group's options (files named `_*.yaml` are
shared bases, not options); `is_tiny(node)` tells a component config whose every
model id is a tiny flavour (`tiny:NAME`) from one that loads from a hub; the
`tiny_component` fixture builds a tiny component once per session.

Tiny checkpoints and the small Sort-of-CLEVR dataset are written once per test
session (per worker under pytest-xdist, `make test` runs one per core) into a
temporary cache (`REFRACT_CACHE`), through the same code paths a user's first
run takes.
"""

from __future__ import annotations

import os
import sys
import tempfile
from functools import cache
from pathlib import Path

if "PYTEST_XDIST_WORKER" in os.environ or "REFRACT_CACHE" not in os.environ:  # one cache per pytest-xdist worker
    os.environ["REFRACT_CACHE"] = tempfile.mkdtemp(prefix="refract-test-cache-")
os.environ["HF_HUB_OFFLINE"] = "1"  # tests never reach a hub
os.environ["REFRACT_TINY_SMOKE"] = "1"  # pretrained tiny flavours: a few steps on a small world, cached apart (vlm/tiny/pretrained.py)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig, ListConfig  # noqa: E402

from core.resolvers import register_resolvers  # noqa: E402
from vlm.hub import TINY_PREFIX  # noqa: E402

register_resolvers()  # ${gpu_or_cpu:...} in conf/trainer/auto.yaml, the default trainer preset

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
sys.path.insert(0, str(ROOT))
torch.set_num_threads(1)

# Small data and batches so that a step takes well under a second on one core.
BASE = ["logger=csv", "trainer.progress_bar=false", "trainer.log_every_n_steps=1"]
SMALL = [
    *BASE,
    "data.generator.n_train=48",
    "data.generator.n_test=12",
    "data.generator.questions_per_image=4",
]
# The default recipe without its caption phase, with small batches (tests that train the default stage).
SCRATCH_SMALL = ["~stage.phases.scratch_captions", "stage.phases.scratch.global_batch_size=4"]


def compose_cfg(*overrides: str, config: str = "train"):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=config, overrides=list(overrides))


def composed(*overrides: str, config: str = "train"):
    """`compose_cfg(*overrides, config=config)`, composed once per session: shared, so read it only
    (`copy.deepcopy` it to change it)."""
    return _composed(config, overrides)


@cache
def _composed(config: str, overrides: tuple[str, ...]):
    return compose_cfg(*overrides, config=config)


def config_options(group: str) -> list[str]:
    """The options of conf/GROUP (sorted), without the shared bases (`_*.yaml`)."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml") if not p.name.startswith("_"))


def model_ids(node) -> list[str]:
    """Every `model_id` / `model_name` in a component config, nested ones (a fused encoder's) included."""
    if isinstance(node, DictConfig):
        own = [str(node[k]) for k in ("model_id", "model_name") if k in node]
        return own + [i for k, v in node.items() if isinstance(v, (DictConfig, ListConfig)) for i in model_ids(v)]
    if isinstance(node, ListConfig):
        return [i for v in node for i in model_ids(v)]
    return []


def is_tiny(node) -> bool:
    """A component config that loads only tiny flavours (no hub)."""
    ids = model_ids(node)
    return bool(ids) and all(i.startswith(TINY_PREFIX) for i in ids)


@cache
def tiny_options(group: str) -> list[str]:
    """The options of conf/GROUP whose components load only tiny flavours."""
    return [o for o in config_options(group) if is_tiny(composed(f"{group}={o}")[group])]


@pytest.fixture(scope="session")
def tiny_component():
    """tiny_component(group, option): the component conf/GROUP/OPTION.yaml builds, built once per session
    (seeded). Shared: deep-copy it before changing it."""
    from vlm.model import build_component

    built = {}

    def get(group: str, option: str):
        if (group, option) not in built:
            torch.manual_seed(0)
            built[group, option] = build_component(composed(f"{group}={option}")[group])
        return built[group, option]

    return get


@pytest.fixture
def small_cfg(tmp_path):
    """compose(*overrides) with the small test settings and runs under tmp_path."""

    def make(*overrides: str):
        stage = [] if any(o.startswith("stage=") for o in overrides) else SCRATCH_SMALL
        return compose_cfg(*SMALL, *stage, f"run.root={tmp_path / 'runs'}", *overrides)

    return make


@pytest.fixture(scope="session")
def tiny_vlm():
    """The default tiny VLM (untrained), built from the default config."""
    from vlm.model import build_vlm

    torch.manual_seed(0)
    return build_vlm(compose_cfg())


def randomize(model, std=0.2):
    """Wider random weights than an init or a few training steps leave (every matrix ~ N(0, std), seeded), so
    greedy decoding of a tiny model does not repeat one token."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, std)
    return model


@pytest.fixture(scope="session")
def reach_camera_demos(tmp_path_factory):
    """2 reach-v3 expert episodes with corner2 frames at 32 px (MUJOCO_GL=egl), the first 2 of the state collection."""
    from behavior.demos import ensure_demos

    return Path(ensure_demos(str(tmp_path_factory.mktemp("camera")), "reach-v3", 2, seed=0, workers=1,
                             camera="corner2", size=32))
