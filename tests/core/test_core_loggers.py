"""metrics.csv across a restart: rows after the checkpoint are dropped, the checkpoint's own step (logged
by Lightning only after the save) is restored from the checkpoint if a kill lost it."""

import csv

from core.loggers import RunCSVLogger


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
