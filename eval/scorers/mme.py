"""MME: yes/no questions, two per image, scored as the official MME `eval_tool/calculation.py` does.

Annotations: the release folder `MME_Benchmark_release_version/`, one folder per subtask. A subtask
keeps its question files either in `questions_answers_YN/` (when it has an `images/` folder: artwork,
celebrity, landmark, posters, scene) or next to its images (the others). A question file
`{image stem}.txt` holds one `question<TAB>Yes|No` line per question (two per image in the release).
Predictions: `[{"question_id": "{subtask}/{image stem}/{k}", "answer"}]`, k the 0-based line of the
question in its file.

Per subtask, as the official tool: an answer is lower-cased; "yes" or "no" stands, otherwise the
first four characters decide ("yes" in them: yes, else "no" in them: no, else neither, counted in
`unparsed`, always wrong). `accuracy` is the percentage of questions answered right, `accuracy_plus`
the percentage of images whose questions are all right, and the subtask `score` is their sum
(0..200). `perception` sums the scores of the ten perception subtasks, `cognition` of the four
cognition subtasks (present ones only). The top-level `accuracy` is over all questions. A missing or
empty prediction is wrong and counted in `missing` / `empty`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import ScoringError, Tally, as_text, check_known, load_predictions, lookup, no_split, pct, require

PERCEPTION = ("existence", "count", "position", "color", "posters", "celebrity", "scene", "landmark", "artwork", "OCR")
COGNITION = ("commonsense_reasoning", "numerical_calculation", "text_translation", "code_reasoning")


def to_yes_no(answer: Any) -> str | None:
    """The official reading of an answer: "yes", "no", or None (neither)."""
    text = as_text(answer).lower()
    if text in ("yes", "no"):
        return text
    return "yes" if "yes" in text[:4] else "no" if "no" in text[:4] else None


def question_files(subtask_dir: Path) -> list[Path]:
    """A subtask's question files, sorted: `questions_answers_YN/*.txt` beside `images/`, else `*.txt`."""
    folder = subtask_dir / "questions_answers_YN" if (subtask_dir / "images").is_dir() else subtask_dir
    return sorted(folder.glob("*.txt"))


def read_questions(path: Path) -> list[tuple[str, str]]:
    """The `(question, answer)` lines of one question file; the answer lower-cased ("yes" / "no")."""
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.strip().split("\t")
        require(len(fields) == 2 and fields[1].strip().lower() in ("yes", "no"), path,
                f"line {lineno} is not 'question<TAB>Yes|No'. Fix: pass the MME release folder unmodified.")
        out.append((fields[0], fields[1].strip().lower()))
    return out


def read_release(annotations) -> dict[str, dict[str, list[tuple[str, str]]]]:
    """`{subtask: {image stem: [(question, answer), ...]}}` from the release folder."""
    root = Path(annotations)
    require(root.is_dir(), root, "not a folder. Fix: pass the MME_Benchmark_release_version folder.")
    release = {d.name: {f.stem: read_questions(f) for f in question_files(d)} for d in sorted(root.iterdir()) if d.is_dir()}
    release = {name: files for name, files in release.items() if files}
    if not release:
        raise ScoringError(f"{root}: no subtask folder holds question files. Fix: pass the MME_Benchmark_release_version "
                           "folder (e.g. existence/*.txt, artwork/questions_answers_YN/*.txt).")
    return release


def score_mme(predictions, annotations, questions=None, split=None) -> dict[str, Any]:
    no_split(split, "mme")
    if questions is not None:
        raise ScoringError("mme: the release folder already holds the questions. Fix: drop --questions.")
    release = read_release(annotations)
    preds = load_predictions(predictions)
    check_known(preds, (f"{task}/{stem}/{k}" for task, files in release.items() for stem, qs in files.items()
                        for k in range(len(qs))), predictions, annotations)
    tally, unparsed, per_subtask = Tally(), 0, {}
    raw_scores = {}
    for task, files in release.items():
        right = images_right = n = 0
        for stem, qs in files.items():
            all_right = True
            for k, (_, truth) in enumerate(qs):
                answer, missing, empty = lookup(preds, f"{task}/{stem}/{k}")
                said = None if (missing or empty) else to_yes_no(answer)
                unparsed += int(not (missing or empty) and said is None)
                tally.add(float(said == truth), missing=missing, empty=empty)
                right += said == truth
                all_right &= said == truth
                n += 1
            images_right += all_right
        accuracy, accuracy_plus = 100 * right / n, 100 * images_right / len(files)
        raw_scores[task] = accuracy + accuracy_plus
        per_subtask[task] = {"accuracy": pct(right, n), "accuracy_plus": pct(images_right, len(files)),
                             "score": round(raw_scores[task], 2), "n": n}
    metrics = tally.metrics()
    metrics["unparsed"] = unparsed
    metrics["perception"] = round(sum(raw_scores[t] for t in PERCEPTION if t in raw_scores), 2)
    metrics["cognition"] = round(sum(raw_scores[t] for t in COGNITION if t in raw_scores), 2)
    metrics["per_subtask"] = per_subtask
    return metrics
