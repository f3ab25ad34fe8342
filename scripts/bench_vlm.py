"""Speed of our VLM against transformers' `LlavaForConditionalGeneration` with identical weights, in one process.

    python scripts/bench_vlm.py                  # the figures in docs/benchmarks.md (~2.5 min on one CPU thread)
    python scripts/bench_vlm.py --threads 2 --repeats 5 --epoch-samples 256

Both models are built from the same weights: our VLM from the shipped configs (encoder=tiny_siglip,
projector=mlp, and a Llama backbone written here with `save_pretrained`, wider and deeper than tiny_llama,
with tiny_llama's tokenizer), and HF's Llava by exporting it with vlm/hf_llava.py and loading the folder
with `from_pretrained` (fp32, `attn_implementation="sdpa"`; our ViT runs timm's fused SDPA attention, our
backbone HF's sdpa). Before timing, the script checks the two agree: logits on the benchmark batch, and
the greedy tokens of the generation benchmark. Measured (after warm-ups; medians over `--repeats`,
`--epoch-repeats`, `--gen-repeats`; ours and HF's runs interleaved so that machine load hits both alike):
(a) a training step (forward with loss, backward, AdamW step) on the same right-padded batch;
(b) real (non-padding: text + image patches) tokens/s of a training epoch of our VLM over a LLaVA-like
    length distribution (lognormal text lengths clipped to 20..600 tokens, a mix of image and text-only
    samples), micro-batches from `core.data.GroupedStreamSampler` (what `data.group_by_length=true` uses)
    against the plain shuffled stream (`StreamSampler`), same model and micro-batch size;
(c) greedy generation tokens/s for a batch of prompts with an image, end to end from PIL images and
    strings to strings: our `VLM.generate` against HF's processor + `generate` + decode, with
    `min_new_tokens` = `max_new_tokens` so both generate the same number of tokens.
Ratios are ours / HF for (a) and (c), grouped / shuffled for (b).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from PIL import Image  # noqa: E402

from core.data import GroupedStreamSampler, StreamSampler  # noqa: E402
from vlm.dataset import Collator  # noqa: E402
from vlm.prompting import IGNORE_INDEX  # noqa: E402

QUESTIONS = ["What is in the picture?", "Describe the image in detail, including every object and its colour.",
             "How many objects are there?", "Is the red object to the left of the blue one? Answer briefly."]


@dataclass
class Pair:
    ours: torch.nn.Module  # vlm.model.VLM
    hf: torch.nn.Module  # transformers.LlavaForConditionalGeneration
    processor: object  # its LlavaProcessor (PIL backend)
    image_token_id: int


# --- the models -----------------------------------------------------------------------------------
def write_llama(out: Path, hidden: int, layers: int, heads: int, seed: int = 0) -> Path:
    """A Llama checkpoint (random init) with tiny_llama's tokenizer, written with `save_pretrained`."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from vlm.tiny import ensure_tiny

    tok = AutoTokenizer.from_pretrained(ensure_tiny("tiny_llama"))
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=int(hidden * 8 / 3) // 16 * 16,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=2048, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def build_pair(workdir: Path, hidden: int = 256, layers: int = 4, heads: int = 4, seed: int = 0) -> Pair:
    """Our VLM (encoder=tiny_siglip, projector=mlp, the Llama above) and HF's Llava exported from it."""
    from hydra import compose, initialize_config_dir
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    from vlm.hf_llava import export
    from vlm.model import build_vlm

    llama = write_llama(workdir / "llama", hidden, layers, heads, seed)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["encoder=tiny_siglip", "projector=mlp", "backbone=tiny_llama",
                                                      f"backbone.model_id={llama}", "backbone.dtype=float32"])
    torch.manual_seed(seed)
    ours = build_vlm(cfg)
    with torch.no_grad():  # wider random weights than the init's: greedy decoding does not repeat one token
        for param in ours.backbone.parameters():
            if param.dim() == 2:
                param.normal_(0, 0.1)
    out = export(ours, workdir / "llava", cfg.encoder.image_strategy)
    hf = LlavaForConditionalGeneration.from_pretrained(out, dtype=torch.float32, attn_implementation="sdpa")
    processor = AutoProcessor.from_pretrained(out, backend="pil")
    return Pair(ours.eval(), hf.eval(), processor, hf.config.image_token_id)


