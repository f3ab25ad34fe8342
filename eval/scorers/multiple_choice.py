"""Multiple-choice benchmarks: AI2D and ScienceQA, on their official files.

Prediction parsing (``parse_choice``), in this order:
1. a JSON integer is a 0-based option index;
2. a string equal to an option's text (case-insensitive, surrounding whitespace and trailing '.'
   ignored) selects that option;
3. a string that is a lone letter ("B", "b", "(B)", "B.", "B)", "B:"), starts with an upper-case
   letter and a delimiter ("B. cat", "(B) cat", "B) cat"), or contains "answer is B" selects option
   B (A = index 0);
4. anything else (or a letter/index beyond the options) is wrong and counted in ``unparsed``.
Digit strings are treated as text, not indices (so an option "2" matches the prediction "2").

Generated answers (the runners' `benchmark.mode: generate`) are first read by the published evaluation's own
parser, `letter_scienceqa_llava` (LLaVA) or `letter_ai2d_lmms` (lmms-eval), and written as the option index, or
-1 when that parser finds no option (then counted in ``unparsed``).
"""
from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any

from .common import (ScoringError, Tally, as_text, check_known, load_predictions, lookup, no_split, read_json,
                     require)

_LETTER_ONLY = re.compile(r"^\(?([A-Za-z])\)?[.:)]?$")
_LETTER_PREFIX = re.compile(r"^\(?([A-Z])[.:)]\s")
_ANSWER_IS = re.compile(r"answer is:?\s*\(?([A-Z])\)?(?:[.,\s]|$)", re.IGNORECASE)


def _norm(text: str) -> str:
    return " ".join(text.strip().lower().rstrip(".").split())


def parse_choice(answer: Any, options: list[str]) -> int | None:
    """Index of the chosen option, or None when the answer cannot be read as one of ``options``."""
    if isinstance(answer, bool):
        return None
    if isinstance(answer, int):
        return answer if 0 <= answer < len(options) else None
    text = as_text(answer).strip()
    normed = [_norm(o) for o in options]
    if _norm(text) in normed:
        return normed.index(_norm(text))
    m = _LETTER_ONLY.match(text) or _LETTER_PREFIX.match(text) or _ANSWER_IS.search(text)
    if m:
        idx = ord(m.group(1).upper()) - ord("A")
        return idx if idx < len(options) else None
    return None


# --- generated answers, parsed as the published evaluations parse them (runners' `benchmark.mode: generate`) ---
_LLAVA_ANSWER_IS = re.compile(r"The answer is ([A-Z]).")  # as written: '.' matches any character
_LMMS_LETTER = re.compile(r"^\s*([A-Z])\.")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def letter_scienceqa_llava(text: str, num_options: int) -> int | None:
    """LLaVA's ScienceQA parsing (haotian-liu/LLaVA@c121f04, llava/eval/eval_science_qa.py, `get_pred_idx` and the
    loop over problems; options A-E): the text is a letter, or starts with "X. ", or contains exactly one
    "The answer is X" followed by any character; the letter must be among the first `num_options`. Else None
    (LLaVA: "FAILED", scored wrong)."""
    options = "ABCDE"
    if text in options:
        letter = text
    elif len(text) >= 3 and text[0] in options and text[1:3] == ". ":
        letter = text[0]
    else:
        found = _LLAVA_ANSWER_IS.findall(text)
        letter = found[0] if len(found) == 1 else None
    return options.index(letter) if letter is not None and letter in options[:num_options] else None


def letter_ai2d_lmms(text: str, num_options: int) -> int | None:
    """lmms-eval's AI2D scoring (EvolvingLMMs-Lab/lmms-eval@75571cf, lmms_eval/tasks/ai2d/ai2d.yaml, filter
    `utils.MultiChoiceRegexFilter` and metric `exact_match` with ignore_case + ignore_punctuation): a response
    starting with "X." becomes "X"; the result, lower-cased and without ASCII punctuation, must equal an option
    letter (so "B", "b", "(B)", "B)" and "B. cat" read as B; "The answer is B" does not). Else None."""
    m = _LMMS_LETTER.match(text)
    answer = (m.group(1) if m else text).lower().translate(_PUNCTUATION)
    letters = [chr(ord("a") + i) for i in range(num_options)]
    return letters.index(answer) if answer in letters else None


