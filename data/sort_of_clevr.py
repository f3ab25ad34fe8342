"""Sort-of-CLEVR: a deterministic generator of a small visual-reasoning dataset.

After Santoro et al. 2017 ("A simple neural network module for relational
reasoning"). Each image shows 6 objects of 6 distinct colours (red, green, blue,
orange, gray, yellow), each a circle or a square, placed at random without
overlap on a neutral mid-gray background (which SigLIP-style normalisation,
mean = std = 0.5, maps to about zero: empty patches then carry no signal, which
a from-scratch ViT needs; on white nothing was learned). The gray object is a
dark gray. Per colour there are 3 non-relational questions (shape; left/right
of the vertical midline; top/bottom of the horizontal midline) and 3
relational ones (shape of the nearest object; shape of the farthest object;
how many objects share its shape, itself included), all with one-word answers.

Output folder (the image root; every path in the records is relative to it):

    images/train/000000.png ...   images/test/000000.png ...
    align.json     LLaVA records, one per train image: "<image>\\nDescribe the image." -> caption
                   ('red circle top left. green square bottom right. ...', random object order)
    instruct.json  LLaVA records, one per train image: its questions as a multi-turn chat
    test.json      [{"id", "image", "question", "answer", "type", "subtype"}] on held-out images
    scenes.json    {"train": {id: objects}, "test": {id: objects}}; an object is
                   {"color", "shape", "center": [x, y], "size"} in pixels
    meta.json      the generation parameters

Writing is crash-safe: everything goes to a temporary sibling folder that is
moved into place with os.replace at the end.

Run:
    python -m data.sort_of_clevr --out /tmp/soc [--seed 0] [--n-train 10000] [--n-test 200]

Library:
    from data.sort_of_clevr import generate, ensure
    root = ensure("~/.cache/refract", n_train=2000)   # generated once per parameter set
"""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from data.atomic import atomic_directory

VERSION = 1
COLORS = {
    "red": (230, 25, 25),
    "green": (20, 170, 40),
    "blue": (30, 60, 230),
    "orange": (255, 140, 0),
    "gray": (80, 80, 80),
    "yellow": (240, 220, 0),
}
SHAPES = ("circle", "square")
SUBTYPES = {"non_relational": ("shape", "horizontal", "vertical"),
            "relational": ("nearest", "farthest", "count")}
TEMPLATES = {
    "shape": "What is the shape of the {c} object?",
    "horizontal": "Is the {c} object on the left or on the right?",
    "vertical": "Is the {c} object at the top or at the bottom?",
    "nearest": "What is the shape of the object nearest to the {c} object?",
    "farthest": "What is the shape of the object farthest from the {c} object?",
    "count": "How many objects have the same shape as the {c} object?",
}
CAPTION_PROMPT = "Describe the image."
DEFAULTS = dict(seed=0, n_train=10000, n_test=200, image_size=64, object_size=10,
                questions_per_image=20, supersample=4, background=128, n_easy=0, easy_max_objects=3)


# ----------------------------------------------------------------------------- scenes
def sample_scene(rng: np.random.Generator, image_size: int, object_size: int,
                 gap: int = 1, tie_margin: float = 1.0, colors: list[str] | None = None) -> list[dict]:
    """Objects of the given colours (default: all six) with integer top-left corners,
    non-overlapping bounding boxes, no centre within 1 px of a midline and no
    near-ties in nearest/farthest."""
    colors = list(COLORS) if colors is None else colors
    half, s = image_size / 2, object_size
    hi = image_size - s  # top-left corner range [0, hi]
    if hi < 0:
        raise ValueError("object_size larger than image_size")
    for _ in range(10000):
        corners: list[tuple[int, int]] = []
        for _ in range(10000):
            if len(corners) == len(colors):
                break
            x, y = (int(v) for v in rng.integers(0, hi + 1, size=2))
            cx, cy = x + s / 2, y + s / 2
            if abs(cx - half) < 1 or abs(cy - half) < 1:
                continue
            if all(max(abs(x - a), abs(y - b)) >= s + gap for a, b in corners):
                corners.append((x, y))
        if len(corners) < len(colors):
            continue
        shapes = rng.integers(0, len(SHAPES), size=len(colors))
        objs = [{"color": c, "shape": SHAPES[int(k)], "center": [x + s / 2, y + s / 2], "size": s}
                for c, k, (x, y) in zip(colors, shapes, corners)]
        if _ties_ok(objs, tie_margin):
            return objs
    raise RuntimeError("could not place objects; make object_size smaller")


