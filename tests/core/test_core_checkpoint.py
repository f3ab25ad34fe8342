"""Checkpoints under faults: a write killed midway leaves the previous checkpoint loadable and selected on
resume (and the resumed run equals an uninterrupted one); `keep_last_k` prunes old step checkpoints;
an unreadable `last.ckpt` falls back to the newest readable `step=N.ckpt`; step checkpoints of a later
phase are named by the run-wide step."""

import csv
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from torch import nn

from core.checkpoint import peek, resume_checkpoint
from core.run import train
from core.trainer import StepCheckpoint
from tests.core.toy import Toy, ToyData

# one phase, whatever the default recipe is: the step and save counts below are about a single phase
ONE_PHASE = ("stage=single_stage", "stage.phases.finetune.global_batch_size=4", "stage.phases.finetune.optim.lr=1e-3")


class Killed(RuntimeError):
    pass


def losses(run_dir: Path) -> dict[int, float]:
    with open(run_dir / "metrics.csv") as f:
        return {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")}


def test_kill_during_a_checkpoint_write_keeps_the_previous_one_and_resume_is_exact(small_cfg, tmp_path, monkeypatch, capsys):
    args = (*ONE_PHASE, "trainer.max_steps=6", "trainer.checkpoint_every=2", "trainer.keep_last_k=2", "trainer.threads=1")
    cfg = small_cfg(*args, "run.name=faulty")
    ckpts = Path(cfg.run.root) / "faulty" / "checkpoints"
    original, calls = TorchCheckpointIO.save_checkpoint, []

    def dies_midway(self, checkpoint, path, storage_options=None):
        calls.append(Path(path).name)
        original(self, checkpoint, path, storage_options)
        if len(calls) == 3:  # the first write at step 4: cut the file in half, then die
            data = Path(path).read_bytes()
            Path(path).write_bytes(data[: len(data) // 2])
            raise Killed("killed while writing a checkpoint")

    monkeypatch.setattr(TorchCheckpointIO, "save_checkpoint", dies_midway)
    with pytest.raises(Killed):
        train(cfg)
    monkeypatch.undo()
    assert [c.split(".tmp-")[0] for c in calls] == ["step=2.ckpt", "last.ckpt", "step=4.ckpt"]  # each through a temporary
    assert not (ckpts / "step=4.ckpt").exists()
    assert resume_checkpoint(ckpts) == ckpts / "last.ckpt" and peek(ckpts / "last.ckpt")["global_step"] == 2
    torch.load(ckpts / "last.ckpt", weights_only=True)  # fully loadable

    capsys.readouterr()
    train(small_cfg(*args, "run.name=faulty"))
    assert "resuming at step 2" in capsys.readouterr().out.replace("\n", " ")
    assert sorted(p.name for p in ckpts.iterdir()) == ["last.ckpt", "step=4.ckpt", "step=6.ckpt"]  # pruned, no .tmp

    train(small_cfg(*args, "run.name=reference"))
    got, want = losses(ckpts.parent), losses(Path(cfg.run.root) / "reference")
    assert sorted(got) == sorted(want) == list(range(6))
    assert all(abs(got[s] - want[s]) <= 1e-6 * max(1.0, abs(want[s])) for s in range(6)), (got, want)


def test_unreadable_last_falls_back_to_the_newest_readable_step_checkpoint(tmp_path):
    for step in (3, 6, 9):
        torch.save({"phase": "p", "global_step": step}, tmp_path / f"step={step}.ckpt")
    (tmp_path / "step=9.ckpt").write_bytes(b"truncated")
    (tmp_path / "last.ckpt").write_bytes((tmp_path / "step=6.ckpt").read_bytes()[:20])
    assert resume_checkpoint(tmp_path) == tmp_path / "step=6.ckpt"
    torch.save({"phase": "p", "global_step": 10}, tmp_path / "last.ckpt")
    assert resume_checkpoint(tmp_path) == tmp_path / "last.ckpt"
    assert resume_checkpoint(tmp_path / "empty") is None


def test_step_checkpoints_carry_the_run_wide_step_and_the_newest_k_are_kept(tmp_path):
    ckpt = StepCheckpoint(step_offset=10, dirpath=tmp_path, filename="step={step}", auto_insert_metric_name=False,
                          monitor="step", mode="max", save_top_k=2, every_n_train_steps=2, enable_version_counter=False)
    module = Toy(nn.Linear(4, 2), {"name": "p", "trainable": ["net"], "optim": {"lr": 0.01}}, total_steps=6)
    trainer = L.Trainer(accelerator="cpu", max_steps=6, logger=False, callbacks=[ckpt], enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module, datamodule=ToyData())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step=14.ckpt", "step=16.ckpt"]  # phase steps 4, 6 + 10
    assert peek(tmp_path / "step=16.ckpt")["global_step"] == 6
