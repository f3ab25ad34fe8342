"""TallyQA runner: greedy generation of a count per question, scored by `eval.scorers.tallyqa`.

    python evaluate.py run=RUN_DIR benchmark=tallyqa benchmark.root=PATH [limit=N] [batch_size=B]
"""

from __future__ import annotations

from pathlib import Path

from data.atomic import read_json
from eval.runners.base import Item, Runner


class TallyQA(Runner):
    """`test.json` (list of {question_id, image, question, answer, issimple}); `image` is a path relative to
    the images folder (e.g. `VG_100K/2410408.jpg`, `val2014/COCO_val2014_000000000042.jpg`)."""

    def items(self, run_dir: Path) -> list[Item]:
        data = read_json(self.path("annotations"))
        return [Item(str(d["question_id"]), self.image_path(d["image"]), d["question"] + self.prompt_suffix,
                     meta={"question_id": d["question_id"], "raw": d}) for d in data]
