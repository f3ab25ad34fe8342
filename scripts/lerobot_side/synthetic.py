"""Deterministic synthetic episodes with camera frames for the LeRobot interop check (numpy only).

Imported both by write.py in LeRobot's own venv (it runs there, as well as in the project's environment)
and by tests/data/test_lerobot_interop.py in the project's, so both directions of the check write the
same content.

Every frame is a colour gradient (red across, green down) with a blue level and a white square that
move with the frame index, so that a frame shifted by one is far from the frame it should be, far beyond
what lossy video coding changes (`misaligned_distance` vs `coding_error` in the test). The two cameras
differ (a per-camera offset), so that swapping them is detectable too.
"""

from __future__ import annotations

import numpy as np

FPS = 10
STATE_DIM = 6
ACTION_DIM = 4
HEIGHT, WIDTH = 32, 48
SQUARE = 8
TASKS = ("pick up the red block", "push the blue cube to the left")
EPISODE_LENGTHS = (12, 17, 10)
EPISODE_TASKS = (0, 1, 0)  # task index of each episode: 2 tasks over 3 episodes
IMAGE_KEY = "observation.images.cam"  # stored as images (PNG in parquet)
VIDEO_KEY = "observation.images.front"  # stored as video (mp4)
CAMERAS = (IMAGE_KEY, VIDEO_KEY)
REPO_ID = "refract/lerobot_interop"


def frame_image(episode: int, t: int, camera: int) -> np.ndarray:
    """(HEIGHT, WIDTH, 3) uint8: gradient + per-frame blue level + a white square that moves with t."""
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH]
    img = np.empty((HEIGHT, WIDTH, 3), np.uint8)
    img[..., 0] = xx * 200 // (WIDTH - 1)
    img[..., 1] = yy * 200 // (HEIGHT - 1)
    img[..., 2] = (40 * episode + 13 * t + 101 * camera) % 200
    x0 = (3 * t + 5 * episode + 11 * camera) % (WIDTH - SQUARE)
    y0 = (2 * t + 7 * episode + 5 * camera) % (HEIGHT - SQUARE)
    img[y0:y0 + SQUARE, x0:x0 + SQUARE] = 255
    return img


def episodes() -> list[dict]:
    """[{state (T,S) f32, action (T,A) f32, task str, images {camera key: (T,H,W,3) u8}}], deterministic."""
    rng = np.random.default_rng(20250404)
    out = []
    for e, (T, task) in enumerate(zip(EPISODE_LENGTHS, EPISODE_TASKS)):
        out.append({
            "state": rng.normal(size=(T, STATE_DIM)).astype(np.float32),
            "action": rng.uniform(-1, 1, size=(T, ACTION_DIM)).astype(np.float32),
            "task": TASKS[task],
            "images": {key: np.stack([frame_image(e, t, c) for t in range(T)]) for c, key in enumerate(CAMERAS)},
        })
    return out


def flat(eps: list[dict]) -> dict[str, np.ndarray]:
    """All frames in dataset order: the npz layout write.py dumps and read.py produces (strings as <U)."""
    return {
        "observation.state": np.concatenate([e["state"] for e in eps]),
        "action": np.concatenate([e["action"] for e in eps]),
        "task": np.array([e["task"] for e in eps for _ in range(len(e["state"]))], dtype=str),
        "episode_index": np.concatenate([np.full(len(e["state"]), i, np.int64) for i, e in enumerate(eps)]),
        "frame_index": np.concatenate([np.arange(len(e["state"]), dtype=np.int64) for e in eps]),
        **{key: np.concatenate([e["images"][key] for e in eps]) for key in CAMERAS},
    }
