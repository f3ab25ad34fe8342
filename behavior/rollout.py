"""Rollouts of a trained policy in Meta-World: `python evaluate.py benchmark=rollouts run=RUN_DIR`.

`RolloutBenchmark` is what conf/benchmark/rollouts.yaml names; its settings are
`benchmark.*` keys (`benchmark.episodes_per_task=20`, ...). Every task gets
`envs_per_task` envs built with the evaluation benchmark seed (the run's
`env.eval_seed` unless `benchmark.eval_seed` is set), disjoint from the
demonstrations' seeds, so the goal/object configurations are held out; episode
j of a task starts from configuration j of that seed. All envs step in lockstep
and the policy acts on the whole batch at once. An episode is a success if
`info["success"]` is ever 1 within the horizon (it ends there); its length is
the steps taken until then.

Action chunks are executed open loop (`benchmark.execution=open_loop`: a new
chunk every H steps) or with temporal ensembling (`benchmark.execution=ensemble`:
a chunk every step, each step's action the exponentially weighted mean, weights
exp(-m·i) with i = 0 for the oldest prediction, as in ACT).

`benchmark.videos=N` records the first N episodes of each task as GIFs in
`RUN_DIR/videos/` (MuJoCo rendering needs an OpenGL backend, see
`behavior.metaworld.make_env`).

A policy that observes a camera (`env.cameras=[observation.images.<camera>]`) gets
every env rendered from that camera at the run's `env.image_size`, the same
rendering (`behavior.metaworld.render_frame`) its demonstrations were rendered
with (behavior/demos.py), each frame preprocessed by the policy's encoder
transform. Env tasks are mapped to the policy's task list (policy.json) by name.
A run without an environment (its dataset's tasks are not the simulator's) is
refused with the command that scores it on its held-out episodes instead.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from behavior.metaworld import HORIZON, make_env, render_frame, select_config, task_names
from core.safe_load import load_run_config
from data.atomic import atomic_file

console = Console()


class Agent:
    """Keeps each env's observation history and pending actions; `act` returns one action per env."""

    def __init__(self, policy, n_envs: int, execution: str = "open_loop", ensemble_decay: float = 0.01,
                 temperature: float = 0.0, seed: int = 0):
        if execution not in ("open_loop", "ensemble"):
            raise ValueError(f"execution must be open_loop or ensemble, not {execution!r}")
        self.policy, self.execution, self.decay, self.temperature = policy, execution, ensemble_decay, temperature
        self.n_obs, self.chunk = policy.n_obs, policy.chunk_size
        self.generator = torch.Generator().manual_seed(seed)
        self.history = [deque(maxlen=self.n_obs) for _ in range(n_envs)]
        self.pending: list[list] = [[] for _ in range(n_envs)]  # open loop: actions left; ensemble: (age, chunk)

    def reset(self, env: int, obs: np.ndarray) -> None:
        self.history[env].clear()
        self.history[env].extend([obs] * self.n_obs)
        self.pending[env] = []

    def act(self, envs: list[int], task: list[int], obs: list[np.ndarray], images: list[np.ndarray] | None = None) -> np.ndarray:
        """One action per env in `envs`; `images`: each env's current camera inputs (C, 3, h, w), for a policy with cameras."""
        for e, o in zip(envs, obs):
            self.history[e].append(o)
        need = [i for i, e in enumerate(envs) if self.execution == "ensemble" or not self.pending[e]]
        if need:
            states = torch.from_numpy(np.stack([np.stack(self.history[envs[i]]) for i in need])).float()
            if states.shape[-1] != self.policy.state_dim:  # a policy without state reads none of it
                states = states[..., : self.policy.state_dim]
            pixels = None if images is None else torch.from_numpy(np.stack([images[i] for i in need]))
            chunks = self.policy.act(states, torch.as_tensor([task[i] for i in need]), self.temperature, self.generator,
                                     images=pixels)
            for i, chunk in zip(need, chunks):
                e = envs[i]
                if self.execution == "open_loop":
                    self.pending[e] = list(chunk)
                else:
                    self.pending[e] = [(age + 1, c) for age, c in self.pending[e] if age + 1 < self.chunk] + [(0, chunk)]
        actions = []
        for e in envs:
            if self.execution == "open_loop":
                actions.append(self.pending[e].pop(0))
            else:  # oldest prediction first: weight exp(-m * i)
                preds = sorted(self.pending[e], key=lambda p: -p[0])
                values = np.stack([c[age] for age, c in preds])
                weights = np.exp(-self.decay * np.arange(len(values)))
                actions.append((weights[:, None] * values).sum(0) / weights.sum())
        return np.clip(np.stack(actions), -1.0, 1.0).astype(np.float32)


