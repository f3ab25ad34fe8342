"""Sort-of-CLEVR: a deterministic generator of a small visual-reasoning dataset.

After Santoro et al. 2017 ("A simple neural network module for relational
reasoning"). Each image shows 6 objects of 6 distinct colours (red, green, blue,
orange, gray, yellow), each a circle or a square, on a neutral mid-gray
background (which SigLIP-style normalisation, mean = std = 0.5, maps to about
zero: empty patches then carry no signal, which a from-scratch ViT needs; on
white nothing was learned). The gray object is a dark gray.

By default (`cell` = 8) each object sits in its own cell of an 8x8 grid of 8-px
cells, the patch grid of the demo's encoder: a ViT trained from scratch on 10k
images reads an object's shape from one patch (100% held-out after 700 steps in
a probe) but not from the corners of an object cut across patches (about 55%
after 1,000 steps, where a CNN reaches 96%). `cell` = 0 places objects anywhere
without overlap, as the original generator does.

Per colour there are 3 non-relational questions (shape; left/right of the
vertical midline; top/bottom of the horizontal midline) and 3 relational ones
(shape of the nearest object; shape of the farthest object; how many objects
share its shape, itself included), all with one-word answers.

Output folder (the image root; every path in the records is relative to it):

    images/train/000000.png ...   images/test/000000.png ...
    align.json     LLaVA records, one per train image: "<image>\\nDescribe the image." -> caption
                   ('red top left circle nearest square farthest circle same 3. ...', random object order)
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

VERSION = 2
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
DEFAULTS = dict(seed=0, n_train=10000, n_test=200, image_size=64, object_size=7, cell=8,
                questions_per_image=20, supersample=4, background=128, n_easy=0, easy_max_objects=3)


# ----------------------------------------------------------------------------- scenes
def sample_scene(rng: np.random.Generator, image_size: int, object_size: int,
                 gap: int = 1, tie_margin: float = 1.0, colors: list[str] | None = None,
                 cell: int = 0) -> list[dict]:
    """Objects of the given colours (default: all six), no centre within 1 px of a
    midline and no near-ties in nearest/farthest. With `cell` = 0 anywhere (integer
    top-left corners, non-overlapping bounding boxes `gap` px apart); with `cell` > 0
    each object centred in its own cell of a grid of `cell`-px cells."""
    colors = list(COLORS) if colors is None else colors
    s = object_size
    if s > (cell or image_size):
        raise ValueError(f"object_size {s} larger than the {'cell' if cell else 'image'} ({cell or image_size} px)")
    for _ in range(10000):
        centers = _grid_centers(rng, image_size, cell, len(colors)) if cell else \
            _free_centers(rng, image_size, s, gap, len(colors))
        if centers is None:
            continue
        shapes = rng.integers(0, len(SHAPES), size=len(colors))
        objs = [{"color": c, "shape": SHAPES[int(k)], "center": [x, y], "size": s}
                for c, k, (x, y) in zip(colors, shapes, centers)]
        if _ties_ok(objs, tie_margin):
            return objs
    raise RuntimeError("could not place objects; make object_size smaller")


def _free_centers(rng, image_size: int, s: int, gap: int, n: int) -> list[tuple[float, float]] | None:
    half, hi = image_size / 2, image_size - s  # top-left corner range [0, hi]
    corners: list[tuple[int, int]] = []
    for _ in range(10000):
        if len(corners) == n:
            return [(x + s / 2, y + s / 2) for x, y in corners]
        x, y = (int(v) for v in rng.integers(0, hi + 1, size=2))
        if abs(x + s / 2 - half) < 1 or abs(y + s / 2 - half) < 1:
            continue
        if all(max(abs(x - a), abs(y - b)) >= s + gap for a, b in corners):
            corners.append((x, y))
    return None


def _grid_centers(rng, image_size: int, cell: int, n: int) -> list[tuple[float, float]]:
    half, g = image_size / 2, image_size // cell
    centers = [(i * cell + cell / 2, j * cell + cell / 2) for j in range(g) for i in range(g)]
    centers = [c for c in centers if abs(c[0] - half) >= 1 and abs(c[1] - half) >= 1]
    if len(centers) < n:
        raise ValueError(f"a {g}x{g} grid of {cell}-px cells has room for {len(centers)} objects, not {n}")
    return [centers[int(i)] for i in rng.permutation(len(centers))[:n]]


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
    """Every object as '{colour} {top|bottom} {left|right} {shape} nearest {shape}
    farthest {shape} same {n}.' (the shapes of its nearest and farthest objects, how
    many objects share its shape), in the given order (generate() uses a random
    one), e.g. 'gray bottom left circle nearest square farthest circle same 4. ...'.
    The order is random, so a model must read the colour word and find that colour
    in the image; the word right after the colour is a position, which a
    from-scratch ViT reads first (its position embeddings start as 2-D sin-cos), so
    the lookup by colour word is learned at the colour word itself and carries over
    to questions, whose answer is read back from the colour word. Every question
    type has its answer in the caption: dense supervision of the same lookups."""
    parts = []
    for o in (objs if order is None else [objs[int(i)] for i in order]):
        a = {s: answer(objs, o["color"], s, image_size) for s in (*SUBTYPES["non_relational"], *SUBTYPES["relational"])}
        parts.append(f"{o['color']} {a['vertical']} {a['horizontal']} {a['shape']} nearest {a['nearest']} "
                     f"farthest {a['farthest']} same {a['count']}.")
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
                objs = sample_scene(rng, S, p["object_size"], colors=colors, cell=p["cell"])
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
