"""POPE runner: every question of the three split files, answered by greedy generation (`benchmark.mode:
generate`, the default; the scorer maps the text to yes/no as LLaVA's eval_pope.py does) or by "yes" vs "no"
chosen by `VLM.score` (`mode: likelihood`); scored by `eval.scorers.pope`.

    python evaluate.py run=RUN_DIR benchmark=pope benchmark.root=PATH [limit=N] [batch_size=B]
"""

from __future__ import annotations

import re
from pathlib import Path

from eval.runners.base import Item, Runner
from eval.scorers.common import read_list_or_lines
from eval.scorers.pope import SPLITS


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
            for rec in read_list_or_lines(f, "annotations file"):
                split = split_of[f]
                out.append(Item(f"{split}/{rec['question_id']}", self.image_path(rec["image"]),
                                rec["text"] + self.prompt_suffix, options=["yes", "no"],
                                meta={"question_id": rec["question_id"], "category": split, "raw": rec}))
        return out

    def official(self, item, answer):
        return {"question_id": item.meta["question_id"], "category": item.meta["category"], "answer": answer}

    def subset(self, items):  # one file whose records carry their split, as the scorer reads it
        return [{**it.meta["raw"], "category": it.meta["category"]} for it in items]