def _ties_ok(objs: list[dict], margin: float) -> bool:
    c = np.array([o["center"] for o in objs], dtype=float)
    d = np.sqrt(((c[:, None] - c[None]) ** 2).sum(-1))
    for i in range(len(objs)):
        r = np.sort(np.delete(d[i], i))
        if len(r) > 1 and (r[1] - r[0] < margin or r[-1] - r[-2] < margin):
            return False
    return True


def render(objs: list[dict], image_size: int, supersample: int = 4, background: int = 128) -> Image.Image:
    """Draw at supersample x resolution and box-downsample (antialiased edges)."""
    k = supersample
    img = Image.new("RGB", (image_size * k, image_size * k), (background,) * 3)
    draw = ImageDraw.Draw(img)
    for o in objs:
        s = o["size"]
        x0, y0 = (o["center"][0] - s / 2) * k, (o["center"][1] - s / 2) * k
        box = [x0, y0, x0 + s * k - 1, y0 + s * k - 1]
        (draw.ellipse if o["shape"] == "circle" else draw.rectangle)(box, fill=COLORS[o["color"]])
    return img.resize((image_size, image_size), Image.BOX) if k > 1 else img


# ----------------------------------------------------------------------------- answers
def answer(objs: list[dict], color: str, subtype: str, image_size: int) -> str:
    i = [o["color"] for o in objs].index(color)
    o = objs[i]
    if subtype == "shape":
        return o["shape"]
    if subtype == "horizontal":
        return "left" if o["center"][0] < image_size / 2 else "right"
    if subtype == "vertical":
        return "top" if o["center"][1] < image_size / 2 else "bottom"
    if subtype == "count":
        return str(sum(p["shape"] == o["shape"] for p in objs))
    c = np.array([p["center"] for p in objs], dtype=float)
    d = np.sqrt(((c - c[i]) ** 2).sum(-1))
    if subtype == "nearest":
        d[i] = np.inf
        return objs[int(np.argmin(d))]["shape"]
    if subtype == "farthest":
        d[i] = -np.inf
        return objs[int(np.argmax(d))]["shape"]
    raise ValueError(subtype)


def questions(rng: np.random.Generator, objs: list[dict], n: int, image_size: int) -> list[dict]:
    """n questions, half non-relational and half relational (all of them if n is
    large enough), about the objects present, drawn without replacement in random
    order. Nearest/farthest are asked only when the scene has other objects."""
    present = [o["color"] for o in objs]
    pools = {t: [(c, s) for c in present for s in subs if len(objs) > 1 or s not in ("nearest", "farthest")]
             for t, subs in SUBTYPES.items()}
    picked = []
    for t, pool in pools.items():
        k = min(len(pool), n // 2 + (n % 2 if t == "non_relational" else 0))
        for j in rng.permutation(len(pool))[:k]:
            picked.append((t, *pool[int(j)]))
    order = rng.permutation(len(picked))
    out = []
    for j in order:
        t, c, s = picked[int(j)]
        out.append({"question": TEMPLATES[s].format(c=c), "answer": answer(objs, c, s, image_size),
                    "type": t, "subtype": s})
    return out


def caption(objs: list[dict], image_size: int, order=None) -> str:
    """Every object as '{colour} {shape} {top|bottom} {left|right}.', in the given
    order (generate() uses a random one), e.g. 'gray circle bottom left. red
    square top left. ...'. The shape word comes right after its colour word and
    the order is random, so a model must read the colour word and find that
    colour in the image (with a fixed colour order it can learn the caption
    without ever reading the colour word, which does not transfer to questions)."""
    parts = []
    for o in (objs if order is None else [objs[int(i)] for i in order]):
        h = answer(objs, o["color"], "horizontal", image_size)
        v = answer(objs, o["color"], "vertical", image_size)
        parts.append(f"{o['color']} {o['shape']} {v} {h}.")
    return " ".join(parts)


def conversation(qs: list[dict]) -> list[dict]:
    """Questions as one LLaVA multi-turn conversation (the image placeholder in the first turn)."""
    turns = []
    for j, q in enumerate(qs):
        turns.append({"from": "human", "value": ("<image>\n" if j == 0 else "") + q["question"]})
        turns.append({"from": "gpt", "value": q["answer"]})
    return turns


# ----------------------------------------------------------------------------- writing
def _params(**kw) -> dict:
    unknown = set(kw) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"unknown parameters: {sorted(unknown)}")
    p = {**DEFAULTS, **kw}
    return {"version": VERSION, **p}


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")


