"""Behavior test fixtures: a small real Meta-World demonstration set (reach-v3), collected once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import BASE, compose_cfg

TINY_POLICY = ["policy.d_model=32", "policy.n_layers=2", "policy.n_heads=2"]


@pytest.fixture(scope="session")
def reach_demos(tmp_path_factory):
    """5 successful scripted-expert episodes of reach-v3, written as a LeRobotDataset."""
    from behavior.demos import ensure_demos

    return Path(ensure_demos(str(tmp_path_factory.mktemp("demos")), "reach-v3", 5, seed=0, workers=1))


@pytest.fixture
def behavior_cfg(tmp_path, reach_demos):
    """compose(*overrides) for a behavior run on the reach demonstrations under tmp_path."""

    def make(*overrides: str):
        tiny = [] if "policy=mlp_bc" in overrides else TINY_POLICY
        return compose_cfg("task=behavior", "env=metaworld_reach", *BASE, f"run.root={tmp_path / 'runs'}",
                           f"env.dataset.cache_dir={reach_demos.parent}",
                           "env.dataset.episodes_per_task=5", *tiny, *overrides)

    return make
