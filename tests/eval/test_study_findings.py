"""eval/study_findings.py: the verdict rules on hand-made intervals, the benchmarks that decide, and findings
computed from synthetic cells whose differences are known by construction."""

from __future__ import annotations

import pytest

from eval.study_findings import (FINDINGS, MATCH_MARGIN, benchmark_verdict, calibration, findings, findings_markdown,
                                 learned_benchmarks, overall_verdict)


@pytest.mark.parametrize("direction, low, high, verdict", [
    ("higher", 0.5, 3.0, "agrees"), ("higher", -3.0, -0.5, "disagrees"), ("higher", -1.0, 2.0, "inconclusive"),
    ("lower", -3.0, -0.5, "agrees"), ("lower", 0.5, 3.0, "disagrees"), ("lower", -1.0, 2.0, "inconclusive"),
    ("at_least", -MATCH_MARGIN + 0.1, 5.0, "agrees"), ("at_least", 1.0, 5.0, "agrees"),
    ("at_least", -5.0, -0.1, "disagrees"), ("at_least", -MATCH_MARGIN - 1, 1.0, "inconclusive"),
])
def test_benchmark_verdict(direction, low, high, verdict):
    assert benchmark_verdict(direction, low, high) == verdict


def test_unknown_direction_is_refused():
    with pytest.raises(ValueError, match="higher, lower or at_least"):
        benchmark_verdict("better", 0.0, 1.0)


def test_overall_verdict():
    assert overall_verdict(["agrees", "inconclusive"]) == "agrees"
    assert overall_verdict(["disagrees", "inconclusive"]) == "disagrees"
    assert overall_verdict(["agrees", "disagrees"]) == "mixed"
    assert overall_verdict(["inconclusive"]) == overall_verdict([]) == "inconclusive"


def row(cell, bench, mean, low, metric="accuracy"):
    return {"cell": cell, "benchmark": bench, "metric": metric, "mean": mean, "low": low}


def test_learned_benchmarks_need_the_base_interval_above_the_prior_and_yes_no_above_50():
    rows = [row("base", "mini_vqav2", 50, 45), row("base", "mini_gqa", 42, 39), row("base", "mini_vsr", 50, 47),
            row("base", "mini_pope", 60, 52, "f1"), row("enc_mae", "mini_gqa", 60, 55)]
    prior = {"mini_vqav2/accuracy": 41.3, "mini_gqa/accuracy": 40.7, "mini_vsr/accuracy": 46.3, "mini_pope/f1": 47.2}
    assert learned_benchmarks(rows, prior) == ["mini_pope", "mini_vqav2"]


def items(n_right: int, n: int = 40) -> dict[str, float]:
    return {str(i): float(i < n_right) for i in range(n)}


def test_findings_from_cells_with_known_differences():
    # base answers 20 of 40 on vqav2 and 10 of 40 on gqa (its prior is 30: not learned); supervised answers 30
    # on vqav2 on every seed (a clear gain: CLIP vs supervised *disagrees*); MAE as base (inconclusive)
    def cell(vqa, gqa):
        return {s: {"items": {"mini_vqav2": items(vqa), "mini_gqa": items(gqa)}} for s in (0, 1)}
    cells = {"base": cell(20, 10), "enc_supervised": cell(30, 10), "enc_mae": cell(20, 0)}
    rows = [row("base", "mini_vqav2", 50, 40), row("base", "mini_gqa", 25, 20),
            row("enc_supervised", "mini_vqav2", 75, 60), row("enc_mae", "mini_gqa", 0, 0)]
    prior = {"mini_vqav2/accuracy": 30.0, "mini_gqa/accuracy": 30.0}
    found = {f["cell"] + "-" + f["reference"]: f for f in findings(cells, rows, prior, replicates=500)}
    assert set(found) == {"enc_supervised-base", "enc_mae-base"}  # the other findings' cells have not run
    sup = found["enc_supervised-base"]
    assert sup["benchmarks"]["mini_vqav2"]["diff"] == pytest.approx(25.0)
    assert sup["benchmarks"]["mini_vqav2"]["verdict"] == "disagrees" and sup["verdict"] == "disagrees"
    mae = found["enc_mae-base"]
    # MAE is worse on gqa (-25 points), but gqa is not learned by base, so it decides nothing
    assert mae["benchmarks"]["mini_gqa"]["diff"] == pytest.approx(-25.0) and mae["decided_by"] == ["mini_vqav2"]
    assert mae["verdict"] == "inconclusive"
    text = findings_markdown(list(found.values()), calibration(rows, prior))
    assert "+25.0 [" in text and "**disagrees**" in text
    assert "| mini_gqa (accuracy) | 30.0 | `enc_mae` 0.0 | `base` 25.0 | yes | no |" in text


def test_every_finding_names_cells_of_the_study():
    from scripts.reproduce import cells_of

    study = set(cells_of("prismatic_mini"))
    assert {c for _, cell, ref, _ in FINDINGS for c in (cell, ref)} <= study
