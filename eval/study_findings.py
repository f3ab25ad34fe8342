"""Prismatic's findings set beside a study's cells: a verdict per finding from paired intervals, and the calibration.

Each finding (FINDINGS) compares two cells of the study, `cell - reference`, with the direction Prismatic
(Karamcheti et al. 2024) reports: `higher` (the cell beats the reference), `lower` (it is worse), or
`at_least` (it matches or beats the reference). On each benchmark the paired difference (same seeds, same
items; eval/intervals.py) and its 95% interval give a verdict:

- `higher`: agrees if the interval lies above zero, disagrees if below, else inconclusive;
- `lower`: the mirror image;
- `at_least`: agrees if the interval's lower end is above -MATCH_MARGIN (no worse than that many points),
  disagrees if the whole interval is below zero, else inconclusive.

A finding's overall verdict reads the benchmarks the base cell learns, `learned_benchmarks`: those whose base
interval lies above the blind prior (out/prior.json) and, on a yes/no benchmark, above 50% (answering one
word to a balanced set scores 50). It agrees where some of them agree and none disagrees, disagrees in the
mirror case, is `mixed` where both occur, and inconclusive otherwise. Benchmarks no cell learns decide nothing.

`calibration` says per benchmark whether the study measured anything there (the issue's test): the best
cell's mean below saturation (SATURATION) and the weakest cell's mean above the prior.
"""

from __future__ import annotations

from eval.intervals import paired_difference

MATCH_MARGIN = 2.0  # points: about the base cell's seed-to-seed spread on VQAv2 (docs/reproduction.md)
SATURATION = 95.0
YES_NO = ("mini_vsr", "mini_pope")  # answered yes / no (VSR: true / false) on sets balanced between the two
# (Prismatic's finding, cell, reference, direction of cell - reference)
FINDINGS = [
    ("Single-stage training matches two-stage (LLaVA-1.5's) at less compute", "single_stage", "base", "at_least"),
    ("Finetuning the vision backbone hurts", "finetune_encoder", "base", "lower"),
    ("Contrastive encoders beat supervised ones: CLIP vs supervised", "enc_supervised", "base", "lower"),
    ("Contrastive encoders beat self-supervised ones: CLIP vs MAE", "enc_mae", "base", "lower"),
    ("Contrastive encoders beat supervised ones: SigLIP vs supervised", "enc_siglip", "enc_supervised", "higher"),
    ("Contrastive encoders beat self-supervised ones: SigLIP vs MAE", "enc_siglip", "enc_mae", "higher"),
    ("Fusing a self-supervised encoder (DINOv2) with SigLIP beats SigLIP alone", "enc_fused", "enc_siglip", "higher"),
    ("Naive resize matches or beats letterbox", "resize_naive", "base", "at_least"),
    ("Resize-and-crop hurts (against letterbox)", "resize_crop", "base", "lower"),
    ("Higher input resolution helps", "res_96", "base", "higher"),
    ("Base LMs match or beat instruct-tuned ones", "base", "instruct_lm", "at_least"),
    ("Two epochs beat one", "epochs_2", "base", "higher"),
]


def benchmark_verdict(direction: str, low: float, high: float) -> str:
    """agrees / disagrees / inconclusive for a paired difference interval [low, high] and a finding's direction."""
    if direction == "higher":
        return "agrees" if low > 0 else "disagrees" if high < 0 else "inconclusive"
    if direction == "lower":
        return "agrees" if high < 0 else "disagrees" if low > 0 else "inconclusive"
    if direction == "at_least":
        return "agrees" if low > -MATCH_MARGIN else "disagrees" if high < 0 else "inconclusive"
    raise ValueError(f"unknown direction {direction!r}: higher, lower or at_least")


def overall_verdict(verdicts: list[str]) -> str:
    agree, disagree = "agrees" in verdicts, "disagrees" in verdicts
    return "mixed" if agree and disagree else "agrees" if agree else "disagrees" if disagree else "inconclusive"


def learned_benchmarks(rows: list[dict], prior: dict[str, float]) -> list[str]:
    """Benchmarks whose base-cell interval (summary rows) lies above the prior and, for yes/no ones, above 50."""
    return sorted(r["benchmark"] for r in rows if r["cell"] == "base"
                  and f"{r['benchmark']}/{r['metric']}" in prior and r["low"] > prior[f"{r['benchmark']}/{r['metric']}"]
                  and (r["benchmark"] not in YES_NO or r["low"] > 50.0))


