"""A run killed with SIGKILL after a checkpoint and started again with the same command continues
from the checkpoint's step and data position: its per-step losses equal an uninterrupted run's.
The same holds for 2-process DDP (gloo on CPU), whose losses also equal one process accumulating the
same micro-batches (same global batch)."""

import csv
import os
import signal
import subprocess
import sys
import time

import torch

from tests.conftest import ROOT, SCRATCH_SMALL, SMALL


def command(root, name, *extra, steps=24, every=6, stage=tuple(SCRATCH_SMALL)):
    return [sys.executable, "train.py", *SMALL, *stage, f"run.root={root}", f"run.name={name}",
            f"trainer.max_steps={steps}", f"trainer.checkpoint_every={every}", "trainer.threads=1", *extra]


def step_losses(run_dir):
    with open(run_dir / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted(set(steps)), "every step is logged exactly once"
    return {int(r["step"]): float(r["train/loss"]) for r in rows}


def test_sigkill_then_same_command_resumes_exactly(tmp_path):
    ckpt = tmp_path / "killed" / "checkpoints" / "last.ckpt"
    proc = subprocess.Popen(command(tmp_path, "killed"), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while not ckpt.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    killed_at = torch.load(ckpt, weights_only=True, map_location="cpu")["global_step"]
    assert 0 < killed_at < 24

    resumed = subprocess.run(command(tmp_path, "killed"), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming at step {killed_at}" in resumed.stdout.replace("\n", " ")
    reference = subprocess.run(command(tmp_path, "reference"), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert reference.returncode == 0, reference.stderr[-3000:]

    got, want = step_losses(tmp_path / "killed"), step_losses(tmp_path / "reference")
    assert sorted(got) == sorted(want) == list(range(24))
    for step in range(24):
        assert abs(got[step] - want[step]) <= 1e-6 * max(1.0, abs(want[step])), (step, got[step], want[step])
    final = torch.load(ckpt, weights_only=True, map_location="cpu")
    assert final["global_step"] == 24 and final["consumed_batches"] == 24


DDP = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.precision=32-true"]
# one phase whatever the default recipe is; a learning rate at which the optimizer state matters
ONE_PHASE = ("stage=single_stage", "stage.phases.finetune.global_batch_size=4", "stage.phases.finetune.optim.lr=1e-3")


def test_two_process_ddp_equals_one_process_accumulating_and_resumes_exactly_after_sigkill(tmp_path):
    """1 process, micro batch 2 x accumulation 2 vs 2 processes x micro batch 2: the same global batch of the same
    micro-batches. The DDP run is SIGKILLed (every process) after its first checkpoint and started again."""
    steps = dict(steps=12, every=4, stage=ONE_PHASE)
    reference = subprocess.run(command(tmp_path, "one", "trainer.micro_batch_size=2", **steps), cwd=ROOT,
                               capture_output=True, text=True, timeout=600)
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert "(2 x 2 accumulation)" in reference.stdout.replace("\n", " ")

    ddp = command(tmp_path, "ddp", *DDP, "trainer.micro_batch_size=2", **steps)
    ckpt = tmp_path / "ddp" / "checkpoints" / "last.ckpt"
    proc = subprocess.Popen(ddp, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 300
    while not ckpt.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and the rank it started: the whole job dies at once
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    killed_at = torch.load(ckpt, weights_only=True, map_location="cpu")["global_step"]
    assert 0 < killed_at < 12

    resumed = subprocess.run(ddp, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    out = resumed.stdout.replace("\n", " ")
    assert f"resuming at step {killed_at}" in out and "(2 x 1 accumulation)" in out

    got, want = step_losses(tmp_path / "ddp"), step_losses(tmp_path / "one")
    assert sorted(got) == sorted(want) == list(range(12))
    for step in range(12):
        assert abs(got[step] - want[step]) <= 1e-5 * max(1.0, abs(want[step])), (step, got[step], want[step])
    final = torch.load(ckpt, weights_only=True, map_location="cpu")
    assert final["global_step"] == 12 and final["consumed_batches"] == 12 and len(final["rng_per_rank"]) == 2
