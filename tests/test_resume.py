"""A run killed with SIGKILL after a checkpoint and started again with the same command continues
from the checkpoint's step and data position: its per-step losses equal an uninterrupted run's.
The same holds for 2-process DDP (gloo on CPU), whose losses also equal one process accumulating the
same micro-batches (same global batch).

The killed runs are processes of their own (the kill is the behaviour under test), and so is the DDP
run (Lightning starts its second rank by running the command again); the uninterrupted reference runs
and the single-process resume train in this process.
"""

import contextlib
import json
import csv
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from core.run import train
from tests.conftest import ROOT, SCRATCH_SMALL, SMALL, compose_cfg


def overrides(root, name, *extra, steps=24, every=6, stage=tuple(SCRATCH_SMALL)) -> list[str]:
    return [*SMALL, *stage, f"run.root={root}", f"run.name={name}", f"trainer.max_steps={steps}",
            f"trainer.checkpoint_every={every}", "trainer.threads=1", *extra]


def command(*args, **kwargs) -> list[str]:
    return [sys.executable, "train.py", *overrides(*args, **kwargs)]


def step_losses(run_dir):
    with open(run_dir / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted(set(steps)), "every step is logged exactly once"
    return {int(r["step"]): float(r["train/loss"]) for r in rows}


def kill_at_first_checkpoint(cmd: list[str], run_dir, whole_group: bool = False) -> int:
    """Start `cmd`, SIGKILL it (with `whole_group`, every process it started) once `last.ckpt` exists, and
    return the checkpoint's step."""
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    log = run_dir.parent / f"{run_dir.name}.stderr"
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, start_new_session=whole_group)
        deadline = time.time() + 300
        while not ckpt.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError):  # it may end between the check and the kill
            os.killpg(proc.pid, signal.SIGKILL) if whole_group else proc.kill()
        proc.wait()
    if proc.returncode != -signal.SIGKILL:
        pytest.fail(f"the run ended with status {proc.returncode} before it could be killed:\n{log.read_text()[-3000:]}")
    return torch.load(ckpt, weights_only=True, map_location="cpu")["global_step"]


def assert_same_losses(got: dict, want: dict, steps: int, tolerance: float) -> None:
    assert sorted(got) == sorted(want) == list(range(steps))
    for step in range(steps):
        assert abs(got[step] - want[step]) <= tolerance * max(1.0, abs(want[step])), (step, got[step], want[step])


def test_sigkill_then_same_command_resumes_exactly(tmp_path, capsys):
    run_dir = tmp_path / "killed"
    killed_at = kill_at_first_checkpoint(command(tmp_path, "killed"), run_dir)
    assert 0 < killed_at < 24
    config = (run_dir / "config.yaml").read_text()

    train(compose_cfg(*overrides(tmp_path, "killed")))  # the same command, run again
    assert f"resuming at step {killed_at}" in capsys.readouterr().out.replace("\n", " ")
    assert (run_dir / "config.yaml").read_text() == config
    train(compose_cfg(*overrides(tmp_path, "reference")))

    assert_same_losses(step_losses(run_dir), step_losses(tmp_path / "reference"), 24, tolerance=1e-6)
    final = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert final["global_step"] == 24 and final["consumed_batches"] == 24


DDP = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.precision=32-true"]
# one phase whatever the default recipe is; a learning rate at which the optimizer state matters
ONE_PHASE = ("stage=single_stage", "stage.phases.finetune.global_batch_size=4", "stage.phases.finetune.optim.lr=1e-3")


def test_two_process_ddp_equals_one_process_accumulating_and_resumes_exactly_after_sigkill(tmp_path, capsys):
    """1 process, micro batch 2 x accumulation 2 vs 2 processes x micro batch 2: the same global batch of the same
    micro-batches. The DDP run is SIGKILLed (every process) after its first checkpoint and started again."""
    steps = dict(steps=12, every=4, stage=ONE_PHASE)
    train(compose_cfg(*overrides(tmp_path, "one", "trainer.micro_batch_size=2", **steps)))
    assert "(2 x 2 accumulation)" in capsys.readouterr().out.replace("\n", " ")

    ddp = command(tmp_path, "ddp", *DDP, "trainer.micro_batch_size=2", **steps)
    killed_at = kill_at_first_checkpoint(ddp, tmp_path / "ddp", whole_group=True)
    assert 0 < killed_at < 12

    resumed = subprocess.run(ddp, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    out = resumed.stdout.replace("\n", " ")
    assert f"resuming at step {killed_at}" in out and "(2 x 1 accumulation)" in out

    assert_same_losses(step_losses(tmp_path / "ddp"), step_losses(tmp_path / "one"), 12, tolerance=1e-5)
    final = torch.load(tmp_path / "ddp" / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert final["global_step"] == 12 and final["consumed_batches"] == 12 and len(final["rng_per_rank"]) == 2


SIFT = ("sifting.enabled=true", "sifting.beta=2.0", "sifting.history=16")  # the probabilistic rule: window and RNG in play


def test_sigkill_then_same_command_resumes_exactly_with_sifting_on(tmp_path, capsys):
    """The sifter's lanes (positions, queues of kept samples, loss windows, RNGs) are in the checkpoint: a killed
    sifting run continues with the same losses and the same sample counts as an uninterrupted one."""
    args = dict(steps=12, every=4)
    killed_at = kill_at_first_checkpoint(command(tmp_path, "killed", *SIFT, **args), tmp_path / "killed")
    assert 0 < killed_at < 12
    train(compose_cfg(*overrides(tmp_path, "killed", *SIFT, **args)))
    assert f"resuming at step {killed_at}" in capsys.readouterr().out.replace("\n", " ")
    train(compose_cfg(*overrides(tmp_path, "reference", *SIFT, **args)))
    assert_same_losses(step_losses(tmp_path / "killed"), step_losses(tmp_path / "reference"), 12, tolerance=1e-6)
    got, want = (json.loads((tmp_path / name / "results.json").read_text()) for name in ("killed", "reference"))
    assert got["sift/forwarded"] == want["sift/forwarded"] > got["sift/backpropagated"] == want["sift/backpropagated"]


def test_two_process_ddp_equals_one_process_accumulating_with_sifting_on(tmp_path):
    """Sifting lanes are micro-batch slots: 2 ranks x 1 and 1 process x 2 accumulation sift alike."""
    steps = dict(steps=8, every=8, stage=ONE_PHASE)
    train(compose_cfg(*overrides(tmp_path, "one", "trainer.micro_batch_size=2", *SIFT, **steps)))
    ddp = subprocess.run(command(tmp_path, "ddp", *DDP, "trainer.micro_batch_size=2", *SIFT, **steps), cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    assert_same_losses(step_losses(tmp_path / "ddp"), step_losses(tmp_path / "one"), 8, tolerance=1e-5)
    got, want = (json.loads((tmp_path / name / "results.json").read_text()) for name in ("ddp", "one"))
    assert got["sift/forwarded"] == want["sift/forwarded"] > got["sift/backpropagated"] == want["sift/backpropagated"]
