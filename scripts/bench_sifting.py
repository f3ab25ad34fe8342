"""Smart sifting measured against full training and a uniform random subset (docs/sifting.md).

    python scripts/bench_sifting.py [--task behavior|vlm|both] [--seeds 0 1 2] [--jobs 2] [--out runs/bench_sifting]
    python scripts/bench_sifting.py --report        # tables and plots from the results file alone

Each configuration trains with `train.py` and is evaluated with `evaluate.py`, one torch thread per job:

- behavior: Meta-World MT10 (the demo's demonstrations, GPT policy), `--behavior-steps` optimizer steps × 256 at
  full training; rollouts `--episodes` per task;
- vlm: the demo's recipe (tiny_siglip + tiny_llama from scratch on Sort-of-CLEVR) with `--vlm-steps` caption
  steps, then as many question steps × 32; the first `--questions` held-out questions.

Every configuration forwards the same samples (the same epochs of data): the sifted and subset runs take
`keep` × the optimizer steps, so each backpropagates `keep` of what full training does. Configurations:
`full`; `sift_keep50` (the highest-loss half of every drawn micro-batch); `sift_beta1` (selective backprop's
percentile**1, which keeps half on average); `uniform50` (a random half: the control).

Writes `reproduction/sifting/results.csv` (task, config, seed, metric, value) and, per run, its items
(`reproduction/sifting/items/`: per-question / per-episode scores) for the intervals; `--report` prints the table (mean over
seeds, 95% two-level bootstrap interval over seeds and items: eval/intervals.py; the paired difference to
full training) and draws `docs/sifting_*.png`. Finished runs are not rerun.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "reproduction" / "sifting" / "results.csv"
ITEMS = RESULTS.parent / "items"  # TASK/CONFIG-sSEED.json: each question's / episode's score, for the intervals
CONFIGS = {  # name: (keep fraction of the steps, sifting overrides)
    "full": (1.0, []),
    "sift_keep50": (0.5, ["sifting.enabled=true", "sifting.keep=0.5"]),
    "sift_beta1": (0.5, ["sifting.enabled=true", "sifting.beta=1.0"]),
    "uniform50": (0.5, ["sifting.enabled=true", "sifting.keep=0.5", "sifting.selector=uniform"]),
    "sift_keep70": (0.7, ["sifting.enabled=true", "sifting.keep=0.7"]),
    "uniform70": (0.7, ["sifting.enabled=true", "sifting.keep=0.7", "sifting.selector=uniform"]),
}
CONTROL = {"sift_keep50": "uniform50", "sift_beta1": "uniform50", "sift_keep70": "uniform70"}  # the same kept fraction
PY = sys.executable


def run(cmd: list[str], log: Path) -> float:
    """Run a command (one torch thread), its output to `log`; its wall time in seconds."""
    start = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        done = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}); see {log}")
    return time.perf_counter() - start


def behavior_job(args, config: str, seed: int) -> dict:
    keep, sifting = CONFIGS[config]
    root, name = Path(args.out) / "behavior", f"{config}-s{seed}"
    run_dir = root / name
    steps = max(1, round(args.behavior_steps * keep))
    train = [PY, "train.py", "task=behavior", f"seed={seed}", f"stage.phases.bc.max_steps={steps}",
             f"trainer.checkpoint_every={steps}", f"run.root={root}", f"run.name={name}", "logger=csv",
             "trainer.progress_bar=false", *sifting]
    root.mkdir(parents=True, exist_ok=True)
    train_s = run(train, root / f"{name}.log")
    evaluation = [PY, "evaluate.py", "benchmark=rollouts", f"run={run_dir}",
                  f"benchmark.episodes_per_task={args.episodes}", "threads=1"]
    run(evaluation, root / f"{name}.log")
    results = json.loads((run_dir / "results.json").read_text())
    metrics = results["benchmarks"]["rollouts"]
    n = args.episodes  # per task: successes as 0/1 items for the bootstrap
    items = {f"{task}/{i}": float(i < round(rate * n / 100)) for task, rate in metrics["per_task"].items() for i in range(n)}
    save_items("behavior", config, seed, items)
    return {"task": "behavior", "config": config, "seed": seed, "success_rate": metrics["success_rate"],
            **_common(results, steps, train_s, steps * 256)}


def vlm_job(args, config: str, seed: int) -> dict:
    keep, sifting = CONFIGS[config]
    root, name = Path(args.out) / "vlm", f"{config}-s{seed}"
    run_dir = root / name
    steps = max(1, round(args.vlm_steps * keep))
    train = [PY, "train.py", f"seed={seed}", f"stage.phases.scratch_captions.max_steps={steps}",
             f"stage.phases.scratch.max_steps={steps}", f"trainer.checkpoint_every={steps}", "trainer.threads=1",
             f"run.root={root}", f"run.name={name}", "logger=csv", "trainer.progress_bar=false", *sifting]
    root.mkdir(parents=True, exist_ok=True)
    train_s = run(train, root / f"{name}.log")
    evaluation = [PY, "evaluate.py", f"run={run_dir}", "benchmark=sort_of_clevr", f"limit={args.questions}", "threads=1"]
    run(evaluation, root / f"{name}.log")
    results = json.loads((run_dir / "results.json").read_text())
    metrics = results["benchmarks"]["sort_of_clevr"]
    from omegaconf import OmegaConf

    from eval.intervals import benchmark_item_scores

    bench = OmegaConf.load(ROOT / "conf" / "benchmark" / "sort_of_clevr.yaml")
    _, items = benchmark_item_scores(bench, run_dir, limit=args.questions)
    save_items("vlm", config, seed, items)
    return {"task": "vlm", "config": config, "seed": seed, "accuracy": metrics["accuracy"],
            "accuracy_non_relational": metrics["accuracy_non_relational"],
            "accuracy_relational": metrics["accuracy_relational"], **_common(results, steps, train_s, 2 * steps * 32)}


def _common(results: dict, steps: int, train_s: float, trained: int) -> dict:
    """Wall time and sample counts; `trained`: the samples the run's optimizer steps train on."""
    train = results["train"]
    score_s = sum(v for k, v in train.items() if k.endswith("/sift/score_seconds"))
    return {"steps_per_phase": steps, "train_seconds": round(train_s, 1), "score_seconds": round(score_s, 1),
            "forwarded": results.get("sift/forwarded", trained), "backpropagated": results.get("sift/backpropagated", trained)}


