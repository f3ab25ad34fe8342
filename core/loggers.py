"""Loggers of a run: a CSV file that survives restarts, MLflow that continues its run (any tracking
URI: the local sqlite file by default, or a server `http://host:5000`), and by name TensorBoard and
Weights & Biases (offline by default). `log_artifacts` attaches config.yaml / results.json at the end.

`metrics.csv` keeps the rows written before the checkpoint a run resumes from
and drops those logged after it (they are about to be recomputed). Steps of
later phases are offset by the steps of the earlier ones, so one file covers a
two-stage run without repeated step numbers.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger, MLFlowLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from data.atomic import atomic_file


class _KeepingWriter(ExperimentWriter):
    def __init__(self, log_dir: str, keep_before_step: int, last_row: dict | None = None):
        self.keep_before_step = keep_before_step
        self.last_row = last_row  # the checkpoint's own step, logged after the save: restored if a kill lost it
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:  # called by the parent's __init__: keep history instead of deleting it
        path = self.metrics_file_path
        if not os.path.isfile(path):
            return
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            rows = [r for r in reader if r.get("step") not in (None, "") and int(float(r["step"])) < self.keep_before_step]
        last = self.keep_before_step - 1
        if self.last_row and last >= 0 and not any(int(float(r["step"])) == last for r in rows):
            rows.append({**{k: str(v) for k, v in self.last_row.items()}, "step": str(last)})
            header += [k for k in self.last_row if k not in header]
        with atomic_file(Path(path)) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=header)
            writer.writeheader()
            writer.writerows(rows)
        self.metrics_keys = header


class RunCSVLogger(CSVLogger):
    """CSVLogger writing `<run_dir>/metrics.csv` directly, resuming instead of truncating."""

    def __init__(self, run_dir: Path, step_offset: int = 0, resume_step: int = 0, flush_logs_every_n_steps: int = 10,
                 last_row: dict | None = None):
        super().__init__(save_dir=str(run_dir), name="", version="", flush_logs_every_n_steps=flush_logs_every_n_steps)
        self.step_offset = step_offset
        self.resume_step = resume_step
        self.last_row = last_row

    @property
    def experiment(self):
        if self._experiment is None:
            self._experiment = _KeepingWriter(self.log_dir, self.step_offset + self.resume_step, self.last_row)
        return self._experiment

    def log_metrics(self, metrics, step=None):
        super().log_metrics(metrics, None if step is None else step + self.step_offset)

    def log_hyperparams(self, params=None):  # the resolved config is already saved as config.yaml
        return None


def mlflow_logger(run_dir: Path, tracking_uri: str, experiment_name: str, run_name: str, params: dict) -> MLFlowLogger:
    """An MLflow logger that continues the run recorded in `<run_dir>/mlflow_run_id` after a restart."""
    id_file = run_dir / "mlflow_run_id"
    run_id = id_file.read_text().strip() if id_file.exists() else None
    # artifacts next to the runs (MLflow's default is ./mlruns in the working directory)
    logger = MLFlowLogger(experiment_name=experiment_name, run_name=run_name, tracking_uri=tracking_uri, run_id=run_id,
                          artifact_location=(run_dir.parent / "mlartifacts").resolve().as_uri())
    if run_id is None:
        id_file.write_text(logger.run_id)
        logger.log_hyperparams(params)
    return logger


def optional_loggers(logger_cfg, run_dir: Path, run_name: str, params: dict) -> list:
    """TensorBoard (`logger=tensorboard`) and Weights & Biases (`logger=wandb`, offline unless WANDB_MODE says
    otherwise) loggers, when the config names them; a clear error when their package is missing."""
    out = []
    if logger_cfg.get("tensorboard") is not None:
        from lightning.pytorch.loggers import TensorBoardLogger

        _require("tensorboard", "tensorboardX", "tensorboard")
        tb = TensorBoardLogger(save_dir=str(run_dir), name="tensorboard", version="", default_hp_metric=False)
        out.append(tb)
    wandb_cfg = logger_cfg.get("wandb")
    if wandb_cfg is not None:
        from lightning.pytorch.loggers import WandbLogger

        _require("wandb", "wandb")
        os.environ.setdefault("WANDB_MODE", str(wandb_cfg.get("mode") or "offline"))
        id_file = run_dir / "wandb_run_id"  # the same run continues after a restart
        run_id = id_file.read_text().strip() if id_file.exists() else None
        wb = WandbLogger(project=wandb_cfg.get("project", "refract"), name=run_name, save_dir=str(run_dir),
                         id=run_id, resume="allow" if run_id else None)
        if run_id is None:
            id_file.write_text(wb.experiment.id)
            wb.log_hyperparams(params)
        out.append(wb)
    return out


def _require(logger: str, *modules: str) -> None:
    import importlib.util

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
