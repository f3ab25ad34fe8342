"""Interop with the `lerobot` package itself (0.4.4), both directions, LeRobot running in a venv of its own.

(a) LeRobot's `LeRobotDataset.create / add_frame / save_episode / finalize` writes a dataset (one camera as
    images, one as video: scripts/lerobot_side/write.py); the project's `read_dataset` reads the same states,
    actions, tasks, indices, timestamps and episode boundaries exactly, and both cameras' frames exactly as
    LeRobot's own reader yields them.
(b) The project's `write_dataset` writes the same episodes (`image_format="image"` and `"video"`); LeRobot's
    `LeRobotDataset` loads them offline (scripts/lerobot_side/read.py) and yields the same states, actions,
    tasks, indices and frames: the fed frames for images, the project's own decode for video.
(c) The behavior task trains on LeRobot's dataset (`env=lerobot env.dataset=DIR`, both cameras).

Video is lossy (AV1, crf 30), so decoded frames are compared with each other, decoder against decoder, and
those agree bit for bit here: both sides decode the same mp4 with FFmpeg through PyAV (LeRobot's "pyav"
decoder, as torchcodec finds no system FFmpeg here) with the AV1 decoder and YUV->RGB conversion giving the
same bits in the project's PyAV (18, FFmpeg 8.1) and LeRobot's (15, FFmpeg 7.1). Should a future PyAV build
round a level differently, that is a decoder change, not an interop fault; `assert_aligned` is the check
that does not depend on it: each decoded frame is within the codec's loss of the frame fed in at its row
and much farther from its neighbours, so a frame shifted by one or a swapped camera always fails.

The checks of both directions run in one test (failures collected, all reported): one LeRobot start-up per
direction, and under pytest-xdist one worker, never two, builds or waits for LeRobot's venv.

LeRobot's venv (scripts/lerobot_venv.py) is built on first use, minutes and gigabytes, then reused:
`$REFRACT_LEROBOT_VENV`, else ~/.cache/refract/lerobot-0.4.4-venv (not conftest's per-session temporary
`REFRACT_CACHE`, which would rebuild it every run). When it cannot be built the test fails saying which
step failed and why.

Run: python -m pytest -q tests/data/test_lerobot_interop.py
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data.lerobot import Episode, read_dataset, write_dataset

ROOT = Path(__file__).resolve().parents[2]
SIDE = ROOT / "scripts" / "lerobot_side"
VENV_DIR = Path(os.environ.get("REFRACT_LEROBOT_VENV") or Path.home() / ".cache" / "refract" / "lerobot-0.4.4-venv")
CODEC_MEAN_ERROR = 6.0  # mean |decoded - fed| per frame a crf-30 coding of these frames stays under (measured: < 4)
NEIGHBOUR_MARGIN = 2.0  # a neighbour frame is this many times farther than the coding error (measured: > 3.3)
SIDE_TIMEOUT_S = 600


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and the like look their module up
    spec.loader.exec_module(module)
    return module


lerobot_venv = load("lerobot_venv", ROOT / "scripts" / "lerobot_venv.py")
synthetic = load("lerobot_synthetic", SIDE / "synthetic.py")


@pytest.fixture(scope="module")
def lerobot_python() -> Path:
    try:
        return lerobot_venv.ensure_lerobot_venv(VENV_DIR, log=lambda msg: print(msg, flush=True))
    except Exception as e:  # LeRobotVenvError (a pip step), filelock.Timeout, OSError (disk, permissions)
        pytest.fail(f"LeRobot's venv could not be built at {VENV_DIR} (scripts/lerobot_venv.py), so the interop "
                    f"check cannot run: {type(e).__name__}: {e}", pytrace=False)


def run_side(python: Path, script: str, *args, hf_home: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(hf_home), OMP_NUM_THREADS="1")  # HF caches kept out of ~/.cache
    proc = subprocess.run([str(python), str(SIDE / script), *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=SIDE_TIMEOUT_S)
    if proc.returncode != 0:
        pytest.fail(f"LeRobot's side failed: {script} {' '.join(map(str, args))} (exit {proc.returncode}):\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}", pytrace=False)


def project_episodes() -> list[Episode]:
    return [Episode(observation_state=e["state"], action=e["action"], task=e["task"], images=e["images"])
            for e in synthetic.episodes()]


def npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def exchanged(lerobot_python, tmp_path_factory) -> dict[str, Path]:
    """LeRobot writes one dataset, the project writes two; LeRobot reads all three (one start-up each side)."""
    tmp = tmp_path_factory.mktemp("lerobot_interop")
    paths = {"lerobot": tmp / "by_lerobot", "image": tmp / "by_project_image", "video": tmp / "by_project_video"}
    run_side(lerobot_python, "write.py", paths["lerobot"], hf_home=tmp / "hf")
    for fmt in ("image", "video"):
        write_dataset(paths[fmt], project_episodes(), fps=synthetic.FPS, robot_type="synthetic_arm",
                      image_format=fmt)
    run_side(lerobot_python, "read.py", *(a for p in paths.values() for a in (p, f"{p}.read.npz")),
             hf_home=tmp / "hf")
    return paths


def assert_same_trajectories(got: dict[str, np.ndarray], want: dict[str, np.ndarray], who: str) -> None:
    for key in ("observation.state", "action", "episode_index", "frame_index", "task"):
        np.testing.assert_array_equal(got[key], want[key], err_msg=f"{who}: {key}")


def assert_aligned(decoded: np.ndarray, fed: np.ndarray, episode_index: np.ndarray, who: str) -> None:
    """Each decoded video frame is close to the frame fed in at its row, and nearer to it than to its
    neighbours in the same episode: a one-frame shift or a swapped camera cannot pass."""
    err = np.abs(decoded.astype(np.int16) - fed.astype(np.int16)).mean(axis=(1, 2, 3))
    assert err.max() < CODEC_MEAN_ERROR, f"{who}: mean coding error per frame up to {err.max():.2f}"
    for shift in (1, -1):
        same_episode = episode_index == np.roll(episode_index, shift)
        shifted = np.abs(decoded.astype(np.int16) - np.roll(fed, shift, axis=0).astype(np.int16)).mean(axis=(1, 2, 3))
        assert (shifted[same_episode] > NEIGHBOUR_MARGIN * err[same_episode]).all(), f"{who}: a frame is as near its neighbour"


def check_project_reads_what_lerobot_wrote(exchanged):
    fed = npz(Path(f"{exchanged['lerobot']}.npz"))  # what write.py gave LeRobot
    by_lerobot = npz(Path(f"{exchanged['lerobot']}.read.npz"))  # what LeRobot's own reader yields
    assert_same_trajectories(by_lerobot, fed, "LeRobot reading its own dataset")

    data = read_dataset(exchanged["lerobot"])
    frames = data.frames()
    got = {**frames, "task": np.array([data.tasks[i] for i in frames["task_index"]], dtype=str)}
    assert_same_trajectories(got, fed, "project reading LeRobot's dataset")
    np.testing.assert_array_equal(frames["index"], by_lerobot["index"])
    np.testing.assert_array_equal(frames["timestamp"], by_lerobot["timestamp"])
    assert data.fps == synthetic.FPS
    assert sorted(data.tasks) == sorted(synthetic.TASKS)
    lengths = [ep["length"] for ep in data.episodes]
    assert lengths == list(synthetic.EPISODE_LENGTHS)
    starts = np.cumsum([0, *lengths])
    assert [(ep["dataset_from_index"], ep["dataset_to_index"]) for ep in data.episodes] == list(zip(starts[:-1], starts[1:]))

    assert data.camera_keys == list(synthetic.CAMERAS) == list(by_lerobot["camera_keys"])
    assert list(by_lerobot["video_keys"]) == [synthetic.VIDEO_KEY]
    image = data.camera_frames(synthetic.IMAGE_KEY)
    np.testing.assert_array_equal(image, by_lerobot[synthetic.IMAGE_KEY])  # PNG: lossless, one decoder's bits
    np.testing.assert_array_equal(image, fed[synthetic.IMAGE_KEY])

    video = data.camera_frames(synthetic.VIDEO_KEY)
    assert video.shape == by_lerobot[synthetic.VIDEO_KEY].shape == fed[synthetic.VIDEO_KEY].shape
    np.testing.assert_array_equal(video, by_lerobot[synthetic.VIDEO_KEY],
                                  err_msg=f"project vs LeRobot ({by_lerobot['video_backend']}) decoding one mp4")
    assert_aligned(video, fed[synthetic.VIDEO_KEY], fed["episode_index"], "project decoding LeRobot's video")


def check_lerobot_reads_what_the_project_wrote(exchanged, image_format):
    fed = synthetic.flat(synthetic.episodes())
    by_lerobot = npz(Path(f"{exchanged[image_format]}.read.npz"))
    assert_same_trajectories(by_lerobot, fed, f"LeRobot reading the project's {image_format} dataset")
    ours = read_dataset(exchanged[image_format])
    frames = ours.frames()
    np.testing.assert_array_equal(by_lerobot["index"], frames["index"])
    np.testing.assert_array_equal(by_lerobot["timestamp"], frames["timestamp"])
    assert int(by_lerobot["fps"]) == synthetic.FPS

    assert list(by_lerobot["camera_keys"]) == list(synthetic.CAMERAS)
    assert list(by_lerobot["video_keys"]) == (list(synthetic.CAMERAS) if image_format == "video" else [])
    for key in synthetic.CAMERAS:
        if image_format == "image":
            np.testing.assert_array_equal(by_lerobot[key], fed[key], err_msg=key)
            continue
        own = ours.camera_frames(key)
        np.testing.assert_array_equal(by_lerobot[key], own,
                                      err_msg=f"{key}: LeRobot ({by_lerobot['video_backend']}) vs project decoding one mp4")
        assert_aligned(by_lerobot[key], fed[key], fed["episode_index"], f"LeRobot decoding the project's {key}")


def test_lerobot_interop_both_directions(exchanged):
    checks = {"(a) project reads LeRobot's dataset": lambda: check_project_reads_what_lerobot_wrote(exchanged),
              **{f"(b) LeRobot reads the project's {fmt} dataset":
                 (lambda fmt=fmt: check_lerobot_reads_what_the_project_wrote(exchanged, fmt)) for fmt in ("image", "video")}}
    failures = []
    for name, check in checks.items():
        try:
            check()
        except AssertionError as e:
            failures.append(f"{name}: {e}")
    assert not failures, "\n\n".join(failures)


def test_alignment_check_catches_a_shifted_or_swapped_frame():
    """assert_aligned, the video check that holds whatever the decoder, rejects what it is there to reject."""
    fed = synthetic.flat(synthetic.episodes())
    rng = np.random.default_rng(0)
    noisy = np.clip(fed[synthetic.VIDEO_KEY].astype(np.int16) + rng.integers(-4, 5, fed[synthetic.VIDEO_KEY].shape),
                    0, 255).astype(np.uint8)  # about a codec's loss
    assert_aligned(noisy, fed[synthetic.VIDEO_KEY], fed["episode_index"], "noisy")
    late = noisy.copy()
    late[5] = noisy[4]  # one frame repeated: every later frame of a real decode would be one behind
    with pytest.raises(AssertionError):
        assert_aligned(late, fed[synthetic.VIDEO_KEY], fed["episode_index"], "one frame late")
    with pytest.raises(AssertionError):
        assert_aligned(fed[synthetic.IMAGE_KEY], fed[synthetic.VIDEO_KEY], fed["episode_index"], "the other camera")


def test_the_behavior_task_trains_on_the_dataset_lerobot_wrote(exchanged, tmp_path):
    """`python train.py task=behavior env=lerobot env.dataset=DIR env.cameras=[...]` on LeRobot's own dataset, both cameras
    (one stored as images, one as video)."""
    from behavior.inference import load as load_policy
    from core.run import train
    from tests.conftest import BASE, compose_cfg

    cameras = ",".join(synthetic.CAMERAS)
    cfg = compose_cfg("task=behavior", "env=lerobot", f"env.dataset={exchanged['lerobot']}", f"env.cameras=[{cameras}]",
                      "policy=gpt_image", "policy.vision.encoder.model_id=tiny:tiny_siglip", "policy.d_model=32",
                      "policy.n_layers=1", "policy.n_heads=2", "stage.phases.bc.max_steps=2",
                      "stage.phases.bc.global_batch_size=8", *BASE, f"run.root={tmp_path}", "run.name=on-lerobot")
    results = train(cfg)
    policy = load_policy(results["run_dir"])
    assert sorted(policy.tasks) == sorted(synthetic.TASKS) and policy.cameras == list(synthetic.CAMERAS)
    held = sum(n for ep, n in zip(range(len(synthetic.EPISODE_LENGTHS)), synthetic.EPISODE_LENGTHS)
               if ep in policy.heldout_episodes)
    assert results["bc/samples"] + results["bc/heldout/samples"] == sum(synthetic.EPISODE_LENGTHS)
    assert results["bc/heldout/samples"] == held > 0
