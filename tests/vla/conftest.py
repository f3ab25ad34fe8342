"""VLA test fixtures: a small synthetic LeRobot dataset with a camera, and a VLA run trained a few steps on it
(tiny_siglip × mlp × tiny_llama, the defaults of conf/task/vla.yaml)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import BASE, compose_cfg

TASKS = ["push the red block left", "push the blue block right"]
CAM = "observation.images.front"


def synthetic_episodes(per_task: int = 3, frames: int = 8, size: int = 16):
    """Episodes whose actions follow the image: the task's brightness sets dimension 1, a moving bar dimension 0."""
    from data.lerobot import Episode

    rng = np.random.default_rng(0)
    episodes = []
    for t, task in enumerate(TASKS):
        for _ in range(per_task):
            state = rng.normal(size=(frames, 3)).astype(np.float32)
            phase = np.linspace(-1, 1, frames, dtype=np.float32)
            action = np.stack([phase, np.full(frames, 0.8 if t else -0.8, np.float32)], 1)
            images = np.full((frames, size, size, 3), 60 + 120 * t, dtype=np.uint8)
            for i in range(frames):
                images[i, :, i * size // frames: (i + 1) * size // frames, 0] = 255
            episodes.append(Episode(state, action, task, images={CAM: images}))
    return episodes


@pytest.fixture(scope="session")
def lerobot_dir(tmp_path_factory):
    from data.lerobot import write_dataset

    return write_dataset(tmp_path_factory.mktemp("vla-data") / "ds", synthetic_episodes(), fps=10,
                         robot_type="synthetic", image_format="image")


def vla_cfg(root, dataset, *overrides):
    return compose_cfg("task=vla", "env=lerobot", f"env.dataset={dataset}", f"env.cameras=[{CAM}]", *BASE,
                       f"run.root={root}", "stage.phases.vla.global_batch_size=8", "stage.phases.vla.optim.lr=1e-3",
                       *overrides)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, lerobot_dir):
    """A VLA run directory trained 4 steps on the synthetic dataset."""
    from core.run import train

    return train(vla_cfg(tmp_path_factory.mktemp("vla-runs"), lerobot_dir, "stage.phases.vla.max_steps=4",
                         "run.name=tiny"))["run_dir"]
