"""Several evaluation processes joined in one torch.distributed group (`python evaluate.py ... devices=N`).

`processes(devices, entry, cfg)` is a context manager yielding `(rank, world)`:
- already in an evaluation group (a child spawned here calling `entry`): that group's rank and size;
- in another group (a DDP / FSDP training evaluating after training on its rank 0): `(0, 1)`, this process alone;
- started by a launcher (torchrun or srun set `WORLD_SIZE`/`RANK`/`MASTER_ADDR`/`MASTER_PORT`): it joins that group,
  one process per launched rank (`devices` must then be 1 or the launcher's world size);
- `devices=N > 1` in a plain process: this process becomes rank 0 and spawns N-1 children (the `spawn` start
  method: safe with CUDA and threads), each of which joins the group and calls `entry(cfg)` itself, so every rank
  runs the same code as under torchrun;
- else `(0, 1)`, no group at all (the one-process path is untouched).

The group always uses the gloo backend, on GPUs as well: evaluation only synchronises (barriers) and the
predictions travel through the run directory's per-shard logs, so NCCL would buy nothing and gloo works on the CPU.
`barrier()` waits for every rank; in the spawning process it keeps checking the children, so a child that dies
(an error, the OOM killer) stops the evaluation with its rank and exit code instead of hanging. Each process uses
`cuda:<local rank>` when GPUs are visible; on the CPU with `threads` unset the cores are split between the ranks.
"""

from __future__ import annotations

import datetime
import os
import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TIMEOUT = datetime.timedelta(hours=24)  # the slowest shard may finish hours after the fastest
_children: list = []  # the processes this one spawned (rank 0 of a spawned group)
_joined = [False]  # whether this process is in an evaluation group (not, say, the group of a training that evaluates)


class ProcessFailed(RuntimeError):
    """A rank of a spawned evaluation died."""


def rank_world() -> tuple[int, int]:
    """This process's rank and size in its evaluation group ((0, 1) outside one)."""
    return (dist.get_rank(), dist.get_world_size()) if _joined[0] else (0, 1)


def local_device(cfg: Any) -> str:
    """`cfg.device` if set, else this rank's GPU (`cuda:<local rank>`) when GPUs are visible, else `cpu`."""
    if cfg.get("device"):
        return str(cfg.device)
    if not torch.cuda.is_available():
        return "cpu"
    local = int(os.environ.get("LOCAL_RANK", rank_world()[0]))
    return f"cuda:{local % torch.cuda.device_count()}"


def barrier() -> None:
    """Wait for every rank (no-op without a group); raises `ProcessFailed` if a spawned child died meanwhile."""
    if not _joined[0]:
        return
    work = dist.barrier(async_op=True)
    while not work.is_completed():
        _check_children()
        time.sleep(0.05)
    try:
        work.wait()
    except RuntimeError:  # gloo saw a peer's connection close: name the child that died, if one did
        for child in _children:
            child.join(timeout=5)
        _check_children()
        raise


@contextmanager
def processes(devices: int, entry: Callable[[Any], Any], cfg: Any) -> Iterator[tuple[int, int]]:
    devices = int(devices or 1)
    if _joined[0]:
        yield rank_world()
        return
    if dist.is_initialized():  # another group: a multi-process training evaluating on its rank 0 (core/after_training.py)
        if devices > 1:
            raise ValueError(f"devices={devices} inside a process group that is not an evaluation's (a multi-process "
                             "training evaluates on its rank 0 alone); evaluate the run afterwards with devices=N")
        yield 0, 1
        return
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > 1:
        if devices not in (1, launched):
            raise ValueError(f"devices={devices} but the launcher started {launched} processes (WORLD_SIZE); "
                             "pass devices=1 or devices=WORLD_SIZE, or start evaluate.py without torchrun")
        dist.init_process_group("gloo", timeout=TIMEOUT)
        with _joined_group(), _threads(cfg, launched):
            yield rank_world()
        return
    if devices <= 1:
        yield 0, 1
        return
    port = _free_port()
    ctx = mp.get_context("spawn")
    _children[:] = [ctx.Process(target=_child, args=(rank, devices, port, entry, cfg), name=f"evaluate-rank{rank}")
                    for rank in range(1, devices)]
    for child in _children:
        child.start()
    try:
        _init_watching_children(port, devices)
        with _joined_group(), _threads(cfg, devices):
            yield 0, devices
        for child in _children:
            child.join()
        _check_children()
    finally:
        for child in _children:
            child.join(timeout=5)
            if child.is_alive():
                child.terminate()
                child.join()
        _children.clear()


def _child(rank: int, world: int, port: int, entry: Callable[[Any], Any], cfg: Any) -> None:
    os.environ["LOCAL_RANK"] = str(rank)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=TIMEOUT)
    with _joined_group(), _threads(cfg, world):
        entry(cfg)


@contextmanager
def _joined_group() -> Iterator[None]:
    """Mark the just initialised default group as this evaluation's; destroy it at the end."""
    _joined[0] = True
    try:
        yield
    finally:
        _joined[0] = False
        dist.destroy_process_group()


def _init_watching_children(port: int, world: int) -> None:
    """Join the group as rank 0; a child that dies before joining raises instead of waiting for the timeout."""
    error: list[BaseException] = []

    def init() -> None:
        try:
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=world, timeout=TIMEOUT)
        except BaseException as err:  # noqa: BLE001 - reported by the caller
            error.append(err)

    thread = threading.Thread(target=init, daemon=True)
    thread.start()
    while thread.is_alive():
        _check_children()
        thread.join(0.05)
    if error:
        raise error[0]


def _check_children() -> None:
    for child in _children:
        if child.exitcode not in (None, 0):
            raise ProcessFailed(f"evaluation process {child.name} exited with code {child.exitcode} (its error is printed "
                                "above); the predictions made so far are kept, and the same command resumes them")


@contextmanager
def _threads(cfg: Any, world: int) -> Iterator[None]:
    """Split the CPU cores between the ranks when `threads` is unset and the model runs on the CPU."""
    before = torch.get_num_threads()
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.get("threads")))
    elif local_device(cfg) == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
