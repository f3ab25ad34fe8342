"""Rerun a design-space study: `python scripts/reproduce.py prismatic_mini [options] [-- train.py overrides]`.

    python scripts/reproduce.py prismatic_mini --list                 # the cells, one a line
    python scripts/reproduce.py prismatic_mini --cell base --seed 0   # one cell and seed; last line: its metrics
    python scripts/reproduce.py prismatic_mini                        # every cell x seeds 0 1 2, 2 at a time
    python scripts/reproduce.py prismatic_mini --report               # tables and plots from the finished cells
    python scripts/reproduce.py prismatic_mini --cell base -- trainer.max_steps=1 eval.limit=8   # a smoke run

A cell is an ordinary experiment preset, `conf/experiment/<study>/<cell>.yaml`, trained and evaluated by the
user's own entry point in a subprocess (`python train.py experiment=<study>/<cell> seed=S run.root=OUT/runs
[overrides]`, one torch thread; its `eval.benchmarks` are evaluated after training, as `evaluate.py` would).
Where things go, under OUT (default `reproduction/<study>/`, `--out` for trials and tests):
- `runs/`: the cells' run directories (git-ignored; named by the core from the config's hash, so a changed
  cell config trains a new run and an unchanged one resumes or reuses its run);
- `cells/<cell>-seed<S>.json`: the cell's result: `metrics` (`benchmark/metric` -> value in percent, every
  metric the run reported), `items` (per benchmark, every item's score from the scorer's `score_*_items`),
  `main_metric` per benchmark, `train_flops` (the core's FLOP counter: results.json `train.<phase>/train_flops`),
  `components` (the tiny flavours' weight fingerprints), `machine` (the CPU it trained on and the instruction set
  torch's kernels used: a rerun reproduces the cell only on that kind), `wall_time_s`, `run_dir` and the
  `overrides` it ran with. A cell/seed whose result file exists is not rerun; no cell trains beside finished ones whose fingerprints are
  not the cache's;
- `logs/<cell>-seed<S>.log` (git-ignored) and `last_run.json` (the latest whole-study invocation: wall time, jobs,
  the cell runs it trained and those that failed);
- `results.csv` (`cell,seed,benchmark,metric,value`), `summary.csv` and `summary.md` (per cell x benchmark:
  the main metric's mean over seeds, its two-level bootstrap 95% interval, the paired difference from the base
  cell with its interval, and the training FLOPs), written after every full run and by `--report`, which also
  writes `tables.md` (one table per axis) and the plots (`--figures`, default docs/figures/<study>/).
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

from data.atomic import atomic_file, read_json, write_json

STUDIES = ("prismatic_mini",)
COUNTS = {"n", "missing", "empty", "unparsed"}  # metrics that are counts, not percentages (left out of results)
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def cells_of(study: str) -> list[str]:
    """The study's cell names: conf/experiment/<study>/*.yaml without the shared bases (`_*.yaml`), sorted with
    `base` first."""
    names = sorted(p.stem for p in (ROOT / "conf" / "experiment" / study).glob("*.yaml") if not p.name.startswith("_"))
    return sorted(names, key=lambda n: n != "base")


def result_path(out: Path, cell: str, seed: int) -> Path:
    return out / "cells" / f"{cell}-seed{seed}.json"


def train_overrides(study: str, cell: str, seed: int, out: Path, extra: list[str]) -> list[str]:
    return [f"experiment={study}/{cell}", f"seed={seed}", f"run.root={out / 'runs'}", "trainer.threads=1", *extra]


def compose_train(overrides: list[str]):
    """conf/train.yaml composed with `overrides` (as train.py composes it), its resolvers registered."""
    from core.conf import compose_config
    from core.resolvers import register_resolvers

    register_resolvers()
    return compose_config("train", overrides)


def components(cfg) -> dict[str, str]:
    """{flavour: fingerprint} of every tiny flavour (`tiny:NAME`) the cell's encoder and backbone load."""
    from vlm.tiny import fingerprints_in

    return fingerprints_in(cfg.encoder, cfg.backbone)


