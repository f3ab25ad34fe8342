"""The study machinery (scripts/reproduce.py, issue 13): the cells compose with train.py and name the contract's
components; one cell runs end to end through `train.py` (the tiny flavours and Sort-of-CLEVR stand in for the
mini components through the `--` overrides), writes its result file, results.csv and the last-line JSON, is not
retrained when asked again and reproduces its numbers when retrained with the same seed; the two-level bootstrap
against hand computations and scipy; each study scorer's per-item scores give back the scorer's own metrics."""

from __future__ import annotations

import copy
import csv
import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.stats
from omegaconf import OmegaConf

import vlm
from core.run import evaluate
from eval.intervals import benchmark_item_scores, bootstrap_interval, paired_difference
from scripts import reproduce
from tests.conftest import CONF, ROOT, compose_cfg
from tests.eval.benchmarks import EVAL_CONFIGS
from tests.eval.fixtures import FIXTURES, Oracle

BENCHMARKS = ["mini_vqav2", "mini_gqa", "mini_tallyqa", "mini_vsr", "mini_pope", "mini_refcoco", "mini_textvqa"]
# cell: (encoder, backbone, stage, image strategy, finetune epochs) -- the brief's table, written out by hand
CELLS = {
    "base": ("mini_clip", "mini_llama", "mini_two_stage", "letterbox", 1),
    "single_stage": ("mini_clip", "mini_llama", "mini_single_stage", "letterbox", 1),
    "finetune_encoder": ("mini_clip", "mini_llama", "mini_full_finetune", "letterbox", 1),
    "enc_siglip": ("mini_siglip", "mini_llama", "mini_two_stage", "letterbox", 1),
    "enc_supervised": ("mini_supervised", "mini_llama", "mini_two_stage", "letterbox", 1),
    "enc_mae": ("mini_mae", "mini_llama", "mini_two_stage", "letterbox", 1),
    "enc_fused": ("mini_mae_siglip", "mini_llama", "mini_two_stage", "letterbox", 1),
    "resize_naive": ("mini_clip", "mini_llama", "mini_two_stage", "resize-naive", 1),
    "resize_crop": ("mini_clip", "mini_llama", "mini_two_stage", "resize-crop", 1),
    "instruct_lm": ("mini_clip", "mini_llama_instruct", "mini_two_stage", "letterbox", 1),
    "epochs_2": ("mini_clip", "mini_llama", "mini_two_stage", "letterbox", 2),
    "res_96": ("mini_clip_96", "mini_llama", "mini_two_stage", "letterbox", 1),
}
# The smallest settings: the real cell with its mini components in smoke mode (REFRACT_TINY_SMOKE, tests/conftest.py:
# a few pretraining steps on a small world), a 40-scene world, 2 steps, and 8 questions of one benchmark analog.
SMALL_WORLD = ["n_train=40", "n_test=12", "n_per_benchmark=8"]
HOOK = [*(f"data.generator.{k}" for k in SMALL_WORLD), "eval.benchmarks=[mini_vqav2]", "eval.limit=8",
        "eval.overrides={mini_vqav2:[" + ",".join(f"'benchmark.generator.{k}'" for k in SMALL_WORLD) + "]}",
        "trainer.max_steps=2", "logger=csv", "stage.phases.align.global_batch_size=4",
        "stage.phases.finetune.global_batch_size=4"]


