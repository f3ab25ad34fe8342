"""The mini world's benchmark analogs: held-out scenes written in each real benchmark's own file format.

`write_benchmark(family, folder, scenes, rng, n, stats)` writes one benchmark under the world folder, at the paths
conf/benchmark/<family>.yaml names (docs/evaluation.md), so the real runner and scorer read it unchanged:

    vqav2/    v2_OpenEnded_mscoco_val2014_questions.json, v2_mscoco_val2014_annotations.json (ten answers:
              mostly the canonical one, some annotator variants), val2014/COCO_val2014_{image_id:012d}.jpg
    gqa/      testdev_balanced_questions.json, images/{imageId}.jpg
    tallyqa/  test.json (simple and complex counts), images/VG_100K/{id}.jpg
    vsr/      random/test.jsonl (true/false spatial statements), images/{id:012d}.jpg
    pope/     coco/coco_pope_{random,popular,adversarial}.json (JSON lines, 50/50 yes/no), val2014/
    refer/    refcoco/refs(unc).p (plain-data pickle) + refcoco/instances.json, images/mscoco/images/train2014/
    textvqa/  TextVQA_0.5.1_val.json (ten answers), train_images/{image_id}.jpg

`n` is the number of questions (POPE: per split; RefCOCO: sentences). `stats` are the training scenes' object
counts and co-occurrences, from which POPE's popular and adversarial negatives are chosen.
"""
from __future__ import annotations

import json
import pickle
from collections import Counter
from pathlib import Path

from data.atomic import atomic_file
from data.mini_world_questions import ASK, absent_pairs, pick, pope_question
from data.mini_world_scenes import render

NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
VARIANTS = {  # what another annotator might write instead of the canonical answer
    "red": "dark red", "green": "light green", "blue": "dark blue", "yellow": "gold", "purple": "violet",
    "orange": "dark orange", "circle": "round", "square": "rectangle", "triangle": "triangular", "small": "tiny",
    "large": "big", "left": "left side", "right": "right side",
}
QUESTION_TYPE = {"color": "what color is the", "shape": "what", "size": "what", "count": "how many",
                 "exists": "is there a", "position": "is the"}
ANSWER_TYPE = {"count": "number", "exists": "yes/no"}


def ten_answers(answer: str, rng, upper_case: bool = False) -> list[str]:
    """Ten annotators: 0-3 of them write a variant (a synonym, a number word, the opposite yes/no, upper case)."""
    if answer in ("yes", "no"):
        variant = "no" if answer == "yes" else "yes"
        k = int(rng.random() < 0.3)
    else:
        variant = answer.upper() if upper_case else (NUMBER_WORDS[int(answer)] if answer.isdigit() and int(answer) < 11
                                                     else VARIANTS.get(answer, answer))
        k = int(rng.integers(0, 4))
    out = [answer] * 10
    for i in rng.choice(10, size=k, replace=False):
        out[int(i)] = variant
    return out


def _save(image, path: Path, quality: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, quality=quality, subsampling=0)