def machine() -> dict[str, str]:
    """The CPU this process runs on (/proc/cpuinfo's model name and vendor where there is one) and the instruction
    set torch's CPU kernels dispatch to: seeded training writes the same weights again only on the same kind."""
    import platform

    import torch

    info = {}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    return {"cpu": info.get("model name") or platform.processor() or platform.machine(),
            "vendor": info.get("vendor_id", ""), "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__}


def check_components(out: Path) -> None:
    """Before a cell trains: refuse if a finished cell under `out` was trained on other weights than the cache's
    flavours (seeded pretraining gives other weights on another kind of CPU, and such cells are not comparable
    with new ones). Cells recorded before fingerprints were (no `components`) are counted, not checked."""
    from vlm.tiny import fingerprint

    results = [read_json(p) for p in sorted((out / "cells").glob("*.json"))]
    current, stale = {}, []
    for r in results:
        for name, recorded in r.get("components", {}).items():
            if name not in current:
                current[name] = fingerprint(name)
            if current[name] != recorded:
                on = f", trained on {r['machine']['cpu']} ({r['machine']['torch_cpu_capability']})" if "machine" in r else ""
                stale.append(f"{r['cell']}-seed{r['seed']} ({name} {recorded}, the cache's {current[name]}{on})")
    if stale:
        raise SystemExit(f"error: {len(stale)} finished cell runs were trained on other component weights than the "
                         f"cache holds: {'; '.join(stale)}\n  fix: move their cells/*.json aside and rerun them on "
                         "these components, or rerun on a machine of the kind that built them (docs/reproduction.md)")
    unchecked = sum("components" not in r for r in results)
    if unchecked:
        print(f"{unchecked} finished cell runs carry no component fingerprints (recorded before they were): "
              "not checked", flush=True)


def train_flops(results: dict) -> float | None:
    """Training FLOPs of every phase, from the core's counter (results.json `train.<phase>/train_flops`)."""
    flops = [v for k, v in results.get("train", {}).items() if k.endswith("/train_flops")]
    return float(f"{sum(flops):.4g}") if flops else None


def flat_metrics(benchmarks: dict) -> dict[str, float]:
    """{"benchmark/metric": value} of every top-level percentage a run's `results.json` benchmarks hold."""
    return {f"{bench}/{key}": float(value) for bench, metrics in benchmarks.items() for key, value in metrics.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in COUNTS}


def run_cell(study: str, cell: str, seed: int, out: Path, extra: list[str]) -> dict:
    """Train and evaluate one cell (unless its result file exists) and return its result."""
    path = result_path(out, cell, seed)
    if path.is_file():
        return read_json(path)
    if cell not in cells_of(study):
        raise SystemExit(f"error: no cell {cell!r} in conf/experiment/{study}/ (cells: {', '.join(cells_of(study))})")
    check_components(out)
    overrides = train_overrides(study, cell, seed, out, extra)
    cfg = compose_train(overrides)
    from core.run import run_dir_of

    run_dir = run_dir_of(cfg).resolve()
    print(f"$ python train.py {' '.join(overrides)}", flush=True)
    start = time.time()
    done = subprocess.run([sys.executable, str(ROOT / "train.py"), *overrides], check=False, cwd=ROOT,
                          env={**os.environ, **ONE_THREAD})
    wall = time.time() - start
    if done.returncode != 0:
        raise SystemExit(f"error: cell {cell} seed {seed}: train.py exited with status {done.returncode} (run {run_dir})")
    results = read_json(run_dir / "results.json", default={})
    benchmarks = {b: results.get("benchmarks", {}).get(b) for b in cfg.eval.benchmarks}
    if not benchmarks or any(m is None for m in benchmarks.values()):
        raise SystemExit(f"error: cell {cell} seed {seed}: {run_dir}/results.json lacks the evaluations of "
                         f"{[b for b, m in benchmarks.items() if m is None] or 'eval.benchmarks (empty)'}")
    items, main = item_scores(cfg, run_dir, benchmarks)
    result = {"cell": cell, "seed": seed, "metrics": flat_metrics(benchmarks), "main_metric": main,
              "train_flops": train_flops(results), "components": components(cfg), "machine": machine(),
              "wall_time_s": round(wall, 1),
              "run_dir": str(run_dir.relative_to(ROOT) if run_dir.is_relative_to(ROOT) else run_dir), "overrides": extra, "items": items}
    write_json(path, result)
    return result


def item_scores(cfg, run_dir: Path, benchmarks: dict) -> tuple[dict, dict]:
    """({benchmark: per-item scores}, {benchmark: main metric}), each scored by the scorer's `*_items` function,
    whose metrics must be the ones the run reported."""
    from core.after_training import compose_eval, eval_settings
    from core.report import main_metric
    from eval.intervals import benchmark_item_scores

    names, overrides = eval_settings(cfg)
    items, main = {}, {}
    for name in names:
        ecfg = compose_eval(overrides[name])
        if cfg.get("cache_dir"):
            ecfg.cache_dir = str(cfg.cache_dir)
        metrics, items[name] = benchmark_item_scores(ecfg.benchmark, run_dir, limit=cfg.eval.get("limit"))
        main[name] = main_metric(name)
        if metrics.get(main[name]) != benchmarks[name].get(main[name]):
            raise SystemExit(f"error: {name}: the per-item scoring gives {main[name]}={metrics.get(main[name])}, "
                             f"the run reported {benchmarks[name].get(main[name])} ({run_dir}/results.json)")
    return items, main


def write_results_csv(out: Path, results: list[dict]) -> Path:
    """`results.csv`: one row per cell, seed and benchmark metric (columns cell,seed,benchmark,metric,value)."""
    path = out / "results.csv"
    with atomic_file(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["cell", "seed", "benchmark", "metric", "value"])
        for r in sorted(results, key=lambda r: (r["cell"] != "base", r["cell"], r["seed"])):
            for key, value in sorted(r["metrics"].items()):
                bench, metric = key.split("/", 1)
                writer.writerow([r["cell"], r["seed"], bench, metric, value])
    return path


def finished(out: Path, cells: list[str], seeds: list[int]) -> list[dict]:
    return [read_json(p) for c in cells for s in seeds if (p := result_path(out, c, s)).is_file()]


def run_study(args, out: Path) -> int:
    """Every cell x seed not yet finished, `--jobs` at a time (each a `--cell` subprocess logging to OUT/logs/)."""
    cells = args.cells or cells_of(args.study)
    todo = [(c, s) for c in cells for s in args.seeds if not result_path(out, c, s).is_file()]
    if todo:
        check_components(out)  # once here for one clear error; each `--cell` run checks again
    (out / "logs").mkdir(parents=True, exist_ok=True)
    print(f"{len(cells) * len(args.seeds) - len(todo)} cell runs finished, {len(todo)} to run, {args.jobs} at a time",
          flush=True)

    def one(job: tuple[str, int]) -> int:
        cell, seed = job
        log = out / "logs" / f"{cell}-seed{seed}.log"
        command = [sys.executable, str(Path(__file__).resolve()), args.study, "--cell", cell, "--seed", str(seed),
                   "--out", str(out), "--", *args.overrides]
        with open(log, "w") as f:
            code = subprocess.run(command, check=False, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                  env={**os.environ, **ONE_THREAD}).returncode
        print(f"{cell} seed {seed}: {'done' if code == 0 else f'FAILED (status {code}), see {log}'}", flush=True)
        return code

    start = time.time()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        codes = list(pool.map(one, todo))
    wall = time.time() - start
    print(f"study wall time {wall:.0f} s", flush=True)
    write_json(out / "last_run.json", {"wall_time_s": round(wall, 1), "jobs": args.jobs, "seeds": args.seeds,
                                        "ran": [f"{c}-seed{s}" for c, s in todo],
                                        "failed": [f"{c}-seed{s}" for (c, s), code in zip(todo, codes) if code],
                                        "overrides": args.overrides})
    from eval.study_report import write_summary

    results = finished(out, cells, args.seeds)
    write_results_csv(out, results)
    write_summary(out, results)
    return 1 if any(codes) else 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", choices=STUDIES)
    parser.add_argument("--list", action="store_true", help="print the cell names, one a line")
    parser.add_argument("--cell", help="train and evaluate this cell only")
    parser.add_argument("--cells", nargs="+", help="the whole-study run restricted to these cells")
    parser.add_argument("--seed", type=int, default=0, help="the seed of --cell (default 0)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the whole study (0 1 2)")
    parser.add_argument("--jobs", type=int, default=2, help="cells trained at the same time (default 2)")
    parser.add_argument("--report", action="store_true", help="write the summary, tables and plots")
    parser.add_argument("--out", type=Path, help="results folder (default reproduction/<study>/)")
    parser.add_argument("--figures", type=Path, help="plots folder of --report (default docs/figures/<study>/)")
    args = parser.parse_args(argv)
    args.overrides = extra
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    out = (args.out or ROOT / "reproduction" / args.study).resolve()
    if args.list:
        print("\n".join(cells_of(args.study)))
        return 0
    if args.report:
        from eval.study_report import write_report

        results = finished(out, args.cells or cells_of(args.study), args.seeds)
        write_results_csv(out, results)
        write_report(out, results, args.figures or ROOT / "docs" / "figures" / args.study)
        return 0
    if args.cell:
        result = run_cell(args.study, args.cell, args.seed, out, args.overrides)
        print(json.dumps(result["metrics"]))
        return 0
    return run_study(args, out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
