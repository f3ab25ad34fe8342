"""Rollout metrics carry episodes, successes and 95% Wilson intervals per task and overall (no MuJoCo: the pure
assembly `behavior.rollout.rollout_metrics`), and the rollout table and `scripts/report.py` show them."""
import json
import sys
from pathlib import Path

import pytest

from behavior.rollout import print_table, rollout_metrics
from eval.wilson import wilson_interval

REPO = Path(__file__).resolve().parents[2]


def test_rollout_metrics_per_task_and_pooled():
    outcomes = {"reach-v3": [True] * 7 + [False] * 3, "push-v3": [True] * 10}
    m = rollout_metrics(outcomes, [100] * 3 + [50] * 17)
    assert m["per_task"] == {"reach-v3": 70.0, "push-v3": 100.0}  # as before: {task: success percent}
    assert m["per_task_episodes"] == {"reach-v3": 10, "push-v3": 10}
    assert m["per_task_successes"] == {"reach-v3": 7, "push-v3": 10}
    assert m["per_task_ci"]["reach-v3"] == pytest.approx(list(wilson_interval(7, 10)))
    assert m["per_task_ci"]["push-v3"][1] == pytest.approx(100.0)
    # equal episodes per task: the pooled rate 17/20 is the mean of the per-task rates
    assert m["success_rate"] == pytest.approx(85.0) and (m["successes"], m["episodes"]) == (17, 20)
    low, high = wilson_interval(17, 20)
    assert (m["success_rate_ci_low"], m["success_rate_ci_high"]) == pytest.approx((low, high))
    assert low < m["success_rate"] < high
    assert m["mean_episode_length"] == pytest.approx(57.5)
    json.dumps(m, allow_nan=False)  # results.json-ready: plain numbers, lists and dicts


def test_rollout_metrics_unequal_counts_interval_is_the_pooled_one():
    m = rollout_metrics({"a": [True], "b": [False] * 3}, [1, 2, 3, 4])
    assert m["success_rate"] == pytest.approx(50.0)  # mean over tasks
    assert (m["success_rate_ci_low"], m["success_rate_ci_high"]) == pytest.approx(wilson_interval(1, 4))


def test_print_table_shows_episodes_and_intervals(capsys):
    from behavior import rollout

    m = rollout_metrics({"reach-v3": [True] * 7 + [False] * 3}, [10] * 10)
    rollout.console.width = 120
    print_table(m)
    out = capsys.readouterr().out
    assert "reach-v3" in out and "70.0" in out and "[39.7, 89.2]" in out and "10" in out
    print_table({"episodes": 2, "per_task": {"a": 50.0}, "success_rate": 50.0})  # an older results.json: no CI
    assert "50.0" in capsys.readouterr().out


def test_report_shows_rollout_success_with_interval(tmp_path, capsys):
    sys.path.insert(0, str(REPO / "scripts"))
    import report

    m = rollout_metrics({"reach-v3": [True] * 7 + [False] * 3, "push-v3": [True] * 10}, [10] * 20)
    run = tmp_path / "gpt"
    run.mkdir()
    (run / "config.yaml").write_text("{}\n")
    (run / "results.json").write_text(json.dumps({"benchmarks": {"rollouts": m}, **m}))
    old = tmp_path / "old"  # before the intervals: only the success rates
    old.mkdir()
    (old / "results.json").write_text(json.dumps({"benchmarks": {"rollouts": {"success_rate": 90.0, "episodes": 20,
                                                                             "per_task": {"reach-v3": 80.0}}}}))
    assert report.main([str(run), str(old), "--out", str(tmp_path / "o")]) == 0
    table = (tmp_path / "o" / "report.md").read_text()
    assert capsys.readouterr().out == table
    lines = table.splitlines()
    low, high = wilson_interval(17, 20)
    assert f"| **mean** | **85.0** [{low:.1f}, {high:.1f}] (n=20) | **90.0** (n=20) |" in lines
    assert "| reach-v3 | 70.0 [39.7, 89.2] (n=10) | 80.0 |" in lines
    assert "| push-v3 | 100.0 [72.2, 100.0] (n=10) |  |" in lines