# --- the data -------------------------------------------------------------------------------------
def make_rows(n: int, num_patches: int, image_size: int, vocab: int, bos: int, seed: int = 0, image_fraction: float = 0.8,
              median: float = 120.0, sigma: float = 0.9, min_len: int = 20, max_len: int = 600) -> list[dict]:
    """LLaVA-like samples as the dataset gives them: BOS + lognormal-length text (the first ~third a prompt,
    label -100; the rest the answer), an image (random pixels, spliced after BOS) for `image_fraction` of them."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(median), sigma, n).round(), min_len, max_len).astype(int)
    rows = []
    for length in lengths:
        ids = [bos] + rng.integers(3, vocab, length - 1).tolist()  # ids 0..2 are the tokenizer's specials
        prompt = max(2, length // 3)
        labels = [IGNORE_INDEX] * prompt + ids[prompt:]
        image = rng.random() < image_fraction
        pixels = torch.from_numpy(rng.standard_normal((3, image_size, image_size), dtype=np.float32)) if image else None
        rows.append({"input_ids": ids, "labels": labels, "image_positions": [1] if image else [], "pixel_values": pixels})
    return rows


def real_tokens(rows: list[dict], num_patches: int) -> int:
    return sum(len(r["input_ids"]) + num_patches * len(r["image_positions"]) for r in rows)


def our_batch(rows: list[dict], pad_id: int) -> dict:
    return Collator(pad_id)(rows)


def hf_batch(rows: list[dict], pad_id: int, image_token_id: int, num_patches: int) -> dict:
    """The same rows as HF Llava takes them: `num_patches` image tokens where our VLM splices the patches."""
    hf_rows = []
    for r in rows:
        ids, labels = list(r["input_ids"]), list(r["labels"])
        for p in reversed(r["image_positions"]):
            ids[p:p] = [image_token_id] * num_patches
            labels[p:p] = [IGNORE_INDEX] * num_patches
        hf_rows.append({"input_ids": ids, "labels": labels, "pixel_values": r["pixel_values"]})
    batch = Collator(pad_id)(hf_rows)
    return {k: batch[k] for k in ("input_ids", "attention_mask", "labels", "pixel_values")}


@torch.no_grad()
def max_logit_difference(pair: Pair, rows: list[dict]) -> float:
    """Largest |ours - HF| over the real positions of the batch's logits (eval mode)."""
    pad, patches = pair.ours.tokenizer.pad_token_id, pair.ours.encoder.num_patches
    ours = pair.ours.eval()(**our_batch(rows, pad)).logits
    theirs = pair.hf.eval()(**hf_batch(rows, pad, pair.image_token_id, patches)).logits
    spans = [len(r["input_ids"]) + patches * len(r["image_positions"]) for r in rows]
    return max(float((ours[i, :n] - theirs[i, :n]).abs().max()) for i, n in enumerate(spans))


# --- (a) a training step --------------------------------------------------------------------------
def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _train_step(model, opt, batch) -> float:
    loss = model(**batch).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach().item()


def bench_train_step(pair: Pair, rows: list[dict], repeats: int, warmup: int = 2, lr: float = 1e-5) -> dict:
    """Seconds per training step (forward + backward + AdamW step) of each model on the same batch."""
    pad, patches = pair.ours.tokenizer.pad_token_id, pair.ours.encoder.num_patches
    runs = {"ours": (pair.ours, our_batch(rows, pad)), "hf": (pair.hf, hf_batch(rows, pad, pair.image_token_id, patches))}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=lr) for k, (m, _) in runs.items()}
    losses = {}
    for name, (model, batch) in runs.items():
        model.train()
        losses[name] = _train_step(model, opts[name], batch)  # first step: the loss on identical weights
        for _ in range(warmup - 1):
            _train_step(model, opts[name], batch)
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, (model, batch) in runs.items():
            times[name].append(_timed(lambda: _train_step(model, opts[name], batch)))
    for model, _ in runs.values():
        model.eval()
    med = {k: statistics.median(v) for k, v in times.items()}
    tokens = real_tokens(rows, patches)
    return {"rows": len(rows), "real_tokens": tokens, "loss_ours": losses["ours"], "loss_hf": losses["hf"],
            "s_ours": med["ours"], "s_hf": med["hf"], "tok_s_ours": tokens / med["ours"], "tok_s_hf": tokens / med["hf"],
            "ratio": med["hf"] / med["ours"]}


