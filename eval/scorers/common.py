"""Shared plumbing for the benchmark scorers: errors, file reading, prediction indexing, tallies.

Conventions every scorer follows:
- ids are compared as strings (``7`` in one file matches ``"7"`` in another);
- the set of scored questions comes from the annotation side, never from the predictions:
  a question without a prediction scores 0 and is counted in ``missing``;
- a prediction whose answer is empty (``None`` or only whitespace) scores 0 and is counted in ``empty``;
- an answer of a type the scorer does not read (by default anything but a string or ``None``: booleans,
  numbers, NaN, lists, objects) raises :class:`ScoringError` naming the record and the question id, never
  read as an answer (a scorer that reads option indices or boxes widens ``answer_types``);
- a prediction record carrying a field that only another benchmark's predictions have (``FIELD_OWNERS``:
  GQA's ``questionId``/``prediction``, POPE's ``category``, RefCOCO's ``sent_id``) is refused: the file was
  made for that benchmark;
- a prediction for an id the annotations do not contain, a duplicated id, or a file that is not
  valid JSON raises :class:`ScoringError` naming the file, the record and the fix;
- accuracies are percentages rounded to 2 decimals (as the official VQA script rounds).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable


class ScoringError(ValueError):
    """Malformed or inconsistent input; the message names the file, the record and the fix."""


def pct(num: float, den: int) -> float:
    """``100 * num / den`` rounded to 2 decimals; 0.0 when nothing was scored."""
    return round(100.0 * num / den, 2) if den else 0.0


def as_text(answer: Any) -> str:
    """A prediction's answer as text (``None`` -> ``""``; numbers and booleans via ``str``)."""
    if answer is None:
        return ""
    if isinstance(answer, str):
        return answer
    return json.dumps(answer) if isinstance(answer, (list, dict)) else str(answer)


def is_empty(answer: Any) -> bool:
    return as_text(answer).strip() == ""


def read_json(path: str | Path, what: str = "file") -> Any:
    """Load a JSON file; a parse error becomes a ScoringError with the file name and position."""
    path = Path(path)
    if not path.is_file():
        raise ScoringError(f"{path}: {what} not found. Fix: pass the path of an existing file.")
    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ScoringError(
            f"{path}: {what} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno} "
            f"(char {err.pos}). Fix: rewrite the file as one JSON document"
            f"{' (or name it *.jsonl for one JSON object per line)' if path.suffix != '.jsonl' else ''}."
        ) from None


def read_jsonl(path: str | Path, what: str = "file") -> list:
    """Load a JSON-lines file (blank lines skipped); errors name the file, line and column."""
    path = Path(path)
    if not path.is_file():
        raise ScoringError(f"{path}: {what} not found. Fix: pass the path of an existing file.")
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ScoringError(
                f"{path}: {what} line {lineno} is not valid JSON: {err.msg} at column {err.colno}. "
                "Fix: write exactly one JSON object per line."
            ) from None
    return out


def read_list_or_lines(path: str | Path, what: str = "file") -> list:
    """A JSON list, or JSON lines whatever the suffix (POPE and VSR ship JSON lines named *.json)."""
    path = Path(path)
    if path.is_file() and path.read_text(encoding="utf-8").lstrip().startswith("["):
        return read_json(path, what)
    return read_jsonl(path, what)


def read_records(path: str | Path, what: str = "file") -> Any:
    """``*.jsonl`` files are read line by line, everything else as a single JSON document."""
    return read_jsonl(path, what) if str(path).endswith(".jsonl") else read_json(path, what)


FIELD_OWNERS = {"questionId": "gqa", "prediction": "gqa", "category": "pope", "sent_id": "refcoco"}