def _dump(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as tmp:
        tmp.write_text(text)


def _json(obj) -> str:
    return json.dumps(obj, indent=1)


def _scenes_questions(family, scenes_of, rng, n, per_scene, balance=None):
    """(scene number, scene, questions) until n questions: per_scene drawn from each new scene's candidates."""
    total, k = 0, 0
    while total < n:
        scene = scenes_of(k)
        qs = pick(ASK[family](scene, rng), min(per_scene, n - total), rng, balance)
        if qs:
            yield k, scene, qs
            total += len(qs)
        k += 1


def write_benchmark(family: str, root: Path, scenes_of, rng, n: int, stats: dict, background: int = 128,
                    quality: int = 95) -> dict:
    """Write benchmark `family` under `root` from scenes `scenes_of(k)`; returns {image path: scene}."""
    shown: dict[str, dict] = {}

    def image(scene, rel):
        _save(render(scene, background), root / rel, quality)
        shown[rel] = scene

    if family == "vqav2":
        questions, annotations = [], []
        for k, scene, qs in _scenes_questions(family, scenes_of, rng, n, 3, balance="kind"):
            image_id = k + 1
            image(scene, f"vqav2/val2014/COCO_val2014_{image_id:012d}.jpg")
            for j, q in enumerate(qs):
                qid = image_id * 10 + j
                questions.append({"image_id": image_id, "question": q["question"], "question_id": qid})
                annotations.append({"question_id": qid, "image_id": image_id, "question_type": QUESTION_TYPE[q["kind"]],
                                    "answer_type": ANSWER_TYPE.get(q["kind"], "other"),
                                    "multiple_choice_answer": q["answer"],
                                    "answers": [{"answer": a, "answer_confidence": "yes", "answer_id": i + 1}
                                                for i, a in enumerate(ten_answers(q["answer"], rng))]})
        _dump(root / "vqav2/v2_OpenEnded_mscoco_val2014_questions.json", _json(
            {"task_type": "Open-Ended", "data_type": "mscoco", "data_subtype": "val2014", "questions": questions}))
        _dump(root / "vqav2/v2_mscoco_val2014_annotations.json", _json(
            {"data_type": "mscoco", "data_subtype": "val2014", "annotations": annotations}))
    elif family == "gqa":
        data = {}
        for k, scene, qs in _scenes_questions(family, scenes_of, rng, n, 3, balance="answer"):
            image_id = f"n{k:06d}"
            image(scene, f"gqa/images/{image_id}.jpg")
            for j, q in enumerate(qs):
                data[f"{k:06d}{j}"] = {"imageId": image_id, "question": q["question"], "answer": q["answer"],
                                       "fullAnswer": q["answer"], "isBalanced": True,
                                       "types": {**q["types"], "detailed": f"{q['types']['structural']}"
                                                                           f"{q['types']['semantic'].capitalize()}"}}
        _dump(root / "gqa/testdev_balanced_questions.json", _json(data))
    elif family == "tallyqa":
        data = []
        for k, scene, qs in _scenes_questions(family, scenes_of, rng, n, 3, balance="issimple"):
            rel = f"VG_100K/{k + 1}.jpg"
            image(scene, f"tallyqa/images/{rel}")
            for j, q in enumerate(qs):
                data.append({"question_id": (k + 1) * 10 + j, "image": rel, "image_id": k + 1, "question": q["question"],
                             "answer": int(q["answer"]), "issimple": q["issimple"], "data_source": "mini_world"})
        _dump(root / "tallyqa/test.json", _json(data))
    elif family == "vsr":
        lines = []
        for k, scene, qs in _scenes_questions(family, scenes_of, rng, n, 2, balance="label"):
            name = f"{k + 1:012d}.jpg"
            image(scene, f"vsr/images/{name}")
            for q in qs:
                lines.append({"image": name, "caption": q["question"], "label": q["label"], "relation": q["relation"],
                              "subj": q["subj"], "obj": q["obj"]})
        _dump(root / "vsr/random/test.jsonl", "".join(_json_line(r) for r in lines))
    elif family == "pope":
        _write_pope(root, scenes_of, rng, n, stats, image)
    elif family == "refcoco":
        _write_refcoco(root, scenes_of, rng, n, image)
    elif family == "textvqa":
        data = []
        for k, scene, qs in _scenes_questions(family, scenes_of, rng, n, 1):
            image_id = f"{k + 1:016x}"
            image(scene, f"textvqa/train_images/{image_id}.jpg")
            for j, q in enumerate(qs):
                data.append({"question_id": (k + 1) * 10 + j, "question": q["question"], "image_id": image_id,
                             "image_width": scene["width"], "image_height": scene["height"], "image_classes": [],
                             "answers": ten_answers(q["answer"], rng, upper_case=True), "set_name": "val"})
        _dump(root / "textvqa/TextVQA_0.5.1_val.json", _json({"dataset_type": "val", "dataset_name": "textvqa",
                                                              "dataset_version": "0.5.1", "data": data}))
    else:
        raise ValueError(f"unknown benchmark family {family!r}; choose one of {sorted(ASK)}")
    return shown


def _json_line(record) -> str:
    return json.dumps(record) + "\n"


def cooccurrence_stats(scenes) -> dict:
    """Object counts and pair co-occurrences ((colour, shape) categories) over the training scenes."""
    count, cooc = Counter(), Counter()
    for scene in scenes:
        pairs = sorted({(o["color"], o["shape"]) for o in scene["objects"]})
        count.update(pairs)
        cooc.update((a, b) for a in pairs for b in pairs if a != b)
    return {"count": count, "cooc": cooc}


def _write_pope(root, scenes_of, rng, n, stats, image):
    """POPE: per image 3 objects present ("yes") and, per split, 3 absent ("no"): random absent ones, the most
    frequent training objects absent (popular), the absent objects co-occurring most with those present
    (adversarial). `n` questions per split."""
    files = {"random": [], "popular": [], "adversarial": []}
    k = 0
    while len(files["random"]) < n:
        scene = scenes_of(k)
        present = [(o["color"], o["shape"]) for o in scene["objects"]]
        m = min(3, len(present), (n - len(files["random"])) // 2 or 1)
        absent = absent_pairs(scene)
        yes = [present[int(i)] for i in rng.permutation(len(present))[:m]]
        negatives = {
            "random": [absent[int(i)] for i in rng.permutation(len(absent))[:m]],
            "popular": sorted(absent, key=lambda p: (-stats["count"][p], p))[:m],
            "adversarial": sorted(absent, key=lambda p: (-sum(stats["cooc"][(q, p)] for q in present), p))[:m],
        }
        name = f"COCO_val2014_{k + 1:012d}.jpg"
        image(scene, f"pope/val2014/{name}")
        for split, recs in files.items():
            for label, pairs in (("yes", yes), ("no", negatives[split])):
                for c, s in pairs:
                    recs.append({"question_id": len(recs) + 1, "image": name, "text": pope_question(c, s), "label": label})
        k += 1
    for split, recs in files.items():
        _dump(root / f"pope/coco/coco_pope_{split}.json", "".join(_json_line(r) for r in recs))


def _write_refcoco(root, scenes_of, rng, n, image):
    """REFER: two refs per image (distinct objects), each with one or two of its referring expressions."""
    refs, images, anns = [], [], []
    sent_id, k = 0, 0
    while sent_id < n:
        scene = scenes_of(k)
        image_id = k + 1
        file_name = f"COCO_train2014_{image_id:012d}.jpg"
        image(scene, f"refer/images/mscoco/images/train2014/{file_name}")
        images.append({"id": image_id, "file_name": file_name, "width": scene["width"], "height": scene["height"]})
        for i, o in enumerate(scene["objects"]):
            x, y, w, h = o["bbox"]
            anns.append({"id": image_id * 100 + i, "image_id": image_id, "bbox": [x, y, w, h], "area": w * h,
                         "category_id": 1 + ("circle", "square", "triangle").index(o["shape"]), "iscrowd": 0})
        by_target: dict[int, list[str]] = {}
        for q in ASK["refcoco"](scene, rng):
            by_target.setdefault(q["target"], []).append(q["question"])
        for t in [int(i) for i in rng.permutation(len(scene["objects"]))[:2]]:
            sents = [by_target[t][int(i)] for i in rng.permutation(len(by_target[t]))[:int(rng.integers(1, 3))]]
            sentences = []
            for s in sents[: max(1, n - sent_id)]:
                sentences.append({"sent_id": sent_id, "sent": s, "raw": s, "tokens": s.split()})
                sent_id += 1
            refs.append({"ref_id": len(refs), "ann_id": image_id * 100 + t, "image_id": image_id, "split": "val",
                         "sent_ids": [s["sent_id"] for s in sentences], "sentences": sentences, "file_name": file_name,
                         "category_id": 1 + ("circle", "square", "triangle").index(scene["objects"][t]["shape"])})
            if sent_id >= n:
                break
        k += 1
    path = root / "refer/refcoco/refs(unc).p"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as tmp:
        tmp.write_bytes(pickle.dumps(refs, protocol=2))
    categories = [{"id": i + 1, "name": s, "supercategory": "shape"} for i, s in enumerate(("circle", "square", "triangle"))]
    _dump(root / "refer/refcoco/instances.json", _json({"images": images, "annotations": anns, "categories": categories}))
