"""Runner for the embedded Sort-of-CLEVR benchmark: `python evaluate.py run=RUN_DIR benchmark=sort_of_clevr`.

Answers every held-out question of `test.json` with greedy `generate`, writes
the predictions to `RUN_DIR/predictions/sort_of_clevr.json`, and scores them
with `eval.scorers.sort_of_clevr` (exact match after lower-casing and
stripping): `accuracy`, `accuracy_relational`, `accuracy_non_relational` in
percent, plus per-subtype accuracies. The test file is the one generated for
the run's own data config, or `benchmark.root/test.json` when given.
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf
from PIL import Image
from rich.progress import track

import vlm
from data.sources import resolve
from eval.scorers import score_sort_of_clevr


class SortOfClevr:
    def __init__(self, name: str = "sort_of_clevr", root: str | None = None, max_new_tokens: int = 8):
        self.name = name
        self.root = root
        self.max_new_tokens = max_new_tokens

    def test_file(self, run_dir: Path) -> tuple[Path, Path]:
        if self.root:
            return Path(self.root) / "test.json", Path(self.root)
        run_cfg = OmegaConf.load(run_dir / "config.yaml")
        if run_cfg.data.get("name") != "sort_of_clevr":
            raise FileNotFoundError(f"{run_dir} was not trained on sort_of_clevr data: pass benchmark.root=DIR (a generated dataset folder)")
        source = resolve(run_cfg.data)
        return source.test, source.image_root

    def __call__(self, run_dir: Path, cfg) -> dict:
        test_path, image_root = self.test_file(run_dir)
        questions = json.loads(test_path.read_text())
        if cfg.get("limit"):
            questions = questions[: int(cfg.limit)]
        model = vlm.load(run_dir)
        predictions = []
        batch = int(cfg.get("batch_size", 64))
        for start in track(range(0, len(questions), batch), description="sort_of_clevr"):
            chunk = questions[start : start + batch]
            images = [Image.open(image_root / q["image"]).convert("RGB") for q in chunk]
            answers = model.generate(images, [q["question"] for q in chunk], max_new_tokens=self.max_new_tokens)
            predictions += [{"id": q["id"], "answer": a} for q, a in zip(chunk, answers)]
        out = run_dir / "predictions" / f"{self.name}.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(predictions, indent=1))
        if cfg.get("limit"):  # score only the questions asked
            subset = run_dir / "predictions" / f"{self.name}.questions.json"
            subset.write_text(json.dumps(questions))
            test_path = subset
        metrics = score_sort_of_clevr(out, test_path)
        return {k: metrics[k] for k in ("accuracy", "accuracy_relational", "accuracy_non_relational")} | {
            f"accuracy_{k}": v for k, v in metrics.get("per_subtype", {}).items()
        } | {"n": metrics.get("n", len(questions))}