def load_predictions(
    path: str | Path,
    id_keys: Iterable[str] = ("question_id",),
    answer_keys: Iterable[str] = ("answer",),
    scope_keys: Iterable[str] = (),
    answer_types: tuple[type, ...] = (str,),
) -> dict[str, tuple[int, Any, dict]]:
    """Index a predictions file as ``{str(id): (record_number, answer, record)}``.

    Accepted layouts: a JSON list (or JSONL) of objects carrying one of ``id_keys`` and one of
    ``answer_keys``, or a JSON object mapping id -> answer. Duplicate ids are an error. With
    ``scope_keys`` (e.g. a split field) a record carrying one is indexed as ``"{scope}/{id}"``.
    An answer must be ``None`` (counted empty) or one of ``answer_types`` (booleans are never ints; a float
    must be finite), and a record must not carry another benchmark's fields (``FIELD_OWNERS``); else
    ScoringError naming the record and its question id.
    """
    id_keys, answer_keys = tuple(id_keys), tuple(answer_keys)
    own_keys = set(id_keys) | set(answer_keys) | set(scope_keys)
    data = read_records(path, "predictions file")
    if isinstance(data, dict):
        records = [{id_keys[0]: k, answer_keys[0]: v} for k, v in data.items()]
    elif isinstance(data, list):
        records = data
    else:
        raise ScoringError(
            f"{path}: predictions file holds a JSON {type(data).__name__}. "
            f"Fix: write a list of objects with keys {id_keys[0]!r} and {answer_keys[0]!r}."
        )
    out: dict[str, tuple[int, Any, dict]] = {}
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise ScoringError(f"{path}: prediction record #{i} is not a JSON object. "
                               f"Fix: write {{{id_keys[0]!r}: ..., {answer_keys[0]!r}: ...}}.")
        qid = next((rec[k] for k in id_keys if k in rec), None)
        if qid is None:
            raise ScoringError(f"{path}: prediction record #{i} has no id (expected one of {list(id_keys)}). "
                               "Fix: add the question id to every record.")
        if not any(k in rec for k in answer_keys):
            raise ScoringError(f"{path}: prediction record #{i} (id {qid!r}) has no answer "
                               f"(expected one of {list(answer_keys)}). Fix: add the model's answer.")
        foreign = next((k for k in rec if k in FIELD_OWNERS and k not in own_keys), None)
        if foreign is not None:
            raise ScoringError(f"{path}: prediction record #{i} (question id {qid!r}) has the field {foreign!r} of "
                               f"{FIELD_OWNERS[foreign]} predictions, which this benchmark does not use. Fix: score the "
                               "file with the benchmark it was made for, or pass this benchmark's predictions.")
        answer = next(rec[k] for k in answer_keys if k in rec)
        check_answer_type(answer, answer_types, path, i, qid)
        scope = next((rec[k] for k in scope_keys if k in rec), None)
        key = str(qid) if scope is None else f"{scope}/{qid}"
        if key in out:
            raise ScoringError(f"{path}: prediction records #{out[key][0]} and #{i} share the id {qid!r}. "
                               "Fix: keep exactly one prediction per question.")
        out[key] = (i, answer, rec)
    return out


def check_answer_type(answer: Any, answer_types: tuple[type, ...], path, i: int, qid: Any) -> None:
    """Raise ScoringError unless `answer` is None or of `answer_types` (a bool only if bool is listed, a float only
    if finite)."""
    ok = answer is None or (isinstance(answer, answer_types) and (not isinstance(answer, bool) or bool in answer_types)
                            and not (isinstance(answer, float) and not math.isfinite(answer)))
    if not ok:
        wanted = " or ".join("a string" if t is str else f"a {t.__name__}" for t in answer_types)
        raise ScoringError(f"{path}: prediction record #{i} (question id {qid!r}) has the answer {answer!r} "
                           f"(a {type(answer).__name__}); this benchmark reads {wanted}. Fix: write the model's answer "
                           "as a JSON string (null for no answer).")


def check_known(preds: dict[str, tuple], known: Iterable[str], pred_path, ann_path, key_name="question id") -> None:
    """Raise on the first prediction whose id is not among the annotated ``known`` ids."""
    known = set(known)
    for key, (i, _, _) in preds.items():
        if key not in known:
            raise ScoringError(
                f"{pred_path}: prediction record #{i} is for unknown {key_name} {key!r}, which {ann_path} "
                "does not contain. Fix: score against the annotations of the split the predictions were "
                "made on, or remove that record."
            )


def no_split(split: str | None, name: str) -> None:
    if split is not None:
        raise ScoringError(f"{name}: this benchmark takes no --split (got {split!r}). Fix: drop --split.")


class Tally:
    """Accumulates per-question scores overall and per named group (e.g. answer type), and each question's own
    score by id (`items`: what the scorers' `*_items` functions return for bootstrap intervals)."""

    def __init__(self) -> None:
        self.total, self.n, self.missing, self.empty = 0.0, 0, 0, 0
        self.groups: dict[str, dict[str, list[float]]] = {}
        self.items: dict[str, float] = {}

    def add(self, score: float, *, item: str | None = None, missing: bool = False, empty: bool = False,
            **groups: Any) -> None:
        if item is not None:
            self.items[str(item)] = float(score)
        self.total += score
        self.n += 1
        self.missing += int(missing)
        self.empty += int(empty)
        for gname, gval in groups.items():
            if gval is None:
                continue
            acc = self.groups.setdefault(gname, {}).setdefault(str(gval), [0.0, 0])
            acc[0] += score
            acc[1] += 1

    def group(self, gname: str) -> dict[str, float]:
        return {k: pct(s, n) for k, (s, n) in sorted(self.groups.get(gname, {}).items())}

    def metrics(self, *per: str) -> dict[str, Any]:
        """Overall accuracy and counts, plus `per_<group>` breakdowns for the named groups that were seen."""
        out = {"accuracy": pct(self.total, self.n), "n": self.n, "missing": self.missing, "empty": self.empty}
        out.update({f"per_{name}": self.group(name) for name in per if self.groups.get(name)})
        return out


def lookup(preds: dict[str, tuple], key: str) -> tuple[Any, bool, bool]:
    """``(answer, missing, empty)`` for one annotated id."""
    if key not in preds:
        return None, True, False
    answer = preds[key][1]
    return answer, False, is_empty(answer)


def require(cond: bool, path, msg: str) -> None:
    if not cond:
        raise ScoringError(f"{path}: {msg}")


Scorer = Callable[..., dict]
