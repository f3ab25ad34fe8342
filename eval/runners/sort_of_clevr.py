"""Runner for the embedded Sort-of-CLEVR benchmark: `python evaluate.py run=RUN_DIR benchmark=sort_of_clevr`.

Answers every held-out question of `test.json` with greedy `generate` (the question as it was trained,
no suffix) and scores the predictions with `eval.scorers.sort_of_clevr` (exact match after lower-casing
and stripping). Returns `accuracy`, `accuracy_relational`, `accuracy_non_relational` in percent,
`accuracy_<subtype>` per subtype, and `n`. The test file is the one generated for the run's own data
config, or `benchmark.root/test.json` when given.
"""

from __future__ import annotations

from pathlib import Path


from core.safe_load import load_run_config
from data.sources import resolve
from data.atomic import read_json
from eval.runners.base import Item, Runner


class SortOfClevr(Runner):
    """Sort-of-CLEVR's held-out questions; predictions `[{"id", "answer"}]`."""

    subset_name = "questions.json"

    def __init__(self, scorer, name: str = "sort_of_clevr", root: str | None = None, max_new_tokens: int = 8,
                 **kwargs):
        super().__init__(name=name, scorer=scorer, root=root, max_new_tokens=max_new_tokens, **kwargs)

    def test_file(self, run_dir: Path) -> tuple[Path, Path]:
        """(test file, image folder): under `root` when set, else the run's own generated data."""
        if self.root:
            return self.root / "test.json", self.root
        run_cfg = load_run_config(run_dir, {"data": ("data", "world")})  # its data generator is one of conf/'s
        if (run_cfg.get("data") or {}).get("name") != "sort_of_clevr":  # an imported checkpoint has no data
            raise FileNotFoundError(f"{run_dir} was not trained on sort_of_clevr data: pass benchmark.root=DIR (a generated dataset folder)")
        source = resolve(run_cfg.data)
        return source.test, source.image_root

    def items(self, run_dir: Path) -> list[Item]:
        test_path, image_root = self.test_file(run_dir)
        if not test_path.is_file():
            raise FileNotFoundError(f"{test_path} not found: benchmark.root must be a generated Sort-of-CLEVR folder")
        return [Item(str(q["id"]), image_root / q["image"], q["question"] + self.prompt_suffix, meta={"raw": q})
                for q in read_json(test_path)]

    def official(self, item, answer):
        return {"id": item.meta["raw"]["id"], "answer": answer}

    def scoring_files(self, run_dir):
        return {"annotations": self.test_file(run_dir)[0]}

    def __call__(self, run_dir: Path, cfg) -> dict | None:
        metrics = super().__call__(run_dir, cfg)
        if metrics is None:  # a rank other than 0 of a sharded evaluation
            return None
        return {k: metrics[k] for k in ("accuracy", "accuracy_relational", "accuracy_non_relational")} | {
            f"accuracy_{k}": v for k, v in metrics.get("per_subtype", {}).items()
        } | {"n": metrics["n"]}
