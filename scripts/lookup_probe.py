"""How fast does the tiny Llama learn to answer from an image when the vision side is perfect?

A calibration probe of Prismatic in miniature (docs/reproduction.md, runs 31-): each object of a mini-world scene
is one input vector at its letterboxed patch, built from its attribute words, so the language model sees exactly
what an ideal encoder + projector could give it, and nothing else is learned but the language model (and, with
`--objects fresh`, the attribute vectors: a new projector's job). Trained on the world's one-word questions
(`instruct.json` without the box and description turns), optionally mixed with its captions (`align.json`) and
prose (`lm_text.txt`) as "describe" targets; held-out accuracy per question kind against each kind's majority
answer (exact match of every answer token and the end of the answer, greedy at each position). With `--boxes`,
instruct.json's RefCOCO questions too (kind "box"): trained on, and scored as RefCOCO is (a greedily generated box
at IoU >= 0.5 with the object's, eval/scorers/refcoco.py), against the prior of the training boxes' most common one.

    python scripts/lookup_probe.py --world ~/.cache/refract/datasets/mini_world-8f4a94a0dc5f \\
        --lm ~/.cache/refract/tiny/mini_llama_base-v5 --objects words --captions 0.5 --prose --steps 4000 --save /tmp/lm

`--objects words`: an object is the sum of the LM's own input embeddings of its caption words ("red", "top", "left",
"large", "circle"), so the lookup is keyed on the LM's vocabulary; `fresh`: the sum of new, trained vectors, one
per attribute value (what a projector would have to learn); `projector`: a real projector (`--projector`) over
the frozen letterboxed patch features of `--encoder`, in all 64 slots, as in a cell. `--background zeros` puts the
objects among 64 patch slots (zeros elsewhere), `const` adds one trained vector to all 64 (an untrained projector
fills every patch), `none` gives the objects alone. `--lm-lr 0` freezes the LM. `--vsr-tilt 0.9 --vsr-tilt-steps N`
states most VSR training statements as "left of" / "above" (answers flipped to match), annealed to the balanced
mix by step N: a curriculum for the statement's comparison (docs/reproduction.md, twenty-fifth session). One thread; prints one line per
evaluation.
"""

from __future__ import annotations

import argparse
import collections
import random
import time
from pathlib import Path

import torch
from torch import nn

from data.mini_world_questions import restate_vsr, stated_first
from data.mini_world_questions import question_kind as kind
from eval.scorers.refcoco import iou, parse_box
from vlm.pretrain.scene_samples import box_turns, object_phrases, one_word_questions
from vlm.prompting import strip_image_placeholder
from vlm.pretrain.world import caption_records, text_lines

GRID = 8  # patches a side at the study's 64-px letterbox


def samples(world: Path, holdout: int, boxes: bool = False):
    """(train questions, held-out questions, describe targets): each (image, prompt, answer, question)."""
    asked = one_word_questions(world)
    if boxes:
        by_image = box_turns(world)
        asked = {image: pairs + by_image.get(image, []) for image, pairs in asked.items()}
    held = set(list(asked)[-holdout:])
    questions = [(image, f"In: {strip_image_placeholder(q)}\nOut:", " " + a, strip_image_placeholder(q))
                 for image, pairs in asked.items() for q, a in pairs]
    describe = [(image, "In: Describe the image.\nOut:", " " + caption, "caption")
                for image, caption in caption_records(world) if image not in held]
    return [s for s in questions if s[0] not in held], [s for s in questions if s[0] in held], describe


def tilt_statement(sample: tuple, first: bool) -> tuple:
    """A VSR training sample stated with a relation of `FIRST_RELATIONS` (`first`) or its opposite
    (data/mini_world_questions.py `restate_vsr`, prompt and bare question alike; other kinds as they are)."""
    image, prompt, answer, question = sample
    if kind(question) != "vsr" or (stated_first(question) == first):
        return sample
    (prompt, answer), (question, _) = restate_vsr(prompt, answer, first), restate_vsr(question, answer, first)
    return image, prompt, answer, question


def split_kind(question: str) -> str | None:
    """A finer kind reported beside `kind`: VSR by its stated relation ("vsr:first" states one of
    `FIRST_RELATIONS`), relation questions by pairwise choice ("relation:pair", GQA's) or one object's side
    ("relation:side", VQAv2's); None for the other kinds."""
    k = kind(question)
    if k == "vsr":
        return "vsr:first" if stated_first(question) else "vsr:other"
    if k == "relation":
        return "relation:side" if "on the left or on the right" in question else "relation:pair"
    return None


