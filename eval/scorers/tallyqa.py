"""TallyQA: counting accuracy on simple and complex questions.

Annotations: the official ``test.json`` (list of {"question_id", "answer": int, "issimple": bool, ...}).
Predictions: [{"question_id", "answer"}], the answer an integer or text. Text is read as the first
count it contains: a run of digits ("3", "3 dogs", "1,000") or a number word zero..twenty; the whole
answer "none" or "no" means 0. Text with no count is wrong and counted in ``unparsed``.
Metrics (percent): accuracy, accuracy_simple, accuracy_complex.
"""
from __future__ import annotations

import re
from typing import Any

from .common import Tally, as_text, check_known, load_predictions, lookup, no_split, read_json, require

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]
_TOKEN = re.compile(r"\d+|[a-z]+")


def parse_count(answer: Any) -> int | None:
    if isinstance(answer, bool):
        return None
    if isinstance(answer, int):
        return answer
    if isinstance(answer, float):
        return int(answer) if answer.is_integer() else None
    text = re.sub(r"(\d),(\d)", r"\1\2", as_text(answer).strip().lower())
    if text.rstrip(".!") in ("none", "no"):
        return 0
    for tok in _TOKEN.findall(text):
        if tok.isdigit():
            return int(tok)
        if tok in WORDS:
            return WORDS.index(tok)
    return None


def score_tallyqa(predictions, annotations, questions=None, split=None) -> dict[str, Any]:
    return score_tallyqa_items(predictions, annotations, questions, split)[0]


def score_tallyqa_items(predictions, annotations, questions=None, split=None) -> tuple[dict[str, Any], dict[str, float]]:
    """``score_tallyqa``'s metrics and each question's score (1 correct, 0 not) by question id."""
    no_split(split, "tallyqa")
    data = read_json(annotations, "annotations file")
    require(isinstance(data, list), annotations, "expected a JSON list of questions. Fix: pass TallyQA test.json.")
    preds = load_predictions(predictions, answer_types=(str, int, float))
    check_known(preds, (str(q["question_id"]) for q in data), predictions, annotations)
    tally, unparsed = Tally(), 0
    for q in data:
        answer, missing, empty = lookup(preds, str(q["question_id"]))
        count = None if (missing or empty) else parse_count(answer)
        unparsed += int(not (missing or empty) and count is None)
        kind = None if "issimple" not in q else ("simple" if q["issimple"] else "complex")
        tally.add(float(count is not None and count == int(q["answer"])), item=str(q["question_id"]), missing=missing, empty=empty, kind=kind)
    metrics = tally.metrics()
    kinds = tally.group("kind")
    metrics["accuracy_simple"] = kinds.get("simple", 0.0)
    metrics["accuracy_complex"] = kinds.get("complex", 0.0)
    metrics["unparsed"] = unparsed
    return metrics, tally.items
