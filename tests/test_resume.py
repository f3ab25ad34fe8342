"""A run killed with SIGKILL after a checkpoint and started again with the same command continues
from the checkpoint's step and data position: its per-step losses equal an uninterrupted run's."""

import csv
import signal
import subprocess
import sys
import time

import torch

from tests.conftest import ROOT, SCRATCH_SMALL, SMALL


def command(root, name):
    return [sys.executable, "train.py", *SMALL, *SCRATCH_SMALL, f"run.root={root}", f"run.name={name}",
            "trainer.max_steps=24", "trainer.checkpoint_every=6", "trainer.threads=1"]


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
