"""Loggers of a run: metrics.csv is written like Lightning's CSVLogger writes it, keeps its history across a
restart (rows after the checkpoint dropped, the checkpoint's own step restored if a kill lost it); trackers
are instantiated from `cfg.logger` `_target_` nodes with the run's directory, name and flattened config; W&B
continues its run and stays offline by default; a missing package names the extra to install."""

import csv

import lightning.pytorch.loggers as pl_loggers
import pytest
import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import OmegaConf

import core.loggers
from core.loggers import RunCSVLogger, build_loggers, require_package, wandb_logger
from tests.conftest import compose_cfg


def write_rows(path, steps):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["epoch", "step", "train/loss"])
        writer.writeheader()
        writer.writerows({"epoch": 0, "step": s, "train/loss": 1.0 / (s + 1)} for s in steps)


def rows(path):
    with open(path, newline="") as f:
        return [(int(r["step"]), float(r["train/loss"])) for r in csv.DictReader(f)]


def test_resume_drops_later_rows_and_restores_the_lost_checkpoint_row(tmp_path):
    write_rows(tmp_path / "metrics.csv", [0, 1, 2, 3, 6, 7])  # step 4 was never flushed; 6, 7 came after the checkpoint
    logger = RunCSVLogger(tmp_path, resume_step=5, last_row={"train/loss": 0.25})
    logger.log_metrics({"train/loss": 0.125}, step=5)
    logger.save()
    assert rows(tmp_path / "metrics.csv") == [(0, 1.0), (1, 0.5), (2, 1 / 3), (3, 0.25), (4, 0.25), (5, 0.125)]


def test_restored_row_is_not_duplicated_and_offsets_apply(tmp_path):
    write_rows(tmp_path / "metrics.csv", [10, 11, 12, 13, 14, 15])
    logger = RunCSVLogger(tmp_path, step_offset=10, resume_step=5, last_row={"train/loss": 9.0})
    logger.log_metrics({"train/loss": 0.5}, step=5)
    logger.save()
    assert [s for s, _ in rows(tmp_path / "metrics.csv")] == [10, 11, 12, 13, 14, 15]
    assert rows(tmp_path / "metrics.csv")[4] == (14, 1 / 15)  # the row on disk wins over the checkpoint copy


def test_fresh_file_is_byte_identical_to_lightnings_csv_logger(tmp_path):
    """Same calls (a column appearing late, tensors, flushes mid-way) into Lightning's CSVLogger and ours."""
    ours, theirs = RunCSVLogger(tmp_path / "ours"), pl_loggers.CSVLogger(tmp_path / "theirs", name="", version="",
                                                                         flush_logs_every_n_steps=10)
    for step in range(25):
        metrics = {"train/loss": torch.tensor(1.0 / (step + 1)), "epoch": step // 7}
        if step >= 12:
            metrics["perf/step_time"] = 0.1 * step
        for logger in (ours, theirs):
            logger.log_metrics(metrics, step=step)
    for logger in (ours, theirs):
        logger.finalize("success")
    assert (tmp_path / "ours" / "metrics.csv").read_bytes() == (tmp_path / "theirs" / "metrics.csv").read_bytes(), \
        "metrics.csv no longer matches what Lightning's CSVLogger writes: see what changed there and update RunCSVLogger"


def record_tracker(run_dir, run_name, params, colour, size=1):
    """A tracker target for the tests: returns what it was called with."""
    return {"run_dir": run_dir, "run_name": run_name, "params": params, "colour": colour, "size": size}


def test_trackers_are_instantiated_from_their_target_with_the_runs_values(tmp_path):
    cfg = compose_cfg("logger=csv", "trainer.max_steps=7")
    cfg.logger = OmegaConf.create({"fake": {"_target_": f"{__name__}.record_tracker", "colour": "${trainer.accelerator}"},
                                   "off": None})
    csv_logger, fake = build_loggers(cfg, tmp_path, step_offset=3, resume_step=0, name="run-a")
    assert isinstance(csv_logger, RunCSVLogger) and csv_logger.step_offset == 3
    assert fake["run_dir"] == tmp_path and fake["run_name"] == "run-a" and (fake["colour"], fake["size"]) == ("cpu", 1)
    assert fake["params"]["trainer.max_steps"] == "7" and fake["params"]["logger.fake.colour"] == "cpu"
    assert all(isinstance(v, str) for v in fake["params"].values())
    assert [type(x) for x in build_loggers(compose_cfg("logger=csv"), tmp_path, 0, 0, "run-a")] == [RunCSVLogger]


def test_other_ranks_get_no_loggers(tmp_path, monkeypatch):
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    assert build_loggers(compose_cfg("logger=mlflow"), tmp_path, 0, 0, "run-a") == []
    assert not (tmp_path / "metrics.csv").exists() and not (tmp_path / "mlflow_run_id").exists()


def test_tensorboard_writes_event_files_under_the_run(tmp_path):
    _, tb = build_loggers(compose_cfg("logger=tensorboard"), tmp_path, 0, 0, "run-a")
    tb.log_metrics({"train/loss": 1.0}, step=0)
    tb.finalize("success")
    assert list((tmp_path / "tensorboard").rglob("events.out.tfevents.*"))


class FakeWandbLogger:
    """Records the arguments WandbLogger would pass to wandb.init; the experiment gets a fresh id."""

    made: list = []

    def __init__(self, **kwargs):
        self.kwargs, self.params = kwargs, None
        self.experiment = type("Run", (), {"id": kwargs.get("id") or f"id{len(self.made)}"})()
        self.made.append(self)

    def log_hyperparams(self, params):
        self.params = params


def test_wandb_is_offline_by_default_and_continues_its_run(tmp_path, monkeypatch):
    monkeypatch.setattr(pl_loggers, "WandbLogger", FakeWandbLogger, raising=False)
    monkeypatch.setattr(core.loggers, "require_package", lambda *names: None)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    node = compose_cfg("logger=wandb").logger.wandb
    assert OmegaConf.to_container(node, resolve=True)["mode"] == "offline"
    first = wandb_logger(tmp_path, "run-a", {"a.b": "1"}, project="p")
    again = wandb_logger(tmp_path, "run-a", {"a.b": "1"}, project="p")
    assert (tmp_path / "wandb_run_id").read_text() == first.experiment.id
    assert first.kwargs["mode"] == "offline" and first.kwargs["id"] is None and first.params == {"a.b": "1"}
    assert again.kwargs["id"] == first.experiment.id and again.kwargs["resume"] == "allow" and again.params is None


def test_missing_package_names_the_extra():
    with pytest.raises(ImportError, match=r"logger=wandb needs the no_such_tracker_package package: pip install -e \"\.\[wandb\]\""):
        require_package("wandb", "no_such_tracker_package")
    require_package("tensorboard", "no_such_tracker_package", "csv")  # one of them is enough
