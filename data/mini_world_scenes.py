"""The mini world's scenes: sampling, rendering and the geometry every question and caption is read from.

A scene is a dict `{"width", "height", "objects": [...], "sign": {...} | None}`; an object is
`{"color", "shape", "size": "small"|"large", "bbox": [x, y, w, h], "label": str | None}` (pixels, integer
top-left corner). Within a scene every colour is used once (as the colours of Sort-of-CLEVR), so "the red
circle" and "the red object" always name one object and a colour is a key a patch-level feature can read.
Colours and shapes are drawn with skewed frequencies, so some (colour, shape) pairs are frequent and some
co-occur more than others (POPE's popular / adversarial negatives).

About `border_share` of the objects are placed with their centre outside the window a centre crop keeps
(timm's resize-crop: shorter side to `crop_size / crop_pct`, centre crop `crop_size`): that crop cuts them off,
squashing the canvas into a square distorts them, letterboxing keeps them whole (`crop_window`, `crop_loss`).

About `label_share` of the scenes carry a sign: a short word in black on a white board (PIL's default font),
free-standing or held just above a large object (that object's `label` is then the word).

With a `grid` (world version 3's default), each object sits inside one cell of a grid of `cell`-px squares whose
rows start at `top`: with the defaults (12-px cells from y = 8 on the 96x64 canvas) a cell is exactly one 8-px
patch of a 64-px encoder after letterboxing (scale 2/3, 16 px of padding above), so under the study's base
preprocessing every object lies inside one patch; resize-naive keeps the columns but not the rows aligned,
resize-crop neither. Objects are then `cell // 2` (small) or `cell - 2` px (large), one pixel or more inside
their cell, and signs are free-standing. The reason (docs/reproduction.md, "World version 3"): no pretraining
objective taught the tiny ViT to read the shape of an object cut across patches.
"""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw, ImageFont

COLORS = {
    "red": (225, 30, 30),
    "green": (30, 170, 50),
    "blue": (35, 70, 230),
    "yellow": (240, 215, 0),
    "purple": (150, 45, 200),
    "orange": (255, 135, 0),
}
COLOR_WEIGHTS = (0.28, 0.22, 0.17, 0.13, 0.11, 0.09)  # skewed: "popular" objects exist
SHAPES = ("circle", "square", "triangle")
SHAPE_WEIGHTS = (0.45, 0.33, 0.22)
SIZES = {"small": 10, "large": 16}
WORDS = ("cat", "sun", "box", "dog", "cup", "hat", "key", "map", "pen", "bus", "fox", "owl", "egg", "jar",
         "kite", "star")
SIGN_PAD = 2       # white margin around the word, pixels
GAP = 2            # minimum free pixels between two things' boxes


def crop_window(width: int, height: int, crop_size: int, crop_pct: float) -> tuple[float, float, float, float]:
    """(x0, y0, x1, y1) of the canvas a resize-crop keeps: shorter side scaled to crop_size / crop_pct, then a
    centre square of crop_size (timm's eval transform), mapped back to original pixels."""
    scale = (crop_size / crop_pct) / min(width, height)
    half = crop_size / scale / 2
    return width / 2 - half, height / 2 - half, width / 2 + half, height / 2 + half


def center(o: dict) -> tuple[float, float]:
    x, y, w, h = o["bbox"]
    return x + w / 2, y + h / 2


def name(o: dict) -> str:
    """'red circle': unique within a scene."""
    return f"{o['color']} {o['shape']}"


def crop_loss(scene: dict, window) -> tuple[int, int]:
    """(objects the crop cuts, objects whose centre it loses)."""
    x0, y0, x1, y1 = window
    cut = lost = 0
    for o in scene["objects"]:
        x, y, w, h = o["bbox"]
        cx, cy = center(o)
        cut += int(x < x0 or y < y0 or x + w > x1 or y + h > y1)
        lost += int(not (x0 <= cx <= x1 and y0 <= cy <= y1))
    return cut, lost


def sign_font() -> ImageFont.ImageFont:
    return ImageFont.load_default()


def sign_size(word: str) -> tuple[int, int]:
    left, top, right, bottom = sign_font().getbbox(word)
    return right - min(left, 0) + 2 * SIGN_PAD, bottom - min(top, 0) + 2 * SIGN_PAD


