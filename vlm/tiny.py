"""Tiny flavours: real checkpoints written locally, loaded through the same code as hub models.

`tiny_siglip` is a timm ViT of the SigLIP architecture saved with
`timm.models.save_for_hf` (config.json + model.safetensors) and loaded as
`local-dir:PATH`; `tiny_llama` is a `LlamaForCausalLM` with a byte-level BPE
tokenizer trained here with HF `tokenizers`, saved with `save_pretrained`
(config, safetensors, tokenizer files, a chat template) and loaded with
`from_pretrained`. Both start untrained (seeded random init; the ViT's
learned position embeddings start from 2-D sin-cos values, as in MAE). They are created
on first use in `$REFRACT_CACHE/tiny/` (default `~/.cache/refract/tiny/`) and
reused afterwards; configs refer to them as `${tiny:NAME}`.

The other image encoders' tiny flavours are written by vlm/tiny_vision.py.

Run `python -m vlm.tiny` to (re)create them all.
"""

from __future__ import annotations

import json
from pathlib import Path

import timm
import torch
from omegaconf import OmegaConf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from data import sort_of_clevr
from data.atomic import atomic_directory
from data.cache import cache_root
from vlm.prompting import VICUNA_SYSTEM
from vlm.tiny_text import TEXT_WRITERS
from vlm.tiny_vision import WRITERS as VISION_WRITERS

VERSION = 3
SIGLIP_ARGS = dict(img_size=64, patch_size=8, embed_dim=128, depth=4, num_heads=4, mlp_ratio=4.0)
# initializer_range ~ 1/sqrt(hidden_size): HF's 0.02 is the fan-in scale of a ~2,500-wide model; at width 192 it
# leaves the untrained attention near-uniform for hundreds of steps (a caption probe escaped chance at step ~400 with
# 0.02, ~110 with 0.06).
LLAMA_ARGS = dict(hidden_size=192, intermediate_size=512, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=4, max_position_embeddings=1024, tie_word_embeddings=False,
                  initializer_range=0.07)
TOKENIZER_VOCAB = 1000
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
    "{% else %} {{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)


def _corpus() -> list[str]:
    """Text the tiny tokenizer is trained on: the embedded benchmark's language, prompt formats, plain English."""
    lines = [VICUNA_SYSTEM, "In: \nOut:", " USER: ASSISTANT:", "[INST] [/INST]", sort_of_clevr.CAPTION_PROMPT]
    answers = [*sort_of_clevr.SHAPES, "left", "right", "top", "bottom", *"123456"]
    for color in sort_of_clevr.COLORS:
        for template in sort_of_clevr.TEMPLATES.values():
            lines += [f"In: {template.format(c=color)}\nOut: {a}" for a in answers]
        for shape in sort_of_clevr.SHAPES:
            lines += [f"{color} {v} {h} {shape}." for v in ("top", "bottom") for h in ("left", "right")]
    lines += ["The quick brown fox jumps over the lazy dog.", "What is in the picture? A cat sitting on a mat."]
    return lines * 4


def _train_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE  # no pad token on purpose: like Llama-2, the backbone adds one
    return fast


def sincos_2d(grid: int, dim: int) -> torch.Tensor:
    """Fixed 2-D sine-cosine position embeddings (as in MAE): half the channels encode the row, half the column."""
    def axis(positions: torch.Tensor, width: int) -> torch.Tensor:
        omega = 1.0 / 10000 ** (torch.arange(width // 2, dtype=torch.float64) / (width / 2))
        angles = positions[:, None] * omega[None]
        return torch.cat([angles.sin(), angles.cos()], 1)

    rows, cols = torch.meshgrid(torch.arange(grid, dtype=torch.float64), torch.arange(grid, dtype=torch.float64), indexing="ij")
    return torch.cat([axis(rows.flatten(), dim // 2), axis(cols.flatten(), dim // 2)], 1).float()


def _write_tiny_siglip(out: Path) -> None:
    torch.manual_seed(0)
    model = timm.create_model("vit_base_patch16_siglip_224", pretrained=False, num_classes=0, **SIGLIP_ARGS)
    grid = SIGLIP_ARGS["img_size"] // SIGLIP_ARGS["patch_size"]
    with torch.no_grad():  # start the learned position embeddings from 2-D sin-cos: positions are readable at once
        model.pos_embed.copy_(sincos_2d(grid, SIGLIP_ARGS["embed_dim"])[None])
    timm.models.save_for_hf(model, out, model_args=SIGLIP_ARGS, safe_serialization=True)


def _write_tiny_llama(out: Path) -> None:
    tokenizer = _train_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, **LLAMA_ARGS)
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)


WRITERS = {"tiny_siglip": _write_tiny_siglip, "tiny_llama": _write_tiny_llama}
WRITERS.update(TEXT_WRITERS)  # tiny_llama3, tiny_mistral, tiny_phi, tiny_qwen2, tiny_gemma
WRITERS.update(VISION_WRITERS)  # tiny_clip, tiny_dinov2, tiny_open_clip (vlm/tiny_vision.py)


def ensure_tiny(name: str, root: Path | None = None) -> Path:
    """Path of the tiny checkpoint `name`, written (atomically) on first use."""
    if name not in WRITERS:
        raise ValueError(f"unknown tiny flavour {name!r}; choose from {sorted(WRITERS)}")
    out = (root or cache_root()) / "tiny" / f"{name}-v{VERSION}"
    if not (out / "done.json").exists():
        with atomic_directory(out) as tmp:
            WRITERS[name](tmp)
            (tmp / "done.json").write_text(json.dumps({"name": name, "version": VERSION}))
    return out


def _resolve(name: str) -> str:
    path = ensure_tiny(name)
    return f"local-dir:{path}" if name in ("tiny_siglip", *VISION_WRITERS) else str(path)  # timm / open_clip folders


OmegaConf.register_new_resolver("tiny", _resolve, replace=True)

if __name__ == "__main__":
    for flavour in WRITERS:
        print(flavour, ensure_tiny(flavour))
