"""The mini world: a deterministic synthetic world of shapes, colours, sizes, positions and signs, with training
data in LLaVA format and seven benchmark analogs in the real benchmarks' file formats (issue 13).

Scenes (data/mini_world_scenes.py) sit on a NON-square canvas (default 96x64, mid-gray) with 3-5 objects of distinct colours, many
near the left/right borders (a centre crop loses them: counted in meta.json), and ~40% carry a sign with a word
(the reading task). The language (data/mini_world_questions.py) asks the benchmark families' questions; the
benchmark files (data/mini_world_benchmarks.py) are written on held-out scenes of their own.

Output folder (every path in the records is relative to it):

    images/train/NNNNNN.jpg  images/test/NNNNNN.jpg   JPEG q95, no chroma subsampling
    align.json       LLaVA records: "<image>\\nDescribe the image." -> a caption naming every object, colour first
    instruct.json    LLaVA records: one multi-turn conversation per train scene, one question of each benchmark
                     family, asked exactly as its runner asks it (data.mini_world_questions.PROMPTS), then
                     "Describe the image." -> the caption with every object's box
    text.json        LLaVA text-only dialogues (no "image"): a scene in words, then questions answered from them
    lm_text.txt      the train scenes in prose, one a line (LM pretraining); lm_text_val.txt: the test scenes'
    scenes.json      {"train": {image path: scene}, "test": {image path: scene}} (scene layout: mini_world_scenes)
    benchmark_scenes.json  {family: {image path: scene}} of the benchmark images
    meta.json        the parameters, and measured figures: objects a centre crop cuts / loses, the share of
                     scenes with a sign, questions per benchmark
    vqav2/ gqa/ tallyqa/ vsr/ pope/ refer/ textvqa/   the benchmarks (layouts in data/mini_world_benchmarks.py)

Deterministic from the seed: every split draws from its own numpy Generator seeded by (seed, split, VERSION).
Written once per parameter set under `cache_dir` (`ensure`), atomically.

Run:
    python -m data.mini_world --out DIR [--n-train N] [--seed S] ...
Library:
    from data.mini_world import ensure
    root = ensure("~/.cache/refract/datasets", n_train=8000)
"""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np

from data.atomic import atomic_directory
from data.mini_world_benchmarks import cooccurrence_stats, write_benchmark
from data.mini_world_questions import (
    ASK,
    FAMILIES,
    absent_pairs,
    caption,
    pick,
    pope_question,
    prompt,
    prose,
    text_dialogue,
)
from data.mini_world_scenes import crop_loss, crop_window, grid_cells, render, sample_scene

VERSION = 3
CAPTION_PROMPT = "Describe the image."
DEFAULTS = {"seed": 0, "n_train": 8000, "n_test": 500, "n_per_benchmark": 300, "width": 96, "height": 64,
            "min_objects": 3, "max_objects": 5, "border_share": 0.3, "label_share": 0.4, "crop_size": 64,
            "crop_pct": 0.9, "background": 128, "jpeg_quality": 95, "grid": 12, "grid_top": 8}
SPLITS = ("train", "test", *FAMILIES)  # each draws its scenes from its own seeded stream


