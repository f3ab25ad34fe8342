"""Crash-safe writes: a file or a folder is written next to its destination, then swapped in with `os.replace`.

    with atomic_file(path) as tmp:       # write tmp; on success it replaces path
        tmp.write_text(...)
    with atomic_directory(out) as tmp:   # build a folder under tmp; on success it replaces out
        ...
    write_json(path, obj)                # JSON through atomic_file
    obj = read_json(path, default={})    # the default when the file is absent

On any error (or a kill) nothing half-written is ever at the destination; a
temporary left by a kill carries the writer's pid in its name.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_MISSING = object()


@contextmanager
def atomic_file(path: Path, fsync: bool = False) -> Iterator[Path]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        if fsync:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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


def write_json(path: Path, data: Any, indent: int | None = 2) -> None:
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(data, indent=indent, sort_keys=True))


def read_json(path: Path, default: Any = _MISSING) -> Any:
    path = Path(path)
    if default is not _MISSING and not path.exists():
        return default
    return json.loads(path.read_text())
