"""Comparing runs: each benchmark's main metric, its table, a bar chart of it and the training loss curves.

Used by `scripts/report.py runs/*` and by the sweep summary (core/sweep.py). One number per benchmark, its
main metric: the benchmark config's `main_metric` (F1 for POPE), else `accuracy` (percent), read from a run's `results.json`
`benchmarks` (benchmark name -> metrics, as `core.run.evaluate` writes them). Loss curves are the
`train/loss` column of each run's `metrics.csv` (steps counted over the whole run, all phases). The charts
are PNG files written with matplotlib (Agg backend, no display needed).
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

from core.conf import group_option, group_options
from data.atomic import read_json


def _inherited(group: str, node, key: str):
    """`key` of a group option, else of the options of the same group its defaults list names (later ones first,
    as Hydra lets a later default override an earlier one): mini_pope.yaml takes pope.yaml's `main_metric`."""
    if node.get(key) is not None:
        return node.get(key)
    for entry in reversed(list(node.get("defaults") or [])):
        if isinstance(entry, str) and entry != "_self_" and not entry.startswith("/"):
            value = _inherited(group, group_option(group, entry), key)
            if value is not None:
                return value
    return None


@cache
def main_metric(benchmark: str) -> str:
    """The `main_metric` of the benchmark config named `benchmark` (file stem or its `name`, its own or the one of
    the benchmark config it builds on); "accuracy" if it names none or there is no such config."""
    for option in group_options("benchmark"):
        node = group_option("benchmark", option)
        if benchmark in (option, node.get("name")):
            return str(_inherited("benchmark", node, "main_metric") or "accuracy")
    return "accuracy"


def main_metrics(run_dir: Path) -> dict[str, float]:
    """{benchmark: its main metric} of the benchmarks `run_dir/results.json` records (none: {})."""
    results = read_json(Path(run_dir) / "results.json", default={})
    out = {}
    for bench, metrics in (results.get("benchmarks") or {}).items():
        value = metrics.get(main_metric(bench)) if isinstance(metrics, dict) else None
        if isinstance(value, (int, float)):
            out[bench] = float(value)
    return out


def benchmark_table(labels: list[str], benchmarks: list[str], values: dict[tuple[str, str], float]) -> str:
    """Markdown: one row per benchmark (with its main metric), one column per run label; empty cells where a
    run lacks the benchmark."""
    head = "| benchmark (metric) | " + " | ".join(labels) + " |"
    rule = "|---|" + "---:|" * len(labels)
    rows = [f"| {b} ({main_metric(b)}) | " + " | ".join(
        f"{values[(b, r)]:.2f}" if (b, r) in values else "" for r in labels) + " |" for b in benchmarks]
    return "\n".join([head, rule, *rows]) + "\n"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def benchmark_chart(labels: list[str], benchmarks: list[str], values: dict[tuple[str, str], float], path: Path) -> None:
    """Grouped bars: per benchmark, one bar per run label (its main metric, in percent)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(benchmarks) * max(1, len(labels)) ** 0.5 + 2), 4))
    width = 0.8 / max(1, len(labels))
    for j, label in enumerate(labels):
        xs = [i + (j - (len(labels) - 1) / 2) * width for i in range(len(benchmarks))]
        ax.bar(xs, [values.get((b, label), 0.0) for b in benchmarks], width, label=label)
    ax.set_xticks(range(len(benchmarks)), [f"{b}\n({main_metric(b)})" for b in benchmarks])
    ax.set_ylabel("score (%)")
    ax.set_ylim(0, 100)
    if labels:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def loss_curve(run_dir: Path) -> list[tuple[int, float]]:
    """(step, train/loss) of every row of `run_dir/metrics.csv` that has a loss, by step (none: [])."""
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        rows = [(int(float(r["step"])), float(r["train/loss"])) for r in csv.DictReader(f)
                if r.get("train/loss") not in (None, "") and r.get("step") not in (None, "")]
    return sorted(rows)


def loss_chart(curves: dict[str, list[tuple[int, float]]], path: Path) -> None:
    """One line per run label: training loss against the run-wide step."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, curve in curves.items():
        if curve:
            ax.plot([s for s, _ in curve], [v for _, v in curve], label=label, marker="." if len(curve) < 30 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("train/loss")
    if any(curves.values()):
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
