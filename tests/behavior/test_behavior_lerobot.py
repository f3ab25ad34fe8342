"""The behavior task on any LeRobot dataset (`env.dataset=DIR`): the dataset's own task strings, configurable
observation keys (state, cameras as images or video, both), held-out episodes and their action metrics for a
run without an environment, and the errors a wrong dataset or config gets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from behavior.dataset import build_demonstrations, heldout_episodes
from behavior.inference import load
from core.run import evaluate, train
from data.lerobot import Episode, LeRobotDataError, read_dataset, write_dataset
from tests.conftest import BASE, compose_cfg

TASKS = ["push the red block left", "push the blue block right"]
CAM = "observation.images.front"
TINY = ["policy.d_model=32", "policy.n_layers=2", "policy.n_heads=2", "stage.phases.bc.global_batch_size=16"]
TINY_VISION = ["policy=gpt_image", "policy.vision.encoder.model_id=tiny:tiny_siglip", f"env.cameras=[{CAM}]"]


def synthetic_episodes(per_task: int = 4, frames: int = 10, size: int = 16) -> list[Episode]:
    """Episodes whose action is a function of the state and of the image (its brightness encodes the task)."""
    rng = np.random.default_rng(0)
    episodes = []
    for t, task in enumerate(TASKS):
        for _ in range(per_task):
            state = rng.normal(size=(frames, 3)).astype(np.float32)
            action = np.stack([np.tanh(state[:, 0]), np.full(frames, 1.0 if t else -1.0)], 1).astype(np.float32)
            images = np.full((frames, size, size, 3), 60 + 120 * t, dtype=np.uint8)
            images[:, :, : size // 2, 0] = np.arange(frames, dtype=np.uint8)[:, None, None] * 20
            episodes.append(Episode(state, action, task, images={CAM: images}))
    return episodes


@pytest.fixture(scope="module", params=["image", "video"])
def lerobot_dir(request, tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp(request.param) / "ds", synthetic_episodes(), fps=10,
                         robot_type="synthetic", image_format=request.param)


def cfg_for(tmp_path, dataset, *overrides):
    return compose_cfg("task=behavior", "env=lerobot", f"env.dataset={dataset}", *BASE,
                       f"run.root={tmp_path / 'runs'}", *TINY, *overrides)


def test_dataset_task_strings_condition_and_the_last_episodes_of_each_task_are_held_out(lerobot_dir):
    data = read_dataset(lerobot_dir)
    demos = build_demonstrations(data, n_obs=2, chunk_size=3, cameras=[CAM], frame_transform=lambda f: f[None, :2, :2, 0])
    assert demos.tasks == TASKS and demos.states.shape == (80, 2, 3) and demos.chunks.shape == (80, 3, 2)
    assert demos.images.shape == (80, 1, 1, 2, 2)  # the transform's output per frame and camera
    np.testing.assert_array_equal(demos.task, np.repeat([0, 1], 40))
    # hand-computed: 4 episodes per task, 10% rounds up to one held out per task, the last of each
    assert heldout_episodes(demos, 0.1) == [3, 7]
    assert heldout_episodes(demos, 0.5) == [2, 3, 6, 7]
    assert heldout_episodes(demos, 0.9) == [1, 2, 3, 5, 6, 7]  # never all of a task's episodes
    assert heldout_episodes(demos, 0.0) == []


def test_wrong_observation_keys_name_the_file_and_the_key(lerobot_dir):
    data = read_dataset(lerobot_dir)
    with pytest.raises(LeRobotDataError, match=r"info\.json.*'observation\.joints'"):
        build_demonstrations(data, 1, 1, state="observation.joints")
    with pytest.raises(LeRobotDataError, match=r"'observation\.state' is not an image or video feature"):
        build_demonstrations(data, 1, 1, cameras=["observation.state"])
    with pytest.raises(LeRobotDataError, match=r"'observation\.images\.wrist'"):
        build_demonstrations(data, 1, 1, cameras=["observation.images.wrist"])
    with pytest.raises(ValueError, match="needs an observation"):
        build_demonstrations(data, 1, 1, state=None)


def test_a_camera_without_policy_vision_is_refused(tmp_path, lerobot_dir):
    with pytest.raises(ValueError, match=r"policy\.vision is not set.*policy=gpt_image"):
        train(cfg_for(tmp_path, lerobot_dir, f"env.cameras=[{CAM}]", "stage.phases.bc.max_steps=1"))


def test_image_policy_trains_on_a_lerobot_folder_and_reports_heldout_action_metrics(tmp_path, lerobot_dir):
    results = train(cfg_for(tmp_path, lerobot_dir, *TINY_VISION, "stage.phases.bc.max_steps=3", "run.name=img"))
    run_dir = Path(results["run_dir"])
    spec = json.loads((run_dir / "policy.json").read_text())
    assert spec["tasks"] == TASKS and spec["simulated"] is False and spec["heldout_episodes"] == [3, 7]
    assert spec["shape"]["cameras"] == [CAM]
    train_figures = json.loads((run_dir / "results.json").read_text())["train"]
    assert train_figures["bc/samples"] == 60 and train_figures["bc/heldout/samples"] == 20
    assert 0 <= train_figures["bc/heldout/token_accuracy"] <= 100 and train_figures["bc/heldout/action_mae"] > 0
    # evaluate.py scores the loaded run on the same held-out episodes: the same numbers
    metrics = evaluate(compose_cfg("task=behavior", f"run={run_dir}", "benchmark=heldout_actions", config="eval"))
    for key in ("token_accuracy", "action_mae", "action_mae_first", "samples", "episodes"):
        assert metrics[key] == pytest.approx(train_figures[f"bc/heldout/{key}"], rel=1e-5), key
    with pytest.raises(ValueError, match="no environment to roll it out in.*benchmark=heldout_actions"):
        evaluate(compose_cfg("task=behavior", f"run={run_dir}", "benchmark.episodes_per_task=1", config="eval"))


def test_the_contract_command_trains_on_a_folder_under_the_default_env(tmp_path, lerobot_dir):
    """`python train.py task=behavior env.dataset=DIR`: the default env's tasks are not the dataset's, so the run is
    not simulated: it conditions on the dataset's task strings and holds out episodes."""
    cfg = compose_cfg("task=behavior", f"env.dataset={lerobot_dir}", *BASE, f"run.root={tmp_path / 'runs'}", *TINY,
                      "stage.phases.bc.max_steps=2", "run.name=state")
    results = train(cfg)
    policy = load(results["run_dir"])
    assert policy.tasks == TASKS and not policy.simulated and policy.heldout_episodes == [3, 7]
    assert results["bc/samples"] == 60 and "bc/heldout/token_accuracy" in results


