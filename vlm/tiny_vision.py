"""Tiny image-encoder checkpoints beyond `tiny_siglip`: CLIP and DINOv2 ViTs (timm) and an open_clip CLIP.

Each writer saves a real checkpoint folder with the owning library's own format,
loaded as `local-dir:PATH` through exactly the code that loads the hub models:
- `tiny_clip`: timm `vit_large_patch14_clip_336` architecture (class token,
  pre-norm) at tiny widths, saved with `timm.models.save_for_hf`. Its config,
  like the hub's `timm/vit_large_patch14_clip_336.openai`, names the GELU
  architecture; the encoder config selects `act_layer: quick_gelu`, as the OpenAI
  weights need.
- `tiny_dinov2`: timm `vit_large_patch14_reg4_dinov2` (4 registers, LayerScale,
  no position embedding for prefix tokens), written at 96 px (12x12 grid) and
  run at 64 px (8x8 grid, the grid of `tiny_siglip`) through the `img_size`
  override, the way the real DINOv2 (518 px) runs at 224 px in Prismatic.
- `tiny_open_clip`: an open_clip `CLIP` (ViT image tower, small text tower with
  the standard 49408-token vocabulary) written as `open_clip_config.json` +
  `open_clip_model.safetensors`, the layout open_clip's `local-dir:` loader reads.

All start untrained (seeded); learned position embeddings start from 2-D sin-cos
values (timm's `build_sincos2d_pos_embed`) and DINOv2's LayerScale from 1 so the
blocks contribute at once. `vlm.tiny` registers these writers (`${tiny:NAME}`).
"""

from __future__ import annotations

import json
from pathlib import Path

import safetensors.torch
import timm
import torch
from timm.layers import build_sincos2d_pos_embed

CLIP_ARGS = dict(img_size=64, patch_size=8, embed_dim=96, depth=4, num_heads=4)
DINOV2_ARGS = dict(img_size=96, patch_size=8, embed_dim=96, depth=4, num_heads=4)
OPEN_CLIP_CFG = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 64, "patch_size": 8, "width": 96, "layers": 4, "head_width": 24},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 1},
}


def _sincos_into(pos_embed: torch.Tensor, grid: int, prefix: int) -> None:
    """Patch positions of a (1, prefix + grid², D) or (prefix + grid², D) table ← 2-D sin-cos; prefix rows ← 0."""
    table = pos_embed.view(-1, pos_embed.shape[-1])
    with torch.no_grad():
        table[:prefix].zero_()
        table[prefix:].copy_(build_sincos2d_pos_embed([grid, grid], dim=table.shape[-1]))


def _write_timm(out: Path, architecture: str, args: dict, **init_args) -> None:
    torch.manual_seed(0)
    model = timm.create_model(architecture, pretrained=False, num_classes=0, **args, **init_args)
    prefix = 0 if model.no_embed_class else model.num_prefix_tokens
    _sincos_into(model.pos_embed, args["img_size"] // args["patch_size"], prefix)
    timm.models.save_for_hf(model, out, model_args=args, safe_serialization=True)


def write_tiny_clip(out: Path) -> None:
    _write_timm(out, "vit_large_patch14_clip_336", CLIP_ARGS)


def write_tiny_dinov2(out: Path) -> None:
    # LayerScale starts at 1 (the architecture's default 1e-5 would make the untrained blocks near-identities).
    _write_timm(out, "vit_large_patch14_reg4_dinov2", DINOV2_ARGS, init_values=1.0)


def write_tiny_open_clip(out: Path) -> None:
    import open_clip  # imported on use: it is slow to import and only this flavour needs it
    from open_clip.constants import HF_CONFIG_NAME, HF_SAFE_WEIGHTS_NAME, OPENAI_DATASET_MEAN, OPENAI_DATASET_STD

    torch.manual_seed(0)
    model = open_clip.CLIP(**OPEN_CLIP_CFG)  # the class open_clip's factory builds for this config
    vision = OPEN_CLIP_CFG["vision_cfg"]
    _sincos_into(model.visual.positional_embedding, vision["image_size"] // vision["patch_size"], prefix=1)
    out.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_file(model.state_dict(), out / HF_SAFE_WEIGHTS_NAME)
    preprocess = {"mean": OPENAI_DATASET_MEAN, "std": OPENAI_DATASET_STD, "interpolation": "bicubic", "resize_mode": "shortest"}
    (out / HF_CONFIG_NAME).write_text(json.dumps({"model_cfg": OPEN_CLIP_CFG, "preprocess_cfg": preprocess}, indent=2))


WRITERS = {"tiny_clip": write_tiny_clip, "tiny_dinov2": write_tiny_dinov2, "tiny_open_clip": write_tiny_open_clip}
