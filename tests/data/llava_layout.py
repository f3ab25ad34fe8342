"""A tiny LLaVA-1.5 data layout for tests (`data=llava_v15 data.root=ROOT`): LLaVA's playground/data in small.

    from tests.data.llava_layout import write_llava_v15
    root = write_llava_v15(tmp_path / "llava")

Split `align` (LCS-558K's file and image folder): one caption record per image, the human prompt with `<image>`
after the text as in LCS. Split `instruct` (mix665k's file; images under ROOT in two of its sources, coco/ and gqa/):
one- and two-turn questions per image plus `text_only` records without an image. Images are flat colours named by
the answer, so a few steps of training have something to learn. Returns ROOT.
"""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

COLORS = {"red": (220, 20, 20), "green": (20, 200, 20), "blue": (20, 20, 220), "yellow": (230, 220, 20)}


def write_llava_v15(root: Path, size: int = 32, text_only: int = 2) -> Path:
    root = Path(root)
    lcs, instruct = [], []
    for k, (name, rgb) in enumerate(COLORS.items()):
        lcs_rel = f"{k // 2:05d}/{k}.jpg"
        inst_rel = f"{'coco/train2017' if k % 2 else 'gqa/images'}/{k}.jpg"
        for path in (root / "LLaVA-Pretrain/images" / lcs_rel, root / inst_rel):
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (size, size), rgb).save(path)
        lcs.append({"id": f"lcs{k}", "image": lcs_rel, "conversations": [
            {"from": "human", "value": "Give a brief description of the image.\n<image>"},
            {"from": "gpt", "value": f"a {name} square"}]})
        turns = [{"from": "human", "value": "<image>\nWhat colour is the image?"}, {"from": "gpt", "value": name}]
        if k % 2:
            turns += [{"from": "human", "value": "Is it a square?"}, {"from": "gpt", "value": "yes"}]
        instruct.append({"id": f"inst{k}", "image": inst_rel, "conversations": turns})
    for k in range(text_only):
        instruct.append({"id": f"text{k}", "conversations": [
            {"from": "human", "value": f"Count to {k + 2}."}, {"from": "gpt", "value": " ".join(str(i + 1) for i in range(k + 2))}]})
    (root / "LLaVA-Pretrain/blip_laion_cc_sbu_558k.json").write_text(json.dumps(lcs))
    (root / "llava_v1_5_mix665k.json").write_text(json.dumps(instruct))
    return root