# --- (b) an epoch: grouped vs shuffled micro-batches --------------------------------------------
def epoch_batches(rows: list[dict], micro_batch: int, num_patches: int, grouped: bool, seed: int = 0) -> list[list[int]]:
    """The first epoch of the training stream, cut into micro-batches: `GroupedStreamSampler` (modality and
    length groups, as `data.group_by_length=true`) or the plain shuffled `StreamSampler`."""
    n = len(rows)
    if grouped:
        lengths = [len(r["input_ids"]) + num_patches * len(r["image_positions"]) for r in rows]
        sampler = GroupedStreamSampler(lengths, [len(r["image_positions"]) for r in rows], seed=seed, block=micro_batch)
    else:
        sampler = StreamSampler(n, seed=seed, block=micro_batch)
    order = list(itertools.islice(iter(sampler), n))
    return [order[i : i + micro_batch] for i in range(0, n, micro_batch)]


def padded_tokens(rows: list[dict], batches: list[list[int]], pad_id: int, model) -> int:
    """Positions the backbone computes over the epoch (rows x spliced width, padding included)."""
    total = 0
    for idx in batches:
        b = our_batch([rows[i] for i in idx], pad_id)
        width = b["input_ids"].shape[1] + (model.encoder.num_patches if bool(b["image_mask"].any()) else 0)
        total += len(idx) * width
    return total


def bench_epoch(model, rows: list[dict], micro_batch: int, repeats: int, lr: float = 1e-5, seed: int = 0) -> dict:
    """Real tokens/s of training steps over one epoch of `rows`, grouped vs shuffled micro-batches."""
    pad, patches = model.tokenizer.pad_token_id, model.encoder.num_patches
    orders = {k: epoch_batches(rows, micro_batch, patches, k == "grouped", seed) for k in ("grouped", "shuffled")}
    batches = {k: [our_batch([rows[i] for i in idx], pad) for idx in v] for k, v in orders.items()}
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    _train_step(model, opt, batches["shuffled"][0])  # warm-up (optimizer state, allocator)
    times = {k: [] for k in orders}
    for _ in range(repeats):
        for name, epoch in batches.items():
            times[name].append(_timed(lambda: [_train_step(model, opt, b) for b in epoch]))
    model.eval()
    tokens = real_tokens(rows, patches)
    out = {"samples": len(rows), "micro_batch": micro_batch, "real_tokens": tokens}
    for name in orders:
        med = statistics.median(times[name])
        padded = padded_tokens(rows, orders[name], pad, model)
        out.update({f"s_{name}": med, f"tok_s_{name}": tokens / med, f"padding_{name}": 1 - tokens / padded})
    out["ratio"] = out["tok_s_grouped"] / out["tok_s_shuffled"]
    return out


# --- (c) greedy generation ------------------------------------------------------------------------
def probe_images(n: int, seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (80 + 8 * i, 96, 3), dtype=np.uint8)) for i in range(n)]


class _Collect:
    """A `generate` streamer that keeps the generated ids (HF calls `put` with the prompt first, then each step)."""

    def __init__(self):
        self.steps = []

    def put(self, value):
        self.steps.append(value)

    def end(self):
        pass

    def new_tokens(self) -> list[list[int]]:
        return torch.stack([s.reshape(-1) for s in self.steps[1:]], 1).tolist()


def hf_generate(pair: Pair, images, prompts, new_tokens: int) -> tuple[list[str], list[list[int]]]:
    """HF's way: processor (chat template, image processor) → `generate` → decode. Returns (answers, new ids)."""
    messages = [[{"role": "user", "content": [{"type": "image", "image": im}, {"type": "text", "text": p}]}]
                for im, p in zip(images, prompts)]
    inputs = pair.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                                return_tensors="pt", processor_kwargs={"padding": True})
    with torch.no_grad():
        out = pair.hf.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    new = out[:, inputs["input_ids"].shape[1]:]
    return [t.strip() for t in pair.processor.batch_decode(new, skip_special_tokens=True)], new.tolist()


def our_generate(pair: Pair, images, prompts, new_tokens: int, streamer=None) -> list[str]:
    extra = {"streamer": streamer} if streamer is not None else {}
    return pair.ours.generate(images, prompts, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **extra)


