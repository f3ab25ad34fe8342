"""Rollouts of a VLA run in Meta-World: `python evaluate.py task=vla run=RUN_DIR episodes_per_task=N`.

`VLARolloutBenchmark` (conf/benchmark/vla_rollouts.yaml) loads the run (`vla.load`), wraps it in the rollout
adapter (`vla.inference.RolloutPolicy`) and calls behavior/rollout.py's `rollout`: every env rendered from the
run's camera at the size its demonstrations were rendered at, on the held-out configurations of the env's
evaluation seed, one batched decode per step over the envs that need a new chunk; success per task and overall
with 95% Wilson intervals (`success_rate`, `per_task`, `success_rate_ci_low`, `success_rate_ci_high`, ...).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from behavior.metaworld import task_names
from behavior.rollout import print_table, rollout
from core.safe_load import load_run_config


class VLARolloutBenchmark:
    """`benchmark=vla_rollouts` (a `core.interfaces.Benchmark`); `tasks`, `eval_seed`, `horizon` null: the run's env."""

    def __init__(self, name: str = "vla_rollouts", episodes_per_task: int = 20, envs_per_task: int = 2,
                 execution: str = "open_loop", temperature: float = 0.0, videos: int = 0,
                 tasks: str | list[str] | None = None, eval_seed: int | None = None, horizon: int | None = None,
                 main_metric: str = "success_rate"):
        if execution not in ("open_loop", "ensemble"):
            raise ValueError(f"benchmark.execution must be open_loop or ensemble, not {execution!r}")
        self.name, self.episodes_per_task, self.envs_per_task = name, int(episodes_per_task), int(envs_per_task)
        self.execution, self.temperature, self.videos = execution, float(temperature), int(videos)
        self.tasks, self.eval_seed, self.horizon, self.main_metric = tasks, eval_seed, horizon, main_metric

    def __call__(self, run_dir: Path, cfg) -> dict:
        from vla.inference import RolloutPolicy, load

        if cfg.get("threads"):
            torch.set_num_threads(int(cfg.threads))
        run_cfg = load_run_config(run_dir, {})
        if run_cfg.task.get("name") != "vla":
            raise ValueError(f"{run_dir} is a {run_cfg.task.get('name')!r} run; vla_rollouts needs a VLA run (task=vla)")
        policy = RolloutPolicy(load(run_dir, trust_remote_code=bool(cfg.get("trust_remote_code", False))))
        env = policy.policy.spec.env
        if not policy.simulated:
            raise ValueError(f"{run_dir} was trained on a dataset whose tasks are not a simulator's ({policy.tasks[:5]}...): "
                             "there is no environment to roll it out in")
        start = time.perf_counter()
        metrics = rollout(policy, task_names(self.tasks or env["tasks"]), self.episodes_per_task,
                          int(env["eval_seed"] if self.eval_seed is None else self.eval_seed),
                          horizon=int(env["horizon"] if self.horizon is None else self.horizon),
                          envs_per_task=self.envs_per_task, execution=self.execution, temperature=self.temperature,
                          seed=int(cfg.get("seed", 0)), videos=self.videos, video_dir=Path(run_dir) / "videos",
                          image_size=policy.policy.spec.image_size)
        metrics["seconds"] = round(time.perf_counter() - start, 1)
        print_table(metrics)
        return metrics
