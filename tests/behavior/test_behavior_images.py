"""Image observations in Meta-World (MuJoCo offscreen, MUJOCO_GL=egl): demonstrations collected with a camera keep
the physics of the state collection, rollouts render exactly the dataset's frames, and an image policy trains on
them and rolls out with the camera."""

from __future__ import annotations


import numpy as np
import pytest

from behavior.demos import camera_key
from behavior.metaworld import make_env, render_frame, select_config
from core.run import evaluate, train
from data.lerobot import read_dataset
from tests.behavior.conftest import TINY_POLICY
from tests.conftest import BASE, compose_cfg

CAMERA, SIZE = "corner2", 32


@pytest.fixture
def camera_demos(reach_camera_demos):
    """tests/conftest.py: 2 reach-v3 expert episodes with corner2 frames at 32 px (the first 2 of the reach fixture's
    collection order)."""
    return reach_camera_demos


def test_collecting_with_a_camera_keeps_the_state_collections_physics(camera_demos, reach_demos):
    images, states = read_dataset(camera_demos), read_dataset(reach_demos)
    assert images.camera_keys == [camera_key(CAMERA)] and camera_demos.name.endswith(f"-{CAMERA}-{SIZE}px")
    for i in range(2):
        a, b = images.episode(i), states.episode(i)
        np.testing.assert_array_equal(a["observation.state"], b["observation.state"])
        np.testing.assert_array_equal(a["action"], b["action"])
    frames = images.camera_frames(camera_key(CAMERA))
    assert frames.shape == (images.num_frames, SIZE, SIZE, 3) and frames.dtype == np.uint8
    assert frames.std() > 10 and not np.array_equal(frames[0], frames[-1])  # a scene, and the arm moved


def test_rollout_rendering_gives_the_datasets_frames(camera_demos):
    data = read_dataset(camera_demos)
    episode = data.episodes[0]
    env = make_env("reach-v3", int(episode["benchmark_seed"]), render=True, camera=CAMERA, size=SIZE)
    other = make_env("reach-v3", 1000, render=True, camera=CAMERA, size=SIZE)  # a second context in the process
    select_config(other, 3)
    render_frame(other)
    select_config(env, int(episode["config_index"]))
    np.testing.assert_array_equal(render_frame(env), data.camera_frames(camera_key(CAMERA))[0])


def test_image_policy_trains_on_rendered_demos_and_rolls_out_with_the_camera(tmp_path, camera_demos):
    cfg = compose_cfg("task=behavior", "env=metaworld_mt10_images", "policy=gpt_image", "env.tasks=reach-v3",
                      f"env.image_size={SIZE}", f"env.dataset.cache_dir={camera_demos.parent}",
                      "env.dataset.episodes_per_task=2", "env.dataset.workers=1",
                      "policy.vision.encoder.model_id=tiny:tiny_siglip", *BASE, *TINY_POLICY,
                      f"run.root={tmp_path / 'runs'}", "stage.phases.bc.max_steps=2",
                      "stage.phases.bc.global_batch_size=16", "run.name=img", "env.horizon=4")
    run_dir = train(cfg)["run_dir"]
    metrics = evaluate(compose_cfg("task=behavior", f"run={run_dir}", "benchmark.episodes_per_task=2",
                                   "benchmark.envs_per_task=2", config="eval"))
    assert metrics["episodes"] == 2 and set(metrics["per_task"]) == {"reach-v3"}
    assert metrics["success_rate_ci_low"] <= metrics["success_rate"] <= metrics["success_rate_ci_high"]
