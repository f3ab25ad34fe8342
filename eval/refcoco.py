"""RefCOCO / RefCOCO+ / RefCOCOg runner: the model writes a box for each referring expression.

    python evaluate.py run=RUN_DIR benchmark=refcoco benchmark.root=PATH [benchmark.split=testA] [limit=N]

Prompt (`benchmark.template`, LLaVA-1.5's grounding instruction): "Please provide the bounding box
coordinate of the region this sentence describes: {sentence}". The answer is parsed by the scorer as the
first "[x1, y1, x2, y2]" in the text; values in [0, 1] are fractions of the original image width/height.
One item per sentence of the refs of `benchmark.split` (default val); images by the instances' file name.
"""

from __future__ import annotations

from pathlib import Path

from eval.runner import Item, Runner
from eval.scorers.common import read_json
from eval.scorers.refcoco import _load_refs


class RefCOCO(Runner):
    def items(self, run_dir: Path) -> list[Item]:
        refs = _load_refs(self.path("annotations"))
        files = {im["id"]: im["file_name"] for im in read_json(self.path("instances"), "instances file")["images"]}
        split = self.settings.get("split", "val")
        template = self.settings.get("template", "{sentence}")
        out = []
        for r in refs:
            if str(r["split"]) != split:
                continue
            for s in r["sentences"]:
                out.append(Item(str(s["sent_id"]), self.image_path(files[r["image_id"]]),
                                template.format(sentence=s["sent"]) + self.prompt_suffix, meta={"ref": r, "sent": s}))
        if not out:
            raise ValueError(f"benchmark {self.name}: no refs of split {split!r} in {self.path('annotations')}")
        return out

    def official(self, item, answer):
        return {"sent_id": item.meta["sent"]["sent_id"], "answer": answer}

    def scoring_files(self, items, limited):
        files = {"annotations": self.path("annotations"), "questions": self.path("instances"),
                 "split": self.settings.get("split", "val")}
        if limited:  # the asked sentences only, still grouped by ref
            refs: dict[int, dict] = {}
            for it in items:
                ref = refs.setdefault(id(it.meta["ref"]), {**it.meta["ref"], "sentences": []})
                ref["sentences"].append(it.meta["sent"])
            files["annotations"] = self.write_subset(list(refs.values()), "refs.json")
        return files
