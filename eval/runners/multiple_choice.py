"""Multiple-choice runners: AI2D and ScienceQA, answered by greedy generation (`benchmark.mode: generate`, the
default: the letter parsed as lmms-eval (AI2D) and LLaVA (ScienceQA) parse it) or by `VLM.score` over the options
(`mode: likelihood`); scored by `eval.scorers.multiple_choice`.

    python evaluate.py run=RUN_DIR benchmark=ai2d benchmark.root=PATH [limit=N] [batch_size=B]

The options are listed as "A. text" lines after the question, followed by `benchmark.prompt_suffix`.
`likelihood`: `VLM.score` gives each option's probability and the most probable one is the prediction. With
`benchmark.choice_by=letter` (default) the letters ("A", "B", ...) are scored, with `text` the option
texts. Predictions are written as the 0-based option index (a JSON integer; -1 when a generated answer names
no option), which the scorer reads unambiguously even when an AI2D option is itself a letter.
"""

from __future__ import annotations

from pathlib import Path

from eval.runners.base import Folder, Item, Runner
from eval.scorers.common import read_json
from eval.scorers.multiple_choice import letter_ai2d_lmms, letter_scienceqa_llava, read_test_ids

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


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

    parser = None  # the published evaluation's parser of generated text: (text, number of options) -> index | None

    def parse_generated(self, item, text):
        index = self.parser(text, len(item.options))
        return -1 if index is None else index  # -1: no option found (scored wrong, counted as unparsed)


class AI2D(MultipleChoice):
    """The `questions/` folder (one `{imageName}.json` per diagram) and, unless `benchmark.test_ids=null`, the
    test-id list; images `images/{imageName}`."""

    subset_name = "questions"
    parser = staticmethod(letter_ai2d_lmms)

    def items(self, run_dir: Path) -> list[Item]:
        keep = read_test_ids(self.path("test_ids")) if self.settings.get("test_ids") else None
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

    def scoring_files(self, run_dir):
        return {"annotations": self.path("annotations"),
                "questions": self.path("test_ids") if self.settings.get("test_ids") else None}

    def subset(self, items):  # the asked questions, still one file per diagram
        docs = Folder()
        for it in items:
            doc = docs.setdefault(it.meta["file"], {**it.meta["doc"], "questions": {}})
            doc["questions"][it.meta["text"]] = it.meta["doc"]["questions"][it.meta["text"]]
        return docs


class ScienceQA(MultipleChoice):
    """`problems.json` + `pid_splits.json` (split `benchmark.split`, default test); a problem's image is
    `images/{split}/{pid}/image.png`; problems without one are asked text-only. The hint goes in front as
    "Context: ...", as LLaVA does. Under `limit` the split list is cut."""

    subset_of, subset_name = "questions", "splits.json"
    parser = staticmethod(letter_scienceqa_llava)

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

    def scoring_files(self, run_dir):
        return {"annotations": self.path("annotations"), "questions": self.path("splits"),
                "split": self.settings.get("split", "test")}

    def subset(self, items):
        return {self.settings.get("split", "test"): [it.id for it in items]}
