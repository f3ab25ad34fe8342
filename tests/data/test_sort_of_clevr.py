"""Tests for data/sort_of_clevr.py: determinism, answers re-derived from the
stored scenes, geometry, LLaVA record format, crash-safe writing, caching.

Run: python -m pytest -q tests/data/test_sort_of_clevr.py
"""
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from data import sort_of_clevr as soc

SMALL = dict(n_train=12, n_test=6, image_size=48, object_size=8, questions_per_image=12)


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return soc.generate(tmp_path_factory.mktemp("a") / "soc", seed=3, **SMALL)


def load(root, name):
    return json.loads((Path(root) / name).read_text())


def _answer(objs, color, subtype, size):
    """Independent re-derivation from the stored object list."""
    me = next(o for o in objs if o["color"] == color)
    others = [o for o in objs if o is not me]
    dist = lambda o: math.hypot(o["center"][0] - me["center"][0], o["center"][1] - me["center"][1])
    return {
        "shape": lambda: me["shape"],
        "horizontal": lambda: "left" if me["center"][0] < size / 2 else "right",
        "vertical": lambda: "top" if me["center"][1] < size / 2 else "bottom",
        "nearest": lambda: min(others, key=dist)["shape"],
        "farthest": lambda: max(others, key=dist)["shape"],
        "count": lambda: str(sum(o["shape"] == me["shape"] for o in objs)),
    }[subtype]()


def _parse(question):
    words = question.rstrip("?").split()
    color = next(w for w in words if w in soc.COLORS)
    for sub, tpl in soc.TEMPLATES.items():
        if tpl.format(c=color) == question:
            return color, sub
    raise AssertionError(question)


def test_files_and_counts(ds):
    meta = load(ds, "meta.json")
    assert meta["seed"] == 3 and meta["n_train"] == 12 and meta["image_size"] == 48
    assert len(list((ds / "images/train").glob("*.png"))) == 12
    assert len(list((ds / "images/test").glob("*.png"))) == 6
    assert len(load(ds, "align.json")) == 12 and len(load(ds, "instruct.json")) == 12
    assert len(load(ds, "test.json")) == 6 * 12
    im = Image.open(ds / "images/train/000000.png")
    assert im.size == (48, 48) and im.mode == "RGB"
    assert not list(ds.parent.glob(".soc.*")), "temporary folders left behind"


def test_same_seed_identical_different_seed_differs(ds, tmp_path):
    b = soc.generate(tmp_path / "b", seed=3, **SMALL)
    c = soc.generate(tmp_path / "c", seed=4, **SMALL)
    for name in ("align.json", "instruct.json", "test.json", "scenes.json"):
        assert (ds / name).read_bytes() == (b / name).read_bytes()
        assert (ds / name).read_bytes() != (c / name).read_bytes()
    assert (ds / "images/train/000003.png").read_bytes() == (b / "images/train/000003.png").read_bytes()


def test_answers_rederived(ds):
    scenes, size = load(ds, "scenes.json"), load(ds, "meta.json")["image_size"]
    recs = load(ds, "test.json")
    for r in recs:
        objs = scenes["test"][r["id"].rsplit("-", 1)[0]]
        color, sub = _parse(r["question"])
        assert sub == r["subtype"]
        assert r["type"] == ("non_relational" if sub in ("shape", "horizontal", "vertical") else "relational")
        assert r["answer"] == _answer(objs, color, sub, size)
    n_rel = sum(r["type"] == "relational" for r in recs)
    assert n_rel == len(recs) // 2
    for r in load(ds, "instruct.json"):
        objs = scenes["train"][r["id"]]
        conv = r["conversations"]
        for h, g in zip(conv[::2], conv[1::2]):
            color, sub = _parse(h["value"].removeprefix("<image>\n"))
            assert g["value"] == _answer(objs, color, sub, size)
    orders = set()
    for r in load(ds, "align.json"):
        objs = scenes["train"][r["id"]]
        orders.add(tuple(w for w in r["conversations"][1]["value"].split() if w in soc.COLORS))
        cap = r["conversations"][1]["value"]
        for o in objs:
            a = {sub: _answer(objs, o["color"], sub, size) for sub in soc.TEMPLATES}
            assert (f'{o["color"]} {a["vertical"]} {a["horizontal"]} {o["shape"]} nearest {a["nearest"]} '
                    f'farthest {a["farthest"]} same {a["count"]}.') in cap
    assert len(orders) > 1, "caption object order should vary"


def test_geometry(ds):
    scenes, size = load(ds, "scenes.json"), load(ds, "meta.json")["image_size"]
    for split in ("train", "test"):
        for objs in scenes[split].values():
            assert sorted(o["color"] for o in objs) == sorted(soc.COLORS)
            for i, a in enumerate(objs):
                s = a["size"]
                assert s / 2 <= a["center"][0] <= size - s / 2 and s / 2 <= a["center"][1] <= size - s / 2
                for b in objs[i + 1:]:  # bounding boxes (which contain the shapes) don't overlap
                    assert max(abs(a["center"][0] - b["center"][0]), abs(a["center"][1] - b["center"][1])) >= s
    # the pixels agree with the scene: object centres carry their colour
    objs = scenes["train"]["train-000000"]
    px = np.asarray(Image.open(ds / "images/train/000000.png")).astype(int)
    for o in objs:
        x, y = (int(v) for v in o["center"])
        assert np.abs(px[y, x] - np.array(soc.COLORS[o["color"]])).max() < 30