def tilt_share(step: int, start: float, steps: int, hold: int = 0) -> float:
    """--vsr-tilt's share of FIRST_RELATIONS statements at `step`: `start` until `hold`, then down linearly to 0.5
    (the balanced test's) at `steps`, then 0.5; `steps` 0: `start` throughout."""
    if steps <= 0 or step < hold:
        return start
    return 0.5 if step >= steps else start + (0.5 - start) * (step - hold) / (steps - hold)


def projector_and_features(args, objects: dict, fit_on: set, embed: nn.Embedding, word_ids: dict):
    """(a new vlm.projectors module, {image: frozen letterboxed patch features}) for `--objects projector`."""
    from vlm import projectors
    from vlm.encoders import TimmEncoder
    from vlm.pretrain.quality import patch_features

    encoder = TimmEncoder(model_id=args.encoder, image_strategy="letterbox")
    if encoder.grid_size != (GRID, GRID):
        raise SystemExit(f"error: --encoder {args.encoder} has a {encoder.grid_size} patch grid; the probe's object "
                         f"slots are the {GRID}x{GRID} grid of the study's 64-px letterbox")
    names = list(objects)
    with torch.no_grad():
        stacked = torch.from_numpy(patch_features(encoder, args.world, names))  # (images, patches, dv)
        if args.feature_norm == "standard":
            rows = stacked[[i for i, name in enumerate(names) if name in fit_on]].flatten(0, 1)
            stacked = (stacked - rows.mean(0)) / rows.std(0)
        features = dict(zip(names, stacked))
    projector = getattr(projectors, args.projector)(encoder.embed_dim, embed.embedding_dim)
    if args.projector_init == "lstsq":
        if args.projector != "linear":
            raise SystemExit("error: --projector-init lstsq fits a linear map; add --projector linear")
        x, y = [], []
        with torch.no_grad():
            for name in names:
                for patch, phrase in objects[name] if name in fit_on else []:  # the training images' objects
                    x.append(features[name][patch])
                    y.append(embed(torch.tensor([i for w in phrase.split() for i in word_ids[w]])).sum(0))
            x = torch.cat([torch.stack(x), torch.ones(len(x), 1)], 1)
            solution = torch.linalg.lstsq(x, torch.stack(y), driver="gelsd").solution  # (dv + 1, d)
            projector.weight.copy_(solution[:-1].T)
            projector.bias.copy_(solution[-1])
    return projector, features


