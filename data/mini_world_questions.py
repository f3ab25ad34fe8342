"""The mini world's language: the question forms of the seven benchmark families, captions and prose.

`ASK[family](scene, rng)` lists every question of that family the scene supports (each a dict with the bare
`question`, the canonical `answer` -- lower-case words, digits, or a box -- and what the benchmark's file needs:
GQA's `types`, TallyQA's `issimple`, VSR's `relation`/`label`, RefCOCO's `target` index, ...); only questions with
one clear answer are listed (relations need centres `MARGIN` px apart, referents must be unique). `prompt(family,
q)` is the question exactly as the benchmark's runner asks it (`PROMPTS`, the conf/benchmark/mini_*.yaml
suffixes and templates), the form the instruction data trains.
"""
from __future__ import annotations

from collections import Counter

from data.mini_world_scenes import (
    COLORS,
    OPPOSITE,
    RELATIONS,
    SHAPES,
    horizontal,
    name,
    position_words,
    relation,
)

SHORT = "\nAnswer the question using a single word or phrase."
PROMPTS = {  # family -> (template around the question, suffix): as the conf/benchmark/<family>.yaml runners ask
    "vqav2": ("{q}", SHORT),
    "gqa": ("{q}", SHORT),
    "tallyqa": ("{q}", "\nAnswer the question using a single number."),
    "vsr": ("Is the following statement about the image true? {q}", "\nAnswer yes or no."),
    "pope": ("{q}", SHORT),
    "refcoco": ("Please provide the bounding box coordinate of the region this sentence describes: {q}", ""),
    "textvqa": ("{q}", SHORT),
}
FAMILIES = tuple(PROMPTS)


# The kinds of question the families ask, by how the bare question starts (first match): what the lookup probe and
# scripts/kind_breakdown.py report accuracy by.
QUESTION_KINDS = [("colour", "What color"), ("size", "What size"), ("shape", "What shape"), ("count", "How many"),
                  ("exists", "Is there"), ("vsr", "Is the following"), ("relation", "Is the"), ("same", "Are the"),
                  ("reading", "What"), ("box", "Please provide the bounding box")]


def question_kind(question: str) -> str:
    """'colour', 'relation', ...: the first of `QUESTION_KINDS` whose start the question has."""
    return next(kind for kind, start in QUESTION_KINDS if question.startswith(start))


FIRST_RELATIONS = ("left of", "above")  # what a VSR curriculum's tilted statements say (--vsr-tilt, lm_pretrain.vsr_tilt)


def stated_first(statement: str) -> bool:
    """Whether a VSR statement (bare or in its prompt) states a relation of `FIRST_RELATIONS`."""
    return any(f" is {r} the " in statement for r in FIRST_RELATIONS)


def restate_vsr(statement: str, answer: str, first: bool) -> tuple[str, str]:
    """A VSR statement (bare or in its prompt) and its answer ("yes"/"no", spacing kept) stated with a relation of
    `FIRST_RELATIONS` (`first`) or its opposite: the same pair of objects, the relation swapped and the answer
    flipped where it said the other, so the label stays the scene's truth."""
    rel = next((r for r in OPPOSITE if f" is {r} the " in statement), None)
    if rel is None:
        raise ValueError(f"{statement!r} is not a VSR statement (no ' is <relation> the ' in it)")
    if (rel in FIRST_RELATIONS) == first:
        return statement, answer
    word = answer.strip()
    if word not in ("yes", "no"):
        raise ValueError(f"{statement!r} has the answer {answer!r}; a VSR statement is answered yes or no")
    return (statement.replace(f" is {rel} the ", f" is {OPPOSITE[rel]} the "),
            answer.replace(word, "no" if word == "yes" else "yes"))


def prompt(family: str, question: str) -> str:
    template, suffix = PROMPTS[family]
    return template.format(q=question) + suffix


def box_answer(box: list[float], width: int, height: int) -> str:
    """'[x1, y1, x2, y2]' as 2-decimal fractions of the image width / height (LLaVA-1.5's convention, which
    eval/scorers/refcoco.py reads back as fractions)."""
    x, y, w, h = box
    return f"[{x / width:.2f}, {y / height:.2f}, {(x + w) / width:.2f}, {(y + h) / height:.2f}]"


