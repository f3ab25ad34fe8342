"""Meta-World environments, scripted experts and the configurations episodes start from.

Each task gets one `Meta-World/MT1` env (creating one samples its 50 goal/object
configurations from the *benchmark seed*, which is slow, so it is made once and
reused). Sampling on reset is turned off and an episode's configuration is
chosen with `set_task(tasks[i])`, so an episode is identified by
(task, benchmark seed, configuration index) and reproducible from them.
Demonstrations use one benchmark seed, evaluation another: the evaluation
configurations are held out (REFERENCE.md, "Meta-World").

Observations are the 39 state floats (hand, gripper, two object poses, the
previous frame, the goal); actions are 4 floats in [-1, 1]; an episode is a
success if `info["success"]` is ever 1 within the horizon.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import numpy as np

MT10 = [
    "reach-v3", "push-v3", "pick-place-v3", "door-open-v3", "drawer-open-v3",
    "drawer-close-v3", "button-press-topdown-v3", "peg-insert-side-v3", "window-open-v3", "window-close-v3",
]
# MT50: the 50 Meta-World v3 tasks in the order of `metaworld.MT50(...).train_classes` (listed here so configs
# are stable; tests/behavior/test_behavior_mt50.py checks the list against metaworld and its scripted experts).
MT50 = [
    "assembly-v3", "basketball-v3", "bin-picking-v3", "box-close-v3", "button-press-topdown-v3",
    "button-press-topdown-wall-v3", "button-press-v3", "button-press-wall-v3", "coffee-button-v3",
    "coffee-pull-v3", "coffee-push-v3", "dial-turn-v3", "disassemble-v3", "door-close-v3", "door-lock-v3",
    "door-open-v3", "door-unlock-v3", "hand-insert-v3", "drawer-close-v3", "drawer-open-v3", "faucet-open-v3",
    "faucet-close-v3", "hammer-v3", "handle-press-side-v3", "handle-press-v3", "handle-pull-side-v3",
    "handle-pull-v3", "lever-pull-v3", "pick-place-wall-v3", "pick-out-of-hole-v3", "pick-place-v3",
    "plate-slide-v3", "plate-slide-side-v3", "plate-slide-back-v3", "plate-slide-back-side-v3",
    "peg-insert-side-v3", "peg-unplug-side-v3", "soccer-v3", "stick-push-v3", "stick-pull-v3", "push-v3",
    "push-wall-v3", "push-back-v3", "reach-v3", "reach-wall-v3", "shelf-place-v3", "sweep-into-v3",
    "sweep-v3", "window-open-v3", "window-close-v3",
]
SUITES = {"mt10": MT10, "mt50": MT50}
HORIZON = 500
CAMERAS = ("corner", "corner2", "corner3", "corner4", "topview", "behindGripper", "gripperPOV")
CONFIGS_PER_SEED = 50


def task_names(tasks) -> list[str]:
    """`mt10` or `mt50` (a suite name), a comma-separated string or a list of Meta-World env names."""
    if isinstance(tasks, str):
        return list(SUITES[tasks]) if tasks in SUITES else [t.strip() for t in tasks.split(",") if t.strip()]
    return [str(t) for t in tasks]


def make_env(task: str, benchmark_seed: int, render: bool = False, camera: str | None = None, size: int | None = None):
    """One MT1 env of `task` whose 50 configurations are fixed by `benchmark_seed`; configurations are chosen
    explicitly with `select_config`, never sampled on reset. `render=True` makes `env.render()` return RGB frames
    (MuJoCo needs an OpenGL backend: MUJOCO_GL=egl, which on a CPU-only machine is Mesa's software renderer), from
    `camera` (a Meta-World camera name, e.g. `corner2`; None: the env's default) at `size` x `size` pixels
    (None: gymnasium's 480). Rendering is set up by `fast_rendering`."""
    import gymnasium as gym
    import metaworld  # noqa: F401  (registers the Meta-World/* envs)

    warnings.filterwarnings("ignore", module=r"gymnasium\.utils\.passive_env_checker")
    warnings.filterwarnings("ignore", message=r"Constant\(s\) may be too high")
    view = {}
    if render:
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless: gymnasium's default (glfw) needs a display
        view = {"render_mode": "rgb_array", **({"camera_name": camera} if camera else {}),
                **({"width": int(size), "height": int(size)} if size else {})}
    try:
        env = gym.make("Meta-World/MT1", env_name=task, seed=benchmark_seed, disable_env_checker=True, **view)
    except Exception as err:
        raise ValueError(f"unknown Meta-World task {task!r} or camera {camera!r} ({err}); e.g. {MT10[:3]}, "
                         f"cameras {CAMERAS}") from err
    env.get_wrapper_attr("toggle_sample_tasks_on_reset")(False)
    if render:
        fast_rendering(env)
    return env


def fast_rendering(env) -> None:
    """No multisampling, shadows or reflections: about 3.5x faster frames under Mesa's software renderer (35 ms
    instead of 120 ms at 64 px here), the same scene geometry and colours."""
    import mujoco

    env.unwrapped.model.vis.quality.offsamples = 0
    viewer = env.unwrapped.mujoco_renderer._get_viewer("rgb_array")
    for flag in (mujoco.mjtRndFlag.mjRND_SHADOW, mujoco.mjtRndFlag.mjRND_REFLECTION, mujoco.mjtRndFlag.mjRND_SKYBOX):
        viewer.scn.flags[flag] = 0


def render_frame(env) -> np.ndarray:
    """The env's camera frame (H, W, 3) uint8, upright. Each rendering env has its own OpenGL context and gymnasium
    renders into whichever is current, so this makes the env's own current first (several envs in one process
    otherwise read each other's, or black, frames). Meta-World's cameras come out of gymnasium's renderer upside
    down; the frame is turned 180 degrees (LeRobot's Meta-World env does the same for corner2)."""
    env.unwrapped.mujoco_renderer._get_viewer("rgb_array").make_context_current()
    return np.ascontiguousarray(env.render()[::-1, ::-1])


def select_config(env, index: int):
    """Put `env` in its `index`-th configuration (0..49) and reset it; returns the first observation."""
    tasks = env.get_wrapper_attr("tasks")
    env.unwrapped.set_task(tasks[index % len(tasks)])
    obs, _ = env.reset(seed=index)
    return np.asarray(obs, dtype=np.float32)


def expert(task: str):
    from metaworld.policies import ENV_POLICY_MAP

    return ENV_POLICY_MAP[task]()


@dataclass
class Trajectory:
    task: str
    config_index: int
    benchmark_seed: int
    observations: np.ndarray  # (T, 39) float32: the observation each action was taken in
    actions: np.ndarray       # (T, 4) float32, clipped to [-1, 1]
    rewards: np.ndarray       # (T,) float32
    successes: np.ndarray     # (T,) bool: info["success"] after each action
    frames: np.ndarray | None = None  # (T, H, W, 3) uint8: the camera frame of each observation (render=True)

    @property
    def success(self) -> bool:
        return bool(self.successes.any())


def run_expert(env, task: str, config_index: int, benchmark_seed: int, horizon: int = HORIZON,
               after_success: int = 0, policy=None, render: bool = False) -> Trajectory:
    """One scripted-expert episode (actions clipped to [-1, 1] before they are stepped and stored). It ends
    `after_success` steps after the first success (so demonstrations also show how to settle at the goal:
    an episode cut at the first success never shows the states just past the success threshold). `render=True`
    (an env made with `render=True`) also keeps the camera frame of every observation."""
    policy = policy or expert(task)
    obs = select_config(env, config_index)
    observations, actions, rewards, successes, frames = [], [], [], [], []
    first = None
    for step in range(horizon):
        if render:
            frames.append(render_frame(env))
        action = np.clip(policy.get_action(obs), -1.0, 1.0).astype(np.float32)
        next_obs, reward, terminated, truncated, info = env.step(action)
        observations.append(obs)
        actions.append(action)
        rewards.append(reward)
        successes.append(bool(info["success"]))
        obs = np.asarray(next_obs, dtype=np.float32)
        if first is None and successes[-1]:
            first = step
        if (first is not None and step - first >= after_success) or terminated or truncated:
            break
    return Trajectory(task, config_index, benchmark_seed, np.stack(observations), np.stack(actions),
                      np.asarray(rewards, dtype=np.float32), np.asarray(successes), np.stack(frames) if render else None)
