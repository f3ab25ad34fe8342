"""One writer per run directory: `run_lock(run_dir, wait)` around everything that writes a run's files.

The lock is `<run_dir>/run.lock`, a `filelock.SoftFileLock` marker that records the holder's pid and host.
A second process on a live run directory gets `RunLockedError`, naming that holder, at once (`wait=0`), or
waits for it up to `wait` seconds (`wait<0`: as long as it takes) — the config keys `run.lock_wait`
(train.py) and `lock_wait` (evaluate.py). A marker left by a process that died on this host is detected and
taken over (filelock checks the recorded pid and its start time); one left by a process on another host
cannot be checked from here, and the message says so and how to remove it.

The processes of one run (DDP / FSDP ranks, evaluation ranks) are one writer: only rank 0 takes the lock,
the entry points decide which process that is. The lock is re-entrant within a process, so the evaluation
that ends a training run (core/after_training.py) runs under the training's lock.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from filelock import SoftFileLock, Timeout

try:  # the host as filelock records it (with a PID-namespace suffix inside containers)
    from filelock._identity import host_name as this_host
except ImportError:  # another filelock layout: the plain host name
    this_host = socket.gethostname

LOCK_NAME = "run.lock"
_held: dict[Path, int] = {}  # run.lock paths this process holds → nesting depth


class RunLockedError(RuntimeError):
    """Another process is writing the run directory."""


def holder(lock_path: Path) -> tuple[int, str] | None:
    """(pid, host) of a lock marker (its first two lines), None while it is being written or unreadable."""
    with suppress(OSError, UnicodeDecodeError):
        lines = Path(lock_path).read_text().splitlines()
        if len(lines) >= 2 and lines[0].isdigit():
            return int(lines[0]), lines[1]
    return None


def describe(who: tuple[int, str] | None) -> str:
    return f"pid {who[0]} on host {who[1]}" if who else "a process that has not finished writing its pid"


@contextmanager
def run_lock(run_dir: str | Path, wait: float = 0, key: str = "run.lock_wait") -> Iterator[None]:
    """Hold `<run_dir>/run.lock` for the block; `wait`: seconds to wait for another writer (<0: no limit).
    `key` names the config key that sets `wait`, for the message."""
    path = (Path(run_dir) / LOCK_NAME).resolve()
    if path in _held:  # this process already writes the run (training, then its own evaluation)
        _held[path] += 1
        try:
            yield
        finally:
            _held[path] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = SoftFileLock(str(path), timeout=-1 if wait < 0 else float(wait), is_singleton=False)
    announced = False
    start = time.monotonic()
    while True:
        try:
            lock.acquire(timeout=0)
            break
        except Timeout:
            if 0 <= wait <= time.monotonic() - start:
                who = holder(path)
                remote = who is not None and who[1] != this_host()
                raise RunLockedError(
                    f"{run_dir} is being written by {describe(who)} ({path} holds its pid and host). Two processes writing one "
                    f"run would delete each other's files and duplicate its records. Wait for it to end, or pass "
                    f"{key}=SECONDS to wait (-1: until it ends)"
                    + (f"; the holder runs on another host, so if it is gone delete {path} by hand" if remote else "")
                ) from None
            if not announced:
                print(f"{run_dir} is being written by {describe(holder(path))}; waiting for it ({key}={wait})", flush=True)
                announced = True
            time.sleep(min(1.0, 0.05 + (time.monotonic() - start) / 20))
    _held[path] = 1
    try:
        yield
    finally:
        _held.pop(path, None)
        lock.release()

