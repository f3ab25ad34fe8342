"""Tests generated from conf/benchmark/*.yaml: every eval benchmark config composes, builds a runner that
conforms to `core.interfaces.Benchmark` (both the way `core.run.evaluate` builds it and with Hydra's
default recursion), and names a scorer that resolves, is callable, and reports malformed records as a
`ScoringError`."""
import json

import pytest
from hydra.utils import instantiate

from core.interfaces import Benchmark
from eval.scorers import ScoringError, build_scorer
from tests.eval.benchmarks import EVAL_BENCHMARKS, EVAL_CONFIGS


def test_the_benchmarks_are_found():
    assert {"vqav2", "refcoco_plus", "refcocog", "sort_of_clevr", "mme"} <= set(EVAL_BENCHMARKS)
    assert "rollouts" not in EVAL_BENCHMARKS  # its runner lives in behavior/


@pytest.mark.parametrize("config", EVAL_BENCHMARKS)
def test_config_builds_a_benchmark_with_a_scorer(config):
    cfg = EVAL_CONFIGS[config]
    for runner in (instantiate(cfg.benchmark, _recursive_=False), instantiate(cfg.benchmark)):
        assert isinstance(runner, Benchmark)
        assert runner.name == cfg.benchmark.name
        assert callable(runner.score)
    assert callable(build_scorer(cfg.benchmark.scorer, config))


@pytest.mark.parametrize("config", EVAL_BENCHMARKS)
def test_scorer_reports_malformed_records_as_scoring_errors(config, tmp_path):
    """Records lacking every field, in the shapes annotation files take: each scorer fails with a
    ScoringError naming the file, never a bare KeyError or TypeError."""
    score = build_scorer(EVAL_CONFIGS[config].benchmark.scorer, config)
    (tmp_path / "pred.json").write_text(json.dumps([{"question_id": "1", "id": "1", "answer": "yes"}]))
    for annotations in ([{}], {"annotations": [{}], "data": [{}], "questions": {}}, {"1": {}}):
        (tmp_path / "ann.json").write_text(json.dumps(annotations))
        with pytest.raises(ScoringError, match="ann.json|pred.json"):
            score(tmp_path / "pred.json", tmp_path / "ann.json")


def test_a_scorer_node_that_builds_no_callable_is_a_clear_error():
    with pytest.raises(TypeError, match="_partial_: true"):
        build_scorer({"_target_": "builtins.dict"}, "broken")
    with pytest.raises(ValueError, match="no `scorer`"):
        build_scorer(None, "broken")
