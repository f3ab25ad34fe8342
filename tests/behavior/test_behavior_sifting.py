"""Smart sifting on the behavior task through `train`: nothing dropped equals sifting off, a fixed keep rate
backpropagates that fraction, and the run's files carry the contract's figures."""

import csv
import json
from pathlib import Path

import pytest

from core.run import train

STEPS = ["stage.phases.bc.max_steps=12", "stage.phases.bc.global_batch_size=16", "trainer.log_every_n_steps=1"]


def rows(run_dir) -> list[dict]:
    with open(Path(run_dir) / "metrics.csv") as f:
        return [r for r in csv.DictReader(f) if r.get("train/loss")]


def losses(run_dir) -> list[float]:
    return [float(r["train/loss"]) for r in rows(run_dir)]


@pytest.mark.parametrize("rule", [["sifting.keep=1.0"], ["sifting.beta=0.0"]], ids=["keep=1", "beta=0"])
def test_sifting_that_drops_nothing_trains_exactly_as_sifting_off(behavior_cfg, rule):
    """keep=1.0 skips the scoring forward; beta=0 runs it (every percentile**0 is 1) and must leave training as it was."""
    off = train(behavior_cfg(*STEPS, "run.name=off"))
    on = train(behavior_cfg(*STEPS, "run.name=on", "sifting.enabled=true", *rule))
    assert len(losses(off["run_dir"])) == 12
    assert losses(on["run_dir"]) == losses(off["run_dir"])  # bit for bit
    results = json.loads((Path(on["run_dir"]) / "results.json").read_text())
    assert results["sift/forwarded"] == results["sift/backpropagated"] == 12 * 16


@pytest.mark.parametrize("micro", [16, 8])
def test_fixed_keep_backpropagates_that_fraction_and_logs_it(behavior_cfg, micro):
    result = train(behavior_cfg(*STEPS, f"run.name=half{micro}", f"trainer.micro_batch_size={micro}",
                                "sifting.enabled=true", "sifting.keep=0.3", "sifting.warmup_steps=2"))
    run_dir = Path(result["run_dir"])
    results = json.loads((run_dir / "results.json").read_text())
    assert results["sift/backpropagated"] == 12 * 16  # every optimizer step saw the full global batch
    # 2 warm-up steps train on everything; the 10 sifted steps draw about 16 / 0.3 samples each
    sifted = results["sift/backpropagated"] - 2 * 16
    drawn = results["sift/forwarded"] - 2 * 16
    assert abs(sifted / drawn - 0.3) <= 0.02
    logged = rows(run_dir)
    assert [float(r["sift/kept_fraction"]) for r in logged[:2]] == [1.0, 1.0]
    assert all(float(r["sift/backpropagated"]) == 16 for r in logged)
    assert sum(float(r["sift/forwarded"]) for r in logged) == results["sift/forwarded"]
    assert results["train"]["bc/sift/forwarded"] == results["sift/forwarded"]


def test_probabilistic_rule_trains_and_resumes_its_totals(behavior_cfg):
    cfg = [*STEPS, "run.name=prob", "sifting.enabled=true", "sifting.beta=2.0", "sifting.history=64"]
    first = json.loads((Path(train(behavior_cfg(*cfg))["run_dir"]) / "results.json").read_text())
    assert 0.15 < first["sift/backpropagated"] / first["sift/forwarded"] < 0.7
    again = json.loads((Path(train(behavior_cfg(*cfg))["run_dir"]) / "results.json").read_text())
    assert again["sift/forwarded"] == first["sift/forwarded"]  # a finished run is not retrained


def test_mlp_baseline_sifts_too(behavior_cfg):
    result = train(behavior_cfg("policy=mlp_bc", "policy.hidden=32", *STEPS, "run.name=mlp", "sifting.enabled=true",
                                "sifting.keep=0.5"))
    results = json.loads((Path(result["run_dir"]) / "results.json").read_text())
    assert results["sift/forwarded"] == 2 * results["sift/backpropagated"]
