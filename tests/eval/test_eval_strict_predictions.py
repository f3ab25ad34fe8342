"""Scorers refuse what they do not read: for every benchmark config, the official predictions file the runner wrote
with one answer replaced by a value of a type that scorer does not read (booleans, numbers, NaN, lists, objects) is a
ScoringError naming the question id, never read as an answer (POPE read them all as "yes"); prediction records
carrying another benchmark's fields are refused."""
import copy
import json
import math
import re

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from eval.scorers.common import ScoringError
from eval.scorers.pope import score_pope
from eval.scorers.refcoco import parse_box
from eval.scorers.tallyqa import score_tallyqa
from eval.scorers.vqa import score_vqav2
from tests.eval.benchmarks import EVAL_BENCHMARKS, EVAL_CONFIGS
from tests.eval.fixtures import make_pope, make_vqav2, write
from tests.eval.test_eval_runners import bench_run, fixture_of  # noqa: F401  (bench_run: a fixture)

# the answer types a scorer reads besides strings (None is an empty answer everywhere)
WIDER = {"vsr": (bool, int), "tallyqa": (int, float), "ai2d": (int,), "scienceqa": (int,),
         "refcoco": (list,), "refcoco_plus": (list,), "refcocog": (list,)}
BAD = {"true": True, "false": False, "one": 1, "float": 2.5, "nan": float("nan"), "inf": float("inf"),
       "list": ["yes"], "object": {"text": "yes"}}
ID_KEYS = ("question_id", "questionId", "sent_id", "image", "id")


def reads(config: str, value) -> bool:
    """Whether the benchmark's scorer reads an answer of this type (by its docstring; booleans are not numbers)."""
    types = WIDER.get(config, ())
    if isinstance(value, bool):
        return bool in types
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, types)


@pytest.mark.parametrize("config", EVAL_BENCHMARKS)
def test_every_scorer_refuses_answers_of_a_type_it_does_not_read(config, bench_run, tmp_path):  # noqa: F811
    run_dir, run = bench_run
    build, _, _ = fixture_of(config)
    run(config, tmp_path / "bench", build(tmp_path / "bench"))
    cfg = copy.deepcopy(EVAL_CONFIGS[config])
    OmegaConf.update(cfg, "benchmark.root", str(tmp_path / "bench"))
    runner = instantiate(cfg.benchmark, _recursive_=False)
    files = runner.scoring_files(run_dir)
    official = json.loads((run_dir / "predictions" / f"{runner.name}.json").read_text())
    answer_key = next(k for k in ("prediction", "answer") if k in official[0])
    qid = next(official[0][k] for k in ID_KEYS if k in official[0])
    questions = None if files.get("questions") is None else str(files["questions"])
    refused = 0
    for label, value in BAD.items():
        preds = write(tmp_path / f"{label}.json", [{**official[0], answer_key: value}, *official[1:]])
        if reads(config, value):  # a type this benchmark reads (an option index, a count, a box, a truth value)
            runner.score(str(preds), str(files["annotations"]), questions=questions, split=files.get("split"))
            continue
        with pytest.raises(ScoringError, match=rf"record #0 \(question id {re.escape(repr(qid))}\) has the answer .* "
                                               "this benchmark reads"):
            runner.score(str(preds), str(files["annotations"]), questions=questions, split=files.get("split"))
        refused += 1
    assert refused >= 4  # every scorer refuses at least NaN, inf, an object and one more type


def test_pope_no_longer_reads_non_strings_as_yes(tmp_path):
    make_pope(tmp_path)
    annotations = tmp_path / "pope/coco"
    for value in (True, 1, float("nan"), ["no"], {"a": 1}):
        preds = write(tmp_path / "p.json", [{"question_id": 1, "category": "random", "answer": value}])
        with pytest.raises(ScoringError, match=r"record #0 \(question id 1\) has the answer"):
            score_pope(preds, annotations, split="random")
    preds = write(tmp_path / "p.json", [{"question_id": 1, "category": "random", "answer": None}])
    assert score_pope(preds, annotations, split="random")["empty"] == 1  # null: no answer, counted empty


def test_refcoco_boxes_of_booleans_or_non_finite_numbers_are_unparsed():
    assert parse_box([0, 0.5, 10, 20]) == [0.0, 0.5, 10.0, 20.0]
    for box in ([True, 0, 1, 1], [0, 0, float("nan"), 1], [0, 0, float("inf"), 1], [0, 0, 1], ["0", 0, 1, 1]):
        assert parse_box(box) is None, box


@pytest.mark.parametrize("field, owner", [("category", "pope"), ("sent_id", "refcoco"), ("questionId", "gqa"),
                                          ("prediction", "gqa")])
def test_records_with_another_benchmarks_fields_are_refused(tmp_path, field, owner):
    annotations = write(tmp_path / "test.json", [{"question_id": 1, "image": "a.jpg", "question": "?", "answer": 2},
                                                 {"question_id": 2, "image": "a.jpg", "question": "?", "answer": 0}])
    good = [{"question_id": 1, "answer": "2"}, {"question_id": 2, "answer": "0"}]
    assert score_tallyqa(write(tmp_path / "ok.json", good), annotations)["accuracy"] == 100.0
    foreign = write(tmp_path / "p.json", [good[0], {**good[1], field: "random" if field == "category" else 7}])
    with pytest.raises(ScoringError, match=rf"record #1 \(question id 2\) has the field '{field}' of {owner} predictions"):
        score_tallyqa(foreign, annotations)


def test_a_pope_file_scored_as_vqav2_is_refused_even_when_its_ids_exist_there(tmp_path):
    make_vqav2(tmp_path)
    questions = tmp_path / "vqav2/v2_OpenEnded_mscoco_val2014_questions.json"
    annotations = tmp_path / "vqav2/v2_mscoco_val2014_annotations.json"
    pope_like = write(tmp_path / "p.json", [{"question_id": q, "category": "random", "answer": "yes"} for q in (10, 11, 12)])
    with pytest.raises(ScoringError, match="'category' of pope predictions"):
        score_vqav2(pope_like, annotations, questions=questions)
