"""Hydra callback that writes a markdown table of a multirun's final metrics.

`python train.py -m encoder=A,B backbone=C` runs each job in its own run
directory (each job's overrides give it its own run name); when the sweep ends,
`<sweep dir>/summary.md` lists every job's overrides, run directory and the
metrics its `train` returned, and the table is printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepSummary(Callback):
    """Collects each job's overrides and returned metrics; writes and prints the table when the sweep ends."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, dict]] = []

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        overrides = " ".join(job_return.overrides or [])
        try:
            metrics = job_return.return_value if isinstance(job_return.return_value, dict) else {}
        except Exception as err:  # the job failed: its row says so instead of vanishing
            metrics = {"error": f"{type(err).__name__}: {err}".splitlines()[0]}
        self.rows.append((overrides, metrics))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        text = summary_markdown(self.rows)
        out = Path(config.hydra.sweep.dir) / "summary.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(text)
        print(f"sweep summary written to {out}")


def summary_markdown(rows: list[tuple[str, dict]]) -> str:
    """A markdown table: one row per job (its overrides), one column per metric any job returned."""
    keys: list[str] = []
    for _, metrics in rows:
        keys += [k for k in metrics if k not in keys]
    lines = ["| overrides | " + " | ".join(keys) + " |", "|" + "---|" * (len(keys) + 1)]
    for overrides, metrics in rows:
        cells = [_fmt(metrics.get(k, "")) for k in keys]
        lines.append(f"| {overrides} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)
