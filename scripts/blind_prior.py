"""The blind baseline of the mini world's benchmarks: a model given the questions without the images.

Every benchmark question is answered from the training data alone (instruct.json, whose prompts are the
benchmarks' own), at one of three levels: the same prompt, the same template (the prompt with its colour, shape,
size and sign words masked) or the same suffix (the question type). Which level answers a template is chosen on
held-out training questions: every `holdout_every`-th training pair is answered from the others at each level,
and the level that gets most of that template's held-out answers right (exact answer; a box at IoU >= 0.5) is
kept, the coarser one on a tie. The answer is then that level's over all training pairs -- the most frequent
answer, or for boxes (RefCOCO) the mean box -- backing off to the coarser levels for a key never seen. A rare
exact prompt's answer is noise, and the held-out questions say so: the prior then answers from the template, as
a question-only model that learnt each type's majority answer does. The predictions are written in each
benchmark's official format through its REAL runner (`items`, `official`, `scoring_files`)
and scored by its REAL scorer. Prints and writes (`--out`) one JSON `{"mini_vqav2/accuracy": x, ...}` (each
benchmark's main metric, percent): the prior a trained cell must beat.

    python scripts/blind_prior.py [--root WORLD_DIR] [--out prior.json] [data.generator.n_train=8000 ...]

Without --root the world is the one conf/world/mini.yaml makes (generated on first use; overrides apply).
Library: `blind_prior(world_root, pred_dir) -> {benchmark/metric: value}`.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hydra.utils import instantiate

from core.conf import compose_config
from data.atomic import write_json
from data.mini_world_questions import FAMILIES
from data.mini_world_scenes import COLORS, SHAPES, SIZES, WORDS
from eval.scorers.refcoco import iou, parse_box

_MASKS = [(re.compile(r"\b(" + "|".join(words) + r")\b"), tag) for words, tag in (
    (list(COLORS), "<color>"), ([s + "s" for s in SHAPES] + list(SHAPES), "<shape>"), (list(SIZES), "<size>"),
    (list(WORDS), "<word>"))]
_BOX = re.compile(r"^\[([\d.]+), ([\d.]+), ([\d.]+), ([\d.]+)\]$")


def template(prompt: str) -> str:
    for pattern, tag in _MASKS:
        prompt = pattern.sub(tag, prompt)
    return prompt


def suffix(prompt: str) -> str:
    return prompt.rsplit("\n", 1)[-1] if "\n" in prompt else prompt.split(":")[0]


LEVELS = ("prompt", "template", "suffix")


def keys(prompt: str) -> tuple[str, str, str]:
    """The prompt's key at each of LEVELS."""
    return prompt, template(prompt), suffix(prompt)


def agrees(guess: str | None, answer: str) -> bool:
    """A guess is right if it is the answer, or (boxes) overlaps it at IoU >= 0.5, RefCOCO's Acc@0.5."""
    a, b = parse_box(answer), guess and parse_box(guess)
    if a and b:
        return iou(b, a) >= 0.5
    return guess == answer


class Prior:
    """Answers a prompt from training answers, at the level (LEVELS) chosen for its template on held-out
    training questions (module docstring). `level[template]` is the index into LEVELS chosen for it."""

    def __init__(self, instruct: list[dict], holdout_every: int = 5):
        pairs = [(human["value"].replace("<image>\n", ""), gpt["value"]) for record in instruct
                 for human, gpt in zip(record["conversations"][::2], record["conversations"][1::2])]
        self.answers = self._tables(pairs)
        fit = self._tables([p for i, p in enumerate(pairs) if i % holdout_every])
        right: dict[str, list[int]] = defaultdict(lambda: [0] * len(LEVELS))
        for prompt, answer in pairs[::holdout_every]:
            for j in range(len(LEVELS)):
                right[template(prompt)][j] += agrees(self._answer(fit, prompt, j), answer)
        self.level = {t: max(range(len(LEVELS)), key=lambda j: (counts[j], j)) for t, counts in right.items()}

    @staticmethod
    def _tables(pairs) -> list[dict[str, list[str]]]:
        tables = [defaultdict(list) for _ in LEVELS]
        for prompt, answer in pairs:
            for table, key in zip(tables, keys(prompt)):
                table[key].append(answer)
        return tables

    @staticmethod
    def _answer(tables, prompt: str, start: int) -> str | None:
        """The answer at LEVELS[start], else the first coarser level that has seen the prompt's key."""
        for table, key in list(zip(tables, keys(prompt)))[start:]:
            seen = table.get(key)
            if seen:
                boxes = [tuple(float(v) for v in m.groups()) for m in map(_BOX.match, seen) if m]
                if boxes:  # a box answer: the mean box
                    mean = [sum(b[i] for b in boxes) / len(boxes) for i in range(4)]
                    return "[{:.2f}, {:.2f}, {:.2f}, {:.2f}]".format(*mean)
                return min(Counter(seen).items(), key=lambda kv: (-kv[1], kv[0]))[0]
        return None

    def __call__(self, prompt: str) -> str:
        answer = self._answer(self.answers, prompt, self.level.get(template(prompt), 0))
        if answer is None:
            raise ValueError(f"no training prompt ends like {prompt!r}: is instruct.json from this world?")
        return answer


def benchmark_runner(family: str, root: Path):
    """The real runner of conf/benchmark/mini_<family>.yaml, reading the world at `root`."""
    cfg = compose_config("eval", [f"benchmark=mini_{family}", "run=blind", f"benchmark.root={root}"])
    return instantiate(cfg.benchmark, _recursive_=False)


def blind_prior(world_root, pred_dir, families=FAMILIES) -> dict[str, float]:
    """{"mini_<family>/<main metric>": value} of the blind prior, scored by the real scorers; the official
    prediction files are written to pred_dir."""
    world_root, pred_dir = Path(world_root), Path(pred_dir)
    prior = Prior(json.loads((world_root / "instruct.json").read_text()))
    out = {}
    for family in families:
        runner = benchmark_runner(family, world_root)
        items = runner.items(pred_dir)
        official = [runner.official(it, prior(it.prompt)) for it in items]
        path = pred_dir / f"{runner.name}.json"
        write_json(path, official)
        files = runner.scoring_files(pred_dir)
        metrics = runner.score(str(path), str(files["annotations"]),
                               questions=None if files.get("questions") is None else str(files["questions"]),
                               split=files.get("split"))
        out[f"{runner.name}/{runner.main_metric}"] = metrics[runner.main_metric]
    return out


def default_world(overrides: list[str]) -> Path:
    cfg = compose_config("train", ["data=mini_world", *overrides])
    return Path(instantiate(cfg.data.generator))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", help="a generated world folder (default: the one conf/world/mini.yaml makes)")
    ap.add_argument("--out", help="write the JSON here too")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides of the world, e.g. data.generator.n_train=2000")
    a = ap.parse_args(argv)
    root = Path(a.root) if a.root else default_world(a.overrides)
    with tempfile.TemporaryDirectory() as tmp:
        result = blind_prior(root, tmp)
    if a.out:
        write_json(Path(a.out), result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