def plural(shape: str) -> str:
    return shape + "s"


def _unique(objs, **attrs) -> list[int]:
    return [i for i, o in enumerate(objs) if all(o[k] == v for k, v in attrs.items())]


def article(words: str) -> str:
    """'a red circle', 'an orange square'."""
    return ("an " if words[0] in "aeiou" else "a ") + words


def _yes(v: bool) -> str:
    return "yes" if v else "no"


def absent_pairs(scene) -> list[tuple[str, str]]:
    present = {(o["color"], o["shape"]) for o in scene["objects"]}
    return [(c, s) for c in COLORS for s in SHAPES if (c, s) not in present]


# ----------------------------------------------------------------------------- the families
def ask_vqav2(scene, rng) -> list[dict]:
    objs, W = scene["objects"], scene["width"]
    out = []
    for o in objs:
        if len(_unique(objs, shape=o["shape"])) == 1:
            out.append({"question": f"What color is the {o['shape']}?", "answer": o["color"], "kind": "color"})
        elif len(_unique(objs, shape=o["shape"], size=o["size"])) == 1:
            out.append({"question": f"What color is the {o['size']} {o['shape']}?", "answer": o["color"], "kind": "color"})
        if len(_unique(objs, color=o["color"])) == 1:
            out.append({"question": f"What shape is the {o['color']} object?", "answer": o["shape"], "kind": "shape"})
        out.append({"question": f"What size is the {name(o)}?", "answer": o["size"], "kind": "size"})
        side = horizontal(o, W)
        if side:
            out.append({"question": f"Is the {name(o)} on the left or on the right?", "answer": side, "kind": "position"})
    for s in SHAPES:
        out.append({"question": f"How many {plural(s)} are there?", "answer": str(len(_unique(objs, shape=s))), "kind": "count"})
    o = objs[int(rng.integers(len(objs)))]
    out.append({"question": f"Is there {article(name(o))}?", "answer": "yes", "kind": "exists"})
    c, s = _pick(absent_pairs(scene), rng)
    out.append({"question": f"Is there {article(c + ' ' + s)}?", "answer": "no", "kind": "exists"})
    return out


def ask_gqa(scene, rng) -> list[dict]:
    objs = scene["objects"]
    out = []
    for ia, a in enumerate(objs):
        for ib, b in enumerate(objs):
            if a is b:
                continue
            lr, ab = relation(a, b, "left of"), relation(a, b, "above")
            if lr is not None:
                out.append({"question": f"Is the {name(a)} to the left or to the right of the {name(b)}?",
                            "answer": "left" if lr else "right", "types": {"structural": "choose", "semantic": "rel"}})
            if ab is not None:
                out.append({"question": f"Is the {name(a)} above or below the {name(b)}?",
                            "answer": "above" if ab else "below", "types": {"structural": "choose", "semantic": "rel"}})
            if ia < ib:
                out.append({"question": f"Are the {name(a)} and the {name(b)} the same size?",
                            "answer": _yes(a["size"] == b["size"]), "types": {"structural": "compare", "semantic": "attr"}})
        for rel in ("left of", "right of"):
            side = rel.split()[0]
            for s in SHAPES:
                flags = [relation(o, a, rel) for o in objs if o is not a and o["shape"] == s]
                if None in flags:
                    continue
                hits = [o for o in objs if o is not a and o["shape"] == s and relation(o, a, rel)]
                out.append({"question": f"Is there a {s} to the {side} of the {name(a)}?", "answer": _yes(bool(hits)),
                            "types": {"structural": "verify", "semantic": "rel"}})
                if len(hits) == 1:
                    out.append({"question": f"What color is the {s} to the {side} of the {name(a)}?",
                                "answer": hits[0]["color"], "types": {"structural": "query", "semantic": "rel"}})
    absent = absent_pairs(scene)
    if len(absent) >= 2:
        (c1, s1), (c2, s2) = (absent[int(i)] for i in rng.choice(len(absent), 2, replace=False))
        o = objs[int(rng.integers(len(objs)))]
        out.append({"question": f"Is there {article(c1 + ' ' + s1)} or {article(c2 + ' ' + s2)}?", "answer": "no",
                    "types": {"structural": "logical", "semantic": "obj"}})
        out.append({"question": f"Is there {article(c1 + ' ' + s1)} or {article(name(o))}?", "answer": "yes",
                    "types": {"structural": "logical", "semantic": "obj"}})
    return out


