"""GQA runner: greedy short answers to the balanced test-dev questions, scored by `eval.scorers.gqa`.

    python evaluate.py run=RUN_DIR benchmark=gqa benchmark.root=PATH [limit=N] [batch_size=B]
"""

from __future__ import annotations

from pathlib import Path

from data.atomic import read_json
from eval.runners.base import Item, Runner


class GQA(Runner):
    """`testdev_balanced_questions.json` (dict question id -> {imageId, question, answer}); images
    `{imageId}.jpg`; official predictions `[{"questionId", "prediction"}]`."""

    def items(self, run_dir: Path) -> list[Item]:
        data = read_json(self.path("annotations"))
        return [Item(str(qid), self.image_path(f"{q['imageId']}.jpg"), q["question"] + self.prompt_suffix,
                     meta={"raw": q}) for qid, q in data.items()]

    def official(self, item, answer):
        return {"questionId": item.id, "prediction": answer}

    def subset(self, items):
        return {it.id: it.meta["raw"] for it in items}
