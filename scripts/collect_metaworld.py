"""Collect scripted-expert demonstrations in Meta-World into a LeRobotDataset (v3.0 layout).

    python scripts/collect_metaworld.py --tasks mt10 --episodes-per-task 50 --out DIR
    python scripts/collect_metaworld.py --tasks mt10 --episodes-per-task 20 --camera corner2 --size 64 --out DIR

Each task's episodes start from the configurations of benchmark seed `--seed`
(0..49); only successful episodes are kept (actions clipped to [-1, 1]), each
running `--after-success` steps past its first success; when
some fail, further configurations come from benchmark seeds `--seed + 1`, ...
Every episode's task, benchmark seed and configuration index are stored in the
dataset's episode metadata. Tasks run in parallel processes. Evaluation uses a
different benchmark seed (conf/env: `eval_seed`), so its configurations are
held out. `--camera` also renders every observation from that Meta-World camera
(MUJOCO_GL=egl; stored as the image feature `observation.images.<camera>`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from behavior.demos import collect  # noqa: E402
from behavior.metaworld import task_names  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="mt10", help="a suite name (mt10) or comma-separated Meta-World env names")
    parser.add_argument("--episodes-per-task", type=int, default=50)
    parser.add_argument("--out", required=True, help="output directory (must not exist)")
    parser.add_argument("--seed", type=int, default=0, help="first benchmark seed of the demonstrations")
    parser.add_argument("--workers", type=int, default=2, help="parallel processes")
    parser.add_argument("--after-success", type=int, default=20, help="expert steps kept after the first success")
    parser.add_argument("--camera", default=None, help="also render frames from this camera (e.g. corner2)")
    parser.add_argument("--size", type=int, default=64, help="frame size in pixels (with --camera)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    path, report = collect(task_names(args.tasks), args.episodes_per_task, args.out, seed=args.seed, workers=args.workers,
                           after_success=args.after_success, camera=args.camera,
                           size=args.size if args.camera else None)
    for task, (kept, tried) in report.items():
        print(f"{task:26s} {kept:4d} successful of {tried:4d} expert episodes")
    print(f"wrote {path} in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
