"""The loggers of a run: its own `metrics.csv`, always, plus the trackers `cfg.logger` instantiates.

`cfg.logger` (conf/logger/*.yaml) maps names to Hydra `_target_` nodes, one per tracker. A tracker target
is called with its YAML arguments plus what only the run knows: `run_dir` (the run directory), `run_name`
and `params` (the resolved config, flattened to dotted keys). The targets here:

- `mlflow_logger`: MLflow on any tracking URI (the local sqlite file by default, or `http://host:5000`),
  continuing the run recorded in `<run_dir>/mlflow_run_id` after a restart;
- `tensorboard_logger`: event files under `<run_dir>/tensorboard`;
- `wandb_logger`: Weights & Biases, offline unless told otherwise, continuing the run recorded in
  `<run_dir>/wandb_run_id`.

A missing package stops the run with an ImportError naming the extra to install.

`RunCSVLogger` writes `<run_dir>/metrics.csv`: steps of later phases are offset by the steps of the earlier
ones, so one file covers a multi-phase run without repeated step numbers; on resume it keeps the rows written
before the checkpoint and drops those logged after it (they are about to be recomputed).

`log_artifacts` attaches files (config.yaml, results.json) to the tracked runs at the end.
"""

from __future__ import annotations

import csv
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from lightning.pytorch.loggers import Logger, MLFlowLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from data.atomic import atomic_file


def build_loggers(cfg: DictConfig, run_dir: Path, step_offset: int, resume_step: int, name: str,
                  last_row: dict | None = None) -> list:
    """metrics.csv plus the trackers `cfg.logger` names; only rank 0 logs (other ranks get none)."""
    if rank_zero_only.rank != 0:
        return []
    loggers: list = [RunCSVLogger(run_dir, step_offset=step_offset, resume_step=resume_step, last_row=last_row)]
    trackers = [node for node in (cfg.get("logger") or {}).values() if node is not None]
    if trackers:
        params = {k: str(v) for k, v in flatten(OmegaConf.to_container(cfg, resolve=True)).items()}
        for node in trackers:  # the YAML arguments bound by Hydra, then the run's own values
            make_tracker = instantiate(node, _partial_=True, _convert_="all")
            loggers.append(make_tracker(run_dir=Path(run_dir), run_name=name, params=params))
    return loggers


def flatten(nested: Mapping, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}."""
    out = {}
    for key, value in nested.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


class RunCSVLogger(Logger):
    """Writes `<run_dir>/metrics.csv` (one row per logged step, columns sorted, a `step` column).

    `step_offset` (the steps of earlier phases) is added to every step. Making the logger trims the file
    to the rows before `step_offset + resume_step` (`resume_step`: the step of the checkpoint this phase
    resumes from, 0 for a fresh start), restoring `last_row` (the checkpoint's own step, which Lightning
    logs after the save) at the step before when a kill lost it. Rows are buffered and appended every
    `flush_logs_every_n_steps` steps and on `save()`."""

    def __init__(self, run_dir: Path, step_offset: int = 0, resume_step: int = 0, flush_logs_every_n_steps: int = 10,
                 last_row: dict | None = None):
        super().__init__()
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "metrics.csv"
        self.step_offset = step_offset
        self.flush_every = flush_logs_every_n_steps
        self.rows: list[dict] = []
        self.columns = self._keep_history(step_offset + resume_step, last_row)

    @property
    def name(self) -> str:
        return ""

    @property
    def version(self) -> str:
        return ""

    @property
    def save_dir(self) -> str:
        return str(self.run_dir)

    @rank_zero_only
    def log_hyperparams(self, params: Any = None, *args: Any, **kwargs: Any) -> None:
        """Nothing: the resolved config is already saved as config.yaml."""

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        step = len(self.rows) if step is None else step + self.step_offset
        self.rows.append({**{k: v.item() if hasattr(v, "item") else v for k, v in metrics.items()}, "step": step})
        if (step + 1) % self.flush_every == 0:
            self.save()

    @rank_zero_only
    def save(self) -> None:
        if not self.rows:
            return
        new = {k for row in self.rows for k in row} - set(self.columns)
        if new or not self.path.exists():
            self.columns = sorted([*self.columns, *new])
            self._write(self._read_rows() + self.rows)
        else:
            with open(self.path, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=self.columns).writerows(self.rows)
        self.rows = []

    @rank_zero_only
    def finalize(self, status: str) -> None:
        self.save()

    def _keep_history(self, keep_before_step: int, last_row: dict | None) -> list[str]:
        """Trim the file to the rows before `keep_before_step` (restoring the checkpoint's row); its columns."""
        if not self.path.is_file():
            return []
        with open(self.path, newline="") as f:
            reader = csv.DictReader(f)
            columns = list(reader.fieldnames or [])
            rows = [r for r in reader if r.get("step") not in (None, "") and int(float(r["step"])) < keep_before_step]
        last = keep_before_step - 1
        if last_row and last >= 0 and not any(int(float(r["step"])) == last for r in rows):
            rows.append({**{k: str(v) for k, v in last_row.items()}, "step": str(last)})
            columns += [k for k in last_row if k not in columns]
        self.columns = columns
        self._write(rows)
        return columns

    def _read_rows(self) -> list[dict]:
        if not self.path.is_file():
            return []
        with open(self.path, newline="") as f:
            return list(csv.DictReader(f))

    def _write(self, rows: list[dict]) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with atomic_file(self.path) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns)
            writer.writeheader()
            writer.writerows(rows)


