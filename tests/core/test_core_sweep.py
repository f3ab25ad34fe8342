"""The sweep summary (core/sweep.py) on hand-made run directories, and the checks of the `eval` block
(core/after_training.py) that stop a run before it trains."""

import json

import pytest
from omegaconf import OmegaConf

from core.after_training import check_eval_settings, eval_settings
from core.sweep import write_summary
from tests.conftest import composed


def make_run(root, name, train, benchmarks=None, losses=()):
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("{}\n")
    (d / "results.json").write_text(json.dumps({"train": train, **({"benchmarks": benchmarks} if benchmarks else {})}))
    if losses:
        (d / "metrics.csv").write_text("step,train/loss\n" + "".join(f"{s},{v}\n" for s, v in enumerate(losses)))
    return str(d)


def test_summary_table_hand_computed_with_a_failed_job(tmp_path):
    a = make_run(tmp_path, "a", {"align/train_loss": 3.0, "finetune/train_loss": 1.23456, "finetune/skipped": 2},
                 {"pope": {"accuracy": 80.0, "f1": 85.555}, "gqa": {"accuracy": 50.0}}, losses=(3.5, 2.0))
    b = make_run(tmp_path, "b", {"finetune/train_loss": 2.0}, losses=(3.0,))
    jobs = [{"overrides": ["logger=csv", "encoder=x"], "run_dir": a, "error": ""},
            {"overrides": ["logger=csv", "encoder=y"], "run_dir": b, "error": "DataError: bad record"},
            {"overrides": ["logger=csv", "encoder=z"], "run_dir": None, "error": "ValueError: no"}]
    text = write_summary(jobs, tmp_path / "sweep")
    assert (tmp_path / "sweep" / "summary.md").read_text() == text
    lines = text.splitlines()
    assert lines[2] == "Overrides common to every job: `logger=csv`"
    assert lines[4:9] == [
        "| job | align/train_loss | finetune/train_loss | gqa (accuracy) | pope (f1) | run | error |",
        "|---|---:|---:|---:|---:|---|---|",
        f"| #0 encoder=x | 3.0000 | 1.2346 | 50.00 | 85.56 | {a} |  |",
        f"| #1 encoder=y |  | 2.0000 |  |  | {b} | DataError: bad record |",
        "| #2 encoder=z |  |  |  |  |  | ValueError: no |",
    ]
    for png in ("summary.png", "summary_loss.png"):
        assert (tmp_path / "sweep" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_eval_settings_build_the_evaluate_overrides_in_order():
    cfg = OmegaConf.create({"task": {"name": "vlm"}, "eval": {"benchmarks": ["gqa", "pope"], "limit": 5,
                                                              "overrides": {"gqa": ["benchmark.root=/d"]}}})
    assert eval_settings(cfg) == (["gqa", "pope"], {"gqa": ["task=vlm", "benchmark=gqa", "limit=5", "benchmark.root=/d"],
                                                    "pope": ["task=vlm", "benchmark=pope", "limit=5"]})


@pytest.mark.parametrize("block, message", [
    ({"benchmarks": ["nonesuch"]}, r"nonesuch cannot be composed .*\(benchmarks: .*sort_of_clevr"),
    ({"benchmarks": ["vqav2"]}, r"vqav2 needs \['benchmark.root'\]; give them with 'eval.overrides=\{vqav2:\[\"benchmark.root=...\"\]\}'"),
    ({"benchmarks": [], "overrides": {"gqa": ["limit=3"]}}, r"eval.overrides has entries for \['gqa'\], which eval.benchmarks=\[\] does not list"),
])
def test_a_bad_eval_block_is_named_before_training(block, message):
    cfg = OmegaConf.merge(composed(), {"eval": block})
    with pytest.raises(ValueError, match=message):
        check_eval_settings(cfg)


def test_a_good_eval_block_passes():
    check_eval_settings(OmegaConf.merge(composed(), {"eval": {"benchmarks": ["sort_of_clevr", "vqav2"],
                                                              "overrides": {"vqav2": ["benchmark.root=/data"]}}}))


def test_a_single_run_has_no_sweep_to_record(tmp_path, monkeypatch, recwarn):
    from core.sweep import SweepSummary

    monkeypatch.chdir(tmp_path)
    single = OmegaConf.create({"hydra": {"job": {"num": "???"}, "sweep": {"dir": str(tmp_path / "sweep")}}})
    SweepSummary().on_job_end(single, job_return=None)  # a plain `python train.py` run: hydra.job.num is unset
    assert not (tmp_path / "sweep").exists() and not list(tmp_path.iterdir())
