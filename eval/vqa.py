"""Free-answer runners: VQAv2, TextVQA, VizWiz, GQA and TallyQA (greedy generation, short-answer suffix).

    python evaluate.py run=RUN_DIR benchmark=vqav2 benchmark.root=PATH [limit=N] [batch_size=B]

The prompt is the question followed by `benchmark.prompt_suffix` ("\\nAnswer the question using a single
word or phrase." as LLaVA-1.5 evaluates; VizWiz adds LLaVA's "unanswerable" instruction, TallyQA asks for
a number). File names come from `conf/benchmark/<name>.yaml`, relative to `benchmark.root`; the layouts
are in docs/evaluation.md.
"""

from __future__ import annotations

import json
from pathlib import Path

from eval.runner import Item, Runner


class VQAv2(Runner):
    """Official questions JSON (prompts, order) + annotations JSON (scoring); COCO images by `image_id`."""

    def items(self, run_dir: Path) -> list[Item]:
        questions = json.loads(self.path("questions").read_text())["questions"]
        pattern = self.settings.get("image_name", "COCO_val2014_{image_id:012d}.jpg")
        return [Item(str(q["question_id"]), self.image_path(pattern.format(image_id=int(q["image_id"]))),
                     q["question"] + self.prompt_suffix, meta={"question_id": q["question_id"], "raw": q})
                for q in questions]

    def scoring_files(self, items, limited):
        questions = self.path("questions")
        if limited:
            questions = self.write_subset({"questions": [it.meta["raw"] for it in items]}, "questions.json")
        return {"annotations": self.path("annotations"), "questions": questions}


class TextVQA(Runner):
    """`TextVQA_0.5.1_val.json` ({"data": [{question_id, question, image_id, answers}]}); images
    `{image_id}.jpg`. OCR tokens are not put in the prompt."""

    def items(self, run_dir: Path) -> list[Item]:
        data = json.loads(self.path("annotations").read_text())["data"]
        return [Item(str(d["question_id"]), self.image_path(f"{d['image_id']}.jpg"), d["question"] + self.prompt_suffix,
                     meta={"question_id": d["question_id"], "raw": d}) for d in data]

    def scoring_files(self, items, limited):
        if limited:
            return {"annotations": self.write_subset({"data": [it.meta["raw"] for it in items]}, "annotations.json")}
        return {"annotations": self.path("annotations")}


class VizWiz(Runner):
    """`val.json` (list of {image, question, answers}); questions are named by their image file."""

    def items(self, run_dir: Path) -> list[Item]:
        data = json.loads(self.path("annotations").read_text())
        return [Item(d["image"], self.image_path(d["image"]), d["question"] + self.prompt_suffix, meta={"raw": d})
                for d in data]

    def official(self, item, answer):
        return {"image": item.id, "answer": answer}

    def scoring_files(self, items, limited):
        if limited:
            return {"annotations": self.write_subset([it.meta["raw"] for it in items], "annotations.json")}
        return {"annotations": self.path("annotations")}


class GQA(Runner):
    """`testdev_balanced_questions.json` (dict question id -> {imageId, question, answer}); images
    `{imageId}.jpg`; official predictions `[{"questionId", "prediction"}]`."""

    def items(self, run_dir: Path) -> list[Item]:
        data = json.loads(self.path("annotations").read_text())
        return [Item(str(qid), self.image_path(f"{q['imageId']}.jpg"), q["question"] + self.prompt_suffix,
                     meta={"raw": q}) for qid, q in data.items()]

    def official(self, item, answer):
        return {"questionId": item.id, "prediction": answer}

    def scoring_files(self, items, limited):
        if limited:
            return {"annotations": self.write_subset({it.id: it.meta["raw"] for it in items}, "annotations.json")}
        return {"annotations": self.path("annotations")}


class TallyQA(Runner):
    """`test.json` (list of {question_id, image, question, answer, issimple}); `image` is a path relative to
    the images folder (e.g. `VG_100K/2410408.jpg`, `val2014/COCO_val2014_000000000042.jpg`)."""

    def items(self, run_dir: Path) -> list[Item]:
        data = json.loads(self.path("annotations").read_text())
        return [Item(str(d["question_id"]), self.image_path(d["image"]), d["question"] + self.prompt_suffix,
                     meta={"question_id": d["question_id"], "raw": d}) for d in data]

    def scoring_files(self, items, limited):
        if limited:
            return {"annotations": self.write_subset([it.meta["raw"] for it in items], "annotations.json")}
        return {"annotations": self.path("annotations")}
