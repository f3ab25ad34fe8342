"""The committed sifting measurement (reproduction/sifting/) reads back into docs/sifting.md's table: every
configuration's row, its seed mean equal to the mean of its results.csv values, inside its interval."""

import csv
import importlib.util
from collections import defaultdict

import numpy as np

from tests.conftest import ROOT


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_sifting", ROOT / "scripts" / "bench_sifting.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_report_rows_match_results_csv():
    bench = load_bench()
    values = defaultdict(list)
    with open(bench.RESULTS) as f:
        for r in csv.DictReader(f):
            if r["metric"] in ("success_rate", "accuracy"):
                values[r["task"], r["config"], r["metric"]].append(float(r["value"]))
    table = bench.report(plot=False)
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in table.splitlines()[2:]}
    assert {(t, c) for t, c, _ in values} == set(rows)
    for (task, config, metric), vals in values.items():
        cell = next(c for c in rows[task, config].split("|") if c.strip().startswith(metric))
        mean, low, high = (float(x) for x in cell.replace(metric, "").replace("[", " ").replace("]", " ").replace(",", " ").split())
        assert abs(mean - np.mean(vals)) < 0.051 and low <= mean <= high, (task, config, cell)
