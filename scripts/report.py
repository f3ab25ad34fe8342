"""Compare runs: a markdown table (benchmarks x runs), a PNG bar chart of it, and the runs' loss curves.

    python scripts/report.py runs/* [--out DIR]

Reads each run's `results.json` (its `benchmarks` key maps benchmark name -> metrics, as written by
`core.run.evaluate`), prints the table and writes `DIR/report.md`, `DIR/report.png` (the benchmark chart)
and `DIR/report_loss.png` (`train/loss` per step from each run's `metrics.csv`) (default DIR: the current
folder). One number per benchmark, its main metric (`core.report.main_metric`: the benchmark config's
`main_metric`, e.g. F1 for POPE, else `accuracy` in percent). Runs that were never evaluated (or lack a benchmark) get empty cells;
arguments that are not run directories are skipped with a note.

Rollout evaluations (behavior runs: a benchmark whose metrics have `success_rate` and `per_task`, e.g.
`rollouts`) get their own table after it, one row per task and the mean, one column per run: the success
rate in percent with its 95% Wilson interval and episode count where results.json has them
(`per_task_ci`, `per_task_episodes`, `success_rate_ci_low`/`_high`; behavior/rollout.py `rollout_metrics`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python scripts/report.py` puts scripts/ first, not the repository
    sys.path.insert(0, str(REPO))

from core.report import benchmark_chart, benchmark_table, loss_chart, loss_curve, main_metrics  # noqa: E402
from data.atomic import read_json  # noqa: E402


def collect(run_dirs: list[Path]) -> tuple[list[str], list[str], dict[tuple[str, str], float], dict[str, list], dict]:
    """(run names, benchmark names, {(benchmark, run): main metric}, {run: loss curve},
    {benchmark: {run: rollout metrics}} of the rollout evaluations)."""
    runs, benchmarks, values, curves, rollouts = [], set(), {}, {}, {}
    for d in run_dirs:
        if not d.is_dir() or not ((d / "config.yaml").exists() or (d / "results.json").exists()):
            print(f"note: {d} is not a run directory, skipped", file=sys.stderr)
            continue
        name = d.name if d.name not in runs else str(d)  # two runs of the same name in different folders
        runs.append(name)
        for bench, value in main_metrics(d).items():
            benchmarks.add(bench)
            values[(bench, name)] = value
        curves[name] = loss_curve(d)
        for bench, metrics in (read_json(d / "results.json", default={}).get("benchmarks") or {}).items():
            if isinstance(metrics, dict) and "success_rate" in metrics and isinstance(metrics.get("per_task"), dict):
                rollouts.setdefault(bench, {})[name] = metrics
    return runs, sorted(benchmarks), values, curves, rollouts


def _interval(low, high) -> str:
    return f" [{low:.1f}, {high:.1f}]" if isinstance(low, (int, float)) and isinstance(high, (int, float)) else ""


def rollout_table(bench: str, runs: list[str], by_run: dict[str, dict]) -> str:
    """Markdown: success % [95% Wilson interval] (n=episodes) per task and the mean, one column per run."""
    labels = [r for r in runs if r in by_run]
    tasks = list(dict.fromkeys(t for r in labels for t in by_run[r]["per_task"]))
    rows = []
    for task in tasks:
        cells = []
        for r in labels:
            m = by_run[r]
            if task not in m["per_task"]:
                cells.append("")
                continue
            ci = (m.get("per_task_ci") or {}).get(task) or (None, None)
            n = (m.get("per_task_episodes") or {}).get(task)
            cells.append(f"{m['per_task'][task]:.1f}{_interval(*ci)}" + (f" (n={n})" if n is not None else ""))
        rows.append(f"| {task} | " + " | ".join(cells) + " |")
    mean = []
    for r in labels:
        m = by_run[r]
        n = m.get("episodes")
        mean.append(f"**{m['success_rate']:.1f}**{_interval(m.get('success_rate_ci_low'), m.get('success_rate_ci_high'))}"
                    + (f" (n={n})" if n is not None else ""))
    rows.append("| **mean** | " + " | ".join(mean) + " |")
    head = [f"\n{bench}: success % [95% Wilson interval] (n = episodes)\n", "| task | " + " | ".join(labels) + " |",
            "|---|" + "---:|" * len(labels)]
    return "\n".join(head + rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (runs/*)")
    parser.add_argument("--out", type=Path, default=Path("."), help="folder for report.md, report.png, report_loss.png")
    args = parser.parse_args(argv)
    runs, benchmarks, values, curves, rollouts = collect(args.runs)
    table = benchmark_table(runs, benchmarks, values)
    table += "".join(rollout_table(bench, runs, rollouts[bench]) for bench in sorted(rollouts))
    print(table, end="")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text(table)
    benchmark_chart(runs, benchmarks, values, args.out / "report.png")
    loss_chart(curves, args.out / "report_loss.png")
    print(f"wrote {args.out / 'report.md'}, {args.out / 'report.png'} and {args.out / 'report_loss.png'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