def _overlaps(box, others) -> bool:
    x, y, w, h = box
    return any(x < a + c + GAP and a < x + w + GAP and y < b + d + GAP and b < y + h + GAP for a, b, c, d in others)


def _place(rng, w, h, width, height, others, window, border=False):
    """An integer top-left corner for a w x h box that overlaps none of `others`: with `border` its centre falls
    left or right of the centre-crop `window` (x0, x1), else inside it. None after 200 tries."""
    x0, x1 = window[0], window[2]
    for _ in range(200):
        if border:  # centre left of x0 or right of x1
            lo, hi = (0, int(np.ceil(x0 - w / 2)) - 1) if rng.random() < 0.5 else (int(np.floor(x1 - w / 2)) + 1, width - w)
        else:
            lo, hi = max(0, int(np.ceil(x0 - w / 2))), min(width - w, int(np.floor(x1 - w / 2)))
        if hi < lo:
            continue
        x = int(rng.integers(lo, hi + 1))
        y = int(rng.integers(0, height - h + 1))
        if not _overlaps((x, y, w, h), others):
            return x, y
    return None


def grid_cells(width: int, height: int, cell: int, top: int) -> list[tuple[int, int]]:
    """Top-left corners of the whole `cell`-px grid cells of the canvas, rows from y = `top`, columns from x = 0."""
    return [(x, y) for y in range(top, height - cell + 1, cell) for x in range(0, width - cell + 1, cell)]


def object_size(size: str, cells: dict | None) -> int:
    """Pixels of a 'small' / 'large' object: SIZES without a grid, else cell // 2 and cell - 2."""
    if cells is None:
        return SIZES[size]
    return cells["cell"] // 2 if size == "small" else cells["cell"] - 2


def _place_in_cell(rng, s, cells, others, window, border):
    """A top-left corner for an s x s object inside a free grid cell (one pixel or more from its edges), the cell's
    centre outside the centre-crop window's columns if `border`, else inside; None if no cell is free."""
    cell = cells["cell"]
    x0, x1 = window[0], window[2]
    free = [(x, y) for x, y in cells["corners"]
            if (not x0 <= x + cell / 2 <= x1) == border and not _overlaps((x + 1, y + 1, cell - 2, cell - 2), others)]
    if not free:
        return None
    x, y = free[int(rng.integers(len(free)))]
    return x + int(rng.integers(1, cell - s)), y + int(rng.integers(1, cell - s))


def sample_scene(rng: np.random.Generator, width: int, height: int, min_objects: int, max_objects: int,
                 border_share: float, label_share: float, window, grid: dict | None = None) -> dict:
    """One scene (see the module docstring); `window` is the centre crop's (x0, y0, x1, y1); `grid` None (objects
    anywhere) or {"cell": px, "top": px}."""
    cells = None if grid is None else {"cell": grid["cell"], "corners": grid_cells(width, height, grid["cell"], grid["top"])}
    for _ in range(1000):
        scene = _try_scene(rng, width, height, min_objects, max_objects, border_share, label_share, window, cells)
        if scene is not None:
            return scene
    raise RuntimeError(f"could not place {max_objects} objects on a {width}x{height} canvas; make it larger")


