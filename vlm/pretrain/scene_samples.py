"""`lm_pretrain.data=scenes`: text about a world scene, preceded by the scene's objects as one input vector each.

The layout is the VLM's for an image (vlm/model.py `VLM.splice`): BOS, then one slot per encoder patch (an 8×8
grid of the letterboxed scene by default), then the text in `lm_pretrain.prompt_format`. The slot under an
object's centre (`vlm.pretrain.quality.centre_patch`) holds the sum of the LM's own input embeddings of the
object's caption words ("red", "top", "left", "large", "circle"); the other slots hold zeros. The text is the
scene's caption (`align.json`), its prose line (`lm_text.txt`) or one of its one-word questions (`instruct.json`
without the box and description turns), with the loss on the answer. The LM reads nothing but its own word
embeddings, and learns to look objects up among patch slots by their words: the in-context lookup a real base LM
arrives with, which a VLM cell then only has to point its projector at (docs/reproduction.md, runs 31-37).

A sample is `(input_ids, labels, slot_words)`: `slot_words` maps each slot's position in `input_ids` (its token is
the EOS id, replaced by the slot's vector) to the token ids whose embeddings are summed there (none: zeros).
With `lm_pretrain.slot_background` > 0, training adds one random vector per sample (norm uniform in
[0, slot_background]) to all its slots: a VLM's projector fills every patch, not only the objects' ones.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from data.atomic import read_json
from vlm.prompting import IGNORE_INDEX
from vlm.pretrain.quality import centre_patch
from vlm.pretrain.world import caption_records, scenes, text_lines

PROSE_PROMPT = "Describe the image in detail."
CAPTION_PROMPT = "Describe the image."


def object_phrases(world: Path, grid: tuple[int, int] = (8, 8)) -> dict[str, list[tuple[int, str]]]:
    """Per training image: (patch under the object's centre, letterboxed; the object's caption phrase, e.g. "red top
    left large circle") of each object, matched to the caption by its colour (one object per colour in the world)."""
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
    return out


def one_word_questions(world: Path) -> dict[str, list[tuple[str, str]]]:
    """instruct.json's (question, answer) turns per image, in file order, without the box and description turns."""
    questions: dict[str, list[tuple[str, str]]] = {}
    for record in read_json(world / "instruct.json"):
        turns = record.get("conversations", [])
        asked = [(q["value"], a["value"]) for q, a in zip(turns[::2], turns[1::2])
                 if "bounding box" not in q["value"] and not q["value"].endswith(CAPTION_PROMPT)]
        questions.setdefault(str(record.get("image")), []).extend(asked)
    return questions


def scene_texts(world: Path, questions_per_scene: int) -> list[tuple[str, str, str]]:
    """(image, prompt, answer) of every training scene: its caption, its prose line and its first
    `questions_per_scene` one-word questions, in scenes.json's order."""
    names = list(scenes(world, "train"))
    prose = text_lines(world, "lm_text.txt")
    if len(prose) != len(names):
        raise ValueError(f"{world / 'lm_text.txt'} has {len(prose)} lines for {len(names)} training scenes; "
                         "delete the world folder so that data/mini_world.py writes it again")
    questions = one_word_questions(world)
    captions = dict(caption_records(world))
    out = []
    for image, line in zip(names, prose):
        out += [(image, CAPTION_PROMPT, captions[image]), (image, PROSE_PROMPT, line)]
        out += [(image, q, a) for q, a in questions.get(image, [])[:questions_per_scene]]
    return out


def scene_samples(world: Path, tokenizer, fmt, questions_per_scene: int, holdout: int, max_length: int,
                  grid: tuple[int, int] = (8, 8)) -> list[tuple[list[int], list[int], dict[int, list[int]]]]:
    """The training samples of the scenes but the last `holdout` (kept apart for a held-out figure), cut to
    `max_length` tokens after the slots."""
    objects = object_phrases(world, grid)
    held = set(list(objects)[len(objects) - holdout:]) if holdout else set()
    slots, start = grid[0] * grid[1], fmt.image_position
    word_ids: dict[str, list[int]] = {}

    def ids_of(word: str) -> list[int]:
        if word not in word_ids:
            word_ids[word] = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        return word_ids[word]

    out = []
    for image, prompt, answer in scene_texts(world, questions_per_scene):
        if image in held:
            continue
        ids, labels = fmt.build([("human", prompt), ("gpt", answer)])
        ids, labels = ids[:start + max_length], labels[:start + max_length]
        filler = [tokenizer.eos_token_id] * slots
        ids, labels = ids[:start] + filler + ids[start:], labels[:start] + [IGNORE_INDEX] * slots + labels[start:]
        words = {start + patch: [] for patch in range(slots)}
        for patch, phrase in objects[image]:
            words[start + patch] = [i for w in phrase.split() for i in ids_of(w)]
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
