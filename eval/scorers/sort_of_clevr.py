"""Sort-of-CLEVR: exact match after lower-casing and stripping.

Annotations: the test file, a JSON list of {"id", "image", "question", "answer",
"type": "relational" | "non_relational", "subtype"}. Predictions: [{"id" (or "question_id"), "answer"}].
Metrics (percent): accuracy, accuracy_relational, accuracy_non_relational, per_subtype.
"""
from __future__ import annotations

from typing import Any

from .common import Tally, as_text, check_known, load_predictions, lookup, no_split, read_json, require


def score_sort_of_clevr(predictions, annotations, questions=None, split=None) -> dict[str, Any]:
    return score_sort_of_clevr_items(predictions, annotations, questions, split)[0]


def score_sort_of_clevr_items(predictions, annotations, questions=None, split=None) -> tuple[dict[str, Any], dict[str, float]]:
    """``score_sort_of_clevr``'s metrics and each question's score (1 correct, 0 not) by id."""
    no_split(split, "sort_of_clevr")
    data = read_json(annotations, "annotations file")
    require(isinstance(data, list), annotations,
            "expected a JSON list of questions. Fix: pass the Sort-of-CLEVR test file.")
    preds = load_predictions(predictions, id_keys=("id", "question_id"))
    check_known(preds, (str(q["id"]) for q in data), predictions, annotations)
    tally = Tally()
    for q in data:
        answer, missing, empty = lookup(preds, str(q["id"]))
        correct = not (missing or empty) and as_text(answer).strip().lower() == str(q["answer"]).strip().lower()
        tally.add(float(correct), item=str(q["id"]), missing=missing, empty=empty, type=q.get("type"), subtype=q.get("subtype"))
    metrics = tally.metrics()
    per_type = tally.group("type")
    metrics["accuracy_relational"] = per_type.get("relational", 0.0)
    metrics["accuracy_non_relational"] = per_type.get("non_relational", 0.0)
    metrics["per_subtype"] = tally.group("subtype")
    return metrics, tally.items
