"""Crash-safe folder writes: build a dataset in a temporary folder next to its destination, then swap it in.

    with atomic_directory(out) as tmp:
        ...write files under tmp...

On success `tmp` replaces `out` (a previous `out` is removed); on any error
(or a kill) nothing half-written is ever at `out`, and the temporary folder is
deleted when the error is raised in-process.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_directory(out: Path) -> Iterator[Path]:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