def mlflow_logger(run_dir: Path, run_name: str, params: dict, tracking_uri: str,
                  experiment_name: str = "refract") -> MLFlowLogger:
    """MLflow logging to `tracking_uri`, continuing the run recorded in `<run_dir>/mlflow_run_id` after a
    restart; a new run gets `params` and artifacts stored in `<run_dir>/../mlartifacts`."""
    id_file = run_dir / "mlflow_run_id"
    run_id = id_file.read_text().strip() if id_file.exists() else None
    # artifacts next to the runs (MLflow's default is ./mlruns in the working directory)
    logger = MLFlowLogger(experiment_name=experiment_name, run_name=run_name, tracking_uri=tracking_uri, run_id=run_id,
                          artifact_location=(run_dir.parent / "mlartifacts").resolve().as_uri())
    if run_id is None:
        id_file.write_text(logger.run_id)
        logger.log_hyperparams(params)
    return logger


def tensorboard_logger(run_dir: Path, run_name: str, params: dict):
    """TensorBoard event files in `<run_dir>/tensorboard` (needs tensorboardX or tensorboard)."""
    require_package("tensorboard", "tensorboardX", "tensorboard")
    from lightning.pytorch.loggers import TensorBoardLogger

    return TensorBoardLogger(save_dir=str(run_dir), name="tensorboard", version="", default_hp_metric=False)


def wandb_logger(run_dir: Path, run_name: str, params: dict, project: str = "refract", mode: str = "offline"):
    """Weights & Biases in `mode` (offline, online, disabled), files under `run_dir`, continuing the run
    recorded in `<run_dir>/wandb_run_id` after a restart; a new run gets `params`."""
    require_package("wandb", "wandb")
    from lightning.pytorch.loggers import WandbLogger

    id_file = run_dir / "wandb_run_id"
    run_id = id_file.read_text().strip() if id_file.exists() else None
    logger = WandbLogger(project=project, name=run_name, save_dir=str(run_dir), id=run_id,
                         resume="allow" if run_id else None, mode=mode)
    if run_id is None:
        id_file.write_text(logger.experiment.id)
        logger.log_hyperparams(params)
    return logger


def require_package(logger: str, *modules: str) -> None:
    """An ImportError naming the extra to install when none of `modules` can be imported."""
    if not any(importlib.util.find_spec(m) for m in modules):
        raise ImportError(f"logger={logger} needs the {modules[-1]} package: pip install -e \".[{logger}]\"")


def log_artifacts(loggers: list, paths: list[Path]) -> None:
    """Files (config.yaml, results.json, plots) attached to the tracked run (MLflow and W&B)."""
    for logger in loggers:
        for path in paths:
            if not Path(path).exists():
                continue
            if isinstance(logger, MLFlowLogger):
                logger.experiment.log_artifact(logger.run_id, str(path))
            elif type(logger).__name__ == "WandbLogger":
                logger.experiment.save(str(path), base_path=str(Path(path).parent), policy="now")