def params(**kw) -> dict:
    """The full parameter set (defaults filled in), checked; a bad value raises naming the parameter and the fix."""
    unknown = sorted(set(kw) - set(DEFAULTS))
    if unknown:
        raise TypeError(f"data.mini_world: unknown parameter(s) {unknown}; known: {sorted(DEFAULTS)}")
    p = {**DEFAULTS, **kw}
    for key in ("n_train", "n_test", "n_per_benchmark", "width", "height", "min_objects", "max_objects", "crop_size"):
        if not isinstance(p[key], (int, np.integer)) or isinstance(p[key], bool) or p[key] < 1:
            raise ValueError(f"data.mini_world: {key}={p[key]!r} must be a positive integer (conf/world/mini.yaml)")
    if p["n_per_benchmark"] < 6:
        raise ValueError(f"data.mini_world: n_per_benchmark={p['n_per_benchmark']} is too small; use at least 6 "
                         "(POPE asks 3 yes and 3 no questions per image)")
    if not p["min_objects"] <= p["max_objects"] <= 6:
        raise ValueError(f"data.mini_world: need min_objects <= max_objects <= 6 (each of the 6 colours at most once "
                         f"per scene); got {p['min_objects']}..{p['max_objects']}")
    if p["min_objects"] < 3:
        raise ValueError(f"data.mini_world: min_objects={p['min_objects']}; use at least 3 (relations and POPE need "
                         "several objects)")
    if p["width"] < 48 or p["height"] < 32:
        raise ValueError(f"data.mini_world: a {p['width']}x{p['height']} canvas is too small for 16-px objects and "
                         "signs; use at least 48x32")
    if p["grid"]:
        if not isinstance(p["grid"], (int, np.integer)) or p["grid"] < 8 or p["grid_top"] < 0:
            raise ValueError(f"data.mini_world: grid={p['grid']!r} (cell px) must be 0 (objects anywhere) or an integer "
                             f">= 8, grid_top={p['grid_top']!r} >= 0 (conf/world/mini.yaml)")
        cells = len(grid_cells(p["width"], p["height"], p["grid"], p["grid_top"]))
        if cells < 2 * p["max_objects"]:
            raise ValueError(f"data.mini_world: a {p['width']}x{p['height']} canvas holds {cells} grid cells of "
                             f"{p['grid']} px from y={p['grid_top']}; need at least {2 * p['max_objects']} for "
                             f"max_objects={p['max_objects']}: lower grid or grid_top, or enlarge the canvas")
    for key in ("border_share", "label_share"):
        if not 0.0 <= float(p[key]) <= 1.0:
            raise ValueError(f"data.mini_world: {key}={p[key]!r} must be a share in [0, 1]")
    if not 0.0 < float(p["crop_pct"]) <= 1.0 or not 1 <= int(p["jpeg_quality"]) <= 100:
        raise ValueError(f"data.mini_world: crop_pct in (0, 1] and jpeg_quality in 1..100 (got {p['crop_pct']}, "
                         f"{p['jpeg_quality']})")
    return {"version": VERSION, **p}


class World:
    """The scene streams of one parameter set: `scene(split, k)` is the k-th scene of a split, drawn in order."""

    def __init__(self, p: dict):
        self.p = p
        self.window = crop_window(p["width"], p["height"], p["crop_size"], p["crop_pct"])
        self.grid = {"cell": p["grid"], "top": p["grid_top"]} if p["grid"] else None
        self.rngs = {s: np.random.default_rng([p["seed"], i, VERSION]) for i, s in enumerate(SPLITS)}
        self.drawn: dict[str, list] = {s: [] for s in SPLITS}

    def scene(self, split: str, k: int) -> dict:
        p, drawn = self.p, self.drawn[split]
        while len(drawn) <= k:  # TextVQA's scenes all carry a sign
            label_share = 1.0 if split == "textvqa" else p["label_share"]
            drawn.append(sample_scene(self.rngs[split], p["width"], p["height"], p["min_objects"], p["max_objects"],
                                      p["border_share"], label_share, self.window, self.grid))
        return drawn[k]

    def question_rng(self, split: str) -> np.random.Generator:
        return np.random.default_rng([self.p["seed"], SPLITS.index(split), VERSION, 1])


def instruct_turns(scene: dict, rng) -> list[dict]:
    """One question of every family the scene supports (POPE: present or absent, 50/50) in random order, each
    asked as its benchmark's runner asks it (the image placeholder in the first turn, as the runners ask), then
    a grounded description: every object keyed by its colour, with its box (LLaVA-1.5's mix holds detailed
    descriptions and RefCOCO / Visual Genome boxes alike). The description comes last: asked first, it taught
    the model to describe whatever the first question was (a calibration run answered VQAv2 3.7%)."""
    asked = []
    for family in FAMILIES:
        if family == "pope" and rng.random() < 0.5:
            absent = absent_pairs(scene)
            c, s = absent[int(rng.integers(len(absent)))]
            asked.append((prompt(family, pope_question(c, s)), "no"))
            continue
        qs = pick(ASK[family](scene, rng), 1, rng)
        if qs:
            asked.append((prompt(family, qs[0]["question"]), qs[0]["answer"]))
    turns = []
    for j, i in enumerate(rng.permutation(len(asked))):
        question, answer = asked[int(i)]
        turns += [{"from": "human", "value": ("<image>\n" if j == 0 else "") + question}, {"from": "gpt", "value": answer}]
    return turns + [{"from": "human", "value": CAPTION_PROMPT}, {"from": "gpt", "value": caption(scene, rng, boxes=True)}]


