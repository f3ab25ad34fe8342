"""Hydra callback that writes what a multirun found: `<sweep dir>/summary.md`, with a benchmark chart and loss curves.

`python train.py -m projector=linear,mlp eval.benchmarks=[sort_of_clevr]` runs each job in its own run
directory (each job's overrides give it its own run name) and, with `eval.benchmarks` set, evaluates it
after training (core/after_training.py). When the sweep ends, `summary.md` lists per job: the overrides that
differ between jobs (those common to all are said once above the table), the final training loss of each
phase, each benchmark's main metric (`core.report.main_metric`: F1 for POPE, accuracy otherwise), read back
from the job's `results.json`, and its run directory; a failed job's row carries its error. Below the table:
`summary.png` (the main metrics across jobs, one bar per job) and `summary_loss.png` (each job's `train/loss`
per step from its metrics.csv). The table is printed too. docs/sweeps.md shows a whole session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from core.report import benchmark_chart, loss_chart, loss_curve, main_metric, main_metrics
from data.atomic import read_json, write_json


class SweepSummary(Callback):
    """Each job records its overrides, run directory and error in `<sweep dir>/<job number>/job.json` (in the
    job's own process, which under a cluster launcher such as submitit is not the launching one); when the sweep
    ends, the launching process reads them back and writes and prints the summary."""

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if OmegaConf.select(config, "hydra.job.num", default=None) is None:
            return  # a single run (not -m): no sweep to summarise
        job = {"number": int(config.hydra.job.num), "overrides": list(job_return.overrides or []), "run_dir": None,
               "error": ""}
        try:
            returned = job_return.return_value if isinstance(job_return.return_value, dict) else {}
            job["run_dir"] = returned.get("run_dir")
        except Exception as err:  # the job failed: its row says so instead of vanishing
            job["error"] = f"{type(err).__name__}: {err}".splitlines()[0]
            job["run_dir"] = _run_dir_of(job_return.cfg)  # training may have finished before the failure
        write_json(Path(config.hydra.runtime.output_dir) / "job.json", job)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        out = Path(config.hydra.sweep.dir)
        jobs = sorted((read_json(p) for p in out.glob("*/job.json")), key=lambda job: job["number"])
        text = write_summary(jobs, out)
        print(text)
        print(f"sweep summary written to {out / 'summary.md'}")


def _run_dir_of(cfg: DictConfig | None) -> str | None:
    from core.run import run_dir_of  # core.run imports the training stack; only needed for a failed job

    try:
        return str(run_dir_of(cfg)) if cfg is not None else None
    except Exception:  # a config that does not even resolve: no run directory to read
        return None


def write_summary(jobs: list[dict], out: Path) -> str:
    """Write `out/summary.md`, `out/summary.png`, `out/summary_loss.png` for `jobs` ({"number", "overrides",
    "run_dir", "error"} each, in launch order); return the markdown."""
    out.mkdir(parents=True, exist_ok=True)
    common = [o for o in (jobs[0]["overrides"] if jobs else []) if all(o in j["overrides"] for j in jobs)]
    labels, losses, metrics, curves = [], [], [], {}
    for number, job in enumerate(jobs):
        own = [o for o in job["overrides"] if o not in common]
        labels.append(f"#{job.get('number', number)} " + (" ".join(own) or "(no overrides)"))
        run_dir = Path(job["run_dir"]) if job["run_dir"] else None
        train = read_json(run_dir / "results.json", default={}).get("train", {}) if run_dir else {}
        losses.append({k: v for k, v in train.items() if k.endswith("/train_loss")})
        metrics.append(main_metrics(run_dir) if run_dir else {})
        curves[labels[-1]] = loss_curve(run_dir) if run_dir else []
    loss_keys = _union(losses)
    benchmarks = sorted(_union(metrics))
    head = ["job", *loss_keys, *(f"{b} ({main_metric(b)})" for b in benchmarks), "run"]
    if any(job["error"] for job in jobs):
        head.append("error")
    lines = [f"# Sweep summary: {len(jobs)} jobs", ""]
    if common:
        lines += ["Overrides common to every job: `" + " ".join(common) + "`", ""]
    numeric = len(loss_keys) + len(benchmarks)
    lines += ["| " + " | ".join(head) + " |", "|---|" + "---:|" * numeric + "---|" * (len(head) - 1 - numeric)]
    for label, job, loss, metric in zip(labels, jobs, losses, metrics):
        cells = [label, *(_fmt(loss.get(k), 4) for k in loss_keys), *(_fmt(metric.get(b), 2) for b in benchmarks),
                 job["run_dir"] or ""]
        lines.append("| " + " | ".join(cells + ([job["error"]] if "error" in head else [])) + " |")
    if benchmarks:
        values = {(b, label): m[b] for label, m in zip(labels, metrics) for b in m}
        benchmark_chart(labels, benchmarks, values, out / "summary.png")
        lines += ["", "![main metric per benchmark and job](summary.png)"]
    loss_chart(curves, out / "summary_loss.png")
    lines += ["", "![training loss per step and job](summary_loss.png)"]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def _union(dicts: list[dict]) -> list[str]:
    keys: list[str] = []
    for d in dicts:
        keys += [k for k in d if k not in keys]
    return keys


def _fmt(value: Any, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)