def findings(cells: dict[str, dict[int, dict]], rows: list[dict], prior: dict[str, float],
             replicates: int = 2000) -> list[dict]:
    """One entry per finding whose two cells have common seeds: per benchmark the difference, its interval and
    verdict, and the overall verdict over `learned_benchmarks`."""
    learned = learned_benchmarks(rows, prior)
    metric = {r["benchmark"]: r["metric"] for r in rows}
    out = []
    for claim, cell, reference, direction in FINDINGS:
        seeds = sorted(set(cells.get(cell, {})) & set(cells.get(reference, {})))
        if not seeds:
            continue
        per_bench = {}
        for bench in sorted(metric):
            a, b = ([cells[c][s]["items"][bench] for s in seeds] for c in (cell, reference))
            diff, low, high = paired_difference(a, b, metric[bench], replicates)
            per_bench[bench] = {"diff": diff, "low": low, "high": high,
                                "verdict": benchmark_verdict(direction, low, high)}
        out.append({"finding": claim, "cell": cell, "reference": reference, "direction": direction,
                    "seeds": seeds, "benchmarks": per_bench, "decided_by": learned,
                    "verdict": overall_verdict([per_bench[b]["verdict"] for b in learned if b in per_bench])})
    return out


def calibration(rows: list[dict], prior: dict[str, float]) -> list[dict]:
    """Per benchmark: the best and weakest cell (mean over seeds), the prior, and whether best < SATURATION and
    weakest > prior."""
    out = []
    for bench in sorted({r["benchmark"] for r in rows}):
        of = sorted((r for r in rows if r["benchmark"] == bench), key=lambda r: r["mean"])
        p = prior.get(f"{bench}/{of[0]['metric']}")
        out.append({"benchmark": bench, "metric": of[0]["metric"], "prior": p,
                    "weakest": (of[0]["cell"], of[0]["mean"]), "best": (of[-1]["cell"], of[-1]["mean"]),
                    "below_saturation": of[-1]["mean"] < SATURATION,
                    "weakest_above_prior": None if p is None else of[0]["mean"] > p})
    return out


def findings_markdown(found: list[dict], calib: list[dict]) -> str:
    """findings.md: the verdict table (difference [interval] and verdict per benchmark) and the calibration."""
    benches = sorted({b for f in found for b in f["benchmarks"]})
    decided = found[0]["decided_by"] if found else []
    lines = ["# Prismatic's findings beside the study's cells", "",
             "Paired difference `cell − reference` (mean over the common seeds, 95% two-level bootstrap interval) "
             f"and the verdict per benchmark (eval/study_findings.py; `at_least` agrees within {MATCH_MARGIN:g} "
             "points). The overall verdict reads the benchmarks the base cell learns: "
             + (", ".join(decided) or "none") + "; the others show the difference only.", "",
             "| Prismatic | cell − reference | seeds | " + " | ".join(benches) + " | verdict |",
             "|---|---|---|" + "---|" * len(benches) + "---|"]
    for f in found:
        shown = [(f["benchmarks"][b], b in decided) for b in benches]  # a verdict only where the benchmark decides
        cells = " | ".join(f"{v['diff']:+.1f} [{v['low']:+.1f}, {v['high']:+.1f}]" + (f" {v['verdict']}" if d else "")
                           for v, d in shown)
        lines.append(f"| {f['finding']} | `{f['cell']}` − `{f['reference']}` | {len(f['seeds'])} | {cells} "
                     f"| **{f['verdict']}** |")
    lines += ["", "## Calibration: did each benchmark measure anything?", "",
              f"| benchmark | prior | weakest cell | best cell | best < {SATURATION:g} | weakest > prior |",
              "|---|---:|---|---|---|---|"]
    for c in calib:
        prior = "" if c["prior"] is None else f"{c['prior']:.1f}"
        lines.append(f"| {c['benchmark']} ({c['metric']}) | {prior} | `{c['weakest'][0]}` {c['weakest'][1]:.1f} | "
                     f"`{c['best'][0]}` {c['best'][1]:.1f} | {'yes' if c['below_saturation'] else 'no'} | "
                     f"{'' if c['weakest_above_prior'] is None else 'yes' if c['weakest_above_prior'] else 'no'} |")
    return "\n".join(lines) + "\n"
