"""The resumable predictions log of a benchmark run, `RUN_DIR/predictions/<name>.jsonl`, and its per-shard parts.

The log is a first line `{"_meta": {...}}` (the settings and weights the predictions were made with) followed by
one prediction object per line, appended and fsync'ed after every batch (eval/runners/base.py). `read_log` turns a
log into a clean prefix (a trailing partial line left by a crash is dropped; a log of other settings or weights
starts over).

A sharded evaluation (`devices=N`, core/launch.py) has every rank append to its own part,
`<name>.shard-<rank>.jsonl` (same `_meta` line), so no two processes write one file. `consolidate` (run by rank 0
alone, before the ranks start and after they all finished) moves the predictions of every part into the log and
deletes the parts. A killed sharded run therefore leaves parts that the next start folds in, whatever its number
of processes: a log written by one process is reused by N and the other way round, and parts made with other
settings or weights are dropped with the same "starting over" message as the log itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rich.console import Console

from data.atomic import atomic_file

console = Console()


def shard_log(log: Path, rank: int) -> Path:
    """The part of `log` that rank `rank` appends to."""
    return log.with_name(f"{log.stem}.shard-{rank}.jsonl")


def consolidate(log: Path, meta: dict) -> dict[str, dict]:
    """The predictions of `log` and of all its parts (by id), with the parts' predictions appended to `log` and the
    parts deleted. Crash-safe: a part is deleted only after its predictions are in the log (fsync'ed), and a
    prediction already in the log is not written twice."""
    done = read_log(log, meta)
    parts = sorted(log.parent.glob(f"{log.stem}.shard-*.jsonl"))
    if not parts:
        return done
    new = []
    for part in parts:
        for key, rec in read_log(part, meta).items():
            if key not in done:
                done[key] = rec
                new.append(rec)
    if new:
        with open(log, "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(r) + "\n" for r in new))
            f.flush()
            os.fsync(f.fileno())
    for part in parts:
        part.unlink()
    return done


def read_log(log: Path, meta: dict) -> dict[str, dict]:
    """The predictions already in `log` (by id), after making the file a clean prefix: a trailing partial
    line is cut off; a file made with other settings or weights is started over (its `_meta` line differs).
    Always leaves the file starting with the current `_meta` line."""
    header = json.dumps({"_meta": meta}) + "\n"
    done: dict[str, dict] = {}
    if log.exists():
        raw = log.read_bytes()
        lines = raw.split(b"\n")
        keep, stale = [], False
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                if i == len(lines) - 1:  # a trailing partial line, left by a crash mid-write
                    console.print(f"{log}: dropping a partial last line; it will be rewritten")
                    break
                raise ValueError(f"{log} line {i + 1} is not valid JSON (only the last line can be partial). "
                                 f"Fix: delete the file to start this benchmark over") from None
            if "_meta" in rec:
                if rec["_meta"] != meta:
                    console.print(f"{log} was made with other settings or weights; starting over")
                    stale = True
                    break
                continue
            if isinstance(rec, dict) and "id" in rec and "answer" in rec and str(rec["id"]) not in done:
                rec["id"] = str(rec["id"])
                done[rec["id"]] = rec
                keep.append(rec)
        if stale:
            done, keep = {}, []
        body = header + "".join(json.dumps(r) + "\n" for r in keep)
        if raw.decode("utf-8", errors="replace") != body:
            with atomic_file(log) as tmp:
                tmp.write_text(body, encoding="utf-8")
    else:
        log.write_text(header, encoding="utf-8")
    return done