def read_rows() -> list[dict]:
    if not RESULTS.exists():
        return []
    with open(RESULTS) as f:
        return list(csv.DictReader(f))


def write_row(row: dict) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    new = not RESULTS.exists()
    with open(RESULTS, "a", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(["task", "config", "seed", "metric", "value"])
        for key, value in row.items():
            if key not in ("task", "config", "seed") and value is not None:
                writer.writerow([row["task"], row["config"], row["seed"], key, value])


def report(plot: bool = True) -> str:
    """The table of docs/sifting.md from results.csv and the items files (and, with `plot`, docs/sifting_*.png)."""
    import numpy as np

    from eval.intervals import bootstrap_interval

    rows = read_rows()
    table: dict = {}
    for r in rows:
        table.setdefault((r["task"], r["config"]), {}).setdefault(int(r["seed"]), {})[r["metric"]] = float(r["value"])
    lines = ["| task | configuration | seeds | steps × batch per phase | samples forwarded | backpropagated | "
             "train wall (s) | of which scoring (s) | final metric (95% CI) | vs full (95% CI) | vs uniform subset (95% CI) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for task, metric, batch in (("behavior", "success_rate", 256), ("vlm", "accuracy", 32)):
        full_items = _items(task, "full", sorted(table.get((task, "full"), {})))
        for config in CONFIGS:
            seeds = table.get((task, config))
            if not seeds:
                continue
            order = sorted(seeds)
            items = _items(task, config, order)
            mean, lo, hi = bootstrap_interval(items)
            diff = versus(items, full_items) if config != "full" else ""
            control = CONTROL.get(config)
            control_seeds = sorted(table.get((task, control), {})) if control else []
            vs_control = versus(items, _items(task, control, order)) if control_seeds == order else ""
            val = lambda k: np.mean([seeds[s][k] for s in order])  # noqa: E731
            lines.append(f"| {task} | {config} | {len(order)} | {int(val('steps_per_phase'))} × {batch} | "
                         f"{val('forwarded'):,.0f} | {val('backpropagated'):,.0f} | {val('train_seconds'):.0f} | "
                         f"{val('score_seconds'):.0f} | {metric} {mean:.1f} [{lo:.1f}, {hi:.1f}] | {diff} | {vs_control} |")
    if plot:
        _plot(table)
    return "\n".join(lines)


def versus(items: list[dict], base: list[dict]) -> str:
    """The paired difference (same seeds, same items) with its 95% interval, or '' without the same seeds."""
    from eval.intervals import paired_difference

    if not base or len(base) != len(items):
        return ""
    d, lo, hi = paired_difference(items, base)
    return f"{d:+.1f} [{lo:+.1f}, {hi:+.1f}]"


def save_items(task: str, config: str, seed: int, items: dict) -> None:
    (ITEMS / task).mkdir(parents=True, exist_ok=True)
    (ITEMS / task / f"{config}-s{seed}.json").write_text(json.dumps(items, sort_keys=True))


def _items(task: str, config: str, seeds: list[int]) -> list[dict]:
    return [json.loads((ITEMS / task / f"{config}-s{s}.json").read_text()) for s in seeds]


def _plot(table: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from eval.intervals import bootstrap_interval

    for task, metric in (("behavior", "success rate (%)"), ("vlm", "held-out accuracy (%)")):
        configs = [c for c in CONFIGS if (task, c) in table]
        if not configs:
            continue
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for config in configs:
            seeds = sorted(table[(task, config)])
            wall = np.mean([table[(task, config)][s]["train_seconds"] for s in seeds])
            mean, lo, hi = bootstrap_interval(_items(task, config, seeds))
            ax.errorbar([wall], [mean], yerr=[[mean - lo], [hi - mean]], fmt="o", capsize=4, label=config)
        ax.set_xlabel("training wall time (s, mean over seeds)")
        ax.set_ylabel(metric)
        ax.set_title(f"smart sifting, {task}: 95% CI over seeds and items")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(ROOT / "docs" / f"sifting_{task}.png", dpi=120)
        plt.close(fig)


def who_is_kept(run_dir: Path, keep: float = 0.5) -> str:
    """Which MT10 samples a trained behavior run's losses would keep at `keep` (the highest losses): per task, and
    for the last 20 frames of each episode (the expert's steps after success) against the rest."""
    import numpy as np
    import torch
    from hydra.utils import instantiate

    from behavior.inference import load
    from behavior.lightning import BehaviorTask
    from behavior.metaworld import task_names
    from core.safe_load import load_run_config
    from data.lerobot import read_dataset

    cfg = load_run_config(Path(run_dir), {"env": "env"})  # its dataset target checked against conf/env
    policy, demos = load(run_dir), BehaviorTask.load_demonstrations(cfg)
    ids, _ = policy.codec.encode(demos.normalised_chunks())
    tensors = {"states": torch.from_numpy(demos.states), "task": torch.from_numpy(demos.task), "tokens": torch.from_numpy(ids)}
    with torch.no_grad():
        losses = torch.cat([policy.sample_losses({k: v[i : i + 4096] for k, v in tensors.items()})
                            for i in range(0, len(demos), 4096)]).numpy()
    kept = losses >= np.quantile(losses, 1 - keep)
    episode = read_dataset(instantiate(cfg.env.dataset)).frames()["episode_index"]
    ends = np.r_[np.flatnonzero(episode[1:] != episode[:-1]), len(episode) - 1]
    to_end = np.repeat(ends, np.diff(np.r_[-1, ends])) - np.arange(len(episode))
    tail = to_end < int(cfg.env.dataset.after_success)
    names = task_names(cfg.env.tasks)
    lines = [f"| samples | share of all | share of the kept {keep:.0%} | mean loss |", "|---|---:|---:|---:|"]
    for label, mask in [*((n, demos.task == i) for i, n in enumerate(names)),
                        ("last 20 frames of an episode", tail), ("the other frames", ~tail)]:
        lines.append(f"| {label} | {mask.mean():.1%} | {kept[mask].sum() / kept.sum():.1%} | {losses[mask].mean():.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=["behavior", "vlm", "both"], default="both")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench_sifting"))
    parser.add_argument("--behavior-steps", type=int, default=2000)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--vlm-steps", type=int, default=300)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--who-is-kept", metavar="RUN_DIR", help="which samples a trained behavior run's losses keep")
    args = parser.parse_args()
    if args.who_is_kept:
        print(who_is_kept(Path(args.who_is_kept)))
        return
    if args.report:
        print(report())
        return
    done = {(r["task"], r["config"], int(r["seed"])) for r in read_rows()}
    jobs = []
    for task in (["behavior", "vlm"] if args.task == "both" else [args.task]):
        for seed in args.seeds:
            for config in args.configs:
                if (task, config, seed) not in done:
                    jobs.append((behavior_job if task == "behavior" else vlm_job, config, seed))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for fn, data in ((behavior_job, "['task=behavior']).env.dataset"), (vlm_job, "[]).data.generator")):
        if any(job[0] is fn for job in jobs):  # the demonstrations / the dataset made once, before parallel jobs read them
            run([PY, "-c", "from hydra import compose, initialize_config_dir; from hydra.utils import instantiate;"
                 f"initialize_config_dir(config_dir='{ROOT / 'conf'}', version_base='1.3');"
                 f"print(instantiate(compose(config_name='train', overrides={data}))"], Path(args.out) / "data.log")
    with ThreadPoolExecutor(args.jobs) as pool:
        for row in pool.map(lambda job: job[0](args, job[1], job[2]), jobs):
            write_row(row)
            print(json.dumps(row), flush=True)
    print(report())


if __name__ == "__main__":
    main()