def bench_generate(pair: Pair, batch: int, new_tokens: int, repeats: int, warmup: int = 1) -> dict:
    """Generated tokens/s of greedy decoding, end to end, and whether both produce the same tokens."""
    images, prompts = probe_images(batch), [QUESTIONS[i % len(QUESTIONS)] for i in range(batch)]
    ids = _Collect()
    ours_text = our_generate(pair, images, prompts, new_tokens, streamer=ids)
    hf_text, hf_ids = hf_generate(pair, images, prompts, new_tokens)
    runs = {"ours": lambda: our_generate(pair, images, prompts, new_tokens),
            "hf": lambda: hf_generate(pair, images, prompts, new_tokens)}
    for fn in runs.values():
        for _ in range(warmup):
            fn()
    times = {k: [] for k in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            times[name].append(_timed(fn))
    med = {k: statistics.median(v) for k, v in times.items()}
    generated = batch * new_tokens
    return {"batch": batch, "new_tokens": new_tokens, "identical_tokens": ids.new_tokens() == hf_ids,
            "identical_text": ours_text == hf_text, "distinct_tokens": len({t for row in hf_ids for t in row}),
            "s_ours": med["ours"], "s_hf": med["hf"], "tok_s_ours": generated / med["ours"], "tok_s_hf": generated / med["hf"],
            "ratio": med["hf"] / med["ours"]}


# --- the command ----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the same for both models)")
    p.add_argument("--hidden", type=int, default=256, help="Llama width")
    p.add_argument("--layers", type=int, default=4, help="Llama decoder layers")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--repeats", type=int, default=7, help="timed training steps per model in (a)")
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--epoch-samples", type=int, default=160, help="samples in the (b) epoch")
    p.add_argument("--epoch-repeats", type=int, default=3)
    p.add_argument("--gen-batch", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--gen-repeats", type=int, default=15)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-vlm-") as tmp:
        pair = build_pair(Path(tmp), args.hidden, args.layers, args.heads, args.seed)
    ours = pair.ours
    tok, patches = ours.tokenizer, ours.encoder.num_patches
    params = lambda m: sum(p.numel() for p in m.parameters()) / 1e6  # noqa: E731
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), fp32, sdpa; encoder tiny_siglip "
          f"({patches} patches), Llama {args.hidden} wide x {args.layers} layers; params ours {params(ours):.2f}M, "
          f"HF {params(pair.hf):.2f}M")
    rows = make_rows(args.epoch_samples, patches, ours.encoder.image_size[0], len(tok) - 1, tok.bos_token_id, args.seed)
    step_rows = rows[: args.micro_batch]
    print(f"max |logits ours - HF| on the step batch: {max_logit_difference(pair, step_rows):.2e}")

    gen = bench_generate(pair, args.gen_batch, args.new_tokens, args.gen_repeats)
    print(f"(c) greedy generation, batch {gen['batch']} x {gen['new_tokens']} new tokens, end to end: "
          f"ours {gen['tok_s_ours']:.1f} tok/s, HF {gen['tok_s_hf']:.1f} tok/s, ours/HF {gen['ratio']:.2f}x; "
          f"identical tokens: {gen['identical_tokens']} ({gen['distinct_tokens']} distinct), identical text: {gen['identical_text']}")
    step = bench_train_step(pair, step_rows, args.repeats)
    print(f"(a) training step, {step['rows']} rows, {step['real_tokens']} real tokens: ours {step['s_ours'] * 1e3:.0f} ms, "
          f"HF {step['s_hf'] * 1e3:.0f} ms, ours/HF {step['ratio']:.2f}x (first-step loss ours {step['loss_ours']:.5f}, "
          f"HF {step['loss_hf']:.5f})")
    epoch = bench_epoch(copy.deepcopy(ours), rows, args.micro_batch, args.epoch_repeats, seed=args.seed)
    print(f"(b) training epoch, {epoch['samples']} samples ({sum(bool(r['image_positions']) for r in rows)} with an image), "
          f"micro-batch {epoch['micro_batch']}, {epoch['real_tokens']} real tokens: grouped {epoch['tok_s_grouped']:.0f} tok/s "
          f"(padding {epoch['padding_grouped']:.0%}), shuffled {epoch['tok_s_shuffled']:.0f} tok/s "
          f"(padding {epoch['padding_shuffled']:.0%}), grouped/shuffled {epoch['ratio']:.2f}x")
    print(f"medians of {args.repeats} (a), {args.epoch_repeats} (b), {args.gen_repeats} (c) repeats; "
          f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
