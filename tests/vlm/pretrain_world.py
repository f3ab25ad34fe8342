"""A small synthetic world in the contract layout of data/mini_world.py, for the pretraining tests.

`ensure(cache_dir, seed=0, n_train=40, n_test=12, ...)` writes (once, atomically, keyed by its parameters)
a folder with what vlm/pretrain/ reads: `images/train|test/NNNNNN.jpg` (96x64, JPEG q95), `align.json`
(LLaVA captions), `scenes.json` (`train` / `test` scenes), `lm_text.txt`, `lm_text_val.txt` and `text.json`
(text-only dialogues). Scenes: 1-3 coloured squares or circles, small or large, some with a one-word sign
label (not rendered: the tests only need the layout). Extra keyword arguments of the real generator are
accepted and ignored, so the same overrides compose against both.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from PIL import Image, ImageDraw

from data.atomic import atomic_directory, write_json

COLORS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 70, 220)}
SHAPES = ["square", "circle"]
WORDS = ["stop", "exit"]
WIDTH, HEIGHT = 96, 64


def _scene(rng: random.Random) -> dict:
    objects = []
    for _ in range(rng.randint(1, 3)):
        size = rng.choice(["small", "large"])
        side = 12 if size == "small" else 24
        x, y = rng.randint(0, WIDTH - side), rng.randint(0, HEIGHT - side)
        objects.append({"color": rng.choice(sorted(COLORS)), "shape": rng.choice(SHAPES), "size": size,
                        "bbox": [x, y, side, side], "label": rng.choice(WORDS) if rng.random() < 0.3 else None})
    return {"width": WIDTH, "height": HEIGHT, "objects": objects}


def _draw(scene: dict, path: Path) -> None:
    image = Image.new("RGB", (scene["width"], scene["height"]), (235, 235, 235))
    draw = ImageDraw.Draw(image)
    for obj in scene["objects"]:
        x, y, w, h = obj["bbox"]
        (draw.ellipse if obj["shape"] == "circle" else draw.rectangle)([x, y, x + w - 1, y + h - 1], fill=COLORS[obj["color"]])
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, quality=95, subsampling=0)


def _caption(scene: dict) -> str:
    parts = [f"a {o['size']} {o['color']} {o['shape']}" + (f" with the sign {o['label']}" if o["label"] else "")
             for o in scene["objects"]]
    return "There is " + ", ".join(parts) + "."


def ensure(cache_dir, seed: int = 0, n_train: int = 40, n_test: int = 12, **_ignored) -> Path:
    out = Path(cache_dir) / f"pretrain_fixture_world-s{seed}-{n_train}-{n_test}"
    if (out / "meta.json").exists():
        return out
    rng = random.Random(seed)
    with atomic_directory(out) as tmp:
        all_scenes = {"train": {}, "test": {}}
        for split, n in (("train", n_train), ("test", n_test)):
            for i in range(n):
                rel = f"images/{split}/{i:06d}.jpg"
                all_scenes[split][rel] = scene = _scene(rng)
                _draw(scene, tmp / rel)
        train = all_scenes["train"]
        write_json(tmp / "align.json", [
            {"id": f"align-{i}", "image": rel, "conversations": [
                {"from": "human", "value": "<image>\nDescribe the image."}, {"from": "gpt", "value": _caption(s)}]}
            for i, (rel, s) in enumerate(train.items())])
        write_json(tmp / "scenes.json", all_scenes)
        (tmp / "lm_text.txt").write_text("\n".join(_caption(s) for s in train.values()) + "\n")
        (tmp / "lm_text_val.txt").write_text("\n".join(_caption(s) for s in all_scenes["test"].values()) + "\n")
        dialogues = []
        for i, s in enumerate(train.values()):
            obj = s["objects"][0]
            dialogues.append({"id": f"text-{i}", "conversations": [
                {"from": "human", "value": f"What colour is the {obj['size']} {obj['shape']}?"},
                {"from": "gpt", "value": obj["color"]},
                {"from": "human", "value": f"How many objects are there in: {_caption(s)}"},
                {"from": "gpt", "value": str(len(s["objects"]))}]})
        write_json(tmp / "text.json", dialogues)
        write_json(tmp / "meta.json", {"seed": seed, "n_train": n_train, "n_test": n_test, "fixture": True})
    return out
