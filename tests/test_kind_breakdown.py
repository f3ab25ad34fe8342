"""scripts/kind_breakdown.py: a study's per-item scores split by the kind of question, read from the world's own
benchmark files: hand-made cells whose scores follow the kind come out at 100 and 0 exactly, and items that are
not in the world are refused."""
import json

import pytest

from data.mini_world import ensure
from data.mini_world_questions import question_kind
from scripts.kind_breakdown import breakdown, item_kinds, main


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return ensure(tmp_path_factory.mktemp("w"), n_train=8, n_test=2, n_per_benchmark=12)


def _vsr(world):
    return [json.loads(line) for line in open(world / "vsr/random/test.jsonl")]


def _cell(world, name, seed, vsr_score, vqa_score, gqa_score=lambda q: 0.0):
    vqa = json.load(open(world / "vqav2/v2_OpenEnded_mscoco_val2014_questions.json"))["questions"]
    gqa = json.load(open(world / "gqa/testdev_balanced_questions.json"))
    return {"cell": name, "seed": seed, "items": {
        "mini_vsr": {str(i): vsr_score(r) for i, r in enumerate(_vsr(world))},
        "mini_vqav2": {str(q["question_id"]): vqa_score(q["question"]) for q in vqa},
        "mini_gqa": {k: gqa_score(q) for k, q in gqa.items()}}}


def test_a_cell_that_calls_every_statement_true_scores_100_on_true_ones_and_0_on_false_ones(world):
    says_yes = [_cell(world, "yes", s, lambda r: float(r["label"] == 1),
                      lambda q: float(question_kind(q) == "relation")) for s in (0, 1)]
    rows = breakdown(says_yes, item_kinds(world), replicates=50)
    vsr = {r["kind"]: r for r in rows if r["benchmark"] == "mini_vsr"}
    labels = [r["label"] for r in _vsr(world)]
    assert sum(r["items"] for r in vsr.values()) == len(labels)
    assert sum(r["items"] for k, r in vsr.items() if k.endswith(" true")) == labels.count(1)
    for kind, r in vsr.items():
        assert (r["mean"], r["low"], r["high"]) == ((100.0,) * 3 if kind.endswith(" true") else (0.0,) * 3)
    vqa = {r["kind"]: r["mean"] for r in rows if r["benchmark"] == "mini_vqav2"}
    assert vqa.pop("relation") == 100.0 and vqa and set(vqa.values()) == {0.0}


def test_gqa_relational_questions_are_marked_and_the_mean_is_over_seeds(world):
    rel = lambda q: float(q["types"]["semantic"] == "rel")  # noqa: E731
    cells = [_cell(world, "c", 0, lambda r: 1.0, lambda q: 1.0, rel), _cell(world, "c", 1, lambda r: 0.0, lambda q: 1.0, rel)]
    rows = breakdown(cells, item_kinds(world), replicates=50)
    gqa = {r["kind"]: r["mean"] for r in rows if r["benchmark"] == "mini_gqa"}
    assert gqa and all((v == 100.0) == k.endswith("+rel") for k, v in gqa.items())
    assert {r["mean"] for r in rows if r["benchmark"] == "mini_vsr"} == {50.0}  # seed 0 all right, seed 1 all wrong


def test_items_missing_from_the_world_are_refused_with_the_fix(world, tmp_path):
    cell = _cell(world, "base", 0, lambda r: 1.0, lambda q: 1.0)
    cell["items"]["mini_vsr"]["99999"] = 1.0
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells/base-seed0.json").write_text(json.dumps(cell))
    with pytest.raises(SystemExit, match="not in the world's mini_vsr file.*--world"):
        main(["--study", str(tmp_path), "--world", str(world), "--replicates", "10"])
