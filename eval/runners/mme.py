"""MME runner: every yes/no question of the release folder, answered by `VLM.score` over
`benchmark.options` (default "Yes" / "No"); scored by `eval.scorers.mme` (per subtask accuracy and
accuracy+, perception and cognition scores).

    python evaluate.py run=RUN_DIR benchmark=mme benchmark.root=PATH [limit=N] [batch_size=B]

Items in subtask, file and line order, so an image's two questions are consecutive (a `limit` that
cuts a pair scores the image on its asked question). The prompt is the question as released (it
ends with "Please answer yes or no.") followed by `benchmark.prompt_suffix`.
"""

from __future__ import annotations

from pathlib import Path

from eval.runners.base import Folder, Item, Runner
from eval.scorers.mme import question_files, read_questions

IMAGE_SUFFIXES = (".jpg", ".png", ".jpeg")


class MME(Runner):
    """The `MME_Benchmark_release_version/` folder (`benchmark.annotations`); each question file's image
    is the file of the same stem in the subtask's `images/` folder, or beside it."""

    subset_name = "questions"

    def items(self, run_dir: Path) -> list[Item]:
        root = self.path("annotations")
        out = []
        for task_dir in sorted(d for d in root.iterdir() if d.is_dir()):
            image_dir = task_dir / "images" if (task_dir / "images").is_dir() else task_dir
            for f in question_files(task_dir):
                image = next((image_dir / (f.stem + s) for s in IMAGE_SUFFIXES if (image_dir / (f.stem + s)).is_file()),
                             image_dir / (f.stem + IMAGE_SUFFIXES[0]))
                for k, (question, answer) in enumerate(read_questions(f)):
                    out.append(Item(f"{task_dir.name}/{f.stem}/{k}", image, question + self.prompt_suffix,
                                    options=list(self.settings.get("options", ["Yes", "No"])),
                                    meta={"line": f"{question}\t{answer}"}))
        if not out:
            raise FileNotFoundError(f"{root}: no MME question files (layout in docs/evaluation.md)")
        return out

    def subset(self, items):  # the asked lines only, one file per image as released
        files = Folder()
        for it in items:
            task, stem, _ = it.id.rsplit("/", 2)
            files[f"{task}/{stem}.txt"] = files.get(f"{task}/{stem}.txt", "") + it.meta["line"] + "\n"
        return files