def generate(out_dir, **kw) -> Path:
    """Write the world for these parameters into out_dir (replaced atomically); returns out_dir."""
    p = params(**kw)
    out = Path(out_dir).expanduser().resolve()
    world = World(p)
    with atomic_directory(out) as tmp:
        scenes: dict[str, dict] = {"train": {}, "test": {}}
        align, instruct, text, lm = [], [], [], []
        for split, n in (("train", p["n_train"]), ("test", p["n_test"])):
            (tmp / "images" / split).mkdir(parents=True)
            rng = world.question_rng(split)
            for k in range(n):
                scene = world.scene(split, k)
                rel = f"images/{split}/{k:06d}.jpg"
                render(scene, p["background"]).save(tmp / rel, quality=p["jpeg_quality"], subsampling=0)
                scenes[split][rel] = scene
                if split == "test":
                    continue
                rid = f"train-{k:06d}"
                align.append({"id": rid, "image": rel, "conversations": [
                    {"from": "human", "value": f"<image>\n{CAPTION_PROMPT}"},
                    {"from": "gpt", "value": caption(scene, rng)}]})
                instruct.append({"id": rid, "image": rel, "conversations": instruct_turns(scene, rng)})
                text.append({"id": f"text-{k:06d}", "conversations": text_dialogue(scene, rng)})
                lm.append(prose(scene, rng))
        val_rng = world.question_rng("test")
        lm_val = [prose(s, val_rng) for s in scenes["test"].values()]
        stats = cooccurrence_stats(scenes["train"].values())
        shown = {}
        for family in FAMILIES:
            shown[family] = write_benchmark(family, tmp, lambda k, f=family: world.scene(f, k), world.question_rng(family),
                                            p["n_per_benchmark"], stats, p["background"], p["jpeg_quality"])
        for name, obj in (("align.json", align), ("instruct.json", instruct), ("text.json", text),
                          ("scenes.json", scenes), ("benchmark_scenes.json", shown)):
            (tmp / name).write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
        (tmp / "lm_text.txt").write_text("\n".join(lm) + "\n")
        (tmp / "lm_text_val.txt").write_text("\n".join(lm_val) + "\n")
        (tmp / "meta.json").write_text(json.dumps({"name": "mini_world", **p, "measured": measured(world, scenes, shown)},
                                                  indent=1, sort_keys=True) + "\n")
    return out


def measured(world: World, scenes: dict, shown: dict) -> dict:
    """Figures of the generated world: per split, objects, objects a centre crop cuts and loses, scenes with a sign."""
    out = {"centre_crop_window": [round(v, 2) for v in world.window]}
    for split, group in (("train", scenes["train"]), ("test", scenes["test"]), *shown.items()):
        objects = sum(len(s["objects"]) for s in group.values())
        cut = lost = 0
        for s in group.values():
            c, lo = crop_loss(s, world.window)
            cut, lost = cut + c, lost + lo
        out[split] = {"scenes": len(group), "objects": objects, "centre_crop_cut": cut, "centre_crop_lost": lost,
                      "with_sign": sum(bool(s.get("sign")) for s in group.values())}
    return out


def folder_name(**kw) -> str:
    """'mini_world-<hash of every parameter and VERSION>'."""
    digest = hashlib.sha256(json.dumps(params(**kw), sort_keys=True).encode()).hexdigest()[:12]
    return f"mini_world-{digest}"


def ensure(cache_dir, **kw) -> Path:
    """The world folder for these parameters under cache_dir, generated on first use."""
    out = Path(cache_dir).expanduser() / folder_name(**kw)
    if not (out / "meta.json").exists():
        generate(out, **kw)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the folder to write (replaced if it exists)")
    for k, v in DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    a = vars(ap.parse_args(argv))
    print(generate(a.pop("out"), **a))


if __name__ == "__main__":
    main()
