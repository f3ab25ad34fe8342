"""Prepare once, with Ray Data: validate, check the images of and tokenize a LLaVA source into a cache of shards.

`prepare_source(source, tokenize, key, cache, ...)` returns the folder of the source's prepared samples
(data/shards.py), building it on a miss:
- the folder is `cache/<json stem>-<hash>`, the hash of `key` (what the caller's tokenization depends on: the
  tokenizer's files, the prompt format, the max length, the image settings) plus the JSON file's path, size and
  mtime and the image root: change any of them and a new cache is built; the same key is reused and says so;
  `key["images"]` (present when the image settings are not the defaults: data/image_decode.py's `ImagePolicy`
  fields) is the image policy validation applies (paths outside the image root, the pixel budget);
- the driver does no per-record work: `record_table` splits the file's bytes into one JSON text per record
  (data/json_split.py: a vectorised scan, no parse) and the workers parse their own records; a file that is not
  valid JSON raises what `read_llava_json` raises for it (on that error path the file is parsed in full to say so);
- the records go through Ray Data (`map_batches` over an actor pool of `workers` processes; local
  `ray.init(num_cpus=workers)`, or the cluster at `ray_address`): each actor runs `data.llava.check_record`
  (turns, placeholders, image files opened and verified) and `tokenize(records=[record], image_root=...)`
  (the caller's picklable tokenizer, e.g. `functools.partial(vlm.dataset.tokenize_records, ...)`);
- `workers=0` runs the same per-record work in this process, without Ray (tiny data, tests);
- bad records keep `load_llava`'s behaviour: the first one (in file order) raises its `DataError` naming the
  file, the record and the fix, or, with `skip_bad`, all are skipped and counted by reason; the counts (and the
  samples dropped at tokenization) are printed once, here, and kept in `manifest.json`;
- the folder is written through `data.atomic.atomic_directory`: a kill mid-way leaves only a `.tmp-PID` folder,
  never a usable half cache, and the next start rebuilds.

`wait_for(folder)`: the other ranks poll for the folder rank 0 prepares (or for its `.error` file).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from data import json_split
from data.atomic import atomic_directory, atomic_file, read_json, write_json
from data.errors import DataError
from data.image_decode import DEFAULT_IMAGES, ImagePolicy
from data.llava import bad_record_error, check_record, read_llava_json, reason_key
from data.shards import write_shards

FORMAT = 1  # bump when the shard layout changes
STALE_ERROR_S = 600  # a waiting rank ignores a rank-0 error file older than this before its own wait began
BLOCKS_PER_WORKER = 8  # Ray blocks per worker: small enough to balance, large enough to amortise a task


def file_stamp(path: Path) -> dict:
    stat = Path(path).stat()
    return {"path": str(Path(path).resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def cache_folder(source, key: dict, cache: Path, skip_bad: bool) -> Path:
    """Where `source`'s samples prepared under `key` live."""
    full = {"format": FORMAT, "json": file_stamp(source.json), "image_root": str(Path(source.image_root).resolve()),
            "skip_bad": bool(skip_bad), **key}
    digest = hashlib.sha256(json.dumps(full, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return Path(cache) / f"{Path(source.json).stem}-{digest}"


def manifest(folder: Path) -> dict | None:
    """The manifest of a complete prepared folder, or None."""
    return read_json(Path(folder) / "manifest.json", default=None)


class _PrepareBatch:
    """A Ray Data actor: records (as JSON text) → one row per sample, or per bad / dropped record."""

    def __init__(self, json_path: str, image_root: str, tokenize: Callable, images: ImagePolicy = DEFAULT_IMAGES):
        self.json_path, self.image_root, self.tokenize, self.images = json_path, Path(image_root), tokenize, images

    def __call__(self, batch: pa.Table) -> pa.Table:
        return prepare_rows(batch["record"].to_pylist(), batch["json"].to_pylist(), self.image_root, self.tokenize,
                            self.images)


def prepare_rows(indices: list[int], texts: list[str], image_root: Path, tokenize: Callable,
                 images: ImagePolicy = DEFAULT_IMAGES) -> pa.Table:
    """The rows of a batch of records: samples (`problem` null) and bad or dropped records (`problem` set)."""
    rows = {k: [] for k in ("record", "id", "input_ids", "labels", "images", "image_positions", "problem", "dropped",
                            "error", "not_json")}

    def add(index, sid="", ids=(), labels=(), images=(), positions=(), problem=None, dropped=None, error=None,
            not_json=None):
        for k, v in zip(rows, (index, sid, list(ids), list(labels), [str(p) for p in images], list(positions),
                               problem, dropped, error, not_json)):
            rows[k].append(v)

    for index, text in zip(indices, texts):
        try:
            record = json.loads(text)
        except (ValueError, RecursionError) as err:  # the file is not valid JSON (record_table only split it)
            add(index, error=f"record #{index} is not valid JSON", not_json=f"{type(err).__name__}: {err}")
            continue
        problem = check_record(record, image_root, images)
        if problem is not None:
            rid = record.get("id", f"#{index}") if isinstance(record, dict) else f"#{index}"
            add(index, str(rid), problem=problem)
            continue
        try:
            samples, dropped = tokenize(records=[record], image_root=image_root)
        except DataError as err:  # a record the prompt format cannot build: an error even with skip_bad, as in-process
            add(index, error=str(err))
            continue
        for s in samples:
            add(index, s.id, s.input_ids, s.labels, s.images, s.image_positions)
        for reason, n in dropped.items():
            for _ in range(n):
                add(index, dropped=reason)
    types = {"record": pa.int64(), "id": pa.string(), "input_ids": pa.list_(pa.int32()), "labels": pa.list_(pa.int32()),
             "images": pa.list_(pa.string()), "image_positions": pa.list_(pa.int32()), "problem": pa.string(),
             "dropped": pa.string(), "error": pa.string(), "not_json": pa.string()}
    return pa.table({k: pa.array(v, type=types[k]) for k, v in rows.items()})


_started = False  # whether this process started the Ray it uses (then `release_ray` stops it)


def release_ray() -> None:
    """Stop the local Ray this module started (after a phase's sources are prepared; frees its processes)."""
    global _started
    if _started:
        import ray

        ray.shutdown()
        _started = False


def record_table(json_path: Path) -> pa.Table:
    """The records of a LLaVA JSON file as a table: `record` (index) and `json` (its text), split from the file's
    bytes without parsing (data/json_split.py). DataError if the file is missing or not a JSON list: the one
    `read_llava_json` raises (it parses the file, on this error path only)."""
    try:
        texts = json_split.read_records(json_path)
    except (FileNotFoundError, json_split.JSONSplitError) as err:
        read_llava_json(json_path)  # raises the error of a full parse
        raise DataError(f"{json_path}: not valid JSON ({err}); fix the file") from err
    return pa.table({"record": pa.array(np.arange(len(texts), dtype=np.int64)), "json": texts})


def _not_json(json_path: Path, rows: pa.Table) -> DataError:
    """The error of a file a worker found a record of that is not valid JSON: what `read_llava_json` raises."""
    read_llava_json(json_path)  # raises the error of a full parse
    first = rows.slice(0, 1).to_pylist()[0]
    return DataError(f"{json_path}: not valid JSON (record #{first['record']}: {first['not_json']}); fix the file")


def _run_ray(table: pa.Table, source, tokenize: Callable, workers: int, ray_address: str | None,
             images: ImagePolicy = DEFAULT_IMAGES) -> pa.Table:
    import ray  # the data path's dependency only (core/ and the model packages never import it)

    global _started
    if not ray.is_initialized():
        if ray_address:
            ray.init(address=ray_address, log_to_driver=False)
        else:  # the preparation is the job's critical path: its workers at normal priority (Ray's default is nice 15)
            os.environ.setdefault("RAY_worker_niceness", "0")
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        _started = True
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    n_blocks = max(1, min(len(table), workers * BLOCKS_PER_WORKER))
    step = -(-len(table) // n_blocks)
    blocks = [table.slice(i, step) for i in range(0, len(table), step)] or [table]
    ds = ray.data.from_arrow(blocks).map_batches(
        _PrepareBatch, fn_constructor_args=(str(source.json), str(source.image_root), tokenize, images),
        batch_format="pyarrow", batch_size=None, compute=ray.data.ActorPoolStrategy(size=workers), num_cpus=1)
    parts = [pa.Table.from_batches([b]) if isinstance(b, pa.RecordBatch) else b
             for b in ds.iter_batches(batch_format="pyarrow", batch_size=None)]
    return pa.concat_tables(parts) if parts else prepare_rows([], [], Path(source.image_root), tokenize)


def prepare_source(source, tokenize: Callable, key: dict, cache: Path, skip_bad: bool = False, workers: int | None = None,
                   ray_address: str | None = None, log: Callable[[str], None] = print) -> tuple[Path, dict]:
    """The prepared folder of `source` ({json, image_root}) and its manifest; built with Ray Data on a miss."""
    folder = cache_folder(source, key, cache, skip_bad)
    images = ImagePolicy(**key["images"]) if "images" in key else DEFAULT_IMAGES
    done = manifest(folder)
    if done is not None:
        log(f"data: reusing prepared cache {folder} ({done['num_samples']} samples{_counts(done)})")
        return folder, done
    workers = (os.cpu_count() or 1) if workers is None else int(workers)
    error = folder.with_name(folder.name + ".error")
    error.unlink(missing_ok=True)
    try:
        start = time.perf_counter()
        table = record_table(source.json)
        how = f"with Ray Data, {workers} worker(s)" if workers else "in this process (prepare_workers=0)"
        log(f"data: preparing {source.json} ({len(table)} records) {how} → {folder}")
        if workers:
            rows = _run_ray(table, source, tokenize, workers, ray_address, images)
        else:
            rows = prepare_rows(table["record"].to_pylist(), table["json"].to_pylist(), Path(source.image_root), tokenize,
                                images)
        rows = rows.sort_by("record")  # stable: a record's samples keep their order
        not_json = rows.filter(pc.is_valid(rows["not_json"]))
        if len(not_json):  # before any other error, as when the file was parsed whole first
            raise _not_json(source.json, not_json)
        errors = rows.filter(pc.is_valid(rows["error"]))
        if len(errors):
            raise DataError(f"{source.json}: {errors['error'][0].as_py()}")
        problems = rows.filter(pc.is_valid(rows["problem"]))
        if len(problems) and not skip_bad:
            first = problems.slice(0, 1).to_pylist()[0]
            raise bad_record_error(source.json, first["id"], first["problem"])
        skipped = Counter(reason_key(p) for p in problems["problem"].to_pylist())
        dropped = Counter(rows.filter(pc.is_valid(rows["dropped"]))["dropped"].to_pylist())
        samples = rows.filter(pc.and_(pc.is_null(rows["problem"]), pc.is_null(rows["dropped"])))  # (no errors here)
        with atomic_directory(folder) as tmp:
            shards = write_shards(samples, tmp)
            info = {"source": {"json": str(source.json), "image_root": str(source.image_root)}, "key": key,
                    "num_records": len(table), "num_samples": len(samples), "skipped": dict(skipped),
                    "dropped": dict(dropped), "shards": shards, "workers": workers,
                    "seconds": round(time.perf_counter() - start, 2)}
            write_json(tmp / "manifest.json", info)
    except DataError as err:
        with atomic_file(error) as tmp:  # the waiting ranks raise it too
            tmp.write_text(str(err))
        raise
    log(f"data: prepared {info['num_samples']} samples in {info['seconds']} s{_counts(info)}")
    return folder, info


def _counts(info: dict) -> str:
    parts = [f"skipped/{k}: {v}" for k, v in info.get("skipped", {}).items()]
    parts += [f"dropped/{k}: {v}" for k, v in info.get("dropped", {}).items()]
    return ("; " + ", ".join(parts)) if parts else ""


def wait_for(folder: Path, poll_s: float = 1.0, timeout_s: float = 7 * 24 * 3600,
             log: Callable[[str], None] = print) -> dict:
    """Wait for another process (rank 0) to finish preparing `folder`; its manifest. DataError if it failed."""
    folder, error = Path(folder), Path(folder).with_name(Path(folder).name + ".error")
    deadline, told, since = time.monotonic() + timeout_s, False, time.time() - STALE_ERROR_S
    while True:
        done = manifest(folder)
        if done is not None:
            return done
        if error.exists() and error.stat().st_mtime >= since:  # an older one is a previous run's (rank 0 removes it)
            raise DataError(error.read_text())
        if time.monotonic() > deadline:
            raise DataError(f"{folder}: not prepared after {timeout_s:.0f} s; is rank 0 preparing it? "
                            "Run `python scripts/prepare_data.py <the same overrides>` first")
        if not told:
            log(f"data: waiting for rank 0 to prepare {folder}")
            told = True
        time.sleep(poll_s)
