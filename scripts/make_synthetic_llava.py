"""Write a synthetic LLaVA-1.5 data folder with mix665k's shape, for measuring preparation, start-up and memory.

    python scripts/make_synthetic_llava.py --out DIR --records 665000 [--images 3000] [--align 5000] [--seed 0]

Lays DIR out as `data=llava_v15` expects (two image roots):
- `DIR/llava_v1_5_mix665k.json`: `--records` instruct records, about 6% text-only (mix665k: ~40k of 665k), the rest
  on one of `--images` distinct JPEGs reused across records, spread over coco/ gqa/ ocr_vqa/ textvqa/ vg/ like
  mix665k; conversation lengths drawn like LLaVA's: short-answer VQA records with many question/answer pairs
  (GQA, VQAv2, OCR-VQA style: 1-30 pairs, answers of 1-3 words) and LLaVA-Instruct records with a few long answers;
- `DIR/LLaVA-Pretrain/blip_laion_cc_sbu_558k.json` + `LLaVA-Pretrain/images/`: `--align` one-caption records.
Prints the `data=...` overrides that train on it. Deterministic for a seed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.atomic import atomic_file

WORDS = ["the", "a", "red", "blue", "green", "small", "large", "cube", "sphere", "cylinder", "left", "right", "of", "on", "near", "behind", "man", "woman", "dog", "cat", "car", "table", "street", "sign", "tree", "sky", "building", "person", "holding", "wearing", "shirt", "color", "what", "is", "there", "how", "many", "where", "which", "two", "three", "one", "white", "black", "picture", "image", "shows", "scene", "front", "top", "bottom", "side", "next", "to"]
FOLDERS = {"coco/train2017": 0.55, "gqa/images": 0.2, "ocr_vqa/images": 0.12, "textvqa/train_images": 0.04, "vg/VG_100K": 0.09}


def text(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(lo, hi)))


def conversation(rng: random.Random, with_image: bool) -> list[dict]:
    """LLaVA-like turns: 70% short-answer VQA with 1-30 pairs (heavy tail), 30% instruct with 1-6 long answers."""
    if rng.random() < 0.7:
        pairs = min(30, max(1, int(rng.expovariate(1 / 5))))
        qa = [(text(rng, 4, 12) + "?", text(rng, 1, 3)) for _ in range(pairs)]
    else:
        qa = [(text(rng, 6, 20) + "?", text(rng, 20, 150) + ".") for _ in range(rng.randint(1, 6))]
    turns = []
    for i, (q, a) in enumerate(qa):
        turns += [{"from": "human", "value": ("<image>\n" + q) if with_image and i == 0 else q}, {"from": "gpt", "value": a}]
    return turns


def write_images(root: Path, names: list[str], rng: random.Random, size: int) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        color = tuple(rng.randrange(256) for _ in range(3))
        Image.new("RGB", (size, size * 3 // 4), color).save(path, quality=85)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--records", type=int, default=665_000)
    p.add_argument("--images", type=int, default=3000, help="distinct instruct images (reused across records)")
    p.add_argument("--align", type=int, default=5000, help="stage-1 caption records (each its own image)")
    p.add_argument("--image-size", type=int, default=384)
    p.add_argument("--text-only", type=float, default=0.06)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng, out = random.Random(args.seed), args.out.resolve()
    folders, weights = list(FOLDERS), list(FOLDERS.values())
    images = [f"{rng.choices(folders, weights)[0]}/{k:012d}.jpg" for k in range(args.images)]
    write_images(out, images, rng, args.image_size)
    records = []
    for k in range(args.records):
        record = {"id": f"syn-{k:07d}"}
        with_image = rng.random() >= args.text_only
        if with_image:
            record["image"] = rng.choice(images)
        record["conversations"] = conversation(rng, with_image)
        records.append(record)
    with atomic_file(out / "llava_v1_5_mix665k.json") as tmp:
        tmp.write_text(json.dumps(records))
    pre = out / "LLaVA-Pretrain"
    captions = [f"{k:09d}.jpg" for k in range(args.align)]
    write_images(pre / "images", captions, rng, args.image_size // 2)
    align = [{"id": c[:-4], "image": c, "conversations": [{"from": "human", "value": "<image>\n" + text(rng, 3, 8)},
                                                           {"from": "gpt", "value": text(rng, 5, 20)}]} for c in captions]
    with atomic_file(pre / "blip_laion_cc_sbu_558k.json") as tmp:
        tmp.write_text(json.dumps(align))
    text_only = sum("image" not in r for r in records)
    print(f"wrote {len(records)} instruct records ({text_only} text-only, {len(images)} images) and {len(align)} "
          f"align records under {out}", file=sys.stderr)
    print(f"data=llava_v15 data.root={out}")


if __name__ == "__main__":
    main()
