"""`trainer.profile=true` writes a Chrome trace and a text summary (top operators, data-wait fraction) into the
run directory; every log step of a run carries the throughput columns."""

import csv
import re
from pathlib import Path

from core.run import train


def test_profile_writes_trace_and_summary_and_metrics_have_throughput(small_cfg):
    cfg = small_cfg("stage=single_stage", "stage.phases.finetune.global_batch_size=4", "trainer.max_steps=4", "trainer.profile=true",
                    "trainer.profile_steps=2", "run.name=prof", "trainer.threads=1")
    train(cfg)
    profile = Path(cfg.run.root) / "prof" / "profile"
    summary = (profile / "fit-summary.txt").read_text()
    wait = re.search(r"data wait: ([\d.]+)% of the profiled steps' time", summary)
    assert wait and 0.0 <= float(wait.group(1)) < 100.0
    assert "aten::" in summary and "Self CPU" in summary  # the operator table
    assert list(profile.glob("*.pt.trace.json"))
    with open(Path(cfg.run.root) / "prof" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    assert len(rows) == 4
    assert all(float(r["perf/tokens_per_sec_per_device"]) > 0 and float(r["perf/step_time"]) > 0 for r in rows)