def test_list_prints_the_cells(capsys):
    assert reproduce.main(["prismatic_mini", "--list"]) == 0
    lines = capsys.readouterr().out.split()
    assert lines[0] == "base" and sorted(lines) == sorted(CELLS)


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_every_cell_composes_and_names_the_contract_components(cell):
    encoder, backbone, stage, strategy, epochs = CELLS[cell]
    defaults = OmegaConf.to_container(OmegaConf.load(CONF / "experiment" / "prismatic_mini" / f"{cell}.yaml").defaults)
    assert "prismatic_mini/_base" in defaults
    assert {"override /encoder": encoder, "override /backbone": backbone, "override /stage": stage}.items() <= {
        k: v for d in defaults if isinstance(d, dict) for k, v in d.items()}.items()
    shared = OmegaConf.to_container(OmegaConf.load(CONF / "experiment" / "prismatic_mini" / "_base.yaml").defaults)
    assert {"override /data": "mini_world"} in shared

    cfg = compose_cfg(f"experiment=prismatic_mini/{cell}")
    assert list(cfg.eval.benchmarks) == BENCHMARKS and cfg.trainer.threads == 1
    assert cfg.stage.name == stage and cfg.encoder.image_strategy == strategy and cfg.projector.name == "mlp"
    phases = list(cfg.stage.phases.values())
    last = "full_finetune" if cell == "finetune_encoder" else "finetune"
    assert [p.name for p in phases] == (["finetune"] if cell == "single_stage" else ["align", last])
    assert phases[-1].epochs == epochs and all(p.global_batch_size == 32 for p in phases)
    assert all(p.trainable == ["projector"] for p in phases if p.name == "align")  # the LM frozen while it aligns
    assert cfg.data.max_turns == 1 and cfg.data.group_by_length
    assert ("encoder" in phases[-1].trainable) == (cell == "finetune_encoder")
    assert (cfg.encoder.name, cfg.backbone.name, cfg.data.name) == (encoder, backbone, "mini_world")


