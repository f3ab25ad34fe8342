"""GQA, POPE, AI2D, ScienceQA, TallyQA, VSR, RefCOCO, Sort-of-CLEVR and MME scorers on tiny fixtures
written in each benchmark's published layout, with hand-computed metrics."""
import json

import pytest

from eval.scorers import ScoringError
from eval.scorers.gqa import score_gqa
from eval.scorers.mme import score_mme
from eval.scorers.mme import to_yes_no as mme_yes_no
from eval.scorers.multiple_choice import letter_ai2d_lmms, letter_scienceqa_llava, parse_choice, score_ai2d, score_scienceqa
from eval.scorers.pope import score_pope, to_yes_no
from eval.scorers.refcoco import iou, parse_box, score_refcoco
from eval.scorers.sort_of_clevr import score_sort_of_clevr
from eval.scorers.tallyqa import parse_count, score_tallyqa
from eval.scorers.vsr import parse_bool, score_vsr


def write(path, obj):
    path.write_text(json.dumps(obj))
    return str(path)


def write_jsonl(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return str(path)


# ---------------------------------------------------------------- GQA
def test_gqa(tmp_path):
    anns = write(tmp_path / "testdev_balanced_questions.json", {
        "201": {"answer": "yes", "types": {"structural": "verify", "semantic": "attr"}},
        "202": {"answer": "left", "types": {"structural": "query", "semantic": "rel"}},
        "203": {"answer": "white", "types": {"structural": "query", "semantic": "attr"}},
        "204": {"answer": "tea pot", "types": {"structural": "query", "semantic": "obj"}},
    })
    preds = write(tmp_path / "p.json", [{"questionId": "201", "prediction": "Yes."},
                                        {"questionId": "202", "prediction": "right"},
                                        {"questionId": "204", "prediction": " Tea  pot\n"}])
    m = score_gqa(preds, anns)
    assert (m["accuracy"], m["missing"], m["n"]) == (50.0, 1, 4)
    assert m["per_structural"] == {"query": 33.33, "verify": 100.0}
    assert m["per_semantic"] == {"attr": 50.0, "obj": 100.0, "rel": 0.0}
    bad = write(tmp_path / "bad.json", [{"questionId": "999", "prediction": "yes"}])
    with pytest.raises(ScoringError, match=r"bad\.json.*'999'"):
        score_gqa(bad, anns)


# ---------------------------------------------------------------- POPE
@pytest.mark.parametrize("text, expected", [
    ("Yes, there is a dog.", "yes"), ("No.", "no"), ("There is no dog in the image.", "no"),
    ("It is not there", "no"), ("NO", "yes"),  # LLaVA's rule is case-sensitive except for "No"
    ("Yes. But no cat.", "yes"),  # only the first sentence counts
    ("no,", "no"),
])
def test_pope_yes_no_mapping(text, expected):
    assert to_yes_no(text) == expected


@pytest.fixture
def pope_dir(tmp_path):
    d = tmp_path / "pope"
    d.mkdir()
    rec = lambda q, label: {"question_id": q, "image": "x.jpg", "text": "Is there a dog?", "label": label}  # noqa: E731
    write_jsonl(d / "coco_pope_random.json", [rec(1, "yes"), rec(2, "yes"), rec(3, "no"), rec(4, "no")])
    write_jsonl(d / "coco_pope_adversarial.json", [rec(1, "yes"), rec(2, "no")])
    return d


def test_pope_metrics(pope_dir, tmp_path):
    preds = write(tmp_path / "p.json", [
        {"question_id": 1, "category": "random", "answer": "Yes, there is."},     # TP
        {"question_id": 2, "category": "random", "answer": "No."},                # FN
        {"question_id": 3, "category": "random", "answer": "There is no dog."},   # TN
        {"question_id": 4, "category": "random", "answer": ""},                   # empty -> wrong -> FP
        {"question_id": 1, "category": "adversarial", "text": "yes"},             # TP; question 2 missing -> FP
    ])
    m = score_pope(preds, str(pope_dir))
    r, a = m["per_split"]["random"], m["per_split"]["adversarial"]
    assert (r["tp"], r["fp"], r["tn"], r["fn"]) == (1, 1, 1, 1)
    assert (r["accuracy"], r["precision"], r["recall"], r["f1"], r["yes_ratio"]) == (50.0, 50.0, 50.0, 50.0, 50.0)
    assert (a["accuracy"], a["precision"], a["recall"], a["f1"], a["yes_ratio"]) == (50.0, 50.0, 100.0, 66.67, 100.0)
    assert (m["accuracy"], m["precision"], m["recall"], m["f1"], m["yes_ratio"]) == (50.0, 50.0, 75.0, 58.33, 75.0)
    assert (m["n"], m["missing"], m["empty"]) == (6, 1, 1)
    assert list(m["per_split"]) == ["random", "adversarial"]
    only = score_pope(preds, str(pope_dir), split="adversarial")
    assert (only["accuracy"], only["n"]) == (50.0, 2)


def test_pope_ambiguous_and_unknown_ids(pope_dir, tmp_path):
    amb = write(tmp_path / "amb.json", [{"question_id": 1, "answer": "yes"}])
    with pytest.raises(ScoringError, match=r"amb\.json.*ambiguous.*category"):
        score_pope(amb, str(pope_dir))
    ok = write(tmp_path / "ok.json", [{"question_id": 3, "answer": "no"}])  # id 3 only exists in `random`
    assert score_pope(ok, str(pope_dir))["per_split"]["random"]["tn"] == 1
    unk = write(tmp_path / "unk.json", [{"question_id": 3, "category": "popular", "answer": "no"}])
    with pytest.raises(ScoringError, match=r"unk\.json.*unknown question id '3'.*popular"):
        score_pope(unk, str(pope_dir))


def test_pope_single_file_with_category(tmp_path):
    anns = write_jsonl(tmp_path / "pope.jsonl", [
        {"question_id": 10, "category": "popular", "label": "no"},
        {"question_id": 11, "category": "popular", "label": "yes"}])
    preds = write(tmp_path / "p.json", [{"question_id": 10, "answer": "yes"}, {"question_id": 11, "answer": "yes"}])
    m = score_pope(preds, anns)
    assert (m["accuracy"], m["precision"], m["recall"], m["yes_ratio"]) == (50.0, 50.0, 100.0, 100.0)


# ---------------------------------------------------------------- multiple choice
@pytest.mark.parametrize("answer, expected", [
    (1, 1), (7, None), ("dog", 1), ("Dog.", 1), ("B", 1), ("b", 1), ("(C)", 2), ("C.", 2), ("(B) dog", 1),
    ("D) fish", 3), ("The answer is C.", 2), ("F", None), ("A dog", None), ("banana", None), ("2", 4),
])
def test_parse_choice(answer, expected):
    assert parse_choice(answer, ["cat", "dog", "bird", "fish", "2"]) == expected


@pytest.fixture
def ai2d_dir(tmp_path):
    d = tmp_path / "questions"
    d.mkdir()
    opts = ["cat", "dog", "bird", "fish"]
    write(d / "0.png.json", {"imageName": "0.png", "questions": {
        "Which animal?": {"abcLabel": False, "answerTexts": opts, "correctAnswer": 1, "questionId": "0.png-0"},
        "Which one flies?": {"abcLabel": False, "answerTexts": opts, "correctAnswer": 2, "questionId": "0.png-1"}}})
    write(d / "1.png.json", {"imageName": "1.png", "questions": {
        "Which is first?": {"abcLabel": True, "answerTexts": opts, "correctAnswer": 0, "questionId": "1.png-0"},
        "Which is last?": {"abcLabel": True, "answerTexts": opts, "correctAnswer": 0, "questionId": "1.png-1"}}})
    return d


def test_ai2d(ai2d_dir, tmp_path):
    preds = write(tmp_path / "p.json", [{"question_id": "0.png-0", "answer": "dog"}, {"question_id": "0.png-1", "answer": "C"},
                                        {"question_id": "1.png-0", "answer": 3}, {"question_id": "1.png-1", "answer": "banana"}])
    m = score_ai2d(preds, str(ai2d_dir))
    assert (m["accuracy"], m["n"], m["unparsed"], m["missing"]) == (50.0, 4, 1, 0)
    ids = tmp_path / "ai2d_test_ids.csv"
    ids.write_text("0\n")
    only = write(tmp_path / "p0.json", [{"question_id": "0.png-0", "answer": "dog"}])
    m = score_ai2d(only, str(ai2d_dir), questions=str(ids))
    assert (m["accuracy"], m["n"], m["missing"]) == (50.0, 2, 1)


def test_scienceqa(tmp_path):
    problems = write(tmp_path / "problems.json", {
        "1": {"question": "?", "choices": ["a", "b"], "answer": 1, "image": "image.png", "subject": "natural science", "split": "test"},
        "2": {"question": "?", "choices": ["x", "y", "z"], "answer": 0, "image": None, "subject": "language science", "split": "test"},
        "3": {"question": "?", "choices": ["x", "y"], "answer": 0, "image": None, "subject": "social science", "split": "test"},
        "4": {"question": "?", "choices": ["x", "y"], "answer": 0, "image": None, "subject": "social science", "split": "train"},
    })
    preds = write(tmp_path / "p.json", [{"question_id": "1", "answer": "B"}, {"question_id": "2", "answer": 1}])
    m = score_scienceqa(preds, problems)
    assert (m["accuracy"], m["accuracy_img"], m["n"], m["missing"]) == (33.33, 100.0, 3, 1)
    assert m["per_subject"] == {"language science": 0.0, "natural science": 100.0, "social science": 0.0}
    train = write(tmp_path / "train.json", [{"question_id": "4", "answer": "x"}])
    assert score_scienceqa(train, problems, split="train")["accuracy"] == 100.0
    with pytest.raises(ScoringError, match=r"train\.json.*'4'"):
        score_scienceqa(train, problems)  # pid 4 is not in the default test split


# ---------------------------------------------------------------- TallyQA
@pytest.mark.parametrize("answer, expected", [
    (3, 3), ("3", 3), ("two", 2), ("There are 4 dogs.", 4), ("none", 0), ("No.", 0), ("1,000", 1000),
    ("Twelve", 12), ("many", None), ("", None), (True, None),
])
def test_parse_count(answer, expected):
    assert parse_count(answer) == expected


def test_tallyqa(tmp_path):
    anns = write(tmp_path / "test.json", [
        {"question_id": 1, "image": "a.jpg", "question": "?", "answer": 2, "issimple": True},
        {"question_id": 2, "image": "a.jpg", "question": "?", "answer": 3, "issimple": True},
        {"question_id": 3, "image": "a.jpg", "question": "?", "answer": 0, "issimple": False},
        {"question_id": 4, "image": "a.jpg", "question": "?", "answer": 5, "issimple": False},
    ])
    preds = write(tmp_path / "p.json", [{"question_id": 1, "answer": "two"}, {"question_id": 2, "answer": "3 dogs"},
                                        {"question_id": 3, "answer": "none"}, {"question_id": 4, "answer": "many"}])
    m = score_tallyqa(preds, anns)
    assert (m["accuracy"], m["accuracy_simple"], m["accuracy_complex"], m["unparsed"]) == (75.0, 100.0, 50.0, 1)


# ---------------------------------------------------------------- VSR
@pytest.mark.parametrize("answer, expected", [
    (True, True), (0, False), ("True", True), ("yes, it is", True), ("False.", False), ("No", False), ("maybe", None),
])
def test_parse_bool(answer, expected):
    assert parse_bool(answer) is expected


def test_vsr(tmp_path):
    anns = write_jsonl(tmp_path / "test.jsonl", [
        {"image": "a.jpg", "caption": "The cat is on the mat.", "label": 1, "relation": "on"},
        {"image": "b.jpg", "caption": "The dog is under the table.", "label": 0, "relation": "under"},
        {"image": "c.jpg", "caption": "The cup is on the table.", "label": 1, "relation": "on"},
    ])
    preds = write(tmp_path / "p.json", [{"question_id": 0, "answer": "True"}, {"question_id": 1, "answer": "yes"}])
    m = score_vsr(preds, anns)
    assert (m["accuracy"], m["missing"], m["n"]) == (33.33, 1, 3)
    assert m["per_relation"] == {"on": 50.0, "under": 0.0}
    with pytest.raises(ScoringError, match=r"q\.json.*'3'"):
        score_vsr(write(tmp_path / "q.json", [{"question_id": 3, "answer": "true"}]), anns)


# ---------------------------------------------------------------- RefCOCO
def test_box_helpers():
    assert iou([0, 0, 2, 2], [1, 1, 3, 3]) == pytest.approx(1 / 7)
    assert iou([0, 0, 1, 1], [2, 2, 3, 3]) == 0.0
    assert parse_box("The box is [10, 20.5, 30, 40].") == [10.0, 20.5, 30.0, 40.0]
    assert parse_box("(0.1, 0.2, 0.3, 0.4)") == [0.1, 0.2, 0.3, 0.4]
    assert parse_box([1, 2, 3, 4]) == [1.0, 2.0, 3.0, 4.0]
    assert parse_box("left side") is None


@pytest.fixture
def refcoco_files(tmp_path):
    refs = [
        {"ref_id": 0, "ann_id": 1, "image_id": 7, "split": "val", "category_id": 1,
         "sentences": [{"sent_id": 10, "sent": "man on left"}, {"sent_id": 11, "sent": "left man"}]},
        {"ref_id": 1, "ann_id": 2, "image_id": 7, "split": "val", "category_id": 1,
         "sentences": [{"sent_id": 12, "sent": "dog"}, {"sent_id": 13, "sent": "the dog"}, {"sent_id": 14, "sent": "a dog"}]},
        {"ref_id": 2, "ann_id": 2, "image_id": 7, "split": "testA", "category_id": 1,
         "sentences": [{"sent_id": 20, "sent": "dog again"}]},
    ]
    instances = {"images": [{"id": 7, "width": 100, "height": 200}],
                 "annotations": [{"id": 1, "image_id": 7, "bbox": [10, 20, 30, 40]},
                                 {"id": 2, "image_id": 7, "bbox": [0, 0, 50, 50]}]}
    return write(tmp_path / "refs.json", refs), write(tmp_path / "instances.json", instances)


def test_refcoco(refcoco_files, tmp_path):
    refs, inst = refcoco_files
    preds = write(tmp_path / "p.json", [
        {"sent_id": 10, "answer": "[10, 20, 40, 60]"},          # pixels, IoU 1
        {"sent_id": 11, "answer": "[0.1, 0.1, 0.4, 0.3]"},      # normalised (w=100, h=200) -> [10, 20, 40, 60]
        {"sent_id": 12, "answer": "(0, 0, 50, 25)"},            # IoU exactly 0.5 -> correct
        {"sent_id": 13, "answer": "[0, 0, 50, 24]"},            # IoU 0.48 -> wrong
        {"sent_id": 14, "answer": "the dog on the right"},      # unparsed
    ])
    m = score_refcoco(preds, refs, questions=inst)
    assert (m["accuracy"], m["n"], m["unparsed"], m["missing"]) == (60.0, 5, 1, 0)
    assert m["per_split"] == {"val": 60.0}  # testA has no predictions -> not scored
    t = score_refcoco(preds, refs, questions=inst, split="testA")
    assert (t["accuracy"], t["n"], t["missing"]) == (0.0, 1, 1)
    with pytest.raises(ScoringError, match=r"sentence id '99'"):
        score_refcoco(write(tmp_path / "u.json", [{"sent_id": 99, "answer": "[1, 2, 3, 4]"}]), refs, questions=inst)


# ---------------------------------------------------------------- Sort-of-CLEVR
@pytest.fixture
def soc_files(tmp_path):
    test = [
        {"id": 0, "image": "0.png", "question": "q", "answer": "red", "type": "relational", "subtype": "closest"},
        {"id": 1, "image": "0.png", "question": "q", "answer": "yes", "type": "relational", "subtype": "count"},
        {"id": 2, "image": "0.png", "question": "q", "answer": "circle", "type": "non_relational", "subtype": "shape"},
        {"id": 3, "image": "0.png", "question": "q", "answer": "square", "type": "non_relational", "subtype": "shape"},
    ]
    preds = [{"id": 0, "answer": " Red "}, {"question_id": 1, "answer": "no"}, {"id": 2, "answer": "circle"}]
    return write(tmp_path / "preds.json", preds), write(tmp_path / "test.json", test)


def test_sort_of_clevr(soc_files):
    preds, test = soc_files
    m = score_sort_of_clevr(preds, test)
    assert (m["accuracy"], m["accuracy_relational"], m["accuracy_non_relational"]) == (50.0, 50.0, 50.0)
    assert m["per_subtype"] == {"closest": 100.0, "count": 0.0, "shape": 50.0}
    assert (m["n"], m["missing"], m["empty"]) == (4, 1, 0)


def test_sort_of_clevr_empty_answer_and_malformed(soc_files, tmp_path):
    _, test = soc_files
    empty = write(tmp_path / "e.json", [{"id": 0, "answer": ""}, {"id": 2, "answer": None}])
    m = score_sort_of_clevr(empty, test)
    assert (m["accuracy"], m["empty"], m["missing"]) == (0.0, 2, 2)
    with pytest.raises(ScoringError, match=r"e2\.json.*unknown question id '42'"):
        score_sort_of_clevr(write(tmp_path / "e2.json", [{"id": 42, "answer": "red"}]), test)
    bad = tmp_path / "trunc.json"
    bad.write_text('[{"id": 0, "answer": "red"}')
    with pytest.raises(ScoringError, match=r"trunc\.json.*not valid JSON.*line 1, column 28"):
        score_sort_of_clevr(str(bad), test)


def test_refcoco_refs_pickle_with_code_is_refused(tmp_path):
    import os
    import pickle

    from eval.scorers import ScoringError
    from eval.scorers.refcoco import score_refcoco

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    refs = tmp_path / "refs(unc).p"
    refs.write_bytes(pickle.dumps([Evil()]))
    (tmp_path / "pred.json").write_text("[]")
    import pytest

    with pytest.raises(ScoringError, match="refusing to load"):
        score_refcoco(tmp_path / "pred.json", refs)


# ---------------------------------------------------------------- MME
@pytest.mark.parametrize("answer, expected", [
    ("Yes", "yes"), ("no", "no"), ("yes.", "yes"), ("YES", "yes"), ("Not at all", "no"), ("nope", "no"),
    ("know", "no"),  # the official rule only looks for "no" in the first four characters
    ("I think yes", None), ("  yes", None), ("", None),
])
def test_mme_yes_no_reading(answer, expected):
    assert mme_yes_no(answer) == expected


@pytest.fixture
def mme_release(tmp_path):
    """Three subtasks in both released layouts: questions beside the images, or under questions_answers_YN/."""
    root = tmp_path / "MME_Benchmark_release_version"
    (root / "existence").mkdir(parents=True)
    (root / "existence/1.txt").write_text("Is there a cat? Please answer yes or no.\tYes\n"
                                          "Is there a dog? Please answer yes or no.\tNo\n")
    (root / "existence/2.txt").write_text("Is there a car?\tYes\nIs there a bus?\tNo\n")
    (root / "artwork/images").mkdir(parents=True)
    (root / "artwork/questions_answers_YN").mkdir()
    (root / "artwork/images/10.jpg").write_bytes(b"")
    (root / "artwork/questions_answers_YN/10.txt").write_text("Is this by Monet?\tNo\nIs this by Manet?\tYes\n")
    (root / "code_reasoning").mkdir()
    (root / "code_reasoning/20.txt").write_text("Does it print 3?\tYes\nDoes it print 4?\tNo\n")
    return root


def test_mme_scores_as_the_official_tool(mme_release, tmp_path):
    preds = write(tmp_path / "p.json", [
        {"question_id": "existence/1/0", "answer": "Yes"},        # right
        {"question_id": "existence/1/1", "answer": "no"},         # right: image 1 counts for acc+
        {"question_id": "existence/2/0", "answer": "yes."},       # right
        {"question_id": "existence/2/1", "answer": "Yes"},        # wrong
        {"question_id": "artwork/10/0", "answer": "Not at all"},  # "not " holds "no": right
        {"question_id": "artwork/10/1", "answer": "I think yes"},  # neither: wrong, unparsed
        {"question_id": "code_reasoning/20/0", "answer": "YES"},  # right; 20/1 missing
    ])
    m = score_mme(preds, str(mme_release))
    # existence: acc 3/4, acc+ 1/2 -> 75 + 50; artwork: 1/2, 0/1 -> 50 + 0; code_reasoning: 1/2, 0/1 -> 50 + 0
    assert m["per_subtask"]["existence"] == {"accuracy": 75.0, "accuracy_plus": 50.0, "score": 125.0, "n": 4}
    assert m["per_subtask"]["artwork"] == {"accuracy": 50.0, "accuracy_plus": 0.0, "score": 50.0, "n": 2}
    assert m["per_subtask"]["code_reasoning"]["score"] == 50.0
    assert (m["perception"], m["cognition"]) == (175.0, 50.0)
    assert (m["accuracy"], m["n"], m["missing"], m["empty"], m["unparsed"]) == (62.5, 8, 1, 0, 1)
    unknown = write(tmp_path / "u.json", [{"question_id": "existence/9/0", "answer": "yes"}])
    with pytest.raises(ScoringError, match=r"u\.json.*'existence/9/0'"):
        score_mme(unknown, str(mme_release))


def test_mme_rejects_a_malformed_question_file(mme_release, tmp_path):
    (mme_release / "existence/3.txt").write_text("Is there a cat? Yes\n")  # no tab
    with pytest.raises(ScoringError, match=r"3\.txt: line 1 .*question<TAB>Yes\|No"):
        score_mme(write(tmp_path / "p.json", []), str(mme_release))


# --------------------------------------------------------------------- generated answers: the published parsers
@pytest.mark.parametrize(("text", "n", "index"), [
    ("B", 3, 1), ("C. table", 3, 2), ("The answer is A.", 2, 0), ("The answer is B and", 2, 1),
    ("The answer is B", 2, None),  # LLaVA's r'The answer is ([A-Z]).' needs a character after the letter
    ("The answer is A. The answer is B.", 2, None),  # two matches: FAILED
    ("D", 3, None), ("b", 3, None), ("(B)", 3, None), ("B.", 3, None), (" B", 3, None), ("whale", 2, None)])
def test_scienceqa_letter_as_llava_parses_it(text, n, index):
    assert letter_scienceqa_llava(text, n) == index


@pytest.mark.parametrize(("text", "n", "index"), [
    ("B", 4, 1), ("b", 4, 1), ("(C)", 4, 2), ("D)", 4, 3), ("A. lion", 4, 0), ("  C.", 4, 2), ("B.", 2, 1),
    ("E", 4, None), ("The answer is B", 4, None), ("cow", 4, None), ("B cow", 4, None)])
def test_ai2d_letter_as_lmms_eval_parses_it(text, n, index):
    assert letter_ai2d_lmms(text, n) == index
