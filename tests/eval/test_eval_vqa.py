"""VQA accuracy (VQAv2 / TextVQA / VizWiz): normalisation edge cases, leave-one-out averaging,
the official 'normalise only when the GT answers differ' rule, and the malformed-input rules."""
import json

import pytest

from eval.scorers import ScoringError
from eval.scorers.vqa import (normalize_answer, process_punctuation, score_textvqa, score_vizwiz, score_vqav2,
                              vqa_accuracy)


def write(path, obj):
    path.write_text(json.dumps(obj))
    return str(path)


def gt(answer, k, other="zzz"):
    """Ten annotator answers: `answer` k times, then distinct fillers (so the GT is never uniform)."""
    return [answer] * k + [f"{other}{i}" for i in range(10 - k)]


@pytest.mark.parametrize("k, expected", [(0, 0.0), (1, 0.3), (2, 0.6), (3, 0.9), (4, 1.0), (10, 1.0)])
def test_leave_one_out_averaging(k, expected):
    # k annotators agree with the prediction: k subsets hold k-1 matches, 10-k subsets hold k.
    assert vqa_accuracy("cat", gt("cat", k)) == pytest.approx(expected)


@pytest.mark.parametrize("raw, normed", [
    ("two", "2"), ("Two Dogs", "2 dogs"), ("none", "0"), ("ten", "10"),
    ("a dog", "dog"), ("an apple", "apple"), ("The cat", "cat"),
    ("1,000", "1000"), ("3.5", "3.5"), ("3.5.", "3.5"), ("yes.", "yes"), ("YES", "yes"),
    ("dont", "don't"), ("isnt", "isn't"), ("don't", "don't"),
    ("hello-world", "hello world"), ("what ?", "what"), ("red, white", "red white"), ("a.m.", "am"),
])
def test_normalize_answer(raw, normed):
    assert normalize_answer(raw) == normed


def test_punctuation_rules():
    assert process_punctuation("red,blue") == "red blue"      # no space next to ',' -> becomes a space
    assert process_punctuation("red, blue") == "red blue"     # ', ' -> deleted
    assert process_punctuation("1,000 (approx)") == "1000 approx"  # digit,digit anywhere -> every mark deleted


@pytest.mark.parametrize("pred, answers, expected", [
    ("two", gt("2", 3), 0.9),            # number word -> digit
    ("the dog", gt("a dog", 4), 1.0),    # articles dropped on both sides
    ("1,000", gt("1000", 2), 0.6),       # digit comma digit
    ("3.5", gt("3.5", 1), 0.3),          # period before a digit kept
    ("3", gt("3.5", 4), 0.0),
    ("dont", gt("don't", 4), 1.0),       # contraction map
    ("YES.", gt("yes", 3), 0.9),         # case + trailing period
    ("  cat\n", gt("cat", 4), 1.0),      # whitespace/newline cleanup
])
def test_normalised_matches(pred, answers, expected):
    assert vqa_accuracy(pred, answers) == pytest.approx(expected)


def test_uniform_gt_is_compared_raw():
    # Official behaviour: when all ten answers are identical nothing is normalised (only \n, \t, strip).
    assert vqa_accuracy("2", ["2"] * 10) == 1.0
    assert vqa_accuracy(" 2\t", ["2"] * 10) == 1.0
    assert vqa_accuracy("two", ["2"] * 10) == 0.0
    assert vqa_accuracy("Yes", ["yes"] * 10) == 0.0
    assert vqa_accuracy("Yes", ["yes"] * 9 + ["no"]) == pytest.approx(1.0)


@pytest.fixture
def vqav2_files(tmp_path):
    def ann(qid, qtype, atype, answers):
        return {"question_id": qid, "image_id": 1, "question_type": qtype, "answer_type": atype,
                "multiple_choice_answer": answers[0],
                "answers": [{"answer": a, "answer_confidence": "yes", "answer_id": i + 1} for i, a in enumerate(answers)]}
    anns = {"annotations": [
        ann(1, "is this", "yes/no", ["yes"] * 10),
        ann(2, "how many", "number", ["2"] * 3 + ["3"] * 7),
        ann(3, "what color", "other", ["red"] + ["blue"] * 9),
        ann(4, "what color", "other", ["red"] * 10),
        ann(5, "how many", "number", ["4"] * 10),
    ]}
    questions = {"questions": [{"question_id": q, "image_id": 1, "question": "?"} for q in (1, 2)]}
    preds = [{"question_id": 1, "answer": "yes"}, {"question_id": 2, "answer": "two"},
             {"question_id": 3, "answer": "red"}, {"question_id": 5, "answer": "  "}]
    return (write(tmp_path / "preds.json", preds), write(tmp_path / "ann.json", anns),
            write(tmp_path / "q.json", questions), tmp_path)


