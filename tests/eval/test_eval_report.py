"""`scripts/report.py`: a markdown table of each benchmark's main metric per run, a PNG bar chart, and the runs'
loss curves from metrics.csv (a PNG)."""
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import report  # noqa: E402

import core.report as report_core  # noqa: E402


def make_run(root: Path, name: str, benchmarks: dict | None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("{}\n")
    results = {"train": {"scratch/train_loss": 1.0}}
    if benchmarks is not None:
        results["benchmarks"] = benchmarks
    (d / "results.json").write_text(json.dumps(results))
    return d


def test_report_table_and_chart(tmp_path, capsys):
    a = make_run(tmp_path / "runs", "a", {"vqav2": {"accuracy": 61.234, "n": 10},
                                          "pope": {"accuracy": 80.0, "f1": 85.5, "per_split": {}}})
    b = make_run(tmp_path / "runs", "b", {"vqav2": {"accuracy": 70.0}, "gqa": {"accuracy": 55.5}})
    c = make_run(tmp_path / "runs", "c", None)  # trained, never evaluated
    out = tmp_path / "out"
    assert report.main([str(a), str(b), str(c), "--out", str(out)]) == 0
    table = (out / "report.md").read_text()
    assert capsys.readouterr().out == table
    lines = table.strip().splitlines()
    assert lines[0] == "| benchmark (metric) | a | b | c |"
    assert lines[2:] == ["| gqa (accuracy) |  | 55.50 |  |",
                         "| pope (f1) | 85.50 |  |  |",
                         "| vqav2 (accuracy) | 61.23 | 70.00 |  |"]
    png = (out / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    assert (out / "report_loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # no metrics.csv: an empty chart


def test_loss_curves_are_read_from_metrics_csv_and_plotted(tmp_path, monkeypatch):
    a = make_run(tmp_path, "a", None)
    # as RunCSVLogger writes it: sorted columns, rows without a loss (perf-only) skipped, steps in file order
    (a / "metrics.csv").write_text("perf/step_time,step,train/loss\n0.5,0,2.5\n0.4,1,2.25\n0.3,2,\n0.3,3,1.75\n")
    b = make_run(tmp_path, "b", None)
    assert report_core.loss_curve(a) == [(0, 2.5), (1, 2.25), (3, 1.75)] and report_core.loss_curve(b) == []
    plotted = {}
    real = report.loss_chart
    monkeypatch.setattr(report, "loss_chart", lambda curves, path: (plotted.update(curves), real(curves, path)))
    assert report.main([str(a), str(b), "--out", str(tmp_path / "o")]) == 0
    assert plotted == {"a": [(0, 2.5), (1, 2.25), (3, 1.75)], "b": []}
    png = (tmp_path / "o" / "report_loss.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000


def test_report_skips_what_is_not_a_run(tmp_path, capsys):
    a = make_run(tmp_path, "a", {"vqav2": {"accuracy": 50.0}})
    (tmp_path / "notes.txt").write_text("x")
    assert report.main([str(a), str(tmp_path / "notes.txt"), "--out", str(tmp_path / "o")]) == 0
    captured = capsys.readouterr()
    assert "notes.txt" in captured.err and "| vqav2 (accuracy) | 50.00 |" in captured.out


def test_main_metric_is_inherited_from_the_benchmark_config_an_option_builds_on():
    # conf/benchmark/mini_pope.yaml sets no main_metric; its defaults name pope.yaml, whose main metric is F1
    from omegaconf import OmegaConf

    own = OmegaConf.load(REPO / "conf" / "benchmark" / "mini_pope.yaml")
    assert own.get("main_metric") is None and "pope" in own.defaults
    assert report_core.main_metric("mini_pope") == "f1" == report_core.main_metric("pope")
    assert report_core.main_metric("mini_vqav2") == "accuracy"
    assert report_core.main_metric("no_such_benchmark") == "accuracy"
