"""A run directory under adversarial use (issue 15, classes 2, 3 and 6 at the core's level).

Class 2, one writer per run: a second process on a live run directory is refused with the holder's pid and host
(train and evaluate alike) or waits when asked (`run.lock_wait`); a lock left by a dead process is taken over, a
half-written one after filelock's grace period, one from another host is reported with how to remove it; the
evaluation that ends a training runs under the training's own lock.
Class 3, reruns lose nothing: a finished command run again keeps results.json's `train` section and every other
record (a lost results.json gets its figures back from progress.json); checkpoints that all fail their read or
their checksum stop the run with a message instead of restarting at step 0; a damaged results.json or
progress.json stops the run, naming the file, and is not overwritten.
Class 6, damaged weights (core/weights.py on a small module): truncated, corrupted, NaN / infinite, replaced
(checksum) and mis-shaped weight files fail naming the file and the tensor or config key.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file, save_model
from torch import nn

from core.checkpoint import CheckpointError, resume_checkpoint
from core.run import RunDirError, evaluate, train, update_results
from core.run_lock import LOCK_NAME, RunLockedError, run_lock
from core.weights import CHECKSUMS, WeightsError, load_weights, record_file
from tests.conftest import ROOT, compose_cfg

HOLDER = """
import os, sys
sys.path.insert(0, {root!r})
from core.run_lock import run_lock
with run_lock({run_dir!r}):
    print("held", flush=True)
    if {die!r}:
        os._exit(0)  # killed while holding the lock: the marker stays behind
    sys.stdin.read()  # hold until the test closes stdin
"""


def hold_lock(run_dir: Path, die: bool = False) -> subprocess.Popen:
    """Another process holding the run's lock (released when its stdin closes, or left behind if `die`)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER.format(root=str(ROOT), run_dir=str(run_dir), die=die)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def release(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    proc.wait(timeout=30)


# --- class 2: one writer per run directory --------------------------------------------------------------
def test_a_second_process_on_a_live_run_is_refused_naming_the_holder(small_cfg, tmp_path):
    cfg = small_cfg("run.name=shared", "trainer.max_steps=2")
    run_dir = tmp_path / "runs" / "shared"
    proc = hold_lock(run_dir)
    host = (run_dir / LOCK_NAME).read_text().split("\n")[1]
    assert host.startswith(socket.gethostname())  # filelock adds a PID-namespace suffix inside a container
    try:
        with pytest.raises(RunLockedError, match=rf"being written by pid {proc.pid} on host {re.escape(host)}.*run\.lock_wait="):
            train(cfg)
        assert not (run_dir / "config.yaml").exists() and not (run_dir / "checkpoints").exists()  # wrote nothing
        ecfg = compose_cfg(f"run={run_dir}", "benchmark=sort_of_clevr", config="eval")
        (run_dir / "config.yaml").write_text("{}")  # evaluate checks for a run first
        with pytest.raises(RunLockedError, match=rf"pid {proc.pid} .*lock_wait="):
            evaluate(ecfg)
    finally:
        release(proc)
    assert not (run_dir / LOCK_NAME).exists()


def test_asked_to_wait_it_waits_for_the_holder_then_writes(tmp_path, capsys):
    proc = hold_lock(tmp_path)
    start = time.monotonic()
    threading.Timer(1.0, proc.stdin.close).start()  # the holder finishes a second later
    with run_lock(tmp_path, wait=30):
        waited = time.monotonic() - start
        assert (tmp_path / LOCK_NAME).read_text().split("\n")[0] == str(os.getpid())
    proc.wait(timeout=30)
    assert 0.5 < waited < 25 and f"being written by pid {proc.pid}" in capsys.readouterr().out


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path):
    proc = hold_lock(tmp_path, die=True)
    proc.wait(timeout=30)
    assert (tmp_path / LOCK_NAME).read_text().split("\n")[0] == str(proc.pid)  # the dead holder's marker stayed
    with run_lock(tmp_path):
        assert (tmp_path / LOCK_NAME).read_text().split("\n")[0] == str(os.getpid())


def test_a_lock_of_another_host_is_refused_with_how_to_remove_it(tmp_path):
    (tmp_path / LOCK_NAME).write_text("4242\nother-node-17\n123\n")
    with pytest.raises(RunLockedError, match=r"pid 4242 on host other-node-17.*another host.*delete .*run\.lock by hand"):
        with run_lock(tmp_path):
            pass


def test_a_half_written_lock_refuses_at_once_and_is_taken_over_after_the_grace_period(tmp_path):
    (tmp_path / LOCK_NAME).write_text("garbage")  # a holder killed while writing its marker
    with pytest.raises(RunLockedError, match="not finished writing its pid"):
        with run_lock(tmp_path):
            pass
    with run_lock(tmp_path, wait=20):
        assert (tmp_path / LOCK_NAME).read_text().split("\n")[0] == str(os.getpid())


