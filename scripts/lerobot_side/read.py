"""Read LeRobotDataset folders through the `lerobot` package itself (runs in LeRobot's venv, not the project's).

    <lerobot venv>/bin/python scripts/lerobot_side/read.py DIR OUT.npz [DIR2 OUT2.npz ...]

`scripts/lerobot_venv.py` builds that venv. Each DIR is loaded with `LeRobotDataset(repo_id=..., root=DIR)`
offline (HF_HUB_OFFLINE=1: a folder LeRobot cannot read locally fails instead of reaching for a hub), every
frame is taken with `dataset[i]`, and OUT.npz gets, in dataset order: observation.state, action, task
(the string LeRobot maps task_index to, fixed-width unicode), episode_index, frame_index, index,
timestamp, and each camera key's frames as (N, H, W, 3) uint8 (LeRobot yields float32 CHW in [0, 1], k/255
exactly; x * 255 rounded gives k back), plus `camera_keys`, `video_keys`, `fps` and `video_backend`.

Video is decoded with LeRobot's default decoder, torchcodec, where it loads (it needs the system's FFmpeg
libraries), else with LeRobot's "pyav" decoder (PyAV's wheel carries its own FFmpeg);
`$REFRACT_LEROBOT_VIDEO_BACKEND` forces one. Several DIR OUT pairs share one start-up (torch + lerobot
imports take seconds).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402

REPO_ID = "refract/lerobot_interop"  # any id: root= is what is read
COLUMNS = ("observation.state", "action", "episode_index", "frame_index", "index", "timestamp")


def video_backend() -> str:
    forced = os.environ.get("REFRACT_LEROBOT_VIDEO_BACKEND")
    if forced:
        return forced
    try:
        from torchcodec.decoders import VideoDecoder  # noqa: F401  (loads FFmpeg's shared libraries)
    except Exception:  # ImportError, or RuntimeError when no FFmpeg library loads
        return "pyav"
    return "torchcodec"


def to_uint8_hwc(x: torch.Tensor) -> np.ndarray:
    return (x.permute(1, 2, 0) * 255).round().clamp(0, 255).to(torch.uint8).numpy()


def read(root: Path, backend: str) -> dict[str, np.ndarray]:
    ds = LeRobotDataset(REPO_ID, root=root, video_backend=backend)
    cams = list(ds.meta.camera_keys)
    cols = {k: [] for k in (*COLUMNS, "task", *cams)}
    for i in range(len(ds)):
        item = ds[i]
        for k in COLUMNS:
            cols[k].append(item[k].numpy())
        cols["task"].append(item["task"])
        for k in cams:
            cols[k].append(to_uint8_hwc(item[k]))
    out = {k: np.stack(v) if k != "task" else np.array(v, dtype=str) for k, v in cols.items()}
    out.update(camera_keys=np.array(cams, dtype=str), video_keys=np.array(list(ds.meta.video_keys), dtype=str),
               fps=np.array(ds.fps), video_backend=np.array(backend))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="+", metavar="DIR OUT.npz")
    args = ap.parse_args()
    if len(args.pairs) % 2:
        ap.error("give DIR OUT.npz pairs")
    backend = video_backend()
    for root, out in zip(args.pairs[::2], args.pairs[1::2]):
        data = read(Path(root), backend)
        np.savez(out, **data)
        print(f"read {len(data['action'])} frames from {root} (video backend {backend}) into {out}")


if __name__ == "__main__":
    main()
