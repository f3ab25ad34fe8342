"""Plain progress lines when stdout is not a terminal (SLURM, nohup, CI logs): preparation steps (`track`) and
training steps (`ProgressLines`, instead of the Rich bar that stays on a terminal)."""

import copy
import csv
import io
import re
import sys

import pytest
import torch
from lightning.pytorch.callbacks import ProgressBar, RichProgressBar
from lightning.pytorch.loggers import CSVLogger
from omegaconf import OmegaConf
from torch import nn

from core.progress import eta_line, track
from core.progress_lines import ProgressLines
from core.trainer import build_trainer
from tests.conftest import composed
from tests.core.toy import Toy, ToyData


def test_off_a_terminal_track_writes_plain_lines_with_counts_and_a_final_line():
    out = io.StringIO()  # not a TTY
    assert list(track(range(5), "tokenizing", every_seconds=0.0, stream=out)) == list(range(5))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("tokenizing: 1/5 (20%)") and lines[-1].startswith("tokenizing: 5/5 (100%)")
    assert len(lines) == 6  # one per item (every_seconds=0) and the final one


def test_eta_line_hand_computed():
    assert eta_line("step", 25, 100, 50.0) == "step: 25/100 (25%), 50 s, ETA 150 s"
    assert eta_line("records", 7, None, 3.2) == "records: 7, 3 s"


def test_eta_line_of_a_resumed_run_counts_only_the_steps_since_the_clock_started():
    # 40 steps done, 30 of them before the restart: 10 steps in 20 s, 60 to go at 0.5 steps/s
    assert eta_line("step", 40, 100, 20.0, since=30, extra={"loss": "1.5000"}) == \
        "step: 40/100 (40%), 20 s, ETA 120 s, loss 1.5000"


def toy_trainer(tmp_path, **trainer):
    cfg = copy.deepcopy(composed("trainer=cpu"))
    cfg.trainer.update(trainer)
    phase = OmegaConf.create({"name": "p", "trainable": ["net"], "optim": {"lr": 0.01}})
    logger = CSVLogger(tmp_path, name="", version="")
    return build_trainer(cfg, phase, tmp_path, max_steps=3, accumulate=2, loggers=[logger]), phase


def test_a_run_without_a_terminal_prints_progress_lines_with_step_loss_lr_and_tokens(tmp_path, capsys):
    trainer, phase = toy_trainer(tmp_path, progress_every=1, log_every_n_steps=1)
    assert not any(isinstance(c, ProgressBar) for c in trainer.callbacks)  # stdout is captured: no Rich bar
    torch.manual_seed(0)
    trainer.fit(Toy(nn.Linear(4, 2), phase, total_steps=3), datamodule=ToyData())
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("phase p step: ")]
    pattern = (r"phase p step: (\d)/3 \(\d+%\), \d+ s, ETA (\d+|nan) s, loss ([\d.]+), lr ([\d.e+-]+), "
               r"tokens/s/device (\d+)")
    found = [re.fullmatch(pattern, line) for line in lines]
    assert all(found), lines
    assert [m.group(1) for m in found] == ["1", "2", "3"]  # optimizer steps (2 micro-batches each), not batches
    with open(tmp_path / "metrics.csv") as f:
        logged = {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")}
    assert [float(m.group(3)) for m in found] == pytest.approx([logged[s] for s in (0, 1, 2)], abs=1e-4)
    assert found[-1].group(2) == "0"


def test_every_n_steps_and_the_last_one(tmp_path, capsys):
    trainer, phase = toy_trainer(tmp_path, progress_every=2)
    trainer.fit(Toy(nn.Linear(4, 2), phase, total_steps=3), datamodule=ToyData())
    steps = re.findall(r"^phase p step: (\d)/3", capsys.readouterr().out, flags=re.M)
    assert steps == ["2", "3"]


def test_on_a_terminal_the_rich_bar_stays_and_no_lines_are_printed(tmp_path, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdout", Terminal())
    trainer, _ = toy_trainer(tmp_path)
    assert any(isinstance(c, RichProgressBar) for c in trainer.callbacks)
    assert not any(isinstance(c, ProgressLines) for c in trainer.callbacks)
    monkeypatch.undo()
    quiet, _ = toy_trainer(tmp_path, progress_bar=False)
    assert not any(isinstance(c, (ProgressBar, ProgressLines)) for c in quiet.callbacks)