def test_the_lock_is_reentrant_in_its_process(tmp_path):
    with run_lock(tmp_path), run_lock(tmp_path):  # training, then the evaluation that ends it
        pass
    assert not (tmp_path / LOCK_NAME).exists()
    with run_lock(tmp_path):  # released: taken again
        pass


# --- class 3: nothing a run recorded is lost by running it again -----------------------------------------
def test_rerunning_a_finished_command_keeps_every_record(small_cfg, tmp_path):
    cfg = small_cfg("run.name=again", "trainer.max_steps=2")
    first = train(cfg)
    run_dir = Path(first["run_dir"])
    update_results(run_dir, {"benchmarks": {"sort_of_clevr": {"accuracy": 50.0}}})
    names = ("results.json", "progress.json", "metrics.csv", "model.safetensors", "checkpoints/last.ckpt", CHECKSUMS)
    before = {n: (run_dir / n).read_bytes() for n in names}
    again = train(cfg)
    assert again == first
    assert {n: (run_dir / n).read_bytes() for n in names} == before  # nothing rewritten, nothing lost
    train_figures = json.loads((run_dir / "results.json").read_text())["train"]
    assert train_figures["scratch/train_loss"] == first["scratch/train_loss"] and "scratch/train_flops" in train_figures

    (run_dir / "results.json").unlink()  # a kill before the end of the run: the phase's figures are in progress.json
    assert train(cfg) == first
    assert json.loads((run_dir / "results.json").read_text())["train"] == train_figures


def test_a_run_whose_tiny_flavour_changed_under_its_name_is_not_resumed_or_reused(small_cfg, monkeypatch):
    import vlm.tiny

    cfg = small_cfg("run.name=inputs", "trainer.max_steps=2")
    first = train(cfg)
    run_dir = Path(first["run_dir"])
    names = sorted({cfg.encoder.model_id.removeprefix("tiny:"), cfg.backbone.model_id.removeprefix("tiny:")})
    assert json.loads((run_dir / "inputs.json").read_text()) == {n: vlm.tiny.fingerprint(n) for n in names}
    assert train(cfg) == first  # the same weights behind the names: the finished run is reused

    real = vlm.tiny.fingerprint  # a rebuild (another revision, another kind of CPU) under the same `tiny:NAME`
    monkeypatch.setattr(vlm.tiny, "fingerprint", lambda n, root=None: "0" * 16 if n == names[0] else real(n, root))
    with pytest.raises(RunDirError, match=rf"inputs\.json.*{names[0]}: [0-9a-f]{{16}} then, 0{{16}} now.*move .* aside"):
        train(cfg)
    (run_dir / "inputs.json").unlink()  # a run recorded before inputs.json existed is not checked
    assert train(cfg) == first
    assert not (run_dir / "inputs.json").exists()  # nor given a record of weights it may not have trained on


def test_damaged_records_stop_the_run_naming_the_file_and_stay_as_they_were(small_cfg, tmp_path):
    cfg = small_cfg("run.name=records", "trainer.max_steps=2")
    run_dir = Path(train(cfg)["run_dir"])
    for name in ("results.json", "progress.json"):
        good = (run_dir / name).read_bytes()
        (run_dir / name).write_bytes(good[: len(good) // 2])
        with pytest.raises(RunDirError, match=rf"{name} cannot be read.*restore the file"):
            train(cfg)
        assert (run_dir / name).read_bytes() == good[: len(good) // 2]
        (run_dir / name).write_bytes(good)


def test_checkpoints_that_all_fail_stop_the_run_instead_of_restarting_at_step_0(small_cfg, tmp_path):
    cfg = small_cfg("run.name=broken", "trainer.max_steps=2")
    run_dir = Path(train(cfg)["run_dir"])
    (run_dir / "progress.json").write_text(json.dumps({"completed": {}}))  # killed before the phase ended
    last = run_dir / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])
    weights = (run_dir / "model.safetensors").read_bytes()
    with pytest.raises(CheckpointError, match=r"no checkpoint the run can continue from: last\.ckpt.*Restarting at step 0"):
        train(cfg)
    assert (run_dir / "model.safetensors").read_bytes() == weights and last.stat().st_size == 1000


def test_a_later_phase_never_starts_from_missing_or_damaged_weights(small_cfg, tmp_path):
    cfg = small_cfg("stage=two_stage", "stage.phases.align.global_batch_size=4", "stage.phases.finetune.global_batch_size=4",
                    "trainer.max_steps=2", "run.name=phases")
    run_dir = Path(train(cfg)["run_dir"])
    (run_dir / "progress.json").write_text(json.dumps({"completed": {"align": 2}}))  # killed early in finetune
    shutil.rmtree(run_dir / "checkpoints")
    weights = run_dir / "model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[:-10])
    with pytest.raises(WeightsError, match=rf"{weights} has \d+ bytes, the run recorded"):
        train(cfg)
    weights.unlink()
    with pytest.raises(RunDirError, match=r"finished phases \['align'\], but .*model\.safetensors, the weights phase finetune "
                                          r"starts from, is missing"):
        train(cfg)


def test_a_checkpoint_that_fails_its_checksum_falls_back_to_an_older_one(tmp_path):
    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    for name, step in (("step=2.ckpt", 2), ("last.ckpt", 4)):
        torch.save({"phase": "p", "global_step": step}, ckpts / name)
        record_file(tmp_path, ckpts / name)
    torch.save({"phase": "p", "global_step": 5}, ckpts / "last.ckpt")  # readable, but not what the run wrote
    assert resume_checkpoint(ckpts) == ckpts / "step=2.ckpt"
    (ckpts / "step=2.ckpt").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"last\.ckpt \(.*SHA-256.*step=2\.ckpt"):
        resume_checkpoint(ckpts)


