"""End-to-end runs on the tiny flavours: training lowers the loss, evaluation writes results.json,
bad data is counted at the end of the run, sweeps get one directory each, evaluate every job and
summarise them (table and charts), the task choice selects what a run trains with and is evaluated
on, and the entry points' user errors.

The entry points (train.py, evaluate.py) run in this process through `run_script` (their `__main__`
block, Hydra's command-line parsing and launcher included); only the test whose behaviour is set at
interpreter start (the hub's address) starts a new process.
"""

import csv
import json
import logging
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import MissingConfigException
from omegaconf import OmegaConf
from PIL import Image

from behavior.lightning import BehaviorTask
from core.interfaces import Task
from core.run import run_dir_of, run_name, train
from tests.conftest import BASE, ROOT, SCRATCH_SMALL, SMALL, compose_cfg
from vlm.lightning import VLMTask


def losses(run_dir: Path) -> dict[int, float]:
    with open(run_dir / "metrics.csv") as f:
        return {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")}


@pytest.fixture
def run_script(monkeypatch):
    """run_script("train.py", *args) -> exit status: the script as `python SCRIPT ARGS` runs it, in this process.
    The logging set-up Hydra installs is undone afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level

    def run(script: str, *args: str) -> int:
        monkeypatch.setattr(sys, "argv", [script, *args])
        monkeypatch.chdir(ROOT)
        try:
            runpy.run_path(str(ROOT / script), run_name="__main__")
        except SystemExit as end:
            return end.code if isinstance(end.code, int) else 1
        return 0

    yield run
    root.handlers[:], root.level = handlers, level


def test_twenty_steps_lower_the_loss_and_evaluation_writes_results(small_cfg, tmp_path, run_script):
    cfg = small_cfg("trainer.max_steps=20", "trainer.checkpoint_every=10", "run.name=twenty")
    results = train(cfg)
    run_dir = tmp_path / "runs" / "twenty"
    for name in ("config.yaml", "checkpoints/last.ckpt", "metrics.csv", "results.json", "model.safetensors"):
        assert (run_dir / name).exists(), name
    curve = losses(run_dir)
    assert sorted(curve) == list(range(20))
    first, last = sum(curve[s] for s in range(3)) / 3, sum(curve[s] for s in range(17, 20)) / 3
    assert last < first - 1.0, (first, last)
    assert results["scratch/train_loss"] == curve[19]

    assert run_script("evaluate.py", f"run={run_dir}", "limit=12") == 0  # the default benchmark of task=vlm
    saved = json.loads((run_dir / "results.json").read_text())
    assert saved["benchmark"] == "sort_of_clevr" and saved["n"] == 12
    for key in ("accuracy", "accuracy_relational", "accuracy_non_relational"):
        assert 0.0 <= saved[key] <= 100.0 and saved[key] == saved["benchmarks"]["sort_of_clevr"][key]
    assert saved["train"]["scratch/train_loss"] == curve[19]  # evaluation keeps the training figures
    predictions = json.loads((run_dir / "predictions" / "sort_of_clevr.json").read_text())
    assert len(predictions) == 12 and all(isinstance(p["answer"], str) for p in predictions)


def test_bad_records_are_skipped_and_counted_at_the_end_of_the_run(tmp_path, capsys):
    Image.new("RGB", (32, 32), (255, 0, 0)).save(tmp_path / "red.png")
    good = {"id": "g", "image": "red.png", "conversations": [{"from": "human", "value": "<image>\nColour?"}, {"from": "gpt", "value": "red"}]}
    records = [good, {**good, "id": "bad1", "image": "missing.png"}, {**good, "id": "bad2", "conversations": []}, good]
    (tmp_path / "d.json").write_text(json.dumps(records))
    cfg = compose_cfg(*BASE, f"run.root={tmp_path / 'runs'}", "data=llava", f"data.json={tmp_path / 'd.json'}", f"data.image_root={tmp_path}", "data.skip_bad=true",
                      "data.num_workers=0", "stage=single_stage", "stage.phases.finetune.global_batch_size=2", "trainer.max_steps=2")
    results = train(cfg)
    assert results["finetune/skipped/missing image"] == 1
    assert results["finetune/skipped/has an empty or missing 'conversations' list"] == 1
    out = capsys.readouterr().out
    assert "skipped/missing image" in out


def test_two_stage_runs_align_then_finetune_from_the_aligned_projector(small_cfg):
    cfg = small_cfg("stage=two_stage", "stage.phases.align.global_batch_size=4", "stage.phases.finetune.global_batch_size=4",
                    "trainer.max_steps=3", "run.name=two")
    train(cfg)
    run_dir = Path(cfg.run.root) / "two"
    assert json.loads((run_dir / "progress.json").read_text())["completed"] == {"align": 3, "finetune": 3}
    assert sorted(losses(run_dir)) == list(range(6))  # later phases continue the step count


def test_run_name_is_stable_and_differs_between_commands():
    a1, a2 = compose_cfg(*SMALL), compose_cfg(*SMALL)
    b = compose_cfg(*SMALL, "projector=linear")
    assert run_dir_of(a1) == run_dir_of(a2) != run_dir_of(b)
    assert run_dir_of(compose_cfg(*SMALL, "eval.benchmarks=[sort_of_clevr]")) == run_dir_of(a1)  # evaluating adds no run
    assert re.fullmatch(r"tiny_siglip-tiny_llama-mlp-scratch-[0-9a-f]{8}", run_dir_of(a1).name)
    assert re.fullmatch(r"behavior-metaworld_reach-mlp_bc-fast-[0-9a-f]{8}",
                        run_name(compose_cfg("task=behavior", "env=metaworld_reach", "policy=mlp_bc", "tokenizer=fast")))
    assert run_name(compose_cfg(*SMALL, "run.name=mine")) == "mine"


@pytest.mark.parametrize("task", ["vlm", "behavior"])
def test_naming_a_run_writes_nothing(task, tmp_path, monkeypatch):
    """run_name resolves the whole config to hash it: no resolver may write (a cache, a dataset, a checkpoint)."""
    monkeypatch.setenv("REFRACT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    name = run_name(compose_cfg(f"task={task}", f"run.root={tmp_path / 'runs'}"))
    assert name.startswith("behavior-" if task == "behavior" else "tiny_siglip-")
    assert list(tmp_path.iterdir()) == []


def test_both_tasks_conform_to_the_task_contract():
    assert isinstance(VLMTask(), Task) and isinstance(BehaviorTask(), Task)
    assert VLMTask().name == "vlm" and BehaviorTask().name == "behavior"


def test_a_task_target_that_is_not_a_task_fails_before_the_run_starts(small_cfg, tmp_path):
    cfg = small_cfg("task._target_=collections.OrderedDict")
    with pytest.raises(TypeError, match=r"task\._target_=collections\.OrderedDict .*not a core\.interfaces\.Task.*'build_model'"):
        train(cfg)
    assert not (tmp_path / "runs").exists()


def test_the_task_choice_selects_what_a_run_trains_with_and_is_evaluated_on():
    vlm, behavior = compose_cfg(), compose_cfg("task=behavior")
    assert "encoder" in vlm and "lora" in vlm and "tokenizer" not in vlm
    assert "tokenizer" in behavior and "encoder" not in behavior and list(behavior.stage.phases) == ["bc"]
    assert behavior.trainer.threads == 1 and vlm.trainer.threads is None
    assert OmegaConf.to_container(vlm.task) == {"_target_": "vlm.lightning.VLMTask", "name": "vlm"}
    benchmark = {args: compose_cfg("run=r", *args, config="eval").benchmark.name
                 for args in [(), ("task=behavior",), ("task=behavior", "benchmark=gqa"), ("benchmark=rollouts",)]}
    assert benchmark == {(): "sort_of_clevr", ("task=behavior",): "rollouts", ("task=behavior", "benchmark=gqa"): "gqa",
                         ("benchmark=rollouts",): "rollouts"}


def table(markdown: str) -> list[dict[str, str]]:
    """The rows of the first markdown table in `markdown`, as {column: cell}."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return [dict(zip(cells[0], row)) for row in cells[2:]]


def test_a_sweep_evaluates_every_job_and_its_summary_and_the_report_show_the_metrics(tmp_path, run_script):
    sweep = tmp_path / "sweep"
    status = run_script("train.py", "-m", *SMALL, *SCRATCH_SMALL, f"run.root={tmp_path}", "trainer.max_steps=2",
                        "projector=linear,mlp", "eval.benchmarks=[sort_of_clevr]", "eval.limit=4",
                        'eval.overrides={sort_of_clevr:["batch_size=2"]}', f"hydra.sweep.dir={sweep}")
    assert status == 0
    runs = sorted(p for p in tmp_path.iterdir() if (p / "config.yaml").exists())
    assert [run.name.split("-")[2] for run in runs] == ["linear", "mlp"]  # one directory per job
    results = {run: json.loads((run / "results.json").read_text()) for run in runs}
    for saved in results.values():  # every job was evaluated after training, as evaluate.py writes it
        assert saved["benchmarks"]["sort_of_clevr"]["n"] == 4 and saved["benchmark"] == "sort_of_clevr"

    summary = (sweep / "summary.md").read_text()
    (common,) = [line for line in summary.splitlines() if line.startswith("Overrides common to every job")]
    assert "eval.benchmarks=[sort_of_clevr]" in common and "projector=" not in common  # said once, above the table
    rows = {row["job"]: row for row in table(summary)}
    assert sorted(rows) == ["#0 projector=linear", "#1 projector=mlp"]
    for run in runs:
        row = rows[f"#{'0' if run.name.split('-')[2] == 'linear' else '1'} projector={run.name.split('-')[2]}"]
        saved = results[run]
        assert row["run"] == str(run)
        assert row["scratch/train_loss"] == f"{saved['train']['scratch/train_loss']:.4f}"
        assert row["sort_of_clevr (accuracy)"] == f"{saved['benchmarks']['sort_of_clevr']['accuracy']:.2f}"
    for png in ("summary.png", "summary_loss.png"):
        assert (sweep / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({png})" in summary

    assert run_script("scripts/report.py", *map(str, runs), "--out", str(tmp_path / "report")) == 0
    (report_row,) = table((tmp_path / "report" / "report.md").read_text())
    assert report_row == {"benchmark (metric)": "sort_of_clevr (accuracy)",
                          **{run.name: f"{results[run]['benchmarks']['sort_of_clevr']['accuracy']:.2f}" for run in runs}}
    assert (tmp_path / "report" / "report_loss.png").stat().st_size > 1000


def test_unknown_choice_fails_with_hydra_list_of_choices():
    with pytest.raises(MissingConfigException, match=r"(?s)Available options.*tiny_siglip"):
        compose_cfg("encoder=nonexistent")


def test_real_encoder_without_network_fails_fast_with_a_clear_message(tmp_path):
    """A process of its own: the hub's address and offline mode are read when huggingface_hub is imported."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens there: the hub is unreachable
    env["HF_HOME"] = str(tmp_path / "hf")  # an empty hub cache
    proc = subprocess.run([sys.executable, "train.py", "encoder=siglip", "backbone=llama", "data=sort_of_clevr", "logger=csv", f"run.root={tmp_path}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1
    assert "timm/vit_so400m_patch14_siglip_224.webli" in proc.stderr and "encoder.model_id=" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_saved_config_rebuilds_the_run(small_cfg):
    cfg = small_cfg("trainer.max_steps=1", "run.name=one")
    train(cfg)
    saved = OmegaConf.load(Path(cfg.run.root) / "one" / "config.yaml")
    assert saved.encoder.model_id == "tiny:tiny_siglip" and saved.stage.phases.scratch.trainable == ["encoder", "projector", "backbone"]
    assert OmegaConf.to_container(saved) == OmegaConf.to_container(cfg, resolve=True)


def test_the_headline_command_shows_the_paper_recipe_in_cfg_job(run_script, capsys):
    assert run_script("train.py", "encoder=siglip", "backbone=llama", "--cfg", "job") == 0
    job = OmegaConf.create(capsys.readouterr().out)
    assert job.stage.name == "single_stage" and job.data.name == "llava_v15"
