"""Compare runs: a markdown table (benchmarks x runs), a PNG bar chart of it, and the runs' loss curves.

    python scripts/report.py runs/* [--out DIR]

Reads each run's `results.json` (its `benchmarks` key maps benchmark name -> metrics, as written by
`core.run.evaluate`), prints the table and writes `DIR/report.md`, `DIR/report.png` (the benchmark chart)
and `DIR/report_loss.png` (`train/loss` per step from each run's `metrics.csv`) (default DIR: the current
folder). One number per benchmark, its main metric (`core.report.main_metric`: the benchmark config's
`main_metric`, e.g. F1 for POPE, else `accuracy` in percent). Runs that were never evaluated (or lack a benchmark) get empty cells;
arguments that are not run directories are skipped with a note.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python scripts/report.py` puts scripts/ first, not the repository
    sys.path.insert(0, str(REPO))

from core.report import benchmark_chart, benchmark_table, loss_chart, loss_curve, main_metrics  # noqa: E402


def collect(run_dirs: list[Path]) -> tuple[list[str], list[str], dict[tuple[str, str], float], dict[str, list]]:
    """(run names, benchmark names, {(benchmark, run): main metric}, {run: loss curve})."""
    runs, benchmarks, values, curves = [], set(), {}, {}
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
    return runs, sorted(benchmarks), values, curves


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (runs/*)")
    parser.add_argument("--out", type=Path, default=Path("."), help="folder for report.md, report.png, report_loss.png")
    args = parser.parse_args(argv)
    runs, benchmarks, values, curves = collect(args.runs)
    table = benchmark_table(runs, benchmarks, values)
    print(table, end="")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text(table)
    benchmark_chart(runs, benchmarks, values, args.out / "report.png")
    loss_chart(curves, args.out / "report_loss.png")
    print(f"wrote {args.out / 'report.md'}, {args.out / 'report.png'} and {args.out / 'report_loss.png'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
