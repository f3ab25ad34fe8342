"""Write a small LeRobotDataset through the `lerobot` package itself (runs in LeRobot's venv, not the project's).

    <lerobot venv>/bin/python scripts/lerobot_side/write.py OUT [--vcodec libsvtav1]

`scripts/lerobot_venv.py` builds that venv. OUT must not exist: `LeRobotDataset.create` makes it. The
content is synthetic.py's (3 episodes, 2 tasks, a float32 state and action, one camera stored as images
and one as video), written with LeRobot 0.4.4's own recording API: `LeRobotDataset.create(...,
use_videos=True)`, `add_frame({..., "task": ...})` per frame, `save_episode()` per episode, `finalize()`.
What was fed in (the same arrays the project side compares against) is dumped to OUT.npz beside OUT,
strings as fixed-width unicode (loadable with allow_pickle=False).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reaches a hub

import numpy as np  # noqa: E402
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import synthetic  # noqa: E402

CAMERA = {"shape": (synthetic.HEIGHT, synthetic.WIDTH, 3), "names": ["height", "width", "channels"]}
FEATURES = {
    "observation.state": {"dtype": "float32", "shape": (synthetic.STATE_DIM,),
                          "names": [f"joint_{i}" for i in range(synthetic.STATE_DIM)]},
    "action": {"dtype": "float32", "shape": (synthetic.ACTION_DIM,),
               "names": [f"motor_{i}" for i in range(synthetic.ACTION_DIM)]},
    synthetic.IMAGE_KEY: {"dtype": "image", **CAMERA},
    synthetic.VIDEO_KEY: {"dtype": "video", **CAMERA},
}


def write(out: Path, vcodec: str) -> dict[str, np.ndarray]:
    eps = synthetic.episodes()
    ds = LeRobotDataset.create(repo_id=synthetic.REPO_ID, root=out, fps=synthetic.FPS, features=FEATURES,
                               robot_type="synthetic_arm", use_videos=True, vcodec=vcodec)
    for ep in eps:
        for t in range(len(ep["state"])):
            ds.add_frame({"observation.state": ep["state"][t], "action": ep["action"][t],
                          **{key: ep["images"][key][t] for key in synthetic.CAMERAS}, "task": ep["task"]})
        ds.save_episode()
    ds.finalize()
    return synthetic.flat(eps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--vcodec", default="libsvtav1", help="LeRobot's default; h264 or hevc also work")
    args = ap.parse_args()
    fed = write(args.out, args.vcodec)
    np.savez(args.out.with_name(args.out.name + ".npz"), **fed, vcodec=np.array(args.vcodec))
    print(f"wrote {len(fed['action'])} frames in {len(synthetic.EPISODE_LENGTHS)} episodes to {args.out}")


if __name__ == "__main__":
    main()
