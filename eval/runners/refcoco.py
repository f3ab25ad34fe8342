"""RefCOCO / RefCOCO+ / RefCOCOg runner: the model writes a box for each referring expression; scored by
`eval.scorers.refcoco` (Acc@0.5).

    python evaluate.py run=RUN_DIR benchmark=refcoco benchmark.root=PATH [benchmark.split=testA] [limit=N]

The prompt is `benchmark.template` with the sentence filled in. The answer is parsed by the scorer as the
first "[x1, y1, x2, y2]" in the text; values in [0, 1] are fractions of the original image width/height.
One item per sentence of the refs of `benchmark.split` (default val); images by the instances' file name.
"""

from __future__ import annotations

from pathlib import Path

from eval.runners.base import Item, Runner
from eval.scorers.common import read_json
from eval.scorers.refcoco import load_refs


class RefCOCO(Runner):
    """`refs(unc|umd).p` + `instances.json` of a REFER release; under `limit` the refs are cut to the asked
    sentences (written as `<name>.refs.json`)."""

    subset_name = "refs.json"

    def items(self, run_dir: Path) -> list[Item]:
        refs = load_refs(self.path("annotations"))
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

    def scoring_files(self, run_dir):
        return {"annotations": self.path("annotations"), "questions": self.path("instances"),
                "split": self.settings.get("split", "val")}

    def subset(self, items):  # the asked sentences only, still grouped by ref
        refs: dict[int, dict] = {}
        for it in items:
            ref = refs.setdefault(id(it.meta["ref"]), {**it.meta["ref"], "sentences": []})
            ref["sentences"].append(it.meta["sent"])
        return list(refs.values())