def test_vqav2_file_scoring(vqav2_files):
    preds, anns, _, _ = vqav2_files
    m = score_vqav2(preds, anns)
    # per question: 1.0, 0.9, 0.3, 0 (missing), 0 (empty)
    assert m["accuracy"] == 44.0
    assert (m["n"], m["missing"], m["empty"]) == (5, 1, 1)
    assert m["per_answer_type"] == {"number": 45.0, "other": 15.0, "yes/no": 100.0}
    assert m["per_question_type"] == {"how many": 45.0, "is this": 100.0, "what color": 15.0}


def test_vqav2_questions_file_selects_subset(vqav2_files, tmp_path):
    preds, anns, questions, _ = vqav2_files
    m = score_vqav2(preds, anns, questions=questions)
    assert (m["accuracy"], m["n"], m["missing"]) == (95.0, 2, 0)
    bad_q = write(tmp_path / "badq.json", {"questions": [{"question_id": 99, "image_id": 1, "question": "?"}]})
    with pytest.raises(ScoringError, match=r"badq\.json.*99"):
        score_vqav2(preds, anns, questions=bad_q)


def test_unknown_prediction_id(vqav2_files, tmp_path):
    _, anns, _, _ = vqav2_files
    preds = write(tmp_path / "p_unknown.json", [{"question_id": 1, "answer": "yes"}, {"question_id": 777, "answer": "x"}])
    with pytest.raises(ScoringError, match=r"p_unknown\.json.*record #1.*'777'.*Fix"):
        score_vqav2(preds, anns)


def test_invalid_json_names_file_and_position(vqav2_files, tmp_path):
    _, anns, _, _ = vqav2_files
    bad = tmp_path / "broken.json"
    bad.write_text('[{"question_id": 1, "answer": "yes"},\n {"question_id": 2 "answer": "no"}]')
    with pytest.raises(ScoringError, match=r"broken\.json.*not valid JSON.*line 2, column 20"):
        score_vqav2(str(bad), anns)


def test_duplicate_prediction_is_an_error(vqav2_files, tmp_path):
    _, anns, _, _ = vqav2_files
    preds = write(tmp_path / "dup.json", [{"question_id": 1, "answer": "yes"}, {"question_id": 1, "answer": "no"}])
    with pytest.raises(ScoringError, match=r"dup\.json.*#0 and #1"):
        score_vqav2(preds, anns)


def test_textvqa(tmp_path):
    anns = write(tmp_path / "TextVQA_0.5.1_val.json", {"dataset_name": "textvqa", "data": [
        {"question_id": 34602, "image_id": "a", "question": "?", "answers": ["Nokia"] * 2 + [f"x{i}" for i in range(8)]},
        {"question_id": 34603, "image_id": "b", "question": "?", "answers": ["stop"] * 10},
        {"question_id": 34604, "image_id": "c", "question": "?", "answers": ["1,000"] * 10},
    ]})
    preds = write(tmp_path / "p.json", [{"question_id": 34602, "answer": "nokia"},
                                        {"question_id": 34603, "answer": "stop"},
                                        {"question_id": 34604, "answer": "1000"}])  # uniform GT: raw compare -> 0
    m = score_textvqa(preds, anns)
    assert m["accuracy"] == pytest.approx(round(100 * (0.6 + 1.0 + 0.0) / 3, 2))
    assert m["accuracy"] == 53.33


def test_vizwiz(tmp_path):
    def answers(lst):
        return [{"answer": a, "answer_confidence": "yes"} for a in lst]
    anns = write(tmp_path / "val.json", [
        {"image": "VizWiz_val_00000000.jpg", "question": "?", "answers": answers(["unanswerable"] * 10),
         "answer_type": "unanswerable", "answerable": 0},
        {"image": "VizWiz_val_00000001.jpg", "question": "?", "answers": answers(["coffee"] * 3 + ["tea"] * 7),
         "answer_type": "other", "answerable": 1},
    ])
    preds = write(tmp_path / "p.json", [{"image": "VizWiz_val_00000000.jpg", "answer": "unanswerable"},
                                        {"image": "VizWiz_val_00000001.jpg", "answer": "Coffee."}])
    m = score_vizwiz(preds, anns)
    assert m["accuracy"] == 95.0
    assert m["per_answer_type"] == {"other": 90.0, "unanswerable": 100.0}
    assert m["per_answerable"] == {"0": 100.0, "1": 90.0}