def policy_task_index(policy, tasks: list[str]) -> list[int]:
    """Each env task's index in the policy's task list (policy.json `tasks`; runs from before it: the env order)."""
    known = getattr(policy, "tasks", None)
    if not known:
        return list(range(len(tasks)))
    missing = [t for t in tasks if t not in known]
    if missing:
        raise ValueError(f"tasks {missing} are not tasks the policy was trained on ({known}); roll out those")
    return [known.index(t) for t in tasks]


def camera_of(policy) -> str | None:
    """The Meta-World camera a policy observes (`observation.images.<camera>`), or None; one camera per env."""
    cameras = list(getattr(policy, "cameras", None) or [])
    if len(cameras) > 1:
        raise ValueError(f"the policy observes {len(cameras)} cameras {cameras}; Meta-World rollouts render one")
    return cameras[0].removeprefix("observation.images.") if cameras else None


def rollout(policy, tasks: list[str], episodes_per_task: int, eval_seed: int, horizon: int = HORIZON,
            envs_per_task: int = 1, execution: str = "open_loop", temperature: float = 0.0, seed: int = 0,
            videos: int = 0, video_dir: Path | None = None, image_size: int | None = None) -> dict:
    """Success rate (percent) per task and overall, and the mean episode length; a policy with a camera sees it
    rendered at `image_size` pixels."""
    slots = [(t, k) for t in range(len(tasks)) for k in range(envs_per_task)]
    camera, index = camera_of(policy), policy_task_index(policy, tasks)
    if camera is not None and not image_size:
        raise ValueError("a policy with a camera needs the frame size its demonstrations were rendered at (env.image_size)")
    envs = [make_env(tasks[t], eval_seed, render=camera is not None or (videos > 0 and k == 0), camera=camera,
                     size=image_size if camera else None) for t, k in slots]
    agent = Agent(policy, len(envs), execution=execution, temperature=temperature, seed=seed)
    see = (lambda slot: policy.vision.pixels(render(envs[slot]))[None]) if camera is not None else None
    queue = {t: deque(range(episodes_per_task)) for t in range(len(tasks))}
    successes, lengths = defaultdict(list), []
    state: dict[int, dict] = {}

    def start(slot: int) -> None:
        task = slots[slot][0]
        if queue[task]:
            config = queue[task].popleft()
            obs = select_config(envs[slot], config)
            agent.reset(slot, obs)
            record = slots[slot][1] == 0 and config < videos
            state[slot] = {"obs": obs, "steps": 0, "config": config, "frames": [render(envs[slot])] if record else None}

    for slot in range(len(envs)):
        start(slot)
    while state:
        active = sorted(state)
        actions = agent.act(active, [index[slots[s][0]] for s in active], [state[s]["obs"] for s in active],
                            None if see is None else [see(s) for s in active])
        for slot, action in zip(active, actions):
            obs, _, terminated, truncated, info = envs[slot].step(action)
            st = state[slot]
            st["obs"], st["steps"] = np.asarray(obs, dtype=np.float32), st["steps"] + 1
            success = bool(info["success"])
            if st["frames"] is not None:
                st["frames"].append(render(envs[slot]))
            if success or terminated or truncated or st["steps"] >= horizon:
                successes[slots[slot][0]].append(success)
                lengths.append(st["steps"])
                if st["frames"] is not None:
                    save_gif(st["frames"], Path(video_dir or "videos") / f"{tasks[slots[slot][0]]}-{st['config']:02d}.gif")
                del state[slot]
                start(slot)
    for env in envs:
        env.close()
    return rollout_metrics({tasks[t]: v for t, v in sorted(successes.items())}, lengths)


def rollout_metrics(outcomes: dict[str, list[bool]], lengths: list[int]) -> dict:
    """The metrics of finished episodes: `outcomes` {task: each episode's success}, `lengths` every episode's steps.

    - `success_rate`: the mean over tasks of the per-task success rates (percent);
    - `success_rate_ci_low`, `success_rate_ci_high`: the 95% Wilson interval (percent, `eval.wilson`) of the
      pooled successes / episodes over all tasks. With the same number of episodes per task (what `rollout`
      runs) the pooled rate equals the mean of the per-task rates, i.e. `success_rate`; with unequal
      counts the interval is that of the pooled rate;
    - `successes`, `episodes`: the pooled counts; `mean_episode_length`;
    - `per_task`: {task: success percent} (unchanged, other tools read it), and beside it
      `per_task_episodes` {task: n}, `per_task_successes` {task: k}, `per_task_ci` {task: [low, high]}
      (95% Wilson, percent)."""
    from eval.wilson import wilson_interval

    counts = {task: (int(sum(map(bool, v))), len(v)) for task, v in outcomes.items() if len(v)}
    per_task = {task: 100.0 * k / n for task, (k, n) in counts.items()}
    k_all, n_all = sum(k for k, _ in counts.values()), sum(n for _, n in counts.values())
    low, high = wilson_interval(k_all, n_all) if n_all else (float("nan"), float("nan"))
    return {"success_rate": float(np.mean(list(per_task.values()))) if per_task else float("nan"),
            "success_rate_ci_low": low, "success_rate_ci_high": high, "per_task": per_task,
            "per_task_episodes": {task: n for task, (_, n) in counts.items()},
            "per_task_successes": {task: k for task, (k, _) in counts.items()},
            "per_task_ci": {task: list(wilson_interval(k, n)) for task, (k, n) in counts.items()},
            "successes": k_all, "mean_episode_length": float(np.mean(lengths)) if lengths else float("nan"),
            "episodes": len(lengths)}


