"""Progress that shows where there is no terminal: a rich bar on a TTY, plain lines otherwise (SLURM, nohup, CI).

    for record in track(records, "tokenizing", total=len(records)):
        ...

Off a TTY, `track` prints `description: n/total (p%), elapsed s, ETA s` at most every `every_seconds`
and once at the end, so a log file shows the progress of a long preparation step as it happens.
Training steps get the same lines from `core.progress_lines.ProgressLines` (a Lightning callback).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

from rich.progress import track as rich_track

T = TypeVar("T")


def interactive(stream: TextIO | None = None) -> bool:
    """Whether `stream` (default: stdout) is a terminal that a live progress bar can redraw."""
    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)())


def eta_line(description: str, done: int, total: int | None, elapsed: float, since: int = 0,
             extra: dict[str, str] | None = None) -> str:
    """`description: done/total (p%), elapsed s, ETA s` (without total: `description: done, elapsed s`), then
    `, key value` for each of `extra`. `since`: what was already done when the clock started (a resumed run),
    so the rate, and with it the ETA, counts only the work of the last `elapsed` seconds."""
    tail = "".join(f", {k} {v}" for k, v in (extra or {}).items())
    if not total:
        return f"{description}: {done}, {elapsed:.0f} s{tail}"
    rate = (done - since) / elapsed if elapsed > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else float("nan")
    return f"{description}: {done}/{total} ({100 * done / total:.0f}%), {elapsed:.0f} s, ETA {eta:.0f} s{tail}"


def track(iterable: Iterable[T], description: str, total: int | None = None, every_seconds: float = 10.0,
          stream: TextIO | None = None) -> Iterator[T]:
    stream = stream or sys.stdout
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    if interactive(stream):
        yield from rich_track(iterable, description=description, total=total, transient=True)
        return
    start = last = time.monotonic()
    done = 0
    for item in iterable:
        yield item
        done += 1
        now = time.monotonic()
        if now - last >= every_seconds:
            print(eta_line(description, done, total, now - start), file=stream, flush=True)
            last = now
    print(eta_line(description, done, total, time.monotonic() - start), file=stream, flush=True)