def test_grid_layout_centres_objects_in_cells_and_free_layout_places_anywhere(ds, tmp_path):
    scenes = load(ds, "scenes.json")  # default layout: one object per 8-px cell (the encoder's patch grid)
    centres = [c for objs in scenes["train"].values() for o in objs for c in o["center"]]
    assert all((c - 4) % 8 == 0 for c in centres)
    free = soc.generate(tmp_path / "free", seed=3, **{**SMALL, "cell": 0, "n_train": 6})
    centres = [c for objs in load(free, "scenes.json")["train"].values() for o in objs for c in o["center"]]
    assert any((c - 4) % 8 != 0 for c in centres)
    with pytest.raises(ValueError, match="larger than the cell"):
        soc.sample_scene(np.random.default_rng(0), 64, 9, cell=8)


def test_llava_records(ds):
    for name in ("align.json", "instruct.json"):
        for r in load(ds, name):
            assert set(r) == {"id", "image", "conversations"}
            assert (ds / r["image"]).is_file() and r["image"].startswith("images/train/")
            conv = r["conversations"]
            assert len(conv) >= 2 and len(conv) % 2 == 0
            assert [t["from"] for t in conv] == ["human", "gpt"] * (len(conv) // 2)
            assert conv[0]["value"].startswith("<image>\n")
            assert all("<image>" not in t["value"] for t in conv[1:])
            assert all(t["value"] for t in conv)
    assert all(len(r["conversations"]) == 24 for r in load(ds, "instruct.json"))


def test_test_split_disjoint(ds):
    scenes = load(ds, "scenes.json")
    train = {json.dumps(v, sort_keys=True) for v in scenes["train"].values()}
    test = {json.dumps(v, sort_keys=True) for v in scenes["test"].values()}
    assert not train & test
    imgs = {r["image"] for r in load(ds, "test.json")}
    assert all(i.startswith("images/test/") for i in imgs)
    train_bytes = {p.read_bytes() for p in (ds / "images/train").glob("*.png")}
    assert not any(p.read_bytes() in train_bytes for p in (ds / "images/test").glob("*.png"))


def test_crash_leaves_no_dataset(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = soc.render

    def boom(*a, **k):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(soc, "render", boom)
    with pytest.raises(KeyboardInterrupt):
        soc.generate(tmp_path / "x", **SMALL)
    assert os.listdir(tmp_path) == []


def test_ensure_caches(tmp_path):
    a = soc.ensure(tmp_path, n_train=3, n_test=2, image_size=40, object_size=6)
    stamp = (a / "meta.json").stat().st_mtime_ns
    assert soc.ensure(tmp_path, n_train=3, n_test=2, image_size=40, object_size=6) == a
    assert (a / "meta.json").stat().st_mtime_ns == stamp
    b = soc.ensure(tmp_path, n_train=3, n_test=2, image_size=40, object_size=6, seed=1)
    assert b != a and b.parent == a.parent
    with pytest.raises(TypeError):
        soc.ensure(tmp_path, bogus=1)


def test_cli(tmp_path):
    soc.main(["--out", str(tmp_path / "cli"), "--n-train", "2", "--n-test", "1", "--seed", "5"])
    meta = load(tmp_path / "cli", "meta.json")
    assert meta["seed"] == 5 and meta["n_train"] == 2


def test_easy_curriculum_split_has_few_objects_and_valid_questions(tmp_path):
    import json

    from data.sort_of_clevr import answer, generate

    out = generate(tmp_path / "d", n_train=2, n_test=1, n_easy=30, easy_max_objects=3, questions_per_image=40)
    scenes = json.loads((out / "scenes.json").read_text())
    easy = json.loads((out / "instruct_easy.json").read_text())
    assert len(easy) == 30 and {len(v) for v in scenes["easy"].values()} == {1, 2, 3}
    assert all(len(v) == 6 for v in scenes["train"].values()) and all(len(v) == 6 for v in scenes["test"].values())
    for record in easy:
        objs = scenes["easy"][record["id"]]
        colors = {o["color"] for o in objs}
        turns = record["conversations"]
        for q, a in zip(turns[::2], turns[1::2]):
            text = q["value"].removeprefix("<image>\n")
            color = next(c for c in colors if f" {c} " in text)  # questions ask only about objects present
            if len(objs) == 1:
                assert "nearest" not in text and "farthest" not in text
            subtype = ("nearest" if "nearest" in text else "farthest" if "farthest" in text else "count" if "How many" in text
                       else "horizontal" if "left or" in text else "vertical" if "top or" in text else "shape")
            assert a["value"] == answer(objs, color, subtype, 64)
