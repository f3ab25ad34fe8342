"""Policy latency per control step at batch 1 on CPU: `python scripts/bench_policy.py RUN_DIR [RUN_DIR ...]`.

For each trained behavior run, steps one real Meta-World env with the policy
(through the rollout agent, as evaluation does) and reports the median and
90th-percentile wall time of the policy call per control step, with the env's
own step time excluded. Open-loop chunks amortise one call over H steps; the
per-call time is printed too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from behavior.inference import load  # noqa: E402
from behavior.metaworld import make_env, select_config, task_names  # noqa: E402
from behavior.rollout import Agent  # noqa: E402


def bench(run_dir: Path, steps: int, execution: str) -> dict:
    policy = load(run_dir)
    cfg = OmegaConf.load(run_dir / "config.yaml")
    task = task_names(cfg.env.tasks)[0]
    env = make_env(task, int(cfg.env.eval_seed))
    agent = Agent(policy, 1, execution=execution)
    obs = select_config(env, 0)
    agent.reset(0, obs)
    times, calls = [], 0
    for step in range(steps):
        before = agent.pending[0] if execution == "open_loop" else None
        start = time.perf_counter()
        action = agent.act([0], [0], [obs])[0]
        times.append(time.perf_counter() - start)
        calls += execution == "ensemble" or not before
        obs, _, _, _, info = env.step(action)
        if info["success"]:
            obs = select_config(env, step % 50)
            agent.reset(0, obs)
    times = times[10:]  # warm-up
    ms = sorted(t * 1000 for t in times)
    return {"run": run_dir.name, "median_ms": statistics.median(ms), "p90_ms": ms[int(0.9 * len(ms))],
            "mean_ms": statistics.fmean(ms), "policy_calls_per_step": calls / steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--execution", default="open_loop", choices=["open_loop", "ensemble"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{'run':60s} {'median ms':>10s} {'p90 ms':>8s} {'mean ms':>8s} {'calls/step':>10s}")
    for run in args.runs:
        r = bench(run, args.steps, args.execution)
        print(f"{r['run']:60s} {r['median_ms']:10.2f} {r['p90_ms']:8.2f} {r['mean_ms']:8.2f} {r['policy_calls_per_step']:10.2f}")


if __name__ == "__main__":
    main()