def reproduce_cell(out, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/reproduce.py", "prismatic_mini", "--cell", "base", "--seed", "0",
                           "--out", str(out), *extra, "--", *HOOK], check=False, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def one_cell(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    done = reproduce_cell(out)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out, done.stdout


def test_one_cell_end_to_end(one_cell):
    out, stdout = one_cell
    last = json.loads(stdout.strip().splitlines()[-1])
    result = json.loads((out / "cells" / "base-seed0.json").read_text())
    assert last == result["metrics"] and "mini_vqav2/accuracy" in last and "mini_vqav2/n" not in last
    run_dir = ROOT / result["run_dir"]  # the run under OUT/runs (absolute outside the repository)
    reported = json.loads((run_dir / "results.json").read_text())["benchmarks"]["mini_vqav2"]
    assert last["mini_vqav2/accuracy"] == reported["accuracy"]
    items = result["items"]["mini_vqav2"]
    assert len(items) == 8 and round(100 * sum(items.values()) / 8, 2) == reported["accuracy"]
    assert result["main_metric"] == {"mini_vqav2": "accuracy"} and result["seed"] == 0
    assert result["train_flops"] > 1e6 and result["wall_time_s"] > 0 and result["overrides"] == HOOK
    import torch

    assert result["machine"]["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert result["machine"]["cpu"] and result["machine"]["torch"] == torch.__version__


def test_a_finished_cell_is_not_retrained_and_the_study_writes_results_csv(one_cell, monkeypatch, capsys):
    out, stdout = one_cell
    result_file = out / "cells" / "base-seed0.json"
    before = result_file.stat().st_mtime_ns

    def no_training(*args, **kwargs):
        raise AssertionError(f"a finished cell was run again: {args}")

    monkeypatch.setattr(subprocess, "run", no_training)
    assert reproduce.main(["prismatic_mini", "--cell", "base", "--out", str(out), "--", *HOOK]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == stdout.strip().splitlines()[-1]
    assert reproduce.main(["prismatic_mini", "--cells", "base", "--seeds", "0", "--out", str(out), "--", *HOOK]) == 0
    assert "0 to run" in capsys.readouterr().out and result_file.stat().st_mtime_ns == before
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.reader(f))
    metrics = json.loads(result_file.read_text())["metrics"]
    assert rows[0] == ["cell", "seed", "benchmark", "metric", "value"]
    assert {(r[2], r[3]): float(r[4]) for r in rows[1:]} == {tuple(k.split("/")): v for k, v in metrics.items()}
    assert all(r[:2] == ["base", "0"] for r in rows[1:])
    with open(out / "summary.csv", newline="") as f:
        summary = list(csv.DictReader(f))
    assert [(s["cell"], s["benchmark"], float(s["mean"])) for s in summary] == [
        ("base", "mini_vqav2", metrics["mini_vqav2/accuracy"])]


def test_finished_cells_trained_on_other_component_weights_are_refused(one_cell, tmp_path, capsys):
    from vlm.tiny import fingerprint

    out, _ = one_cell
    result = json.loads((out / "cells" / "base-seed0.json").read_text())
    assert result["components"] == {"mini_clip": fingerprint("mini_clip"), "mini_llama_base": fingerprint("mini_llama_base")}
    (tmp_path / "cells").mkdir()
    cell_file = tmp_path / "cells" / "base-seed0.json"
    cell_file.write_text(json.dumps({**result, "components": {**result["components"], "mini_clip": "0" * 16},
                                     "machine": {**result["machine"], "cpu": "Some CPU", "torch_cpu_capability": "AVX2"}}))
    for args in (["--cells", "base", "--seeds", "0", "1"], ["--cell", "base", "--seed", "1"]):  # seed 1 would train
        with pytest.raises(SystemExit, match=r"other component weights than the cache holds: base-seed0 \(mini_clip 0{16}, "
                           r"the cache's \w+, trained on Some CPU \(AVX2\)\)"):
            reproduce.main(["prismatic_mini", *args, "--out", str(tmp_path), "--", *HOOK])
    assert not (tmp_path / "cells" / "base-seed1.json").exists()
    assert reproduce.main(["prismatic_mini", "--cell", "base", "--seed", "0", "--out", str(tmp_path)]) == 0  # shown, not mixed
    cell_file.write_text(json.dumps({k: v for k, v in result.items() if k != "components"}))  # recorded before them
    reproduce.check_components(tmp_path)
    assert "1 finished cell runs carry no component fingerprints" in capsys.readouterr().out


def test_retraining_a_cell_with_the_same_seed_reproduces_it(one_cell, tmp_path):
    out, _ = one_cell
    assert reproduce.main(["prismatic_mini", "--cell", "base", "--seed", "0", "--out", str(tmp_path), "--", *HOOK]) == 0
    first, second = (json.loads((d / "cells" / "base-seed0.json").read_text()) for d in (out, tmp_path))
    assert first["metrics"] == second["metrics"] and first["items"] == second["items"]
    runs = [ROOT / r["run_dir"] for r in (first, second)]
    answers = [json.loads((r / "predictions" / "mini_vqav2.json").read_text()) for r in runs]
    losses = [json.loads((r / "results.json").read_text())["train"]["finetune/train_loss"] for r in runs]
    assert answers[0] == answers[1] and losses[0] == losses[1]


# ----------------------------------------------------------------------------------------- bootstrap
def test_identical_items_give_a_zero_width_interval():
    seeds = [{str(i): 1.0 for i in range(20)}] * 3
    assert bootstrap_interval(seeds, replicates=500) == (100.0, 100.0, 100.0)
    varied = [{str(i): float(i % 2) for i in range(20)}] * 3
    assert paired_difference(varied, varied, replicates=500) == (0.0, 0.0, 0.0)


def test_bootstrap_hand_cases():
    # one seed, items 0 and 1: a replicate's mean is 0, 50 or 100 with probability 1/4, 1/2, 1/4
    assert bootstrap_interval([{"a": 0.0, "b": 1.0}], replicates=4000) == (50.0, 0.0, 100.0)
    # two seeds scoring 0 and 100 on every item: the seed level alone gives 0, 50, 100 with 1/4, 1/2, 1/4
    point, low, high = bootstrap_interval([{"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 1.0}], replicates=4000)
    assert (point, low, high) == (50.0, 0.0, 100.0)
    # a cell one item better than base on every seed: the paired difference never drops below zero
    base = [{str(i): float(i < 5) for i in range(10)}] * 3
    better = [{str(i): float(i < 6) for i in range(10)}] * 3
    diff, low, high = paired_difference(better, base, replicates=2000)
    assert diff == pytest.approx(10.0) and 0.0 <= low < 10.0 < high <= 40.0


def test_one_seed_matches_scipy_percentile_bootstrap():
    scores = (np.random.default_rng(1).random(80) < 0.7).astype(float)
    point, low, high = bootstrap_interval([{str(i): s for i, s in enumerate(scores)}], replicates=20000)
    ref = scipy.stats.bootstrap((100 * scores,), np.mean, method="percentile", n_resamples=20000, random_state=0)
    assert point == pytest.approx(100 * scores.mean())
    assert low == pytest.approx(ref.confidence_interval.low, abs=1.3)
    assert high == pytest.approx(ref.confidence_interval.high, abs=1.3)


def test_pope_f1_is_recomputed_from_the_yes_no_answers():
    # per split: 5 tp, 5 fp, 5 fn, 5 tn -> precision = recall = 0.5 -> F1 50; accuracy 50; yes ratio 50
    outcomes = [("yes", "yes"), ("yes", "no"), ("no", "yes"), ("no", "no")] * 5
    seed = {f"{s}/{q}": {"split": s, "pred": p, "label": lab} for s in ("random", "popular")
            for q, (p, lab) in enumerate(outcomes)}
    assert bootstrap_interval([seed], "f1", replicates=200)[0] == pytest.approx(50.0)
    # a second split where every answer is right: F1 100 there, the metric is the mean over splits
    seed.update({f"adversarial/{q}": {"split": "adversarial", "pred": lab, "label": lab}
                 for q, (_, lab) in enumerate(outcomes)})
    assert bootstrap_interval([seed], "f1", replicates=200)[0] == pytest.approx(200 / 3)


def test_seeds_with_different_items_are_refused():
    with pytest.raises(ValueError, match="same benchmark items"):
        bootstrap_interval([{"a": 1.0, "b": 0.0}, {"a": 1.0, "c": 0.0}])


# ----------------------------------------------------------------------------------------- per-item scores
def wrong(answer: str) -> str:
    """Another answer than `answer`, so that the oracle misses one item."""
    return {"yes": "no", "no": "yes"}.get(answer, str(int(answer) + 1) if answer.isdigit() else "zebra")


@pytest.mark.parametrize("config", ["vqav2", "textvqa", "gqa", "tallyqa", "vsr", "pope", "refcoco"])
def test_item_scores_give_back_the_scorers_metrics(config, tmp_path, monkeypatch):
    build, total, _ = FIXTURES[config]
    answers = build(tmp_path / "bench")
    first = next(iter(answers))
    if config != "refcoco":  # the refcoco fixture already misses one of its two items
        answers[first] = wrong(answers[first])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("{}\n")
    monkeypatch.setattr(vlm, "load", lambda *a, **k: Oracle(answers))
    cfg = copy.deepcopy(EVAL_CONFIGS[config])
    cfg.run, cfg.benchmark.root = str(run_dir), str(tmp_path / "bench")
    metrics = evaluate(cfg)
    again, items = benchmark_item_scores(cfg.benchmark, run_dir)
    assert again == metrics and len(items) == total
    if config == "pope":
        assert 0 < metrics["f1"] < 100
        assert round(bootstrap_interval([items], "f1", replicates=1)[0], 2) == metrics["f1"]
        assert round(bootstrap_interval([items], "accuracy", replicates=1)[0], 2) == metrics["accuracy"]
    else:
        assert 0 < metrics["accuracy"] < 100
        assert round(100 * sum(items.values()) / total, 2) == metrics["accuracy"]


def test_report_writes_the_axis_tables_and_plots(one_cell, tmp_path):
    out, _ = one_cell
    study = tmp_path / "study"
    (study / "cells").mkdir(parents=True)
    base = json.loads((out / "cells" / "base-seed0.json").read_text())
    for cell in ("base", "resize_crop"):  # a variant that answers exactly as base: a zero difference
        (study / "cells" / f"{cell}-seed0.json").write_text(json.dumps({**base, "cell": cell}))
    (study / "prior.json").write_text(json.dumps({"mini_vqav2/accuracy": 12.5}))
    assert reproduce.main(["prismatic_mini", "--report", "--seeds", "0", "--out", str(study),
                           "--figures", str(tmp_path / "figures")]) == 0
    tables = (study / "tables.md").read_text()
    assert "## Image preprocessing" in tables and "## Training duration" not in tables  # axes with a variant only
    assert "| resize-crop − base | +0.0 [+0.0, +0.0] |" in tables and "| blind prior | 12.5 |" in tables
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == ["preprocessing.png"]
    found = (study / "findings.md").read_text()  # the one finding whose two cells ran, identical: inconclusive
    assert "| Resize-and-crop hurts (against letterbox) | `resize_crop` − `base` | 1 | +0.0 [+0.0, +0.0]" in found
    assert "Two epochs" not in found and "**inconclusive**" in found
    assert (study / "results.csv").read_text().count("\nresize_crop,0,mini_vqav2,") == len(base["metrics"])
