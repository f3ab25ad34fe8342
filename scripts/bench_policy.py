"""Policy latency per control step at batch 1 on CPU: `python scripts/bench_policy.py RUN_DIR [RUN_DIR ...]`.

For each trained behavior run, steps one real Meta-World env with the policy
(through the rollout agent, as evaluation does) and reports the median and
90th-percentile wall time of the policy call per control step, with the env's
own step time excluded. Open-loop chunks amortise one call over H steps; the
per-call time is printed too. A policy with a camera gets the env rendered from
it (MUJOCO_GL=egl) every step: the policy time includes the frame's
preprocessing and the encoder, the render time is reported apart (`render ms`).
A VLA run (task=vla) is timed the same way through its rollout adapter
(`vla.inference.RolloutPolicy`: the whole chunk's action tokens decoded with
the KV cache per call).
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
from behavior.metaworld import render_frame  # noqa: E402
from behavior.rollout import Agent, camera_of, policy_task_index  # noqa: E402


def policy_of(run_dir: Path, cfg):
    """The policy the rollouts drive: a behavior policy, or a VLA's rollout adapter."""
    if cfg.task.get("name") == "vla":
        from vla.inference import RolloutPolicy
        from vla.inference import load as load_vla

        return RolloutPolicy(load_vla(run_dir))
    return load(run_dir)


def bench(run_dir: Path, steps: int, execution: str) -> dict:
    cfg = OmegaConf.load(run_dir / "config.yaml")
    policy = policy_of(run_dir, cfg)
    task = task_names(cfg.env.tasks)[0]
    camera = camera_of(policy)
    size = cfg.env.get("image_size") or (cfg.get("vla") or {}).get("image_size")  # a VLA on a camera-less env: vla.*
    env = make_env(task, int(cfg.env.eval_seed), render=camera is not None, camera=camera, size=size if camera else None)
    agent, index = Agent(policy, 1, execution=execution), policy_task_index(policy, [task])[0]
    obs = select_config(env, 0)
    agent.reset(0, obs)
    times, renders, calls = [], [], 0
    for step in range(steps):
        before = agent.pending[0] if execution == "open_loop" else None
        images = None
        if camera is not None:
            start = time.perf_counter()
            frame = render_frame(env)
            renders.append(time.perf_counter() - start)
        start = time.perf_counter()
        if camera is not None:
            images = [policy.vision.pixels(frame)[None]]
        action = agent.act([0], [index], [obs], images)[0]
        times.append(time.perf_counter() - start)
        calls += execution == "ensemble" or not before
        obs, _, _, _, info = env.step(action)
        if info["success"]:
            obs = select_config(env, step % 50)
            agent.reset(0, obs)
    times = times[10:]  # warm-up
    ms = sorted(t * 1000 for t in times)
    return {"run": run_dir.name, "median_ms": statistics.median(ms), "p90_ms": ms[int(0.9 * len(ms))],
            "mean_ms": statistics.fmean(ms), "policy_calls_per_step": calls / steps,
            "render_ms": statistics.median(t * 1000 for t in renders) if renders else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--execution", default="open_loop", choices=["open_loop", "ensemble"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{'run':60s} {'median ms':>10s} {'p90 ms':>8s} {'mean ms':>8s} {'calls/step':>10s} {'render ms':>9s}")
    for run in args.runs:
        r = bench(run, args.steps, args.execution)
        print(f"{r['run']:60s} {r['median_ms']:10.2f} {r['p90_ms']:8.2f} {r['mean_ms']:8.2f} {r['policy_calls_per_step']:10.2f} {r['render_ms']:9.2f}")


if __name__ == "__main__":
    main()
