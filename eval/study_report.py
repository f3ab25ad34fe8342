"""A design-space study's summary, tables and plots, from its cells' result files (scripts/reproduce.py writes and calls this).

- `summarise(results)`: per cell x benchmark, the benchmark's main metric (core/report.py: the benchmark
  config's `main_metric`) averaged over the seeds with its two-level bootstrap 95% interval, the paired
  difference from the `base` cell (same seeds, same items) with its interval, and the mean training FLOPs;
- `write_summary(out, results)`: `summary.csv` and `summary.md` under `out`;
- `write_report(out, results, figures)`: the summary, `tables.md` (one table per axis of the study: each
  cell's mean [interval] per benchmark, the difference from base, the blind prior where
  `out/prior.json` gives it) and one PNG per axis under `figures` (bars with the intervals as error bars,
  the prior as a black mark), which docs/reproduction.md shows, and `findings.md` / `findings.json`: each of
  Prismatic's findings with its paired intervals and verdict, and the calibration (eval/study_findings.py).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from data.atomic import atomic_file, read_json
from eval.intervals import bootstrap_interval, paired_difference
from eval.study_findings import calibration, findings, findings_markdown

REPLICATES = 2000
# Prismatic's axes, each a list of (cell, label): the base cell's label says its value on that axis.
AXES = {
    "recipe": ("Optimisation procedure", [("base", "two-stage (align first)"), ("single_stage", "single-stage")]),
    "encoder_training": ("Frozen vs finetuned encoder", [("base", "frozen"), ("finetune_encoder", "finetuned")]),
    "encoder_objective": ("Visual representation", [("base", "CLIP"), ("enc_siglip", "SigLIP"),
                                                      ("enc_supervised", "supervised"), ("enc_mae", "MAE"),
                                                      ("enc_fused", "MAE + SigLIP")]),
    "preprocessing": ("Image preprocessing", [("base", "letterbox"), ("resize_naive", "resize-naive"),
                                              ("resize_crop", "resize-crop")]),
    "language_model": ("Base vs instruct LM", [("base", "base LM"), ("instruct_lm", "instruct LM")]),
    "duration": ("Training duration", [("base", "1 epoch"), ("epochs_2", "2 epochs")]),
    "resolution": ("Image resolution", [("base", "64 px"), ("res_96", "96 px")]),
}


def _by_cell(results: list[dict]) -> dict[str, dict[int, dict]]:
    cells: dict[str, dict[int, dict]] = {}
    for r in results:
        cells.setdefault(r["cell"], {})[int(r["seed"])] = r
    return cells


def summarise(results: list[dict], replicates: int = REPLICATES) -> list[dict]:
    """One row per cell x benchmark: cell, benchmark, metric, mean, low, high, seeds, diff, diff_low, diff_high,
    train_flops (diff* empty for the base cell or without a base cell on the same seeds)."""
    cells = _by_cell(results)
    base = cells.get("base", {})
    rows = []
    for cell in sorted(cells, key=lambda c: (c != "base", c)):
        runs = cells[cell]
        seeds = sorted(runs)
        flops = [runs[s].get("train_flops") for s in seeds]
        for bench, metric in sorted(runs[seeds[0]]["main_metric"].items()):
            mean, low, high = bootstrap_interval([runs[s]["items"][bench] for s in seeds], metric, replicates)
            row = {"cell": cell, "benchmark": bench, "metric": metric, "mean": mean, "low": low, "high": high,
                   "seeds": " ".join(map(str, seeds)), "diff": None, "diff_low": None, "diff_high": None,
                   "train_flops": sum(flops) / len(flops) if None not in flops else None}
            paired = [s for s in seeds if s in base and bench in base[s]["items"]]
            if cell != "base" and paired:
                row["diff"], row["diff_low"], row["diff_high"] = paired_difference(
                    [runs[s]["items"][bench] for s in paired], [base[s]["items"][bench] for s in paired], metric, replicates)
            rows.append(row)
    return rows


def _fmt(value: float | None, low: float | None = None, high: float | None = None, sign: bool = False) -> str:
    if value is None:
        return ""
    text = f"{value:+.1f}" if sign else f"{value:.1f}"
    return text if low is None else f"{text} [{low:{'+' if sign else ''}.1f}, {high:{'+' if sign else ''}.1f}]"


def _write(path: Path, text: str) -> None:
    with atomic_file(path) as tmp:
        tmp.write_text(text)


def write_summary(out: Path, results: list[dict], rows: list[dict] | None = None) -> list[dict]:
    """`summary.csv` and `summary.md` under `out`; returns the rows."""
    rows = summarise(results) if rows is None else rows
    with atomic_file(out / "summary.csv") as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["cell", "benchmark", "metric", "mean", "low", "high", "seeds", "diff",
                                               "diff_low", "diff_high", "train_flops"])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.4g}" if k == "train_flops" and v is not None else
                                 round(v, 3) if isinstance(v, float) else v) for k, v in row.items()})
    benches = sorted({r["benchmark"] for r in rows})
    table = {(r["cell"], r["benchmark"]): r for r in rows}
    lines = ["# Study summary: main metric per benchmark, mean over seeds [95% two-level bootstrap interval]", "",
             "| cell | " + " | ".join(f"{b} ({next(r['metric'] for r in rows if r['benchmark'] == b)})" for b in benches)
             + " | train FLOPs |", "|---|" + "---:|" * (len(benches) + 1)]
    for cell in dict.fromkeys(r["cell"] for r in rows):
        flops = next(r["train_flops"] for r in rows if r["cell"] == cell)
        lines.append(f"| {cell} | " + " | ".join(_fmt(*(table[cell, b][k] for k in ("mean", "low", "high")))
                                                 if (cell, b) in table else "" for b in benches)
                     + f" | {'' if flops is None else f'{flops:.3g}'} |")
    _write(out / "summary.md", "\n".join(lines) + "\n")
    return rows


def prior_of(out: Path) -> dict[str, float]:
    """The blind prior (`{"benchmark/metric": value}`, scripts/blind_prior.py) from `out/prior.json`, if present."""
    return read_json(out / "prior.json", default={})


def write_report(out: Path, results: list[dict], figures: Path) -> None:
    """The summary, `tables.md` (one section per axis), one plot per axis under `figures`, and the findings."""
    rows = write_summary(out, results)
    prior = prior_of(out)
    table = {(r["cell"], r["benchmark"]): r for r in rows}
    benches = sorted({r["benchmark"] for r in rows})
    metric = {r["benchmark"]: r["metric"] for r in rows}
    figures.mkdir(parents=True, exist_ok=True)
    text = [("# Study tables: per axis, each cell's main metric (mean over seeds [95% interval]) and its paired "
             "difference from the base cell [95% interval]"), ""]
    for key, (title, cells) in AXES.items():
        present = [(c, label) for c, label in cells if any((c, b) in table for b in benches)]
        if not any(c != "base" for c, _ in present):  # an axis none of whose variants has run yet
            continue
        text += [f"## {title}", "", "| cell | " + " | ".join(f"{b} ({metric[b]})" for b in benches) + " | train FLOPs |",
                 "|---|" + "---:|" * (len(benches) + 1)]
        for cell, label in present:
            flops = next((table[cell, b]["train_flops"] for b in benches if (cell, b) in table), None)
            text.append(f"| {label} (`{cell}`) | " + " | ".join(
                _fmt(*(table[cell, b][k] for k in ("mean", "low", "high"))) if (cell, b) in table else ""
                for b in benches) + f" | {'' if flops is None else f'{flops:.3g}'} |")
            if cell != "base":
                text.append(f"| {label} − base | " + " | ".join(
                    _fmt(*(table[cell, b][k] for k in ("diff", "diff_low", "diff_high")), sign=True)
                    if (cell, b) in table else "" for b in benches) + " | |")
        if prior:
            text.append("| blind prior | " + " | ".join(_fmt(prior.get(f"{b}/{metric[b]}")) for b in benches) + " | |")
        text += ["", f"![{title}]({os.path.relpath(figures / f'{key}.png', out)})", ""]
        axis_chart(title, present, benches, metric, table, prior, figures / f"{key}.png")
    _write(out / "tables.md", "\n".join(text))
    _write(out / "summary.json", json.dumps(rows, indent=1))
    found, calib = findings(_by_cell(results), rows, prior), calibration(rows, prior)
    _write(out / "findings.md", findings_markdown(found, calib))
    _write(out / "findings.json", json.dumps({"findings": found, "calibration": calib}, indent=1))


def axis_chart(title: str, cells: list[tuple[str, str]], benches: list[str], metric: dict, table: dict,
               prior: dict, path: Path) -> None:
    """Grouped bars: per benchmark, one bar per cell of the axis (mean, 95% interval as error bar), prior marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(benches) * max(1, len(cells)) ** 0.5 + 2), 4))
    width = 0.8 / max(1, len(cells))
    for j, (cell, label) in enumerate(cells):
        xs = [i + (j - (len(cells) - 1) / 2) * width for i in range(len(benches))]
        rows = [table.get((cell, b)) for b in benches]
        means = [r["mean"] if r else 0.0 for r in rows]
        err = [[r["mean"] - r["low"] if r else 0.0 for r in rows], [r["high"] - r["mean"] if r else 0.0 for r in rows]]
        ax.bar(xs, means, width, yerr=err, capsize=2, label=label)
    for i, b in enumerate(benches):
        if f"{b}/{metric[b]}" in prior:
            ax.hlines(prior[f"{b}/{metric[b]}"], i - 0.45, i + 0.45, colors="black", linewidth=2,
                      label="blind prior" if i == 0 else None)
    ax.set_xticks(range(len(benches)), [f"{b}\n({metric[b]})" for b in benches], fontsize="small")
    ax.set_ylabel("score (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
