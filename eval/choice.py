"""Probability-scored runners: POPE and VSR (yes/no), AI2D and ScienceQA (multiple choice).

    python evaluate.py run=RUN_DIR benchmark=pope benchmark.root=PATH [limit=N] [batch_size=B]

Nothing is generated: `VLM.score` gives each item's probabilities over its answer options (the
log-likelihood of the whole assistant answer, normalised over the options) and the most probable option
is the prediction. POPE and VSR choose between "yes" and "no". AI2D and ScienceQA list the options as
"A. text" lines after the question, end with LLaVA-1.5's "Answer with the option's letter from the given
choices directly." and score the letters ("A", "B", ...), so every option is one short answer of the
same length; `benchmark.choice_by=text` scores the option texts instead. Multiple-choice predictions are
written as the 0-based option index (a JSON integer), which the scorer reads unambiguously even when an
AI2D option is itself a letter.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from eval.runner import Item, Runner
from eval.scorers.common import read_json, read_jsonl
from eval.scorers.pope import SPLITS

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _records(path: Path) -> list:
    """JSON lines (as POPE and VSR ship them, whatever the suffix) or a JSON list."""
    if path.read_text(encoding="utf-8").lstrip().startswith("["):
        return read_json(path, "annotations file")
    return read_jsonl(path, "annotations file")


class POPE(Runner):
    """The folder of `{dataset}_pope_{split}.json` files; items in split order random, popular, adversarial.
    Ids restart in every file, so an item's id is `split/question_id` and predictions carry `category`."""

    def items(self, run_dir: Path) -> list[Item]:
        folder = self.path("annotations")
        files = sorted(folder.glob("*pope_*.json")) + sorted(folder.glob("*pope_*.jsonl"))
        if not files:
            raise FileNotFoundError(f"{folder}: no *_pope_{{split}}.json files (layout in docs/evaluation.md)")
        split_of = {f: re.sub(r"\.jsonl?$", "", f.name).rsplit("_", 1)[-1] for f in files}
        files.sort(key=lambda f: (SPLITS.index(split_of[f]) if split_of[f] in SPLITS else 99, f.name))
        out = []
        for f in files:
            for rec in _records(f):
                split = split_of[f]
                out.append(Item(f"{split}/{rec['question_id']}", self.image_path(rec["image"]),
                                rec["text"] + self.prompt_suffix, options=["yes", "no"],
                                meta={"question_id": rec["question_id"], "category": split, "raw": rec}))
        return out

    def official(self, item, answer):
        return {"question_id": item.meta["question_id"], "category": item.meta["category"], "answer": answer}

    def scoring_files(self, items, limited):
        if limited:
            recs = [{**it.meta["raw"], "category": it.meta["category"]} for it in items]
            return {"annotations": self.write_subset(recs, "annotations.json")}
        return {"annotations": self.path("annotations")}


class VSR(Runner):
    """A VSR split file (JSON lines of {image, caption, label, relation}); the caption goes into
    `benchmark.template`; option 0 ("yes") means true. Ids as the scorer reads them: the record's
    `id`/`question_id`, else its 0-based line number."""

    def items(self, run_dir: Path) -> list[Item]:
        template = self.settings.get("template", "{caption}")
        out = []
        for i, d in enumerate(_records(self.path("annotations"))):
            key = str(d.get("id", d.get("question_id", i)))
            out.append(Item(key, self.image_path(d["image"]), template.format(caption=d["caption"]) + self.prompt_suffix,
                            options=list(self.settings.get("options", ["yes", "no"])), meta={"raw": d}))
        return out

    def answer_of(self, item, probs):
        return bool(probs[0] >= probs[1])

    def scoring_files(self, items, limited):
        if limited:  # the first N records keep their line numbers
            return {"annotations": self.write_subset([it.meta["raw"] for it in items], "annotations.json")}
        return {"annotations": self.path("annotations")}


class MultipleChoice(Runner):
    """Shared prompt and option scoring for AI2D and ScienceQA."""

    def prompt(self, question: str, options: list[str], context: str = "") -> str:
        lines = [f"Context: {context}"] if context else []
        lines += [question, *(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))]
        return "\n".join(lines) + self.prompt_suffix

    def choices(self, options: list[str]) -> list[str]:
        by = self.settings.get("choice_by", "letter")
        if by not in ("letter", "text"):
            raise ValueError(f"benchmark.choice_by must be 'letter' or 'text', not {by!r}")
        return list(LETTERS[: len(options)]) if by == "letter" else list(options)

    def answer_of(self, item, probs):
        return max(range(len(probs)), key=probs.__getitem__)


class AI2D(MultipleChoice):
    """The `questions/` folder (one `{imageName}.json` per diagram) and, unless `benchmark.test_ids=null`, the
    test-id list; images `images/{imageName}`."""

    def items(self, run_dir: Path) -> list[Item]:
        keep = None
        if self.settings.get("test_ids"):
            lines = self.path("test_ids").read_text().splitlines()
            keep = {line.split(",")[0].strip() for line in lines if line.strip()}
        out = []
        for f in sorted(self.path("annotations").glob("*.json")):
            doc = read_json(f, "annotations file")
            image = str(doc.get("imageName", f.stem))
            if keep is not None and image.split(".")[0] not in keep:
                continue
            for text, q in doc["questions"].items():
                options = list(q["answerTexts"])
                out.append(Item(str(q["questionId"]), self.image_path(image), self.prompt(text, options),
                                options=self.choices(options), meta={"file": f.name, "doc": doc, "text": text}))
        return out

    def scoring_files(self, items, limited):
        if not limited:
            return {"annotations": self.path("annotations"),
                    "questions": self.path("test_ids") if self.settings.get("test_ids") else None}
        folder = self.pred_dir / f"{self.name}.questions"  # the asked questions, still one file per diagram
        folder.mkdir(exist_ok=True)
        for old in folder.glob("*.json"):
            old.unlink()
        docs: dict[str, dict] = {}
        for it in items:
            doc = docs.setdefault(it.meta["file"], {**it.meta["doc"], "questions": {}})
            doc["questions"][it.meta["text"]] = it.meta["doc"]["questions"][it.meta["text"]]
        for name, doc in docs.items():
            (folder / name).write_text(json.dumps(doc))
        return {"annotations": folder}


class ScienceQA(MultipleChoice):
    """`problems.json` + `pid_splits.json` (split `benchmark.split`, default test); a problem's image is
    `images/{split}/{pid}/image.png`; problems without one are asked text-only. The hint goes in front as
    "Context: ...", as LLaVA does."""

    def items(self, run_dir: Path) -> list[Item]:
        problems = read_json(self.path("annotations"), "annotations file")
        split = self.settings.get("split", "test")
        pids = [str(p) for p in read_json(self.path("splits"), "splits file")[split]]
        out = []
        for pid in pids:
            p = problems[pid]
            image = self.image_path(split, pid, p["image"]) if p.get("image") else None
            options = list(p["choices"])
            out.append(Item(pid, image, self.prompt(p["question"], options, (p.get("hint") or "").strip()),
                            options=self.choices(options)))
        return out

    def scoring_files(self, items, limited):
        split = self.settings.get("split", "test")
        splits = self.write_subset({split: [it.id for it in items]}, "splits.json") if limited else self.path("splits")
        return {"annotations": self.path("annotations"), "questions": splits, "split": split}
