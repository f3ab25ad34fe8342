"""GQA: exact match after normalisation, on the official balanced question files.

Annotations: e.g. ``testdev_balanced_questions.json`` -- a dict question_id -> {"answer", "types":
{"structural", "semantic", "detailed"}, ...}. Predictions: the official submission layout
``[{"questionId", "prediction"}]`` or ``[{"question_id", "answer"}]``.
Normalisation (both sides): newlines/tabs -> spaces, lower-case, trailing '.' removed (as LLaVA's
GQA conversion does), runs of whitespace collapsed. The official GQA script itself compares strings
as given; its answers are already lower-case, single-space and period-free, so this only forgives
formatting of the prediction. Metrics: overall and per structural / semantic type, in percent.
"""
from __future__ import annotations

from typing import Any

from .common import Tally, as_text, check_known, load_predictions, lookup, no_split, read_json, require


def normalize(text: str) -> str:
    text = text.replace("\n", " ").replace("\t", " ").strip().lower()
    text = text.rstrip(".").strip()
    return " ".join(text.split())


def score_gqa(predictions, annotations, questions=None, split=None) -> dict[str, Any]:
    return score_gqa_items(predictions, annotations, questions, split)[0]


def score_gqa_items(predictions, annotations, questions=None, split=None) -> tuple[dict[str, Any], dict[str, float]]:
    """``score_gqa``'s metrics and each question's score (1 correct, 0 not) by question id."""
    no_split(split, "gqa")
    data = read_json(annotations, "annotations file")
    require(isinstance(data, dict), annotations,
            "expected a dict question_id -> question (GQA balanced questions format). "
            "Fix: pass e.g. testdev_balanced_questions.json.")
    preds = load_predictions(predictions, id_keys=("questionId", "question_id"), answer_keys=("prediction", "answer"))
    check_known(preds, (str(k) for k in data), predictions, annotations)
    tally = Tally()
    for qid, q in data.items():
        require("answer" in q, annotations, f"question {qid!r} has no 'answer'. Fix: use a split with answers.")
        answer, missing, empty = lookup(preds, str(qid))
        correct = not (missing or empty) and normalize(as_text(answer)) == normalize(str(q["answer"]))
        types = q.get("types") or {}
        tally.add(float(correct), item=str(qid), missing=missing, empty=empty,
                  structural=types.get("structural"), semantic=types.get("semantic"))
    return tally.metrics("structural", "semantic"), tally.items
