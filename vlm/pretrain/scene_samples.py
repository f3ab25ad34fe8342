"""`lm_pretrain.data=scenes`: text about a world scene, preceded by the scene's objects as one input vector each.

The layout is the VLM's for an image (vlm/model.py `VLM.splice`): BOS, then one slot per encoder patch (an 8×8
grid of the letterboxed scene by default), then the text in `lm_pretrain.prompt_format`. The slot under an
object's centre (`vlm.pretrain.quality.centre_patch`) holds the sum of the LM's own input embeddings of the
object's caption words ("red", "top", "left", "large", "circle"); the other slots hold zeros. With `sign_slot`,
the slot under the sign's centre also holds "sign" and the sign's word (the reading task's input, which an
encoder + projector would have to deliver there). The text is the scene's caption (`align.json`), its prose line
(`lm_text.txt`), one of its one-word questions (`instruct.json` without the box and description turns) or, with
`extra_questions` > 0, one of that many further questions generated from the scene for every family but RefCOCO
in turn (`extra_scene_questions`; with `box_questions`, RefCOCO's too: a referring expression answered by the
object's box, which the LM can only place from the slot the object sits in), with the loss on the answer. With
`kinds`, only the questions of those kinds; with `vsr_tilt`, VSR statements restated to mostly say left of / above
(`scene_texts`: the first step of VSR's curriculum). The LM
reads nothing but its own word embeddings, and learns to look objects up among patch slots by their words: the in-context lookup a real base LM
arrives with, which a VLM cell then only has to point its projector at (docs/reproduction.md, runs 31-37).

A sample is `(input_ids, labels, slot_words)`: `slot_words` maps each slot's position in `input_ids` (its token is
the EOS id, replaced by the slot's vector) to the token ids whose embeddings are summed there (none: zeros).
With `lm_pretrain.slot_background` > 0, training adds one random vector per sample (norm uniform in
[0, slot_background]) to all its slots: a VLM's projector fills every patch, not only the objects' ones.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from data.atomic import read_json
from data.mini_world_questions import (
    ASK,
    QUESTION_KINDS,
    absent_pairs,
    pope_question,
    prompt,
    question_kind,
    restate_vsr,
)
from vlm.prompting import IGNORE_INDEX, strip_image_placeholder
from vlm.pretrain.quality import centre_patch
from vlm.pretrain.world import caption_records, scenes, text_lines

PROSE_PROMPT = "Describe the image in detail."
CAPTION_PROMPT = "Describe the image."
ASKED_FAMILIES = ("vqav2", "gqa", "tallyqa", "vsr", "pope", "textvqa")  # RefCOCO's answers are boxes, not words


def object_phrases(world: Path, grid: tuple[int, int] = (8, 8),
                   sign_slot: bool = False) -> dict[str, list[tuple[int, str]]]:
    """Per training image: (patch under the object's centre, letterboxed; the object's caption phrase, e.g. "red top
    left large circle") of each object, matched to the caption by its colour (one object per colour in the world);
    with `sign_slot`, then (patch under the sign's centre, "sign WORD") for a scene with a sign."""
    captions = dict(caption_records(world))
    out = {}
    for image, scene in scenes(world, "train").items():
        if image not in captions:
            raise ValueError(f"{world / 'align.json'} has no caption of {image} (scenes.json's training scene); "
                             "delete the world folder so that data/mini_world.py writes it again")
        phrases = [p.strip().rstrip(".") for p in re.split(r", | and ", captions[image])]
        by_colour = {p.split()[0]: p for p in phrases}
        missing = [o["color"] for o in scene["objects"] if o["color"] not in by_colour]
        if missing or len(by_colour) != len(phrases):
            raise ValueError(f"{world / 'align.json'}: the caption of {image} does not name each object once by its "
                             f"colour (missing {missing}, caption {captions[image]!r}); scene samples need the "
                             "world's one object per colour (data/mini_world.py version 2 or later)")
        out[image] = [(centre_patch(o, scene, grid, "letterbox"), by_colour[o["color"]]) for o in scene["objects"]]
        if sign_slot and scene.get("sign"):
            out[image].append((centre_patch(scene["sign"], scene, grid, "letterbox"), f"sign {scene['sign']['word']}"))
    return out


def instruct_turns(world: Path, keep) -> dict[str, list[tuple[str, str]]]:
    """instruct.json's (question, answer) turns per image, in file order, those whose question `keep` accepts."""
    questions: dict[str, list[tuple[str, str]]] = {}
    for record in read_json(world / "instruct.json"):
        turns = record.get("conversations", [])
        asked = [(q["value"], a["value"]) for q, a in zip(turns[::2], turns[1::2]) if keep(q["value"])]
        questions.setdefault(str(record.get("image")), []).extend(asked)
    return questions


def one_word_questions(world: Path) -> dict[str, list[tuple[str, str]]]:
    """instruct.json's (question, answer) turns per image, in file order, without the box and description turns."""
    return instruct_turns(world, lambda q: "bounding box" not in q and not q.endswith(CAPTION_PROMPT))


def box_turns(world: Path) -> dict[str, list[tuple[str, str]]]:
    """instruct.json's RefCOCO turns (referring expression -> box) per image, in file order."""
    return instruct_turns(world, lambda q: "bounding box" in q)


def extra_scene_questions(world: Path, per_scene: int, seed: int = 0,
                          boxes: bool = False) -> dict[str, list[tuple[str, str]]]:
    """`per_scene` (prompt, answer) pairs per training scene, generated from the scene by the benchmark families'
    question forms (data/mini_world_questions.py `ASK`, asked as their runners ask) of `ASKED_FAMILIES`, VQAv2's
    split by its question kinds (colour, shape, size, position, count, exists): the groups in turn from a random
    first one, a question drawn at random from the group each time, so that no kind is as rare as colour is among
    instruct.json's questions. POPE's are half present objects ("yes"), half absent colour-shape pairs ("no"); a
    group the scene gives no question (TextVQA without a sign) is left out of its turn. With `boxes`, RefCOCO is one
    more group (its referring expressions, answered by the box as its runner reads it). Seeded: the same world gives
    the same pairs."""
    rng = np.random.default_rng(seed)
    families = ASKED_FAMILIES + (("refcoco",) if boxes else ())
    out: dict[str, list[tuple[str, str]]] = {}
    for image, scene in scenes(world, "train").items():
        groups: dict[tuple[str, str], list[dict]] = {}
        for family in families:
            for q in ASK[family](scene, rng):
                groups.setdefault((family, q.get("kind", "")), []).append(q)
        absent = [{"question": pope_question(c, s), "answer": "no"} for c, s in absent_pairs(scene)]
        keys = sorted(groups)
        first, pairs = int(rng.integers(len(keys))), []
        for k in range(per_scene):
            family, kind = keys[(first + k) % len(keys)]
            choices = absent if family == "pope" and absent and rng.random() < 0.5 else groups[family, kind]
            q = choices[int(rng.integers(len(choices)))]
            pairs.append((prompt(family, q["question"]), q["answer"]))
        out[image] = pairs
    return out


def scene_texts(world: Path, questions_per_scene: int, extra_questions: int = 0,
                box_questions: bool = False, kinds: tuple[str, ...] | None = None,
                vsr_tilt: float | None = None) -> list[tuple[str, str, str]]:
    """(image, prompt, answer) of every training scene: its caption, its prose line, its first
    `questions_per_scene` one-word questions and `extra_questions` generated ones, in scenes.json's order. With
    `kinds`, only the questions of those kinds (data/mini_world_questions.py `question_kind`: "vsr", "relation", ...)
    stay beside the caption and prose. With `vsr_tilt` (a share in [0, 1]), each VSR statement is restated, seeded,
    with a relation of `FIRST_RELATIONS` ("left of", "above") at that chance and with its opposite otherwise, the
    answer flipped to keep the scene's truth (`restate_vsr`): at 1.0 every statement says left of / above, so the
    label follows the true relation and a first-order signal teaches the statement's comparison, the first step of
    the curriculum that breaks VSR's saddle (docs/reproduction.md, twenty-sixth session)."""
    if vsr_tilt is not None and not 0.0 <= vsr_tilt <= 1.0:
        raise ValueError(f"lm_pretrain.vsr_tilt={vsr_tilt}: give the share of VSR statements that say left of / "
                         "above, in [0, 1] (null: as generated)")
    known = {kind for kind, _ in QUESTION_KINDS}
    if kinds is not None and set(kinds) - known:
        raise ValueError(f"lm_pretrain.kinds={list(kinds)}: {sorted(set(kinds) - known)} is no question kind; "
                         f"choose among {sorted(known)}")
    rng = np.random.default_rng(0)  # the tilt's draws: the same world gives the same samples
    names = list(scenes(world, "train"))
    prose = text_lines(world, "lm_text.txt")
    if len(prose) != len(names):
        raise ValueError(f"{world / 'lm_text.txt'} has {len(prose)} lines for {len(names)} training scenes; "
                         "delete the world folder so that data/mini_world.py writes it again")
    questions = one_word_questions(world)
    extra = extra_scene_questions(world, extra_questions, boxes=box_questions) if extra_questions else {}
    captions = dict(caption_records(world))
    out = []
    for image, line in zip(names, prose):
        out += [(image, CAPTION_PROMPT, captions[image]), (image, PROSE_PROMPT, line)]
        for q, a in questions.get(image, [])[:questions_per_scene] + extra.get(image, []):
            asked = question_kind(strip_image_placeholder(q)) if kinds is not None or vsr_tilt is not None else None
            if kinds is not None and asked not in kinds:
                continue
            if asked == "vsr" and vsr_tilt is not None:
                q, a = restate_vsr(q, a, bool(rng.random() < vsr_tilt))
            out.append((image, q, a))
    return out


def scene_samples(world: Path, tokenizer, fmt, questions_per_scene: int, holdout: int, max_length: int,
                  grid: tuple[int, int] = (8, 8), extra_questions: int = 0,
                  sign_slot: bool = False, box_questions: bool = False, kinds: tuple[str, ...] | None = None,
                  vsr_tilt: float | None = None) -> list[tuple[list[int], list[int], dict[int, list[int]]]]:
    """The training samples of the scenes but the last `holdout` (kept apart for a held-out figure), cut to
    `max_length` tokens after the slots (`kinds`, `vsr_tilt`: `scene_texts`'). Two things under one patch (a sign
    over an object's cell) share its slot."""
    objects = object_phrases(world, grid, sign_slot)
    held = set(list(objects)[len(objects) - holdout:]) if holdout else set()
    slots, start = grid[0] * grid[1], fmt.image_position
    word_ids: dict[str, list[int]] = {}

    def ids_of(word: str) -> list[int]:
        if word not in word_ids:
            word_ids[word] = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        return word_ids[word]

    out = []
    for image, question, answer in scene_texts(world, questions_per_scene, extra_questions, box_questions, kinds,
                                               vsr_tilt):
        if image in held:
            continue
        ids, labels = fmt.build([("human", question), ("gpt", answer)])
        ids, labels = ids[:start + max_length], labels[:start + max_length]
        filler = [tokenizer.eos_token_id] * slots
        ids, labels = ids[:start] + filler + ids[start:], labels[:start] + [IGNORE_INDEX] * slots + labels[start:]
        words = {start + patch: [] for patch in range(slots)}
        for patch, phrase in objects[image]:
            words[start + patch] += [i for w in phrase.split() for i in ids_of(w)]
        out.append((ids, labels, words))
    return out


def slot_tensors(samples, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(slot_mask (B, width) bool: the slots; slot_words (B, width, W): their word ids, -1 padded) of a batch."""
    longest = max((len(w) for _, _, words in samples for w in words.values()), default=0)
    mask = torch.zeros(len(samples), width, dtype=torch.bool)
    table = torch.full((len(samples), width, max(longest, 1)), -1)
    for b, (_, _, words) in enumerate(samples):
        for pos, token_ids in words.items():
            mask[b, pos] = True
            table[b, pos, :len(token_ids)] = torch.tensor(token_ids, dtype=torch.long)
    return mask, table


def slot_embeddings(embed: torch.nn.Embedding, input_ids: torch.Tensor, slot_positions: torch.Tensor,
                    slot_words: torch.Tensor, background: torch.Tensor | None = None) -> torch.Tensor:
    """The input embeddings of `input_ids` with every slot position (`slot_positions`, (B, L) bool: all the patch
    slots) replaced by the sum of the embeddings of its words (`slot_words`, -1 padded; no words: zeros), plus the
    row's `background` vector ((B, width); None: none) in every slot."""
    words = slot_words.clamp(min=0)
    summed = (embed(words) * (slot_words >= 0)[..., None]).sum(-2)
    if background is not None:
        summed = summed + background[:, None, :]
    return torch.where(slot_positions[..., None], summed, embed(input_ids))


def random_backgrounds(rows: int, width: int, max_norm: float, device=None) -> torch.Tensor:
    """(rows, width) vectors in random directions with norms drawn uniformly from [0, max_norm]: one background per
    sample, what an untrained projector puts in every patch (an MLP projector's output norm is ~6 on the study's
    encoders, the LM's word embeddings ~1), so that the lookup learned here survives it (docs/reproduction.md)."""
    direction = torch.nn.functional.normalize(torch.randn(rows, width, device=device), dim=-1)
    return direction * torch.rand(rows, 1, device=device) * max_norm