def generate(out_dir, **kw) -> Path:
    """Generate the dataset into out_dir (replaced atomically if it exists).
    Parameters (keyword only): seed, n_train, n_test, image_size, object_size,
    questions_per_image, supersample, background, n_easy (extra training images
    with 1..easy_max_objects objects, written to instruct_easy.json: a curriculum
    split; the benchmark's train and test images always have six objects).
    Returns out_dir as a Path."""
    p = _params(**kw)
    out = Path(out_dir).expanduser().resolve()
    S, qn = p["image_size"], p["questions_per_image"]
    align, instruct, test, easy, scenes = [], [], [], [], {"train": {}, "test": {}, "easy": {}}
    splits = (("train", p["n_train"]), ("test", p["n_test"]), ("easy", p["n_easy"]))
    with atomic_directory(out) as tmp:
        for split_i, (split, n) in enumerate(splits):
            (tmp / "images" / split).mkdir(parents=True)
            rng = np.random.default_rng([p["seed"], split_i, VERSION])
            for k in range(n):
                colors = None
                if split == "easy":  # curriculum images: 1..easy_max_objects objects of random colours
                    count = int(rng.integers(1, p["easy_max_objects"] + 1))
                    colors = [list(COLORS)[int(i)] for i in sorted(rng.permutation(len(COLORS))[:count])]
                objs = sample_scene(rng, S, p["object_size"], colors=colors)
                rel = f"images/{split}/{k:06d}.png"
                render(objs, S, p["supersample"], p["background"]).save(tmp / rel, optimize=False)
                qs = questions(rng, objs, qn, S)
                rid = f"{split}-{k:06d}"
                scenes[split][rid] = objs
                if split == "easy":
                    easy.append({"id": rid, "image": rel, "conversations": conversation(qs)})
                elif split == "train":
                    align.append({"id": rid, "image": rel, "conversations": [
                        {"from": "human", "value": f"<image>\n{CAPTION_PROMPT}"},
                        {"from": "gpt", "value": caption(objs, S, rng.permutation(len(objs)))}]})
                    instruct.append({"id": rid, "image": rel, "conversations": conversation(qs)})
                else:
                    for j, q in enumerate(qs):
                        test.append({"id": f"{rid}-{j:02d}", "image": rel, **q})
        _write_json(tmp / "align.json", align)
        _write_json(tmp / "instruct.json", instruct)
        _write_json(tmp / "test.json", test)
        _write_json(tmp / "instruct_easy.json", easy)
        _write_json(tmp / "scenes.json", scenes)
        _write_json(tmp / "meta.json", {"name": "sort_of_clevr", **p, "colors": list(COLORS),
                                        "shapes": list(SHAPES)})
    return out


def ensure(cache_dir, **kw) -> Path:
    """Folder for these parameters under cache_dir, generated only if missing."""
    p = _params(**kw)
    h = hashlib.sha256(json.dumps(p, sort_keys=True).encode()).hexdigest()[:12]
    out = Path(cache_dir).expanduser() / f"sort_of_clevr-{h}"
    if not (out / "meta.json").exists():
        generate(out, **kw)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    for k, v in DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    a = vars(ap.parse_args(argv))
    out = a.pop("out")
    print(generate(out, **a))


if __name__ == "__main__":
    main()