def _score(items: list[dict], preds, pred_path, ann_path, groups=()) -> dict[str, Any]:
    check_known(preds, (it["id"] for it in items), pred_path, ann_path)
    tally, unparsed = Tally(), 0
    for it in items:
        answer, missing, empty = lookup(preds, it["id"])
        choice = None if (missing or empty) else parse_choice(answer, it["options"])
        unparsed += int(not (missing or empty) and choice is None)
        tally.add(float(choice == it["correct"]), missing=missing, empty=empty, **{g: it.get(g) for g in groups})
    metrics = tally.metrics()
    metrics["unparsed"] = unparsed
    for g in groups:
        metrics[f"per_{g}"] = tally.group(g)
    return metrics


def score_scienceqa(predictions, annotations, questions=None, split=None) -> dict[str, Any]:
    """ScienceQA: ``problems.json`` (pid -> {"choices", "answer" (index), "image", "subject", "split"}).

    ``split`` defaults to "test" when problems carry a split; ``questions`` may be ``pid_splits.json``
    (then the pids listed under ``split`` are scored). Extra metric: ``accuracy_img`` on questions
    with an image (the ScienceQA-IMG number LLaVA reports).
    """
    data = read_json(annotations, "annotations file")
    require(isinstance(data, dict), annotations, "expected a dict pid -> problem. Fix: pass ScienceQA problems.json.")
    split = split or "test"
    if questions is not None:
        splits = read_json(questions, "splits file")
        require(isinstance(splits, dict) and split in splits, questions,
                f"no split {split!r}. Fix: pass pid_splits.json and a --split among {list(splits)[:6]}.")
        pids = [str(p) for p in splits[split]]
        for p in pids:
            require(p in data, questions, f"pid {p!r} is not in {annotations}. Fix: pass the matching problems.json.")
    elif any("split" in v for v in data.values()):
        pids = [str(p) for p, v in data.items() if v.get("split") == split]
        require(bool(pids), annotations, f"no problems of split {split!r}. Fix: pass --split train/val/test/minival.")
    else:
        pids = [str(p) for p in data]
    items = [{"id": p, "options": list(data[p]["choices"]), "correct": int(data[p]["answer"]),
              "subject": data[p].get("subject"), "img": "image" if data[p].get("image") else "no_image"}
             for p in pids]
    metrics = _score(items, load_predictions(predictions, answer_types=(str, int)), predictions, annotations, groups=("subject", "img"))
    metrics["accuracy_img"] = metrics.pop("per_img").get("image", 0.0)
    metrics["split"] = split
    return metrics


def read_test_ids(path: Path) -> set[str]:
    """AI2D's test-id list: one image id (e.g. "1234") per line, the first comma-separated field."""
    return {line.split(",")[0].strip() for line in Path(path).read_text().splitlines() if line.strip()}


def score_ai2d(predictions, annotations, questions=None, split=None) -> dict[str, Any]:
    """AI2D: the official ``questions/`` folder (one ``{imageName}.json`` per diagram, each
    {"imageName", "questions": {text: {"questionId", "answerTexts", "correctAnswer", "abcLabel"}}})
    or a single such file. ``questions`` may name a test-id list (one image id per line, e.g.
    ``ai2d_test_ids.csv``): then only those diagrams are scored. Ids are the AI2D ``questionId``s."""
    no_split(split, "ai2d")
    path = Path(annotations)
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    require(bool(files), path, "no *.json files. Fix: pass AI2D's questions/ folder.")
    keep = None
    if questions is not None:
        qpath = Path(questions)
        require(qpath.is_file(), qpath, "test-id list not found. Fix: pass e.g. ai2d_test_ids.csv.")
        keep = read_test_ids(qpath)
    items = []
    for f in files:
        doc = read_json(f, "annotations file")
        require(isinstance(doc, dict) and isinstance(doc.get("questions"), dict), f,
                "expected {'imageName', 'questions': {...}} (AI2D question file). Fix: pass AI2D's questions/ folder.")
        image = str(doc.get("imageName", f.stem))
        if keep is not None and image.split(".")[0] not in keep:
            continue
        for text, q in doc["questions"].items():
            items.append({"id": str(q["questionId"]), "options": list(q["answerTexts"]),
                          "correct": int(q["correctAnswer"]), "abc_label": bool(q.get("abcLabel", False))})
    if not items:
        raise ScoringError(f"{annotations}: no questions selected. Fix: check the test-id list {questions}.")
    return _score(items, load_predictions(predictions, answer_types=(str, int)), predictions, annotations)
