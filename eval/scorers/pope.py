"""POPE: accuracy, precision, recall, F1 and yes-ratio per split (random / popular / adversarial)
and averaged over the splits present.

Annotations: either the folder of official files ``{dataset}_pope_{split}.json`` (JSON lines
{"question_id", "image", "text", "label": "yes"|"no"}; ids restart in every file) or one JSON/JSONL
file whose records also carry the split in "category" (LLaVA's layout) or "split".
Predictions: [{"question_id", "answer" (or "text"), "category"/"split" (needed only when ids repeat
across splits)}].
Answer mapping, as LLaVA's ``eval_pope.py``: keep the text before the first '.', delete ',', split on
single spaces; "no" if one of the words is exactly "No", "no" or "not", otherwise "yes".
Our rules: an answer that is not a string (a boolean, number, NaN, list) is refused naming the question id,
never read as "yes"; a missing or empty prediction is scored as the wrong answer (yes for a "no" label, no for a
"yes" label) and counted in ``missing``/``empty``; a ratio with a zero denominator is 0.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .common import ScoringError, as_text, is_empty, load_predictions, pct, read_list_or_lines, require

SPLITS = ("random", "popular", "adversarial")


def to_yes_no(text: str) -> str:
    if text.find(".") != -1:
        text = text.split(".")[0]
    words = text.replace(",", "").split(" ")
    return "no" if ("No" in words or "no" in words or "not" in words) else "yes"


def _load_annotations(path) -> dict[tuple[str, str], str]:
    path = Path(path)
    out: dict[tuple[str, str], str] = {}
    if path.is_dir():
        files = sorted(path.glob("*pope_*.json")) + sorted(path.glob("*pope_*.jsonl"))
        require(bool(files), path, "no *_pope_{split}.json files in this folder. Fix: pass the folder holding "
                "coco_pope_random.json, coco_pope_popular.json, coco_pope_adversarial.json.")
        for f in files:
            split = re.sub(r"\.jsonl?$", "", f.name).rsplit("_", 1)[-1]
            for i, rec in enumerate(read_list_or_lines(f, "annotations file")):
                _put(out, (split, str(rec["question_id"])), rec, f, i)
        return out
    for i, rec in enumerate(read_list_or_lines(path, "annotations file")):
        split = rec.get("category", rec.get("split"))
        require(split is not None, path, f"record #{i} has no 'category'/'split'. Fix: add the POPE split or "
                "pass the folder of per-split files.")
        _put(out, (str(split), str(rec["question_id"])), rec, path, i)
    return out


def _put(out, key, rec, path, i) -> None:
    label = str(rec.get("label", rec.get("answer", ""))).strip().lower()
    require(label in ("yes", "no"), path, f"record #{i} has label {label!r}, not yes/no. Fix: use the POPE label files.")
    require(key not in out, path, f"record #{i}: question id {key[1]!r} appears twice in split {key[0]!r}. "
            "Fix: keep one record per question.")
    out[key] = label


def score_pope(predictions, annotations, questions=None, split=None) -> dict[str, Any]:
    return score_pope_items(predictions, annotations, questions, split)[0]


def score_pope_items(predictions, annotations, questions=None, split=None) -> tuple[dict[str, Any], dict[str, dict]]:
    """``score_pope``'s metrics and each question's outcome by "split/question_id": {"split", "pred", "label"}
    (the mapped yes/no answer, a missing or empty one counted wrong, and the label), from which F1 is recomputed."""
    if questions is not None:
        raise ScoringError("pope: the label files already hold the questions. Fix: drop --questions.")
    labels = all_labels = _load_annotations(annotations)
    if split is not None:
        labels = {k: v for k, v in all_labels.items() if k[0] == split}
        require(bool(labels), annotations, f"no questions of split {split!r}. Fix: use one of "
                f"{sorted({k[0] for k in all_labels})}.")
    by_id: dict[str, list[str]] = {}
    for s, qid in all_labels:  # predictions are checked against every split, scored on the chosen ones
        by_id.setdefault(qid, []).append(s)
    preds = load_predictions(predictions, answer_keys=("answer", "text"), scope_keys=("category", "split"))
    answers: dict[tuple[str, str], Any] = {}
    for i, ans, rec in preds.values():
        qid, s = str(rec["question_id"]), rec.get("category", rec.get("split"))
        if s is not None and (str(s), qid) in all_labels:
            key = (str(s), qid)
        elif s is None and len(by_id.get(qid, [])) == 1:
            key = (by_id[qid][0], qid)
        elif s is None and len(by_id.get(qid, [])) > 1:
            raise ScoringError(f"{predictions}: prediction record #{i} (question id {qid!r}) is ambiguous: that id "
                               f"exists in splits {by_id[qid]}. Fix: add 'category' (the split) to each prediction.")
        else:
            raise ScoringError(f"{predictions}: prediction record #{i} is for unknown question id {qid!r}"
                               f"{'' if s is None else f' in split {s!r}'}, which {annotations} does not contain. "
                               "Fix: score against the POPE files the predictions were made on, or remove that record.")
        if key in answers:
            raise ScoringError(f"{predictions}: prediction record #{i} repeats question {qid!r} of split {key[0]!r}. "
                               "Fix: keep exactly one prediction per question.")
        answers[key] = ans
    per_split: dict[str, dict[str, Any]] = {}
    items: dict[str, dict] = {}
    for s in sorted({k[0] for k in labels}, key=lambda x: (SPLITS.index(x) if x in SPLITS else 99, x)):
        tp = fp = tn = fn = missing = empty = n = 0
        for (ls, qid), label in labels.items():
            if ls != s:
                continue
            n += 1
            if (s, qid) not in answers:
                missing += 1
                pred = "no" if label == "yes" else "yes"
            elif is_empty(answers[(s, qid)]):
                empty += 1
                pred = "no" if label == "yes" else "yes"
            else:
                pred = to_yes_no(as_text(answers[(s, qid)]))
            items[f"{s}/{qid}"] = {"split": s, "pred": pred, "label": label}
            tp += pred == "yes" and label == "yes"
            fp += pred == "yes" and label == "no"
            tn += pred == "no" and label == "no"
            fn += pred == "no" and label == "yes"
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_split[s] = {"accuracy": pct(tp + tn, n), "precision": round(100 * precision, 2),
                        "recall": round(100 * recall, 2), "f1": round(100 * f1, 2), "yes_ratio": pct(tp + fp, n),
                        "n": n, "missing": missing, "empty": empty, "tp": tp, "fp": fp, "tn": tn, "fn": fn,
                        "_raw": (100 * (tp + tn) / n, 100 * precision, 100 * recall, 100 * f1, 100 * (tp + fp) / n)}
    metrics: dict[str, Any] = {}
    for j, name in enumerate(("accuracy", "precision", "recall", "f1", "yes_ratio")):
        metrics[name] = round(sum(m["_raw"][j] for m in per_split.values()) / len(per_split), 2)
    for m in per_split.values():
        del m["_raw"]
    metrics["n"] = sum(m["n"] for m in per_split.values())
    metrics["missing"] = sum(m["missing"] for m in per_split.values())
    metrics["empty"] = sum(m["empty"] for m in per_split.values())
    metrics["per_split"] = per_split
    return metrics, items