def ask_tallyqa(scene, rng) -> list[dict]:
    objs = scene["objects"]
    out = [{"question": "How many objects are there?", "answer": str(len(objs)), "issimple": True}]
    for s in SHAPES:
        out.append({"question": f"How many {plural(s)} are there?", "answer": str(len(_unique(objs, shape=s))), "issimple": True})
        for size in ("small", "large"):
            out.append({"question": f"How many {size} {plural(s)} are there?",
                        "answer": str(len(_unique(objs, shape=s, size=size))), "issimple": False})
    for a in objs:
        for rel in ("left of", "right of", "above", "below"):
            flags = [relation(o, a, rel) for o in objs if o is not a]
            if None not in flags:
                out.append({"question": f"How many objects are {rel} the {name(a)}?", "answer": str(sum(flags)),
                            "issimple": False})
    return out


def ask_vsr(scene, rng) -> list[dict]:
    objs = scene["objects"]
    out = []
    for a in objs:
        for b in objs:
            if a is b:
                continue
            for rel in RELATIONS:
                if relation(a, b, rel):  # a true statement, and its opposite as the false one
                    out.append({"question": f"The {name(a)} is {rel} the {name(b)}.", "answer": "yes", "label": 1,
                                "relation": rel, "subj": name(a), "obj": name(b)})
                    out.append({"question": f"The {name(a)} is {OPPOSITE[rel]} the {name(b)}.", "answer": "no", "label": 0,
                                "relation": OPPOSITE[rel], "subj": name(a), "obj": name(b)})
    return out


def ask_pope(scene, rng) -> list[dict]:
    """Positives only (every object present); the runners' negatives are chosen per POPE split."""
    return [{"question": pope_question(o["color"], o["shape"]), "answer": "yes", "pair": [o["color"], o["shape"]]}
            for o in scene["objects"]]


def pope_question(color: str, shape: str) -> str:
    return f"Is there {article(color + ' ' + shape)} in the image?"


def referring(scene, i: int) -> list[str]:
    """The referring expressions of object i: by attributes, and by a relation to another object when unique."""
    objs, o = scene["objects"], scene["objects"][i]
    out = [f"the {o['size']} {name(o)}", f"the {name(o)}"]
    if len(_unique(objs, shape=o["shape"], size=o["size"])) == 1:
        out.append(f"the {o['size']} {o['shape']}")
    for b in objs:
        if b is o:
            continue
        for rel in ("left of", "right of", "above", "below"):
            same = [p for p in objs if p is not b and p["shape"] == o["shape"]]
            flags = [relation(p, b, rel) for p in same]
            if None not in flags and sum(flags) == 1 and relation(o, b, rel):
                out.append(f"the {o['shape']} {rel} the {name(b)}")
    return out


def ask_refcoco(scene, rng) -> list[dict]:
    out = []
    for i, o in enumerate(scene["objects"]):
        for sent in referring(scene, i):
            out.append({"question": sent, "answer": box_answer(o["bbox"], scene["width"], scene["height"]), "target": i})
    return out


def ask_textvqa(scene, rng) -> list[dict]:
    sign = scene.get("sign")
    if not sign:
        return []
    out = [{"question": "What does the sign say?", "answer": sign["word"]},
           {"question": "What word is written on the sign?", "answer": sign["word"]}]
    if sign["on"] is not None:
        o = scene["objects"][sign["on"]]
        out.append({"question": f"What is written above the {name(o)}?", "answer": sign["word"]})
    return out


ASK = {"vqav2": ask_vqav2, "gqa": ask_gqa, "tallyqa": ask_tallyqa, "vsr": ask_vsr, "pope": ask_pope,
       "refcoco": ask_refcoco, "textvqa": ask_textvqa}


def _pick(seq, rng):
    return seq[int(rng.integers(len(seq)))]


