"""VQA accuracy (VQAv2, TextVQA, VizWiz) reproducing the official GT-Vision-Lab ``vqaEval.py`` (master).

Per question, exactly as the official script does it:
1. every GT answer and the prediction get ``\\n`` and ``\\t`` replaced by a space and are stripped;
2. ONLY IF the (whitespace-cleaned) GT answers are not all identical, the GT answers and the
   prediction are normalised: punctuation processing, then digit/article processing. When all ten
   annotators agree, the comparison is on the raw strings (so "Yes" vs ten "yes" scores 0);
3. accuracy = mean over the leave-one-annotator-out subsets of min(1, #matches in subset / 3).
Aggregates: overall, per answer type and per question type are means of the per-question values,
in percent, rounded to 2 decimals. Official quirks kept on purpose: ``periodStrip`` is written with
``(?!<=\\d)`` (a lookahead, not a lookbehind, so it removes every '.' not followed by a digit) and is
applied with ``count=re.UNICODE`` (=32, the script passes the flag in the count position); the
apostrophe is not in the punctuation list, so "don't" survives and "dont" is mapped onto it.
Our additions (the official script would crash instead): a missing prediction scores 0 (``missing``),
an empty one scores 0 (``empty``).
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from .common import (ScoringError, Tally, as_text, check_known, load_predictions, lookup, no_split,
                     read_json, require)

PUNCT = [";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`",
         ",", "?", "!"]
PERIOD_STRIP = re.compile(r"(?!<=\d)(\.)(?!\d)")  # sic: behaves as r"\.(?!\d)"
COMMA_STRIP = re.compile(r"(\d)(,)(\d)")
MANUAL_MAP = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
              "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10"}
ARTICLES = {"a", "an", "the"}


def _contractions() -> dict[str, str]:
    # The official table, written as "key=value" pairs; values with the apostrophe restored.
    pairs = """aint=ain't arent=aren't cant=can't couldve=could've couldnt=couldn't couldn'tve=couldn't've
    couldnt've=couldn't've didnt=didn't doesnt=doesn't dont=don't hadnt=hadn't hadnt've=hadn't've
    hadn'tve=hadn't've hasnt=hasn't havent=haven't hed=he'd hed've=he'd've he'dve=he'd've hes=he's
    howd=how'd howll=how'll hows=how's Id've=I'd've I'dve=I'd've Im=I'm Ive=I've isnt=isn't itd=it'd
    itd've=it'd've it'dve=it'd've itll=it'll let's=let's maam=ma'am mightnt=mightn't mightnt've=mightn't've
    mightn'tve=mightn't've mightve=might've mustnt=mustn't mustve=must've neednt=needn't notve=not've
    oclock=o'clock oughtnt=oughtn't ow's'at='ow's'at 'ows'at='ow's'at 'ow'sat='ow's'at shant=shan't
    shed've=she'd've she'dve=she'd've she's=she's shouldve=should've shouldnt=shouldn't
    shouldnt've=shouldn't've shouldn'tve=shouldn't've somebody'd=somebodyd somebodyd've=somebody'd've
    somebody'dve=somebody'd've somebodyll=somebody'll somebodys=somebody's someoned=someone'd
    someoned've=someone'd've someone'dve=someone'd've someonell=someone'll someones=someone's
    somethingd=something'd somethingd've=something'd've something'dve=something'd've
    somethingll=something'll thats=that's thered=there'd thered've=there'd've there'dve=there'd've
    therere=there're theres=there's theyd=they'd theyd've=they'd've they'dve=they'd've theyll=they'll
    theyre=they're theyve=they've twas='twas wasnt=wasn't wed've=we'd've we'dve=we'd've weve=we've
    werent=weren't whatll=what'll whatre=what're whats=what's whatve=what've whens=when's whered=where'd
    wheres=where's whereve=where've whod=who'd whod've=who'd've who'dve=who'd've wholl=who'll whos=who's
    whove=who've whyll=why'll whyre=why're whys=why's wont=won't wouldve=would've wouldnt=wouldn't
    wouldnt've=wouldn't've wouldn'tve=wouldn't've yall=y'all yall'll=y'all'll y'allll=y'all'll
    yall'd've=y'all'd've y'alld've=y'all'd've y'all'dve=y'all'd've youd=you'd youd've=you'd've
    you'dve=you'd've youll=you'll youre=you're youve=you've"""
    return dict(p.split("=", 1) for p in pairs.split())


CONTRACTIONS = _contractions()


def clean_whitespace(text: str) -> str:
    return text.replace("\n", " ").replace("\t", " ").strip()


def process_punctuation(text: str) -> str:
    """Official punctuation rule: a mark next to a space, or any mark in a text containing
    digit,digit (e.g. "1,000"), is deleted; otherwise it becomes a space. Then '.' not followed
    by a digit is deleted (at most 32 of them)."""
    out = text
    has_digit_comma = COMMA_STRIP.search(text) is not None
    for p in PUNCT:  # the conditions look at the ORIGINAL text, the edits accumulate in `out`
        if (p + " " in text or " " + p in text) or has_digit_comma:
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    return PERIOD_STRIP.sub("", out, count=int(re.UNICODE))


def process_digit_article(text: str) -> str:
    """Lower-case, number words -> digits, drop articles, expand contractions, re-join with spaces."""
    words = [MANUAL_MAP.get(w, w) for w in text.lower().split()]
    words = [w for w in words if w not in ARTICLES]
    return " ".join(CONTRACTIONS.get(w, w) for w in words)


def normalize_answer(text: str) -> str:
    return process_digit_article(process_punctuation(text))


def vqa_accuracy(prediction: str, gt_answers: list[str]) -> float:
    """Per-question VQA accuracy in [0, 1] (see module docstring for the exact procedure)."""
    gts = [clean_whitespace(a) for a in gt_answers]
    pred = clean_whitespace(prediction)
    if len(set(gts)) > 1:
        gts = [normalize_answer(a) for a in gts]
        pred = normalize_answer(pred)
    scores = [min(1.0, sum(1 for j, a in enumerate(gts) if j != i and a == pred) / 3) for i in range(len(gts))]
    return sum(scores) / len(scores)


def score_items(items: Iterable[dict], preds: dict, pred_path, ann_path, known=None) -> dict[str, Any]:
    """Score ``items`` ({"id", "answers", "answer_type"?, "question_type"?}) against indexed predictions;
    predictions must be for ``known`` ids (default: the items' ids)."""
    return tally_items(items, preds, pred_path, ann_path, known).metrics("answer_type", "question_type")


def tally_items(items: Iterable[dict], preds: dict, pred_path, ann_path, known=None) -> Tally:
    """The tally of ``score_items``: every question's VQA accuracy, overall, per type and by id (``.items``)."""
    items = list(items)
    check_known(preds, known if known is not None else (it["id"] for it in items), pred_path, ann_path)
    tally = Tally()
    for it in items:
        answer, missing, empty = lookup(preds, it["id"])
        acc = 0.0 if (missing or empty) else vqa_accuracy(as_text(answer), it["answers"])
        tally.add(acc, item=it["id"], missing=missing, empty=empty,
                  answer_type=it.get("answer_type"), question_type=it.get("question_type"))
    return tally


def _answers(ann: dict, path, qid) -> list[str]:
    raw = ann.get("answers")
    require(isinstance(raw, list) and len(raw) > 0, path,
            f"annotation for question {qid!r} has no 'answers' list. Fix: use the annotation file with answers "
            "(test-split files carry none and must be scored by the evaluation server).")
    return [a["answer"] if isinstance(a, dict) else a for a in raw]


def score_vqav2(predictions, annotations, questions=None, split=None) -> dict[str, Any]:
    """VQAv2 (also VQAv1 / OK-VQA): official annotations JSON + optional questions JSON.

    With ``questions``, exactly the questions listed there are scored (each must be annotated;
    predictions for other annotated questions are ignored); without it, every annotated question is scored.
    """
    return score_vqav2_items(predictions, annotations, questions, split)[0]


def score_vqav2_items(predictions, annotations, questions=None, split=None) -> tuple[dict[str, Any], dict[str, float]]:
    """``score_vqav2``'s metrics and each question's VQA accuracy in [0, 1] by question id."""
    no_split(split, "vqav2")
    data = read_json(annotations, "annotations file")
    require(isinstance(data, dict) and isinstance(data.get("annotations"), list), annotations,
            "expected {'annotations': [...]} (VQA annotation format). Fix: pass e.g. "
            "v2_mscoco_val2014_annotations.json as --annotations.")
    anns = {}
    for ann in data["annotations"]:
        anns[str(ann["question_id"])] = ann
    ids = list(anns)
    if questions is not None:
        qdata = read_json(questions, "questions file")
        require(isinstance(qdata, dict) and isinstance(qdata.get("questions"), list), questions,
                "expected {'questions': [...]}. Fix: pass e.g. v2_OpenEnded_mscoco_val2014_questions.json.")
        ids = [str(q["question_id"]) for q in qdata["questions"]]
        for i, qid in enumerate(ids):
            if qid not in anns:
                raise ScoringError(f"{questions}: question record #{i} (id {qid!r}) has no annotation in "
                                   f"{annotations}. Fix: pass the questions and annotations of the same split.")
    items = [{"id": qid, "answers": _answers(anns[qid], annotations, qid),
              "answer_type": anns[qid].get("answer_type"), "question_type": anns[qid].get("question_type")}
             for qid in ids]
    tally = tally_items(items, load_predictions(predictions), predictions, annotations, known=anns)
    return tally.metrics("answer_type", "question_type"), tally.items


def score_textvqa(predictions, annotations, questions=None, split=None) -> dict[str, Any]:
    """TextVQA: ``TextVQA_0.5.1_val.json`` ({"data": [{"question_id", "answers": [10 strings]}]})."""
    return score_textvqa_items(predictions, annotations, questions, split)[0]


def score_textvqa_items(predictions, annotations, questions=None, split=None) -> tuple[dict[str, Any], dict[str, float]]:
    """``score_textvqa``'s metrics and each question's VQA accuracy in [0, 1] by question id."""
    no_split(split, "textvqa")
    if questions is not None:
        raise ScoringError("textvqa: the annotations file already holds the questions. Fix: drop --questions.")
    data = read_json(annotations, "annotations file")
    require(isinstance(data, dict) and isinstance(data.get("data"), list), annotations,
            "expected {'data': [...]} (TextVQA format). Fix: pass TextVQA_0.5.1_val.json.")
    items = [{"id": str(d["question_id"]), "answers": _answers(d, annotations, d["question_id"])} for d in data["data"]]
    tally = tally_items(items, load_predictions(predictions), predictions, annotations)
    return tally.metrics("answer_type", "question_type"), tally.items


def score_vizwiz(predictions, annotations, questions=None, split=None) -> dict[str, Any]:
    """VizWiz-VQA: ``val.json`` (list of {"image", "answers": [{"answer", "answer_confidence"}],
    "answer_type", "answerable"}). Questions are identified by their image file name, as in the
    official submission format ``[{"image", "answer"}]`` (``question_id`` holding the name also works)."""
    no_split(split, "vizwiz")
    if questions is not None:
        raise ScoringError("vizwiz: the annotations file already holds the questions. Fix: drop --questions.")
    data = read_json(annotations, "annotations file")
    require(isinstance(data, list), annotations, "expected a JSON list (VizWiz format). Fix: pass val.json.")
    items = []
    for d in data:
        items.append({"id": str(d["image"]), "answers": _answers(d, annotations, d["image"]),
                      "answer_type": d.get("answer_type"),
                      "answerable": None if d.get("answerable") is None else int(d["answerable"])})
    preds = load_predictions(predictions, id_keys=("image", "question_id"))
    metrics = score_items(items, preds, predictions, annotations)
    # extra split by the `answerable` flag (1 = answerable, 0 = unanswerable)
    tally = Tally()
    for it in items:
        answer, missing, empty = lookup(preds, it["id"])
        acc = 0.0 if (missing or empty) else vqa_accuracy(as_text(answer), it["answers"])
        tally.add(acc, answerable=it["answerable"])
    if tally.groups.get("answerable"):
        metrics["per_answerable"] = tally.group("answerable")
    return metrics
