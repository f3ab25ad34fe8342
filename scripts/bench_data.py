"""Benchmark the data path at LLaVA scale: preparation (in-process vs Ray Data at 1 and 2 workers), and a restart
of `train.py` on a warm cache (time to the first step, peak RSS of the training process).

    python scripts/make_synthetic_llava.py --out /tmp/syn665k --records 665000
    python scripts/bench_data.py --root /tmp/syn665k --out /tmp/bench_data [--steps inprocess ray1 ray2 train]

The data is `data=llava_v15 data.root=ROOT`'s `instruct` split (the mix665k-shaped file), tokenized for the
default tiny model (`stage=single_stage`: the backbone's prompt format). Steps:
- `inprocess`: today's path, `data.llava.load_llava` + `vlm.dataset.tokenize_records` in this process;
- `ray1`, `ray2`: `data.prepare.prepare_source` into a fresh cache with 1 / 2 Ray workers (Ray's start included);
- `train`: `python train.py ... data.cache=<ray2's cache> ...max_steps=1` as a child process, timed from its
  start to the end of its first optimizer step (the `step: 1/` progress line the run prints; the whole run's wall time
  is printed too) and its peak RSS (the kernel's VmHWM of the child, read from /proc/PID/status every 50 ms; the
  child's `ru_maxrss` is printed too, but it counts this process's pages shared before the exec), with the peaks of
  its anonymous, file-backed and shared parts, and `rss_timeline` (every 0.5 s: seconds, VmRSS, anonymous,
  file-backed MB and the run's newest output line), which shows the RSS before the first step and the step's own.
Prints one line per step and a JSON summary (also written to OUT/bench_data.json).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def overrides(root: Path) -> list[str]:
    return ["data=llava_v15", f"data.root={root}", "stage=single_stage", "data.num_workers=0"]


def build(root: Path):
    from hydra import compose, initialize_config_dir

    from data.sources import resolve
    from vlm.model import build_vlm

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides(root))
    model = build_vlm(cfg)
    return model, resolve(cfg.data).splits["instruct"][0]


def bench_inprocess(model, src) -> dict:
    from data.llava import load_llava
    from vlm.dataset import tokenize_records

    start = time.perf_counter()
    records, _ = load_llava(src.json, src.image_root)
    samples, _ = tokenize_records(records, model.prompt_format, src.image_root, model.backbone.max_length,
                                  model.encoder.num_patches)
    return {"seconds": round(time.perf_counter() - start, 1), "samples": len(samples),
            "peak_rss_mb_of_this_process": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def bench_ray(model, src, workers: int, cache: Path) -> dict:
    from vlm.dataset import prepared_samples

    shutil.rmtree(cache, ignore_errors=True)
    start = time.perf_counter()
    parts, _, _ = prepared_samples([src], model.prompt_format, model.backbone.max_length, model.encoder.num_patches,
                                   None, cache, skip_bad=False, workers=workers)
    return {"seconds": round(time.perf_counter() - start, 1), "samples": sum(len(p) for p in parts)}


def _watch_rss_parts(pid: int, peaks: dict, stop: threading.Event, every: float = 0.05,
                     timeline: list | None = None, last_line: list | None = None, timeline_every: float = 0.5) -> None:
    """Keep in `peaks` the largest VmHWM / RssAnon / RssFile / RssShmem (MB) that /proc/PID/status showed while it
    ran. VmHWM is the kernel's peak RSS of the program since its exec; anonymous memory is what the process itself
    holds (heap, tensors); file-backed pages are the mapped libraries and memory-mapped shards, which the page cache
    shares with every other process mapping the same files. With `timeline`, every `timeline_every` s it appends
    [seconds, VmRSS, RssAnon, RssFile, the process's newest output line (`last_line[0]`)]: where the peak comes from."""
    start, next_mark = time.perf_counter(), 0.0
    while not stop.is_set():
        try:
            text = Path(f"/proc/{pid}/status").read_text()
        except OSError:  # the process has exited
            return
        now = {}
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem"):
                now[key] = round(int(value.split()[0]) / 1024)
                if key != "VmRSS":
                    peaks[key] = max(peaks.get(key, 0), now[key])
        if "VmRSS" not in now:  # a zombie (exited, not yet reaped) has no memory lines
            return
        if timeline is not None and (t := time.perf_counter() - start) >= next_mark:
            timeline.append([round(t, 1), now.get("VmRSS"), now.get("RssAnon"), now.get("RssFile"),
                             (last_line or [""])[0][:80]])
            next_mark += timeline_every
        stop.wait(every)


def bench_train(root: Path, cache: Path, out: Path) -> dict:
    cmd = [sys.executable, "train.py", *overrides(root), f"data.cache={cache}", "logger=csv", f"run.root={out / 'runs'}",
           "stage.phases.finetune.max_steps=1", "stage.phases.finetune.global_batch_size=8", "trainer.log_every_n_steps=1",
           "trainer.progress_bar=true", "trainer.progress_every=1", "eval.benchmarks=[]"]
    print("$ " + " ".join(cmd), flush=True)
    shutil.rmtree(out / "runs", ignore_errors=True)
    start = time.perf_counter()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    rss_parts, stop, timeline, last_line = {}, threading.Event(), [], [""]
    watcher = threading.Thread(target=_watch_rss_parts, args=(proc.pid, rss_parts, stop, 0.05, timeline, last_line),
                               daemon=True)
    watcher.start()
    first_step, reused, lines = None, False, []
    for line in proc.stdout:
        lines.append(line)
        last_line[0] = line.strip()
        reused = reused or "reusing prepared cache" in line
        if line.startswith("data {"):  # the data module's line: how many samples the run holds
            print(line.rstrip(), flush=True)
        if first_step is None and "step: 1/" in line:
            first_step = time.perf_counter() - start
    stop.set()
    watcher.join()
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS (not other children of this process)
    rc = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if rc:
        sys.stdout.write("".join(lines[-40:]))
        raise SystemExit(f"train.py failed ({rc})")
    # ru_maxrss also counts the pages the child shared with this process between fork and exec: after the Ray
    # steps this process is several GB, so the kernel's VmHWM of the training program is the figure
    peak = rss_parts.pop("VmHWM", None)
    return {"wall_seconds": round(wall, 1), "first_step_seconds": round(first_step, 1) if first_step else None,
            "peak_rss_mb": peak, "ru_maxrss_mb": round(usage.ru_maxrss / 1024),
            "peak_rss_parts_mb": {k.removeprefix("Rss").lower(): v for k, v in rss_parts.items()}, "reused_cache": reused,
            "rss_timeline": timeline}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, required=True, help="a make_synthetic_llava.py folder")
    p.add_argument("--out", type=Path, default=Path("/tmp/bench_data"))
    p.add_argument("--steps", nargs="+", default=["inprocess", "ray1", "ray2", "train"])
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results, model = {}, None
    for step in args.steps:  # in the order given
        if step == "train":
            results[step] = bench_train(args.root.resolve(), args.out / "cache-ray2", args.out)
        else:
            if model is None:
                model, src = build(args.root)
            if step == "inprocess":
                results[step] = bench_inprocess(model, src)
            else:
                results[step] = bench_ray(model, src, int(step.removeprefix("ray")), args.out / f"cache-{step}")
        print(f"{step}: {results[step]}", flush=True)
    print(json.dumps(results, indent=1))
    (args.out / "bench_data.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