def _try_scene(rng, width, height, min_objects, max_objects, border_share, label_share, window, cells=None):
    n = int(rng.integers(min_objects, max_objects + 1))
    colors = [list(COLORS)[int(i)] for i in rng.choice(len(COLORS), size=n, replace=False, p=COLOR_WEIGHTS)]
    kinds = [(c, SHAPES[int(rng.choice(len(SHAPES), p=SHAPE_WEIGHTS))]) for c in colors]
    sizes = [("small", "large")[int(rng.integers(2))] for _ in kinds]
    word = WORDS[int(rng.integers(len(WORDS)))] if rng.random() < label_share else None
    holder = None  # the large object holding the sign
    if word is not None and "large" in sizes and cells is None and rng.random() < 0.4:
        holder = sizes.index("large")
    boxes: list[tuple[int, int, int, int]] = []
    objects, sign = [], None
    if word is not None:
        sw, sh = sign_size(word)
        if holder is None:
            at = _place(rng, sw, sh, width, height, boxes, window)
            if at is None:
                return None
            sign = {"word": word, "bbox": [at[0], at[1], sw, sh], "on": None}
            boxes.append((at[0], at[1], sw, sh))
    for i, ((color, shape), size) in enumerate(zip(kinds, sizes)):
        s = object_size(size, cells)
        if cells is not None:
            at = _place_in_cell(rng, s, cells, boxes, window, border=rng.random() < border_share)
            if at is None:
                return None
            box = (at[0], at[1], s, s)
            boxes.append(box)
        elif i == holder:  # the object with its sign just above it, centred: one footprint
            sw, sh = sign_size(word)
            fw, fh = max(sw, s), sh + s
            at = _place(rng, fw, fh, width, height, boxes, window)
            if at is None:
                return None
            sx, ox = at[0] + (fw - sw) // 2, at[0] + (fw - s) // 2
            sign = {"word": word, "bbox": [sx, at[1], sw, sh], "on": i}
            box = (ox, at[1] + sh, s, s)
            boxes.append((at[0], at[1], fw, fh))
        else:
            at = _place(rng, s, s, width, height, boxes, window, border=rng.random() < border_share)
            if at is None:
                return None
            box = (at[0], at[1], s, s)
            boxes.append(box)
        objects.append({"color": color, "shape": shape, "size": size, "bbox": list(box),
                        "label": word if i == holder else None})
    return {"width": width, "height": height, "objects": objects, "sign": sign}


def render(scene: dict, background: int = 128, supersample: int = 4) -> Image.Image:
    """Shapes drawn at `supersample` x and box-downsampled (antialiased); the sign drawn at 1x (crisp text)."""
    k, W, H = supersample, scene["width"], scene["height"]
    img = Image.new("RGB", (W * k, H * k), (background,) * 3)
    draw = ImageDraw.Draw(img)
    for o in scene["objects"]:
        x, y, w, h = (v * k for v in o["bbox"])
        box = [x, y, x + w - 1, y + h - 1]
        fill = COLORS[o["color"]]
        if o["shape"] == "circle":
            draw.ellipse(box, fill=fill)
        elif o["shape"] == "square":
            draw.rectangle(box, fill=fill)
        else:
            draw.polygon([(x + w / 2, y), (x + w - 1, y + h - 1), (x, y + h - 1)], fill=fill)
    img = img.resize((W, H), Image.BOX) if k > 1 else img
    if scene.get("sign"):
        x, y, w, h = scene["sign"]["bbox"]
        draw = ImageDraw.Draw(img)
        draw.rectangle([x, y, x + w - 1, y + h - 1], fill=(255, 255, 255))
        left, top, _, _ = sign_font().getbbox(scene["sign"]["word"])
        draw.text((x + SIGN_PAD - min(left, 0), y + SIGN_PAD - min(top, 0)), scene["sign"]["word"], fill=(0, 0, 0),
                  font=sign_font())
    return img


# ----------------------------------------------------------------------------- geometry the language reads
MARGIN = 6  # pixels: a relation (left of, above, ...) is only stated when the centres differ by at least this


def horizontal(o: dict, width: int) -> str | None:
    """'left' / 'right' of the canvas midline, None when too close to call."""
    cx = center(o)[0]
    return None if abs(cx - width / 2) < MARGIN else ("left" if cx < width / 2 else "right")


def position_words(o: dict, width: int, height: int) -> str:
    """'top left', 'middle', 'bottom right', ... (thirds of the canvas)."""
    cx, cy = center(o)
    v = ("top", "middle", "bottom")[min(2, int(3 * cy / height))]
    h = ("left", "middle", "right")[min(2, int(3 * cx / width))]
    return "middle" if v == h == "middle" else f"{v} {h}" if "middle" not in (v, h) else (h if v == "middle" else v)


def relation(a: dict, b: dict, rel: str) -> bool | None:
    """Whether `a` is `rel` ('left of', 'right of', 'above', 'below') `b`; None when too close to call."""
    (ax, ay), (bx, by) = center(a), center(b)
    d = {"left of": bx - ax, "right of": ax - bx, "above": by - ay, "below": ay - by}[rel]
    return None if abs(d) < MARGIN else d > 0


RELATIONS = ("left of", "right of", "above", "below")
OPPOSITE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}