def test_frozen_encoder_features_match_the_encoder_and_stay_fixed_while_finetuning_changes_them(tmp_path, lerobot_dir):
    frozen = train(cfg_for(tmp_path, lerobot_dir, *TINY_VISION, "stage.phases.bc.max_steps=3", "run.name=frozen"))
    tuned = train(cfg_for(tmp_path, lerobot_dir, *TINY_VISION, "policy.vision.freeze=false",
                          "stage.phases.bc.max_steps=3", "run.name=tuned"))
    a, b = load(frozen["run_dir"]), load(tuned["run_dir"])
    from vlm.encoders import TimmEncoder

    fresh = TimmEncoder("tiny:tiny_siglip")
    for name, p in fresh.state_dict().items():
        torch.testing.assert_close(a.vision.encoder.state_dict()[name], p)  # frozen: the checkpoint's weights
    assert any(not torch.equal(b.vision.encoder.state_dict()[n], p) for n, p in fresh.state_dict().items())
    # precomputed features (what frozen training uses) give the policy the same tokens as the frames do
    frame = read_dataset(lerobot_dir).camera_frames(CAM)[:4]
    pixels = torch.from_numpy(np.stack([a.vision.pixels(f) for f in frame]))[:, None]
    with torch.no_grad():
        torch.testing.assert_close(a.vision(pixels), a.vision(features=a.vision.features(pixels)))
