"""A short VLA run on Meta-World camera demonstrations (2 reach-v3 episodes rendered from corner2, tiny components):
the loss goes down, `python evaluate.py task=vla run=RUN_DIR episodes_per_task=N` rolls it out with the camera
through behavior/rollout.py and reports success with 95% Wilson intervals; an env without cameras is read as its
demonstrations rendered from `vla.camera`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from core.run import evaluate, train
from tests.conftest import BASE, compose_cfg
from vla.lightning import vla_env

CAMERA, SIZE = "corner2", 32


@pytest.fixture
def camera_demos(reach_camera_demos):
    return reach_camera_demos  # tests/conftest.py: 2 reach-v3 episodes, corner2 at 32 px


def test_a_short_vla_run_lowers_the_loss_and_rolls_out(tmp_path, camera_demos):
    cfg = compose_cfg("task=vla", "env=metaworld_mt10_images", "env.tasks=reach-v3", f"env.image_size={SIZE}",
                      f"env.dataset.cache_dir={camera_demos.parent}", "env.dataset.episodes_per_task=2",
                      "env.dataset.workers=1", "env.horizon=6", *BASE, f"run.root={tmp_path / 'runs'}", "run.name=vla",
                      "stage.phases.vla.max_steps=24", "stage.phases.vla.global_batch_size=8",
                      "stage.phases.vla.optim.lr=1e-3")
    run_dir = Path(train(cfg)["run_dir"])
    with open(run_dir / "metrics.csv") as f:
        losses = [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]
    assert len(losses) == 24
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.5, losses  # nats per action token
    spec = json.loads((run_dir / "vla.json").read_text())
    assert spec["cameras"] == [f"observation.images.{CAMERA}"] and spec["image_size"] == SIZE and spec["simulated"]
    assert spec["instructions"] == ["reach"]

    eval_cfg = compose_cfg("task=vla", f"run={run_dir}", "episodes_per_task=2", config="eval")
    assert eval_cfg.benchmark.name == "vla_rollouts" and eval_cfg.benchmark.episodes_per_task == 2
    metrics = evaluate(eval_cfg)
    assert metrics["episodes"] == 2 and set(metrics["per_task"]) == {"reach-v3"}
    assert metrics["mean_episode_length"] <= 6
    assert metrics["success_rate_ci_low"] <= metrics["success_rate"] <= metrics["success_rate_ci_high"]
    results = json.loads((run_dir / "results.json").read_text())
    assert {"success_rate", "per_task", "success_rate_ci_low", "success_rate_ci_high"} <= set(results)


def test_an_env_without_cameras_reads_its_demonstrations_rendered_from_the_vla_camera(camera_demos):
    cfg = compose_cfg("task=vla", "env=metaworld_reach", f"env.dataset.cache_dir={camera_demos.parent}",
                      "env.dataset.episodes_per_task=2", f"vla.image_size={SIZE}")
    assert list(cfg.env.get("cameras") or []) == []
    path, camera, size = vla_env(cfg)
    assert Path(path) == camera_demos and camera == f"observation.images.{CAMERA}" and size == SIZE
    lerobot = compose_cfg("task=vla", "env=lerobot", "env.dataset=/nowhere")
    with pytest.raises(ValueError, match="needs camera frames"):
        vla_env(lerobot)
    assert OmegaConf.select(cfg, "stage.phases.vla.trainable") == ["encoder", "projector", "backbone"]
