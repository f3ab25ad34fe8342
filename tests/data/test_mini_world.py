"""The mini world generator (data/mini_world.py): determinism, layout, a non-square canvas, captions and answers
that agree with scenes.json (re-derived here by hand from the scenes), the centre-crop losses it counts, the share
of scenes with a sign, and clear errors for bad parameters."""
import hashlib
import json
import re

import numpy as np
import pytest
from PIL import Image

from data.mini_world import ensure, folder_name, generate
from data.mini_world_scenes import COLORS, WORDS

SMALL = {"n_train": 60, "n_test": 6, "n_per_benchmark": 12}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("w") / "world", **SMALL)


def digest(folder):
    return {str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_other_seed_other_world(world, tmp_path):
    again = generate(tmp_path / "again", **SMALL)
    assert digest(again) == digest(world)
    other = generate(tmp_path / "other", **SMALL, seed=1)
    assert digest(other)["images/train/000000.jpg"] != digest(world)["images/train/000000.jpg"]


def test_ensure_writes_once_per_parameter_set(tmp_path):
    tiny = {"n_train": 4, "n_test": 2, "n_per_benchmark": 6}
    first = ensure(tmp_path, **tiny)
    stamp = (first / "meta.json").stat().st_mtime_ns
    assert ensure(tmp_path, **tiny) == first and (first / "meta.json").stat().st_mtime_ns == stamp
    assert first.name == folder_name(**tiny) != folder_name(**{**tiny, "seed": 1})
    assert not list(tmp_path.glob(".*tmp*"))  # written atomically: no temporary left


def test_layout_and_a_non_square_canvas(world):
    for name in ("align.json", "instruct.json", "text.json", "scenes.json", "meta.json", "lm_text.txt",
                 "lm_text_val.txt", "vqav2/v2_OpenEnded_mscoco_val2014_questions.json", "gqa/testdev_balanced_questions.json",
                 "tallyqa/test.json", "vsr/random/test.jsonl", "pope/coco/coco_pope_adversarial.json",
                 "refer/refcoco/refs(unc).p", "refer/refcoco/instances.json", "textvqa/TextVQA_0.5.1_val.json"):
        assert (world / name).is_file(), name
    scenes = json.loads((world / "scenes.json").read_text())
    assert len(scenes["train"]) == 60 and len(scenes["test"]) == 6
    for rel in list(scenes["train"])[:3] + list(scenes["test"]):
        with Image.open(world / rel) as im:
            assert im.format == "JPEG" and im.size == (96, 64)
    align = json.loads((world / "align.json").read_text())
    assert [r["image"] for r in align] == list(scenes["train"])
    assert all(r["conversations"][0]["value"] == "<image>\nDescribe the image." for r in align)
    assert all("image" not in r for r in json.loads((world / "text.json").read_text()))
    assert len((world / "lm_text.txt").read_text().splitlines()) == 60
    assert len((world / "lm_text_val.txt").read_text().splitlines()) == 6


def test_images_show_the_scenes(world):
    """The pixel at each object's centre has the object's colour; a sign is white with dark text."""
    scenes = json.loads((world / "scenes.json").read_text())["train"]
    for rel, scene in list(scenes.items())[:20]:
        pixels = np.asarray(Image.open(world / rel).convert("RGB")).astype(int)
        for o in scene["objects"]:
            x, y, w, h = o["bbox"]
            assert np.abs(pixels[int(y + h / 2), int(x + w / 2)] - COLORS[o["color"]]).max() < 40, (rel, o)
        if scene["sign"]:
            x, y, w, h = scene["sign"]["bbox"]
            board = pixels[y:y + h, x:x + w].mean(-1)
            assert (board > 230).mean() > 0.5 and (board < 80).sum() > 5


def centre(o):
    x, y, w, h = o["bbox"]
    return x + w / 2, y + h / 2


def by_name(scene, color, shape):
    [o] = [o for o in scene["objects"] if o["color"] == color and o["shape"] == shape]
    return o


def check_answer(scene, question, answer):
    """Re-derive the answer of the question forms checked by hand; None when the form is not checked here."""
    objs = scene["objects"]
    if m := re.fullmatch(r"How many (circle|square|triangle)s are there\?\nAnswer the question using a single (?:number|word or phrase)\.", question):
        return str(sum(o["shape"] == m[1] for o in objs))
    if m := re.fullmatch(r"What size is the (\w+) (\w+)\?\n.*", question, re.DOTALL):
        return by_name(scene, m[1], m[2])["size"]
    if m := re.fullmatch(r"Is there an? (\w+) (\w+)(?: in the image)?\?\n.*", question, re.DOTALL):
        return "yes" if any(o["color"] == m[1] and o["shape"] == m[2] for o in objs) else "no"
    if m := re.fullmatch(r"Is the following statement about the image true\? The (\w+) (\w+) is (left of|right of|above|below) "
                         r"the (\w+) (\w+)\.\nAnswer yes or no\.", question):
        (ax, ay), (bx, by) = centre(by_name(scene, m[1], m[2])), centre(by_name(scene, m[4], m[5]))
        d = {"left of": bx - ax, "right of": ax - bx, "above": by - ay, "below": ay - by}[m[3]]
        assert abs(d) >= 6  # a relation is only stated when clear
        return "yes" if d > 0 else "no"
    if m := re.fullmatch(r"Please provide the bounding box coordinate of the region this sentence describes: "
                         rf"the (?:(?:small|large) )?({'|'.join(COLORS)}) (circle|square|triangle)", question):
        x, y, w, h = by_name(scene, m[1], m[2])["bbox"]
        x1, y1, x2, y2 = json.loads(answer)
        assert abs(x1 * 96 - x) <= 0.5 and abs(y1 * 64 - y) <= 0.5 and abs(x2 * 96 - x - w) <= 0.5 and abs(y2 * 64 - y - h) <= 0.5
        return answer
    if question.startswith(("What does the sign say?", "What word is written on the sign?")):
        return scene["sign"]["word"]
    return None


def test_instructions_answers_agree_with_the_scenes(world):
    scenes = json.loads((world / "scenes.json").read_text())["train"]
    checked = 0
    for record in json.loads((world / "instruct.json").read_text()):
        turns = record["conversations"]
        assert turns[0]["value"].startswith("<image>\n") and len(turns) >= 14  # one question per family, then
        assert turns[-2]["value"] == "Describe the image."                       # the grounded description
        assert_grounded_caption(scenes[record["image"]], turns[-1]["value"], boxes=True)
        for human, gpt in zip(turns[:-2:2], turns[1:-2:2]):
            expected = check_answer(scenes[record["image"]], human["value"].replace("<image>\n", ""), gpt["value"])
            if expected is not None:
                assert gpt["value"] == expected, (record["id"], human["value"])
                checked += 1
    assert checked > 150


def assert_grounded_caption(scene, text, boxes):
    """Every object keyed by its colour, then its position (thirds of the canvas, by hand), size and shape, then
    (with boxes) its box as RefCOCO answers it; the sign's word once."""
    for o in scene["objects"]:
        cx, cy = centre(o)
        v, h = ("top", "middle", "bottom")[int(3 * cy / 64)], ("left", "middle", "right")[int(3 * cx / 96)]
        where = "middle" if v == h == "middle" else f"{v} {h}" if "middle" not in (v, h) else (h if v == "middle" else v)
        x, y, w, hh = o["bbox"]
        box = f" [{x / 96:.2f}, {y / 64:.2f}, {(x + w) / 96:.2f}, {(y + hh) / 64:.2f}]" if boxes else ""
        assert f"{o['color']} {where} {o['size']} {o['shape']}{box}" in text, (o, text)
    if scene["sign"]:
        assert f"says {scene['sign']['word']}" in text
    assert text.count(" that says ") == bool(scene["sign"])


def test_captions_name_every_object_and_the_sign(world):
    scenes = json.loads((world / "scenes.json").read_text())["train"]
    for record in json.loads((world / "align.json").read_text()):
        assert_grounded_caption(scenes[record["image"]], record["conversations"][1]["value"], boxes=False)


def test_each_colour_names_one_object(world):
    """Colours are the scene's keys: no colour twice in a scene, 3-5 objects, both sizes at 6 and 10 px (12-px grid)."""
    scenes = json.loads((world / "scenes.json").read_text())["train"].values()
    for scene in scenes:
        colours = [o["color"] for o in scene["objects"]]
        assert len(colours) == len(set(colours)) and 3 <= len(colours) <= 5
    assert {tuple(o["bbox"][2:]) for s in scenes for o in s["objects"]} == {(6, 6), (10, 10)}


def test_every_object_lies_inside_one_letterboxed_patch(world):
    """The default grid: each object inside one 12-px cell from y = 8, i.e. inside one 8-px patch of the 64-px
    letterboxed image (scale 2/3, 16 canvas px of padding above), one object per cell; the border columns hold
    objects (the centre crop still loses some)."""
    scenes = json.loads((world / "scenes.json").read_text())["train"].values()
    columns = set()
    for scene in scenes:
        cells = []
        for o in scene["objects"]:
            x, y, w, h = o["bbox"]
            cell = (x // 12, (y - 8) // 12)
            assert (x + w - 1) // 12 == cell[0] and (y + h - 1 - 8) // 12 == cell[1] and y >= 8, o
            left, top = x * 2 / 3, (y + 16) * 2 / 3  # letterboxed to 64 x 64
            assert int(left // 8) == int((left + w * 2 / 3 - 1e-6) // 8)
            assert int(top // 8) == int((top + h * 2 / 3 - 1e-6) // 8)
            cells.append(cell)
            columns.add(cell[0])
        assert len(cells) == len(set(cells))
    assert columns == set(range(8))


def test_objects_anywhere_without_a_grid(tmp_path):
    """grid=0 keeps world version 2's placement: objects of 10 and 16 px anywhere, signs held by objects."""
    from data.mini_world import World, params

    w = World(params(grid=0))
    scenes = [w.scene("train", k) for k in range(200)]
    assert {o["bbox"][2] for s in scenes for o in s["objects"]} == {10, 16}
    assert any(s["sign"] and s["sign"]["on"] is not None for s in scenes)
    assert any(o["bbox"][0] % 12 not in range(1, 6) for s in scenes for o in s["objects"])


def test_centre_crop_losses_are_counted(world):
    """timm's resize-crop of a 96x64 image at 64 px, crop_pct 0.9: the shorter side to 71.1 px, a 64-px centre
    square; in original pixels x from 19.2 to 76.8 and y from 3.2 to 60.8."""
    meta = json.loads((world / "meta.json").read_text())
    assert meta["measured"]["centre_crop_window"] == [19.2, 3.2, 76.8, 60.8]
    scenes = json.loads((world / "scenes.json").read_text())["train"].values()
    objects = [o for s in scenes for o in s["objects"]]
    lost = sum(not (19.2 <= centre(o)[0] <= 76.8 and 3.2 <= centre(o)[1] <= 60.8) for o in objects)
    assert meta["measured"]["train"]["centre_crop_lost"] == lost and meta["measured"]["train"]["objects"] == len(objects)
    assert 0.15 < lost / len(objects) < 0.5  # border_share 0.3 of the objects sit in the border strips


def test_signs_on_about_forty_percent_of_the_scenes(world):
    scenes = json.loads((world / "scenes.json").read_text())["train"].values()
    signs = [s["sign"] for s in scenes if s["sign"]]
    assert 0.2 < len(signs) / len(scenes) < 0.6 and all(s["word"] in WORDS for s in signs)
    for scene in scenes:  # a sign held by an object sits just above it, and that object carries the word
        if scene["sign"] and scene["sign"]["on"] is not None:
            o = scene["objects"][scene["sign"]["on"]]
            assert o["label"] == scene["sign"]["word"] and o["size"] == "large"
            assert scene["sign"]["bbox"][1] + scene["sign"]["bbox"][3] == o["bbox"][1]
    tv = json.loads((world / "textvqa/TextVQA_0.5.1_val.json").read_text())["data"]
    assert all(max(set(d["answers"]), key=d["answers"].count) in WORDS and len(d["answers"]) == 10 for d in tv)


@pytest.mark.parametrize(("kw", "error", "match"), [
    ({"n_trian": 5}, TypeError, "unknown parameter.*n_trian"),
    ({"n_train": 0}, ValueError, "n_train=0 must be a positive integer"),
    ({"min_objects": 5, "max_objects": 4}, ValueError, "min_objects <= max_objects"),
    ({"label_share": 1.5}, ValueError, "label_share=1.5 must be a share"),
    ({"width": 20}, ValueError, "canvas is too small"),
    ({"n_per_benchmark": 2}, ValueError, "n_per_benchmark=2 is too small"),
    ({"grid": 5}, ValueError, r"grid=5 \(cell px\) must be 0"),
    ({"grid": 16, "grid_top": 40}, ValueError, "grid cells of 16 px"),
])
def test_bad_parameters_are_clear_errors(kw, error, match, tmp_path):
    with pytest.raises(error, match=match):
        ensure(tmp_path, **kw)
    assert not list(tmp_path.iterdir())


def test_the_data_config_reads_the_world_as_llava_splits(world, tmp_path):
    """`data=mini_world` (conf/world/mini.yaml at data.generator): every split is valid LLaVA data."""
    from data.llava import load_llava
    from data.sources import resolve
    from tests.conftest import compose_cfg

    overrides = [f"++data.generator.{k}={v}" for k, v in SMALL.items()]
    cfg = compose_cfg("data=mini_world", f"cache_dir={tmp_path}", *overrides)
    assert cfg.data.name == "mini_world" and cfg.data.generator._target_ == "data.mini_world.ensure"
    source = resolve(cfg.data)
    assert digest(source.image_root) == digest(world)  # the same parameters, the same world
    for split, n_images in (("align", 60), ("instruct", 60), ("text", 0)):
        [src] = source.splits[split]
        records, skipped = load_llava(src.json, src.image_root)
        assert len(records) == 60 and not skipped and sum("image" in r for r in records) == n_images


def test_the_counted_crop_window_is_what_timms_resize_crop_keeps():
    """timm's own eval transform (64 px, crop_pct 0.9) on a rendered scene: an object outside the counted window
    is gone, one inside it is kept, and letterboxing would have kept both."""
    import torch
    from timm.data import create_transform

    from data.mini_world_scenes import render

    def square(color, x):
        return {"color": color, "shape": "square", "size": "small", "bbox": [x, 28, 9, 9], "label": None}

    scene = {"width": 96, "height": 64, "sign": None,
             "objects": [square("red", 8), square("blue", 44), square("yellow", 79)]}  # centres 12.5, 48.5, 83.5
    pixels = create_transform(input_size=(3, 64, 64), crop_pct=0.9, interpolation="bicubic")(render(scene))
    rgb = (pixels * torch.tensor([0.229, 0.224, 0.225])[:, None, None] + torch.tensor([0.485, 0.456, 0.406])[:, None, None])
    rgb = (rgb.clamp(0, 1) * 255).permute(1, 2, 0).reshape(-1, 3)

    def seen(color):
        return int(((rgb - torch.tensor(COLORS[color], dtype=torch.float)).abs().max(-1).values < 40).sum())

    assert seen("blue") > 40 and seen("red") == 0 and seen("yellow") == 0
    from data.mini_world_scenes import crop_loss, crop_window
    assert crop_loss(scene, crop_window(96, 64, 64, 0.9)) == (2, 2)
