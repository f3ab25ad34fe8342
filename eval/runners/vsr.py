"""VSR runner: each caption is asked as a yes/no question (`benchmark.template`) and answered by
`VLM.score` over `benchmark.options` (the first means true); scored by `eval.scorers.vsr`.

    python evaluate.py run=RUN_DIR benchmark=vsr benchmark.root=PATH [limit=N] [batch_size=B]
"""

from __future__ import annotations

from pathlib import Path

from eval.runners.base import Item, Runner
from eval.scorers.common import read_list_or_lines


class VSR(Runner):
    """A VSR split file (JSON lines of {image, caption, label, relation}); the caption goes into
    `benchmark.template`; option 0 ("yes") means true. Ids as the scorer reads them: the record's
    `id`/`question_id`, else its 0-based line number (the first N records of a `limit` keep theirs)."""

    def items(self, run_dir: Path) -> list[Item]:
        template = self.settings.get("template", "{caption}")
        out = []
        for i, d in enumerate(read_list_or_lines(self.path("annotations"), "annotations file")):
            key = str(d.get("id", d.get("question_id", i)))
            out.append(Item(key, self.image_path(d["image"]), template.format(caption=d["caption"]) + self.prompt_suffix,
                            options=list(self.settings.get("options", ["yes", "no"])), meta={"raw": d}))
        return out

    def answer_of(self, item, probs):
        return bool(probs[0] >= probs[1])
