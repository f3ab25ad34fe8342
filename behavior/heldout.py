"""Held-out action metrics of a behavior run: what a run without an environment to roll out in reports.

A run whose dataset's tasks are not tasks of a simulator (any LeRobot dataset: `env=lerobot env.dataset=DIR`)
holds out the last episodes of each task (`env.holdout`, behavior/dataset.py `heldout_episodes`) and is
scored on them: at the end of training (results.json `train`: `bc/heldout/...`) and by
`python evaluate.py task=behavior run=RUN_DIR benchmark=heldout_actions`. The metrics, on every frame of the
held-out episodes:
- `token_accuracy` (token policies): percent of action tokens predicted exactly under teacher forcing
  (argmax of the next-token logits given the true earlier tokens of the chunk; padding after EOS not counted);
- `action_mae` / `action_mae_first`: mean absolute error, in the dataset's action units, of the greedily
  generated chunk (decoded, un-normalised) against the recorded actions, over the whole chunk / its first
  action (the one a closed-loop controller executes);
- `episodes`, `samples`: how many held-out episodes and frames they were computed on.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from behavior.codec import IGNORE


@torch.no_grad()
def heldout_metrics(policy, tensors: dict[str, torch.Tensor], chunks: np.ndarray, episodes: int,
                    batch_size: int = 512) -> dict:
    """The module docstring's metrics of `policy` on held-out `tensors` (the training tensors' keys) whose raw
    action chunks are `chunks` (N, H, D)."""
    was_training = policy.training
    policy.eval()
    n = len(chunks)
    correct = counted = 0
    abs_err, abs_first = 0.0, 0.0
    for start in range(0, n, batch_size):
        part = {k: v[start:start + batch_size] for k, v in tensors.items()}
        images, features = part.get("images"), part.get("image_features")
        if "tokens" in part:
            _, logits = policy(part["states"], part["task"], part["tokens"], images, features)
            keep = part["tokens"] != IGNORE
            correct += int((logits.argmax(-1) == part["tokens"])[keep].sum())
            counted += int(keep.sum())
        predicted = policy.act(part["states"], part["task"], images=images, image_features=features)
        error = np.abs(predicted - chunks[start:start + batch_size])
        abs_err += float(error.mean(axis=(1, 2)).sum())
        abs_first += float(error[:, 0].mean(axis=1).sum())
    policy.train(was_training)
    metrics = {"episodes": int(episodes), "samples": int(n),
               "action_mae": abs_err / max(n, 1), "action_mae_first": abs_first / max(n, 1)}
    if counted:
        metrics["token_accuracy"] = 100.0 * correct / counted
    return metrics


class HeldOutBenchmark:
    """`benchmark=heldout_actions`: the held-out action metrics of a behavior run (a `core.interfaces.Benchmark`)."""

    def __init__(self, name: str = "heldout_actions", batch_size: int = 512, main_metric: str = "action_mae_first"):
        self.name, self.batch_size, self.main_metric = name, int(batch_size), main_metric

    def __call__(self, run_dir: Path, cfg) -> dict:
        from behavior.inference import load
        from behavior.lightning import BehaviorTask
        from core.safe_load import load_run_config

        if cfg.get("threads"):
            torch.set_num_threads(int(cfg.threads))
        run_cfg = load_run_config(run_dir, {"policy": ("policy", "encoder"), "env": "env"})
        if run_cfg.task.get("name") != "behavior":
            raise ValueError(f"{run_dir} is a {run_cfg.task.get('name')!r} run; heldout_actions scores behavior runs")
        start = time.perf_counter()
        policy = load(run_dir)
        heldout = BehaviorTask.heldout_tensors(run_cfg, policy)
        if heldout is None:
            raise ValueError(f"{run_dir} held out no episodes (env.holdout is 0: it has an environment to roll out in); "
                             f"evaluate it with benchmark=rollouts, or train with env.holdout=0.1")
        tensors, chunks, episodes = heldout
        metrics = heldout_metrics(policy, tensors, chunks, episodes, self.batch_size)
        metrics["seconds"] = round(time.perf_counter() - start, 1)
        return metrics
