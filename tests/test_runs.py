"""End-to-end runs on the tiny flavours: training lowers the loss, evaluation writes results.json,
bad data is counted at the end of the run, sweeps get one directory each and a summary table."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf
from PIL import Image

from core.run import evaluate, run_dir_of, train
from tests.conftest import BASE, ROOT, SCRATCH_SMALL, SMALL, compose_cfg


def losses(run_dir: Path) -> dict[int, float]:
    with open(run_dir / "metrics.csv") as f:
        return {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")}


def test_twenty_steps_lower_the_loss_and_evaluation_writes_results(small_cfg, tmp_path):
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

    eval_cfg = compose_cfg(f"run={run_dir}", "limit=12", config="eval")
    metrics = evaluate(eval_cfg)
    saved = json.loads((run_dir / "results.json").read_text())
    for key in ("accuracy", "accuracy_relational", "accuracy_non_relational"):
        assert 0.0 <= saved[key] <= 100.0 and saved[key] == metrics[key]
    assert saved["n"] == 12
    predictions = json.loads((run_dir / "predictions" / "sort_of_clevr.json").read_text())
    assert len(predictions) == 12 and all(isinstance(p["answer"], str) for p in predictions)


def test_bad_records_are_skipped_and_counted_at_the_end_of_the_run(small_cfg, tmp_path, capsys):
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
    assert run_dir_of(a1).name.startswith("tiny_siglip-tiny_llama-mlp-scratch-")


def test_multirun_gets_one_directory_per_job_and_a_summary(tmp_path):
    cmd = [sys.executable, "train.py", "-m", *SMALL, *SCRATCH_SMALL, f"run.root={tmp_path}", "trainer.max_steps=1", "projector=linear,mlp",
           f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted(p.name for p in tmp_path.iterdir() if (p / "config.yaml").exists())
    assert len(runs) == 2 and runs[0].split("-")[2] != runs[1].split("-")[2]
    summary = (tmp_path / "sweep" / "summary.md").read_text()
    rows = [line for line in summary.splitlines() if "projector=linear" in line or "projector=mlp" in line]
    assert len(rows) == 2 and "scratch/train_loss" in summary


def test_unknown_choice_fails_with_hydra_list_of_choices():
    proc = subprocess.run([sys.executable, "train.py", "encoder=nonexistent"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "Available options" in proc.stderr and "tiny_siglip" in proc.stderr


def test_real_encoder_without_network_fails_fast_with_a_clear_message(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens there: the hub is unreachable
    env["HF_HOME"] = str(tmp_path / "hf")  # an empty hub cache
    proc = subprocess.run([sys.executable, "train.py", "encoder=siglip", "backbone=llama", "logger=csv", f"run.root={tmp_path}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1
    assert "timm/vit_so400m_patch14_siglip_224.webli" in proc.stderr and "encoder.model_id=" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_saved_config_rebuilds_the_run(small_cfg):
    cfg = small_cfg("trainer.max_steps=1", "run.name=one")
    train(cfg)
    saved = OmegaConf.load(Path(cfg.run.root) / "one" / "config.yaml")
    assert saved.encoder.model_id == "tiny:tiny_siglip" and saved.stage.phases.scratch.trainable == ["encoder", "projector", "backbone"]
