"""What a mini-world run says when asked "Describe the image.": per held-out object, matched by its colour (each
colour names one object in world version 2), whether the run names it and gets its position, size and shape.

    python scripts/describe_probe.py RUN_DIR [--scenes 48]

Prints a few descriptions and one JSON line: `color_recall` / `color_precision` (colours of the scene named /
named colours in the scene), `position` / `size` / `shape` (of the objects named: the words after the colour
match the scene's), each `[percent, count]`, and `majority` (the most frequent position, size and shape among
the probed objects: the score of a run that ignores the image). A diagnostic of the calibration
(docs/reproduction.md, runs 12-18): whether the colour lookup formed before the questions use it.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.conf import compose_config
from data.image_decode import decode_image
from data.mini_world_scenes import COLORS, position_words
from hydra.utils import instantiate
from vlm.inference import load


def named(text: str) -> dict[str, str]:
    """{colour: the words after it} for each part that starts with a colour (parts are separated by ',' or
    'and' before a colour or a sign; a box's commas stay inside its part)."""
    out = {}
    for part in re.split(rf"(?:,| and) (?=(?:{'|'.join(COLORS)}|a sign)\b)", text):
        words = part.strip().rstrip(".").split()
        if words and words[0] in COLORS:
            out[words[0]] = " ".join(words[1:])
    return out


def probe(model, world: Path, n: int, batch: int = 16) -> tuple[list[str], dict]:
    scenes = list(json.loads((world / "scenes.json").read_text())["test"].items())[:n]
    texts = []
    for i in range(0, len(scenes), batch):
        chunk = scenes[i:i + batch]
        texts += model.generate([decode_image(world / k) for k, _ in chunk], ["Describe the image."] * len(chunk),
                                max_new_tokens=120)
    hits: dict[str, list[bool]] = {k: [] for k in ("color_recall", "color_precision", "position", "size", "shape")}
    truth_counts: dict[str, Counter] = {k: Counter() for k in ("position", "size", "shape")}
    for (_, scene), text in zip(scenes, texts):
        truth = {o["color"]: o for o in scene["objects"]}
        said = named(text)
        hits["color_recall"] += [c in said for c in truth]
        hits["color_precision"] += [c in truth for c in said]
        for c, o in truth.items():
            where = position_words(o, scene["width"], scene["height"])
            truth_counts["position"][where] += 1
            truth_counts["size"][o["size"]] += 1
            truth_counts["shape"][o["shape"]] += 1
            if c in said:
                rest = f" {said[c]} "
                hits["position"].append(rest.startswith(f" {where} "))
                hits["size"].append(f" {o['size']} " in rest)
                hits["shape"].append(f" {o['shape']} " in rest)
    figures = {k: [round(100 * sum(v) / max(1, len(v)), 1), len(v)] for k, v in hits.items()}
    figures["majority"] = {k: round(100 * c.most_common(1)[0][1] / sum(c.values()), 1) for k, c in truth_counts.items()}
    return texts, figures


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--scenes", type=int, default=48, help="held-out scenes (scenes.json['test']) to describe")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    world = Path(instantiate(compose_config("train", ["data=mini_world"]).data.generator))
    texts, figures = probe(load(a.run_dir), world, a.scenes)
    print("\n".join(texts[:3]))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
