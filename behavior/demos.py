"""Scripted-expert demonstrations → a LeRobotDataset, collected in parallel processes and cached.

`collect` runs each task's expert over the configurations of benchmark seed
`seed` (then `seed + 1`, ... while episodes fail) until `episodes_per_task`
successful episodes are in hand, and writes them with `data.lerobot.write_dataset`
(atomically: a crash leaves no half-written dataset). `ensure_demos` is what the
behavior task's config calls: it returns the dataset folder, collecting it
first when it is missing.

With a `camera` the same collection also renders every observation from that
Meta-World camera at `size` x `size` pixels (MUJOCO_GL=egl: Mesa's software
renderer on a CPU machine, ~35-70 ms a frame with `fast_rendering`) and stores
the frames as the image feature `observation.images.<camera>` (PNG in the
parquet files: lossless, so training sees exactly the pixels a rollout
renders). The frames are rendered while collecting, not by replaying a state
dataset afterwards: a Meta-World env carries state from one episode into the
next reset (door-open-v3's door, for one), so a replay in another episode
order does not reproduce the recorded states. Rendering changes no physics:
the states and actions equal those of the collection without a camera
(tests/behavior/test_behavior_images.py checks it).
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from behavior.metaworld import CONFIGS_PER_SEED, HORIZON, SUITES, expert, make_env, run_expert, task_names
from data.lerobot import Episode, write_dataset

AFTER_SUCCESS = 20  # expert steps kept after the first success
FPS = 80  # Meta-World's control frequency (frame_skip 5 × 2.5 ms MuJoCo steps)
STATE_NAMES = ([f"hand_{a}" for a in "xyz"] + ["gripper"] + [f"obj1_{a}" for a in ("x", "y", "z", "qw", "qx", "qy", "qz")]
               + [f"obj2_{a}" for a in ("x", "y", "z", "qw", "qx", "qy", "qz")])
STATE_NAMES = STATE_NAMES + [f"prev_{n}" for n in STATE_NAMES] + [f"goal_{a}" for a in "xyz"]
ACTION_NAMES = ["dx", "dy", "dz", "gripper"]


def camera_key(camera: str) -> str:
    return f"observation.images.{camera}"


def _collect_task(task: str, episodes: int, seed: int, horizon: int, after_success: int, camera: str | None = None,
                  size: int | None = None) -> tuple[list[Episode], int]:
    policy, kept, tried, benchmark_seed, env = expert(task), [], 0, seed, None
    while len(kept) < episodes:
        index = tried % CONFIGS_PER_SEED
        if index == 0:
            benchmark_seed = seed + tried // CONFIGS_PER_SEED
            env = make_env(task, benchmark_seed, render=camera is not None, camera=camera, size=size)
        traj = run_expert(env, task, index, benchmark_seed, horizon=horizon, after_success=after_success, policy=policy,
                          render=camera is not None)
        tried += 1
        if traj.success:
            kept.append(Episode(traj.observations, traj.actions, task, success=traj.successes, reward=traj.rewards,
                                extra={"benchmark_seed": benchmark_seed, "config_index": index},
                                images=None if camera is None else {camera_key(camera): traj.frames}))
        if tried >= 10 * episodes + CONFIGS_PER_SEED:
            raise RuntimeError(f"{task}: only {len(kept)} of {tried} expert episodes succeeded")
    return kept, tried


def collect(tasks: list[str], episodes_per_task: int, out, seed: int = 0, workers: int = 2,
            horizon: int = HORIZON, after_success: int = AFTER_SUCCESS, camera: str | None = None,
            size: int | None = None) -> tuple[Path, dict[str, tuple[int, int]]]:
    """Collect and write the dataset (with `camera`: its frames too); returns (path, {task: (kept, tried)})."""
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists; remove it or choose another --out")
    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        n = len(tasks)
        results = list(pool.map(_collect_task, tasks, [episodes_per_task] * n, [seed] * n, [horizon] * n,
                                [after_success] * n, [camera] * n, [size] * n))
    episodes = [ep for kept, _ in results for ep in kept]
    path = write_dataset(out, episodes, fps=FPS, robot_type="sawyer", state_names=STATE_NAMES, action_names=ACTION_NAMES,
                         image_format="image")
    return path, {task: (len(kept), tried) for task, (kept, tried) in zip(tasks, results)}


def ensure_demos(cache_dir: str, tasks, episodes_per_task: int, seed: int = 0, workers: int = 2,
                 after_success: int = AFTER_SUCCESS, camera: str | None = None, size: int | None = None) -> str:
    """The demonstration dataset for these parameters under `cache_dir`, collected on first use."""
    names = task_names(tasks)
    label = tasks if isinstance(tasks, str) and tasks in SUITES else "_".join(n.removesuffix("-v3") for n in names)
    view = "" if camera is None else f"-{camera}-{int(size)}px"
    out = Path(cache_dir) / f"metaworld-{label}-{episodes_per_task}eps-seed{seed}-after{after_success}{view}"
    if not (out / "meta" / "info.json").exists():
        path, report = collect(names, episodes_per_task, out, seed=seed, workers=workers, after_success=after_success,
                               camera=camera, size=size)
        print(f"collected {sum(k for k, _ in report.values())} expert episodes into {path}")
    return str(out)