@torch.no_grad()
def greedy_continuations(model, x: torch.Tensor, lengths: torch.Tensor, max_new: int, eos_id: int) -> list[list[int]]:
    """Greedy next tokens after each row's first `lengths[i]` input embeddings of `x` (batch, time, width; right
    padded), up to and including EOS or `max_new` tokens a row, the batch decoded together."""
    embed, n = model.get_input_embeddings(), len(x)
    x = torch.cat([x[:, :int(lengths.max())], x.new_zeros(n, max_new, x.shape[2])], 1)
    x = torch.stack([torch.cat([row[:k], torch.zeros_like(row[k:])]) for row, k in zip(x, lengths.tolist())])
    pos, out = lengths.clone(), [[] for _ in range(n)]
    for _ in range(max_new):
        mask = (torch.arange(x.shape[1])[None] < pos[:, None]).long()
        nxt = model(inputs_embeds=x, attention_mask=mask).logits[torch.arange(n), pos - 1].argmax(-1)
        x[torch.arange(n), pos] = embed(nxt)
        pos += 1
        for row, t in zip(out, nxt.tolist()):
            if not row or row[-1] != eos_id:
                row.append(t)
        if all(row and row[-1] == eos_id for row in out):
            break
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=Path, required=True, help="a mini world folder (data/mini_world.py)")
    p.add_argument("--lm", type=Path, required=True, help="a transformers causal LM folder with its tokenizer")
    p.add_argument("--objects", choices=["words", "fresh", "projector"], default="words")
    p.add_argument("--encoder", default="tiny:mini_clip",
                   help="projector: the frozen encoder (letterbox) whose patch features the projector maps")
    p.add_argument("--projector", choices=["linear", "mlp"], default="mlp", help="projector: vlm.projectors' module")
    p.add_argument("--feature-norm", choices=["none", "standard"], default="none",
                   help="projector: the patch features as they are, or standardised per dimension with the training "
                   "images' patches' mean and std")
    p.add_argument("--projector-init", choices=["default", "lstsq"], default="default",
                   help="lstsq: a linear projector fitted by least squares to the LM's word vectors at the training "
                   "scenes' object patches (what it could give the LM; run 59)")
    p.add_argument("--background", choices=["none", "zeros", "const"], default="none",
                   help="const: every slot holds one trained vector (norm --bg-norm), the objects added to it")
    p.add_argument("--bg-norm", type=float, default=5.7, help="const's starting norm (an untrained MLP projector's output)")
    p.add_argument("--captions", type=float, default=0.5, help="share of each batch given to describe targets")
    p.add_argument("--prose", action="store_true", help="also describe with the scene's lm_text.txt line")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lm-lr", type=float, help="the language model's lr (default --lr; 0 freezes it: only the "
                   "fresh vectors and the background train)")
    p.add_argument("--every", type=int, default=250)
    p.add_argument("--holdout", type=int, default=300, help="last N conversations' images held out")
    p.add_argument("--test", type=int, default=1500, help="held-out questions evaluated")
    p.add_argument("--bos", action="store_true",
                   help="start each sample with BOS, as the VLM and lm_pretrain.data=scenes do (runs 31-37: without)")
    p.add_argument("--sign-slot", action="store_true",
                   help="the slot under a scene's sign also holds \"sign\" and its word, as lm_pretrain.sign_slot trains")
    p.add_argument("--boxes", action="store_true",
                   help="also RefCOCO's questions (kind box, scored at IoU >= 0.5), as lm_pretrain.box_questions trains")
    p.add_argument("--vsr-tilt", type=float, default=0.5,
                   help="share of VSR training statements that say left of / above (the rest their opposite, answers "
                   "flipped to match): above 0.5 the label follows the true relation, so a first-order signal "
                   "teaches the statement's comparison; annealed to 0.5 over --vsr-tilt-steps")
    p.add_argument("--vsr-tilt-steps", type=int, default=0, help="the step the share is back at 0.5 (0: never)")
    p.add_argument("--vsr-tilt-hold", type=int, default=0, help="keep --vsr-tilt's share until this step, then anneal")
    p.add_argument("--kinds", nargs="+", help="train and test on these question kinds only (e.g. vsr relation)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save", type=Path, help="write the trained LM and its tokenizer here")
    args = p.parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    tok = AutoTokenizer.from_pretrained(args.lm)
    model = AutoModelForCausalLM.from_pretrained(args.lm)
    embed = model.get_input_embeddings()
    width = embed.embedding_dim
    objects = object_phrases(args.world, (GRID, GRID), args.sign_slot)
    train, test, describe = samples(args.world, args.holdout, args.boxes)
    if args.kinds:
        unknown = set(args.kinds) - {kind(q) for *_, q in train}
        if unknown:
            raise SystemExit(f"error: --kinds {sorted(unknown)}: no such question kind among the training questions")
        train, test = ([s for s in rows if kind(s[3]) in args.kinds] for rows in (train, test))
    test = test[:args.test]
    if args.prose:  # lm_text.txt: one line per training scene, in scenes.json's order
        lines = text_lines(args.world, "lm_text.txt")
        held = {s[0] for s in test}
        describe += [(im, "In: Describe the image in detail.\nOut:", " " + line, "prose")
                     for im, line in zip(objects, lines) if im not in held]
    words = sorted({w for rows in objects.values() for _, phrase in rows for w in phrase.split()})
    fresh = nn.Embedding(len(words), width)
    nn.init.normal_(fresh.weight, std=model.config.initializer_range)
    background = nn.Parameter(torch.randn(width) * args.bg_norm / width ** 0.5) if args.background == "const" else None
    word_index = {w: i for i, w in enumerate(words)}
    word_ids = {w: tok(" " + w, add_special_tokens=False)["input_ids"] for w in words}
    projector, features = None, {}
    if args.objects == "projector":
        if args.background != "none":
            raise SystemExit("error: --objects projector fills all 64 slots itself; leave --background at none")
        projector, features = projector_and_features(args, objects, {s[0] for s in train}, embed, word_ids)

    def image(name: str) -> torch.Tensor:
        if projector is not None:
            return projector(features[name])
        rows = sorted(objects[name])
        vecs = [embed(torch.tensor([i for w in phrase.split() for i in word_ids[w]])).sum(0) if args.objects == "words"
                else fresh(torch.tensor([word_index[w] for w in phrase.split()])).sum(0) for _, phrase in rows]
        if args.background == "none":
            return torch.stack(vecs)
        slots = torch.zeros(GRID * GRID, width) if args.background == "zeros" else background.expand(GRID * GRID, -1)
        return slots.index_add(0, torch.tensor([p for p, _ in rows]), torch.stack(vecs))

    def batch(items):
        embeds, labels = [], []
        for name, prompt, answer, _ in items:
            ids = tok(prompt, add_special_tokens=False)["input_ids"]
            ans = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            img = image(name)
            if args.bos:
                img = torch.cat([embed(torch.tensor([tok.bos_token_id])), img])
            embeds.append(torch.cat([img, embed(torch.tensor(ids + ans))]))
            labels.append([-100] * (len(img) + len(ids)) + ans)
        n = max(map(len, labels))
        mask = torch.tensor([[1] * len(lab) + [0] * (n - len(lab)) for lab in labels])
        x = torch.stack([torch.cat([e, e.new_zeros(n - len(e), width)]) for e in embeds])
        return x, mask, torch.tensor([lab + [-100] * (n - len(lab)) for lab in labels])

    majority = {k: collections.Counter(a for _, _, a, q in train if kind(q) == k).most_common(1)[0][0]
                for k in {kind(q) for *_, q in train}}

    def correct(k: str, answer: str, truth: str) -> bool:
        if k != "box":
            return answer == truth
        box = parse_box(answer)
        return box is not None and iou(box, parse_box(truth)) >= 0.5

    prior = collections.Counter(kind(q) for _, _, a, q in test if correct(kind(q), majority[kind(q)], a))
    counts = collections.Counter(kind(q) for *_, q in test)
    sides = collections.Counter(split_kind(q) for *_, q in test if split_kind(q))
    print("prior", round(sum(prior.values()) / len(test), 3), {k: round(prior[k] / counts[k], 2) for k in counts},
          "items", dict(counts), flush=True)

    def generate(items, max_new: int) -> list[str]:
        """Greedy continuations of (image, prompt) items, each up to EOS or `max_new` tokens."""
        x, mask, _ = batch([(name, prompt, "", "") for name, prompt in items])
        ends = mask.sum(1) - 1  # each prompt's length (the empty answer's EOS is left out)
        rows = greedy_continuations(model, x, ends, max_new, tok.eos_token_id)
        return [tok.decode([t for t in row if t != tok.eos_token_id]) for row in rows]

    @torch.no_grad()
    def evaluate():
        model.eval()
        right = collections.Counter()
        for i in range(0, len(test), 64):
            items = test[i:i + 64]
            x, mask, labels = batch(items)
            pred = model(inputs_embeds=x, attention_mask=mask).logits[:, :-1].argmax(-1)
            target = labels[:, 1:]
            ok = ((pred == target) | (target == -100)).all(1)
            right.update(kind(q) for (*_, q), good in zip(items, ok.tolist()) if good and kind(q) != "box")
            right.update(split_kind(q) for (*_, q), good in zip(items, ok.tolist()) if good and split_kind(q))
        boxes = [item for item in test if kind(item[3]) == "box"]
        for i in range(0, len(boxes), 64):
            items = boxes[i:i + 64]
            said = generate([(name, prompt) for name, prompt, *_ in items], max_new=32)
            right.update("box" for (*_, a, _), text in zip(items, said) if correct("box", text, a))
        model.train()
        per_kind = {k: round(right[k] / counts[k], 2) for k in counts}
        return round(sum(right[k] for k in counts) / len(test), 3), per_kind | {
            k: round(right[k] / sides[k], 2) for k in sides}

    lm_lr = args.lr if args.lm_lr is None else args.lm_lr
    inputs = ({"fresh": list(fresh.parameters()), "projector": list(projector.parameters()) if projector else []}
              .get(args.objects, []) + ([background] if background is not None else []))
    model.requires_grad_(lm_lr > 0)
    groups = [g for g in ({"params": inputs, "lr": args.lr},
                          {"params": list(model.parameters()) if lm_lr > 0 else [], "lr": lm_lr}) if g["params"]]
    params = [p for g in groups for p in g["params"]]
    if not groups:
        raise SystemExit("error: --lm-lr 0 with --objects words and no const background leaves nothing to train")
    opt = torch.optim.AdamW(groups, lr=args.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))
    start, n_describe = time.time(), int(args.batch * args.captions)
    for step in range(args.steps + 1):
        if step % args.every == 0 or step == args.steps:
            acc, per_kind = evaluate()
            print(step, f"{time.time() - start:.0f}s", "acc", acc, per_kind, flush=True)
        if step == args.steps:
            break
        drawn = rng.sample(train, args.batch - n_describe)
        if args.vsr_tilt != 0.5:
            share = tilt_share(step, args.vsr_tilt, args.vsr_tilt_steps, args.vsr_tilt_hold)
            drawn = [tilt_statement(s, rng.random() < share) if kind(s[3]) == "vsr" else s for s in drawn]
        x, mask, labels = batch(drawn + rng.sample(describe, n_describe))
        loss = model(inputs_embeds=x, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
    if args.save:
        model.save_pretrained(args.save)
        tok.save_pretrained(args.save)


if __name__ == "__main__":
    main()
