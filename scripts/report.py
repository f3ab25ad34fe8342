"""Compare evaluated runs: a markdown table (benchmarks x runs) and a PNG bar chart.

    python scripts/report.py runs/* [--out DIR]

Reads each run's `results.json` (its `benchmarks` key maps benchmark name -> metrics, as written by
`core.run.evaluate`), prints the table and writes `DIR/report.md` and `DIR/report.png` (default DIR: the
current folder). One number per benchmark, its main metric: F1 for POPE, `accuracy` (percent) for every
other benchmark. Runs that were never evaluated (or lack a benchmark) get empty cells; arguments that are
not run directories are skipped with a note.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from data.atomic import read_json

MAIN_METRIC = {"pope": "f1"}  # every other benchmark: "accuracy"


def main_metric(benchmark: str) -> str:
    return MAIN_METRIC.get(benchmark, "accuracy")


def collect(run_dirs: list[Path]) -> tuple[list[str], list[str], dict[tuple[str, str], float]]:
    """(run names, benchmark names, {(benchmark, run): value})."""
    runs, benchmarks, values = [], [], {}
    for d in run_dirs:
        results = d / "results.json"
        if not d.is_dir() or not ((d / "config.yaml").exists() or results.exists()):
            print(f"note: {d} is not a run directory, skipped", file=sys.stderr)
            continue
        name = d.name if d.name not in runs else str(d)  # two runs of the same name in different folders
        runs.append(name)
        data = read_json(results, default={})
        for bench, metrics in (data.get("benchmarks") or {}).items():
            if bench not in benchmarks:
                benchmarks.append(bench)
            value = metrics.get(main_metric(bench)) if isinstance(metrics, dict) else None
            if isinstance(value, (int, float)):
                values[(bench, name)] = float(value)
    return runs, sorted(benchmarks), values


def markdown(runs, benchmarks, values) -> str:
    head = "| benchmark (metric) | " + " | ".join(runs) + " |"
    rule = "|---|" + "---:|" * len(runs)
    rows = [f"| {b} ({main_metric(b)}) | " + " | ".join(
        f"{values[(b, r)]:.2f}" if (b, r) in values else "" for r in runs) + " |" for b in benchmarks]
    return "\n".join([head, rule, *rows]) + "\n"


def bar_chart(runs, benchmarks, values, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(benchmarks) * max(1, len(runs)) ** 0.5 + 2), 4))
    width = 0.8 / max(1, len(runs))
    for j, run in enumerate(runs):
        xs = [i + (j - (len(runs) - 1) / 2) * width for i in range(len(benchmarks))]
        ax.bar(xs, [values.get((b, run), 0.0) for b in benchmarks], width, label=run)
    ax.set_xticks(range(len(benchmarks)), [f"{b}\n({main_metric(b)})" for b in benchmarks])
    ax.set_ylabel("score (%)")
    ax.set_ylim(0, 100)
    if runs:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (runs/*)")
    parser.add_argument("--out", type=Path, default=Path("."), help="folder for report.md and report.png")
    args = parser.parse_args(argv)
    runs, benchmarks, values = collect(args.runs)
    table = markdown(runs, benchmarks, values)
    print(table, end="")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text(table)
    bar_chart(runs, benchmarks, values, args.out / "report.png")
    print(f"wrote {args.out / 'report.md'} and {args.out / 'report.png'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
