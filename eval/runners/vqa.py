"""Runners of the VQA-accuracy benchmarks: VQAv2, TextVQA and VizWiz (greedy generation of a short answer).

    python evaluate.py run=RUN_DIR benchmark=vqav2 benchmark.root=PATH [limit=N] [batch_size=B]

The prompt is the question followed by `benchmark.prompt_suffix`. File names come from
`conf/benchmark/<name>.yaml`, relative to `benchmark.root`; the layouts are in docs/evaluation.md.
Scored by `eval.scorers.vqa`.
"""

from __future__ import annotations

from pathlib import Path

from data.atomic import read_json
from eval.runners.base import Item, Runner


class VQAv2(Runner):
    """Official questions JSON (prompts, order) + annotations JSON (scoring); COCO images by `image_id`.
    Under `limit` the questions file is cut (the scorer scores the questions it lists)."""

    subset_of, subset_name = "questions", "questions.json"

    def items(self, run_dir: Path) -> list[Item]:
        questions = read_json(self.path("questions"))["questions"]
        pattern = self.settings.get("image_name", "COCO_val2014_{image_id:012d}.jpg")
        return [Item(str(q["question_id"]), self.image_path(pattern.format(image_id=int(q["image_id"]))),
                     q["question"] + self.prompt_suffix, meta={"question_id": q["question_id"], "raw": q})
                for q in questions]

    def scoring_files(self, run_dir):
        return {"annotations": self.path("annotations"), "questions": self.path("questions")}

    def subset(self, items):
        return {"questions": [it.meta["raw"] for it in items]}


class TextVQA(Runner):
    """`TextVQA_0.5.1_val.json` ({"data": [{question_id, question, image_id, answers}]}); images
    `{image_id}.jpg`. OCR tokens are not put in the prompt."""

    def items(self, run_dir: Path) -> list[Item]:
        data = read_json(self.path("annotations"))["data"]
        return [Item(str(d["question_id"]), self.image_path(f"{d['image_id']}.jpg"), d["question"] + self.prompt_suffix,
                     meta={"question_id": d["question_id"], "raw": d}) for d in data]

    def subset(self, items):
        return {"data": [it.meta["raw"] for it in items]}


class VizWiz(Runner):
    """`val.json` (list of {image, question, answers}); questions are named by their image file."""

    def items(self, run_dir: Path) -> list[Item]:
        data = read_json(self.path("annotations"))
        return [Item(d["image"], self.image_path(d["image"]), d["question"] + self.prompt_suffix, meta={"raw": d})
                for d in data]

    def official(self, item, answer):
        return {"image": item.id, "answer": answer}
