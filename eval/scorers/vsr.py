"""VSR (Visual Spatial Reasoning): true/false accuracy.

Annotations: an official split file, JSON lines (or a JSON list) of {"image", "caption", "label": 0|1,
"relation", ...}. Questions are identified by an "id"/"question_id" field when present, otherwise by
their 0-based line number in the file (blank lines skipped). Predictions: [{"question_id", "answer"}]
where the answer is a boolean, 0/1, or text whose first word is true/yes/1 or false/no/0 (case and
punctuation ignored); anything else is wrong and counted in ``unparsed``.
Metrics (percent): accuracy and per relation.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .common import Tally, as_text, check_known, load_predictions, lookup, no_split, read_list_or_lines, require

TRUE, FALSE = {"true", "yes", "1"}, {"false", "no", "0"}


def parse_bool(answer: Any) -> bool | None:
    if isinstance(answer, bool):
        return answer
    if isinstance(answer, int) and answer in (0, 1):
        return bool(answer)
    words = re.findall(r"[a-z0-9]+", as_text(answer).lower())
    if not words:
        return None
    return True if words[0] in TRUE else False if words[0] in FALSE else None


def score_vsr(predictions, annotations, questions=None, split=None) -> dict[str, Any]:
    return score_vsr_items(predictions, annotations, questions, split)[0]


def score_vsr_items(predictions, annotations, questions=None, split=None) -> tuple[dict[str, Any], dict[str, float]]:
    """``score_vsr``'s metrics and each statement's score (1 correct, 0 not) by id."""
    no_split(split, "vsr")
    path = Path(annotations)
    data = read_list_or_lines(path, "annotations file")
    require(isinstance(data, list), path, "expected VSR records. Fix: pass e.g. test.jsonl of a VSR split.")
    items = [(str(d.get("id", d.get("question_id", i))), d) for i, d in enumerate(data)]
    preds = load_predictions(predictions, answer_types=(str, bool, int))
    check_known(preds, (k for k, _ in items), predictions, annotations)
    tally, unparsed = Tally(), 0
    for key, d in items:
        answer, missing, empty = lookup(preds, key)
        value = None if (missing or empty) else parse_bool(answer)
        unparsed += int(not (missing or empty) and value is None)
        tally.add(float(value is not None and value == bool(int(d["label"]))), item=key, missing=missing, empty=empty,
                  relation=d.get("relation"))
    metrics = tally.metrics()
    metrics["unparsed"] = unparsed
    metrics["per_relation"] = tally.group("relation")
    return metrics, tally.items
