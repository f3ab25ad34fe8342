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

import warnings
from dataclasses import dataclass

import numpy as np

MT10 = [
    "reach-v3", "push-v3", "pick-place-v3", "door-open-v3", "drawer-open-v3",
    "drawer-close-v3", "button-press-topdown-v3", "peg-insert-side-v3", "window-open-v3", "window-close-v3",
]
SUITES = {"mt10": MT10}
HORIZON = 500
CONFIGS_PER_SEED = 50


def task_names(tasks) -> list[str]:
    """`mt10` (a suite name), a comma-separated string or a list of Meta-World env names."""
    if isinstance(tasks, str):
        return list(SUITES[tasks]) if tasks in SUITES else [t.strip() for t in tasks.split(",") if t.strip()]
    return [str(t) for t in tasks]


def make_env(task: str, benchmark_seed: int, render: bool = False):
    """One MT1 env of `task` whose 50 configurations are fixed by `benchmark_seed`; configurations are chosen
    explicitly with `select_config`, never sampled on reset. `render=True` makes `env.render()` return RGB frames
    (MuJoCo needs an OpenGL backend: MUJOCO_GL=egl on GPU machines, osmesa on CPU-only ones)."""
    import gymnasium as gym
    import metaworld  # noqa: F401  (registers the Meta-World/* envs)

    warnings.filterwarnings("ignore", module=r"gymnasium\.utils\.passive_env_checker")
    warnings.filterwarnings("ignore", message=r"Constant\(s\) may be too high")
    try:
        env = gym.make("Meta-World/MT1", env_name=task, seed=benchmark_seed, disable_env_checker=True,
                       **({"render_mode": "rgb_array"} if render else {}))
    except Exception as err:
        raise ValueError(f"unknown Meta-World task {task!r} ({err}); e.g. {MT10[:3]}") from err
    env.get_wrapper_attr("toggle_sample_tasks_on_reset")(False)
    return env


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

    @property
    def success(self) -> bool:
        return bool(self.successes.any())


def run_expert(env, task: str, config_index: int, benchmark_seed: int, horizon: int = HORIZON,
               after_success: int = 0, policy=None) -> Trajectory:
    """One scripted-expert episode (actions clipped to [-1, 1] before they are stepped and stored). It ends
    `after_success` steps after the first success (so demonstrations also show how to settle at the goal:
    an episode cut at the first success never shows the states just past the success threshold)."""
    policy = policy or expert(task)
    obs = select_config(env, config_index)
    observations, actions, rewards, successes = [], [], [], []
    first = None
    for step in range(horizon):
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
                      np.asarray(rewards, dtype=np.float32), np.asarray(successes))