# --- class 6: damaged weights ---------------------------------------------------------------------------
class Small(nn.Module):
    def __init__(self, width: int = 4):
        super().__init__()
        self.projector = nn.Linear(3, width)
        self.head = nn.Linear(width, 2)


@pytest.fixture
def weights(tmp_path) -> Path:
    torch.manual_seed(0)
    path = tmp_path / "model.safetensors"
    save_model(Small(), str(path))
    return path


def test_good_weights_load_and_a_run_without_checksums_loads_as_before(weights):
    model, reference = Small(), Small()
    save_model(reference, str(weights))
    load_weights(model, weights)
    assert torch.equal(model.projector.weight, reference.projector.weight)
    record_file(weights.parent, weights)
    load_weights(Small(), weights)


@pytest.mark.parametrize("damage,match", [
    (lambda b: b[: len(b) - 7], "not a readable safetensors file"),                 # truncated tail
    (lambda b: b[:40], "not a readable safetensors file"),                         # truncated header
    (lambda b: b"\xff" * 8 + b[8:], "not a readable safetensors file"),            # corrupted header length
    (lambda b: b[:8] + b"{" * 10 + b[18:], "not a readable safetensors file"),     # corrupted header text
    (lambda b: b"", "not a readable safetensors file"),                            # empty
], ids=["truncated tail", "truncated header", "corrupted header length", "corrupted header text", "empty"])
def test_truncated_or_corrupted_weights_fail_naming_the_file(weights, damage, match):
    weights.write_bytes(damage(weights.read_bytes()))
    with pytest.raises(WeightsError, match=rf"{weights}.*{match}"):
        load_weights(Small(), weights)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_weights_fail_naming_the_tensor(weights, bad):
    state = Small().state_dict()
    state["head.weight"][1, 2] = bad
    save_file(state, str(weights))
    with pytest.raises(WeightsError, match=rf"{weights}: tensor head\.weight holds 1 NaN or infinite"):
        load_weights(Small(), weights)


def test_weights_that_differ_from_their_checksum_fail(weights):
    record_file(weights.parent, weights)
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x01  # one flipped bit in the tensor data: still a readable file
    weights.write_bytes(bytes(data))
    with pytest.raises(WeightsError, match=rf"{weights} does not match the SHA-256 its run recorded"):
        load_weights(Small(), weights)
    weights.write_bytes(bytes(data) + b"\0")
    with pytest.raises(WeightsError, match=r"has \d+ bytes, the run recorded \d+.*truncated or was replaced"):
        load_weights(Small(), weights)
    (weights.parent / CHECKSUMS).write_text("{not json")
    with pytest.raises(WeightsError, match=rf"{CHECKSUMS} cannot be read"):
        load_weights(Small(), weights)


def test_weights_of_another_shape_or_layout_fail_naming_the_config_key(weights):
    with pytest.raises(WeightsError, match=r"tensor projector\.weight has shape \(4, 3\), the model config\.yaml builds \(6, 3\).*"
                                           r"config\.yaml's `head`, `projector` not what the weights were trained with"):
        load_weights(Small(width=6), weights)
    save_file({k: v for k, v in Small().state_dict().items() if k != "head.bias"}, str(weights))
    with pytest.raises(WeightsError, match=r"missing: \['head\.bias'\], not in the model: \[\]\): config\.yaml's `head`"):
        load_weights(Small(), weights)
    with pytest.raises(FileNotFoundError, match="no finished training"):
        load_weights(Small(), weights.parent / "missing.safetensors")