def pick(questions: list[dict], k: int, rng, balance: str | None = None) -> list[dict]:
    """k distinct questions (by text) drawn at random; with `balance` a key, alternating between its values
    (yes/no 50/50)."""
    seen, uniq = set(), []
    for q in questions:
        if q["question"] not in seen:
            seen.add(q["question"])
            uniq.append(q)
    order = [uniq[int(i)] for i in rng.permutation(len(uniq))]
    if balance is None:
        return order[:k]
    groups: dict = {}
    for q in order:
        groups.setdefault(str(q[balance]), []).append(q)
    keys = sorted(groups)
    out, keys = [], [keys[int(i)] for i in rng.permutation(len(keys))]
    while len(out) < k and any(groups.values()):
        for key in keys:
            if groups[key] and len(out) < k:
                out.append(groups[key].pop(0))
    return out


# ----------------------------------------------------------------------------- captions and prose
def describe(o: dict, W: int, H: int) -> str:
    text = f"{article(o['size'])} {name(o)} at the {position_words(o, W, H)}"
    return text + (f" holding a sign that says {o['label']}" if o.get("label") else "")


def keyed(o: dict, W: int, H: int, boxes: bool = False) -> str:
    """'red top left large circle [0.10, 0.20, 0.27, 0.45]': the colour (the scene's key) first, then what a
    lookup at it reads best (the position), then size and shape; with `boxes` the box as RefCOCO answers it."""
    text = f"{o['color']} {position_words(o, W, H)} {o['size']} {o['shape']}"
    text += " " + box_answer(o["bbox"], W, H) if boxes else ""
    return text + (f" holding a sign that says {o['label']}" if o.get("label") else "")


def caption(scene, rng, boxes: bool = False) -> str:
    """Every object keyed by its colour (`keyed`), in random order, and a free sign's word.

    Colour first because the answer to a question is read where the model predicts it: a language model with a
    frozen encoder learns a one-hop lookup (colour word -> the patch of that colour) fastest when the token
    predicted AT the colour word is the looked-up attribute (docs/demo_recipe.md, "Where the answer is
    predicted"); the questions' answers then copy from the colour word."""
    W, H = scene["width"], scene["height"]
    objs = scene["objects"]
    parts = [keyed(objs[int(i)], W, H, boxes) for i in rng.permutation(len(objs))]
    sign = scene.get("sign")
    if sign and sign["on"] is None:
        parts.insert(int(rng.integers(len(parts) + 1)), f"a sign that says {sign['word']}")
    return ", ".join(parts[:-1]) + " and " + parts[-1] + "." if len(parts) > 1 else parts[0] + "."


def prose(scene, rng) -> str:
    """The scene in sentences (the LM's pretraining text): one sentence per object, counts, relations."""
    W, H = scene["width"], scene["height"]
    objs = scene["objects"]
    sentences = [f"There are {len(objs)} objects."]
    for i in rng.permutation(len(objs)):
        sentences.append(describe(objs[int(i)], W, H).capitalize().replace(" at the ", " is at the ", 1) + ".")
    shapes = Counter(o["shape"] for o in objs)
    sentences.append(" ".join(f"There {'is' if n == 1 else 'are'} {n} {s if n == 1 else plural(s)}."
                              for s, n in sorted(shapes.items())))
    rel = [q for q in ask_vsr(scene, rng) if q["label"] == 1]
    if rel:
        q = _pick(rel, rng)
        sentences.append(q["question"])
    sign = scene.get("sign")
    if sign and sign["on"] is None:
        sentences.append(f"A sign says {sign['word']}.")
    return " ".join(sentences)


def text_dialogue(scene, rng, k: int = 4) -> list[dict]:
    """A text-only dialogue: the scene in words, then questions answered from the words (LLaVA conversations)."""
    W, H = scene["width"], scene["height"]
    qs = [q for q in ask_vqav2(scene, rng) if q["kind"] != "position"]
    for o in scene["objects"]:
        qs.append({"question": f"Where is the {name(o)}?", "answer": position_words(o, W, H)})
    if scene.get("sign"):
        qs.append({"question": "What does the sign say?", "answer": scene["sign"]["word"]})
    picked = pick(qs, k, rng)
    turns = []
    for j, q in enumerate(picked):
        value = (f"Here is a scene: {caption(scene, rng)}\n" if j == 0 else "") + q["question"] + SHORT
        turns += [{"from": "human", "value": value}, {"from": "gpt", "value": q["answer"]}]
    return turns