def render(env) -> np.ndarray:
    try:
        return render_frame(env)
    except Exception as err:
        raise RuntimeError(f"MuJoCo could not render ({type(err).__name__}: {err}); videos need an OpenGL backend: "
                           "set MUJOCO_GL=egl (GPU) or MUJOCO_GL=osmesa (CPU, with libOSMesa installed), or run without videos") from err


def save_gif(frames: list[np.ndarray], path: Path, fps: int = 40) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in frames[::2]]  # every other frame
    with atomic_file(path) as tmp:
        images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:], duration=int(2000 / fps), loop=0)


class RolloutBenchmark:
    """`benchmark=rollouts`: roll the run's policy out in its env (a `core.interfaces.Benchmark`).

    `tasks=None` rolls out the run's env tasks and `eval_seed=None` uses the run's `env.eval_seed`;
    the evaluation config's top-level `threads` and `seed` set torch's threads and the sampling seed."""

    def __init__(self, name: str = "rollouts", episodes_per_task: int = 20, envs_per_task: int = 2,
                 execution: str = "open_loop", temperature: float = 0.0, videos: int = 0,
                 tasks: str | list[str] | None = None, eval_seed: int | None = None, main_metric: str = "success_rate"):
        if execution not in ("open_loop", "ensemble"):
            raise ValueError(f"benchmark.execution must be open_loop or ensemble, not {execution!r}")
        self.name, self.episodes_per_task, self.envs_per_task = name, int(episodes_per_task), int(envs_per_task)
        self.execution, self.temperature, self.videos = execution, float(temperature), int(videos)
        self.tasks, self.eval_seed, self.main_metric = tasks, eval_seed, main_metric

    def __call__(self, run_dir: Path, cfg) -> dict:
        from behavior.inference import load

        if cfg.get("threads"):
            torch.set_num_threads(int(cfg.threads))
        run_cfg = load_run_config(run_dir, {"policy": ("policy", "encoder")})
        if run_cfg.task.get("name") != "behavior":
            raise ValueError(f"{run_dir} is a {run_cfg.task.get('name')!r} run; rollouts need a behavior run (task=behavior)")
        policy = load(run_dir)
        if not policy.simulated:
            raise ValueError(f"{run_dir} was trained on a dataset whose tasks are not {run_cfg.env.get('name')}'s "
                             f"({policy.tasks[:5]}...): there is no environment to roll it out in. Score it on its "
                             f"held-out episodes: python evaluate.py task=behavior run={run_dir} benchmark=heldout_actions")
        tasks = task_names(self.tasks or run_cfg.env.tasks)
        start = time.perf_counter()
        eval_seed = run_cfg.env.eval_seed if self.eval_seed is None else self.eval_seed
        metrics = rollout(policy, tasks, self.episodes_per_task, int(eval_seed),
                          horizon=int(run_cfg.env.horizon), envs_per_task=self.envs_per_task,
                          execution=self.execution, temperature=self.temperature, seed=int(cfg.get("seed", 0)),
                          videos=self.videos, video_dir=Path(run_dir) / "videos",
                          image_size=run_cfg.env.get("image_size"))
        metrics["seconds"] = round(time.perf_counter() - start, 1)
        print_table(metrics)
        return metrics


def print_table(metrics: dict) -> None:
    """Success per task and the mean, with episodes and 95% Wilson intervals where the metrics carry them."""
    table = Table(title=f"success over {metrics['episodes']} episodes")
    table.add_column("task")
    table.add_column("success %", justify="right")
    table.add_column("episodes", justify="right")
    table.add_column("95% Wilson", justify="right")
    episodes, cis = metrics.get("per_task_episodes", {}), metrics.get("per_task_ci", {})
    interval = lambda ci: f"[{ci[0]:.1f}, {ci[1]:.1f}]" if ci else ""
    for task, rate in metrics["per_task"].items():
        table.add_row(task, f"{rate:.1f}", str(episodes.get(task, "")), interval(cis.get(task)))
    overall = ([metrics["success_rate_ci_low"], metrics["success_rate_ci_high"]]
               if "success_rate_ci_low" in metrics else None)
    table.add_row("[bold]mean[/]", f"[bold]{metrics['success_rate']:.1f}[/]", str(metrics["episodes"]),
                  f"[bold]{interval(overall)}[/]")
    console.print(table)
