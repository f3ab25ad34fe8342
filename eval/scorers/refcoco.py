"""RefCOCO / RefCOCO+ / RefCOCOg: Acc@0.5 -- a referring expression is correct when the IoU between
the predicted box and the ground-truth box is >= 0.5.

Annotations: the REFER release, ``refs(unc).p`` / ``refs(umd).p`` / ``refs(google).p`` (a Python
pickle, read as plain data only -- class references are refused -- or the same list saved as JSON) with ``instances.json`` of that
release as ``--questions`` (boxes and image sizes). Without ``--questions`` each ref must carry
"bbox" ([x, y, w, h], pixels) and, for normalised predictions, "width"/"height".
One scored item per sentence; prediction ids are ``sent_id`` (key "sent_id" or "question_id").
Which splits are scored: ``split`` if given, else every split with at least one prediction (missing
sentences of those splits count as wrong).
Box convention: the first "[x1, y1, x2, y2]" (or "(...)") in the answer text, or a JSON list of four
finite numbers (not booleans; any other list is unparsed): corners, x to the right, y down. If all four values lie in [0, 1] they are fractions of the
image width/height (so a pixel box inside the 1x1 top-left corner would be misread); otherwise pixels.
A box that cannot be parsed is wrong and counted in ``unparsed``. GT boxes are COCO [x, y, w, h].
"""
from __future__ import annotations

import math
import pickle
import re
from pathlib import Path
from typing import Any

from .common import ScoringError, Tally, as_text, check_known, load_predictions, lookup, read_json, require

_NUM = r"-?\d+(?:\.\d+)?(?:[eE]-?\d+)?"
_BOX = re.compile(rf"[\[(]\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*[\])]")


def parse_box(answer: Any) -> list[float] | None:
    if isinstance(answer, list):  # four finite numbers (booleans are not numbers); anything else is unparsed
        ok = len(answer) == 4 and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in answer)
        return [float(v) for v in answer] if ok else None
    m = _BOX.search(as_text(answer))
    return [float(v) for v in m.groups()] if m else None


def iou(a: list[float], b: list[float]) -> float:
    """IoU of two [x1, y1, x2, y2] boxes (continuous coordinates; inverted boxes have zero area)."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    area = lambda r: max(0.0, r[2] - r[0]) * max(0.0, r[3] - r[1])  # noqa: E731
    union = area(a) + area(b) - inter
    return inter / union if union > 0 else 0.0


class _PlainDataUnpickler(pickle.Unpickler):
    """Unpickles plain data only (lists, dicts, strings, numbers): any class or function reference is
    refused, so a crafted file cannot run code. The released refs(unc).p holds plain data only."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only plain data is accepted")


def load_refs(path) -> list:
    """The refs of a REFER release: its pickle read as plain data only, or the same list saved as JSON."""
    path = Path(path)
    if path.suffix in (".p", ".pkl", ".pickle"):
        require(path.is_file(), path, "refs file not found. Fix: pass e.g. refcoco/refs(unc).p.")
        try:
            with open(path, "rb") as f:
                return _PlainDataUnpickler(f, encoding="latin1").load()
        except Exception as err:  # noqa: BLE001 -- any unpickling failure is an input problem
            raise ScoringError(f"{path}: cannot read the refs pickle ({err}). Fix: pass refs(unc).p as released.") from None
    return read_json(path, "annotations file")


def score_refcoco(predictions, annotations, questions=None, split=None) -> dict[str, Any]:
    return score_refcoco_items(predictions, annotations, questions, split)[0]


def score_refcoco_items(predictions, annotations, questions=None, split=None) -> tuple[dict[str, Any], dict[str, float]]:
    """``score_refcoco``'s metrics and each scored sentence's score (1: IoU >= 0.5, 0 not) by sentence id."""
    refs = load_refs(annotations)
    require(isinstance(refs, list), annotations, "expected a list of refs (REFER format).")
    boxes, sizes = {}, {}
    if questions is not None:
        inst = read_json(questions, "instances file")
        require(isinstance(inst, dict) and "annotations" in inst and "images" in inst, questions,
                "expected COCO instances JSON. Fix: pass the instances.json shipped with this refs file.")
        boxes = {a["id"]: a["bbox"] for a in inst["annotations"]}
        sizes = {im["id"]: (im["width"], im["height"]) for im in inst["images"]}
    items = []
    for r in refs:
        if questions is not None:
            require(r["ann_id"] in boxes, questions, f"ref {r.get('ref_id')!r}: ann_id {r['ann_id']!r} has no box. "
                    "Fix: pass the instances.json of the same release.")
            bbox, size = boxes[r["ann_id"]], sizes.get(r["image_id"])
        else:
            require("bbox" in r, annotations, f"ref {r.get('ref_id')!r} has no 'bbox'. Fix: pass instances.json as --questions.")
            bbox, size = r["bbox"], (r["width"], r["height"]) if "width" in r else None
        x, y, w, h = (float(v) for v in bbox)
        for s in r["sentences"]:
            items.append({"id": str(s["sent_id"]), "split": str(r["split"]), "box": [x, y, x + w, y + h], "size": size})
    preds = load_predictions(predictions, id_keys=("sent_id", "question_id"), answer_types=(str, list))
    check_known(preds, (it["id"] for it in items), predictions, annotations, key_name="sentence id")
    if split is not None:
        chosen = {split}
        require(any(it["split"] == split for it in items), annotations,
                f"no refs of split {split!r}. Fix: use one of {sorted({it['split'] for it in items})}.")
    else:
        chosen = {it["split"] for it in items if it["id"] in preds} or {it["split"] for it in items}
    tally, unparsed = Tally(), 0
    for it in items:
        if it["split"] not in chosen:
            continue
        answer, missing, empty = lookup(preds, it["id"])
        box = None if (missing or empty) else parse_box(answer)
        if box is not None and all(0.0 <= v <= 1.0 for v in box):
            if it["size"] is None:
                raise ScoringError(f"{predictions}: sentence {it['id']!r} has a normalised box but {annotations} gives "
                                   "no image size. Fix: pass instances.json as --questions, or predict pixel boxes.")
            w, h = it["size"]
            box = [box[0] * w, box[1] * h, box[2] * w, box[3] * h]
        unparsed += int(not (missing or empty) and box is None)
        tally.add(float(box is not None and iou(box, it["box"]) >= 0.5), item=it["id"], missing=missing, empty=empty, split=it["split"])
    metrics = tally.metrics()
    metrics["unparsed"] = unparsed
    metrics["per_split"] = tally.group("split")
    return metrics, tally.items
