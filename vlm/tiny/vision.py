"""Tiny image-encoder checkpoints: SigLIP, CLIP and DINOv2 ViTs (timm) and open_clip CLIPs (ViT and ConvNeXt towers).

Each writer saves a real checkpoint folder in the owning library's own format,
loaded through exactly the code that loads the hub models:
- `tiny_siglip`: timm `vit_base_patch16_siglip_224` architecture (no class token)
  at tiny widths, saved with `timm.models.save_for_hf` (config.json + model.safetensors).
- `tiny_clip`: timm `vit_large_patch14_clip_336` architecture (class token,
  pre-norm) at tiny widths. Its config, like the hub's
  `timm/vit_large_patch14_clip_336.openai`, names the GELU architecture; the
  encoder config selects `act_layer: quick_gelu`, as the OpenAI weights need.
- `tiny_dinov2`: timm `vit_large_patch14_reg4_dinov2` (4 registers, LayerScale
  from 1, no position embedding for prefix tokens), written at 96 px (12x12 grid)
  and run at 64 px (8x8 grid) through the `img_size` override.
- `tiny_open_clip`: an open_clip `CLIP` (ViT image tower, small text tower with
  the standard 49408-token vocabulary) written as `open_clip_config.json` +
  `open_clip_model.safetensors`, the layout open_clip's `local-dir:` loader reads.
- `tiny_open_clip_convnext`: the same layout with a timm `convnext_atto` trunk as the
  image tower (the architecture of open_clip's `convnext_base_w`, at 128 px).

All start untrained (seeded); learned position embeddings start from 2-D sin-cos values.
"""

from __future__ import annotations

import json
from pathlib import Path

import safetensors.torch
import timm
import torch
from timm.layers import build_sincos2d_pos_embed

SIGLIP_ARGS = dict(img_size=64, patch_size=8, embed_dim=128, depth=4, num_heads=4, mlp_ratio=4.0)
CLIP_ARGS = dict(img_size=64, patch_size=8, embed_dim=96, depth=4, num_heads=4)
DINOV2_ARGS = dict(img_size=96, patch_size=8, embed_dim=96, depth=4, num_heads=4)
OPEN_CLIP_TEXT = {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 1}
OPEN_CLIP_CFG = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 64, "patch_size": 8, "width": 96, "layers": 4, "head_width": 24},
    "text_cfg": OPEN_CLIP_TEXT,
}
OPEN_CLIP_CONVNEXT_CFG = {  # open_clip's convnext_base_w.json with a tiny trunk, no drop path
    "embed_dim": 64,
    "vision_cfg": {"timm_model_name": "convnext_atto", "timm_model_pretrained": False, "timm_pool": "",
                   "timm_proj": "linear", "image_size": 128},
    "text_cfg": OPEN_CLIP_TEXT,
}


def _sincos_into(pos_embed: torch.Tensor, grid: int, prefix: int) -> None:
    """Patch positions of a (1, prefix + grid², D) or (prefix + grid², D) table ← 2-D sin-cos; prefix rows ← 0."""
    table = pos_embed.view(-1, pos_embed.shape[-1])
    with torch.no_grad():
        table[:prefix].zero_()
        table[prefix:].copy_(build_sincos2d_pos_embed([grid, grid], dim=table.shape[-1]))


def _row_major_mae_sincos(grid: int, dim: int) -> torch.Tensor:
    """MAE's 2-D sin-cos table (float64, as open_clip ships it) with the row half first: [sin, cos] of the row,
    then [sin, cos] of the column (open_clip's table puts the column half first)."""
    from open_clip.pos_embed import get_2d_sincos_pos_embed  # imported on use: open_clip is slow to import

    table = torch.from_numpy(get_2d_sincos_pos_embed(dim, grid)).float()
    return torch.cat([table[:, dim // 2 :], table[:, : dim // 2]], 1)


def _save_timm(out: Path, model, args: dict) -> None:
    timm.models.save_for_hf(model, out, model_args=args, safe_serialization=True)


def _write_timm(out: Path, architecture: str, args: dict, **init_args) -> None:
    torch.manual_seed(0)
    model = timm.create_model(architecture, pretrained=False, num_classes=0, **args, **init_args)
    prefix = 0 if model.no_embed_class else model.num_prefix_tokens
    _sincos_into(model.pos_embed, args["img_size"] // args["patch_size"], prefix)
    _save_timm(out, model, args)


def write_tiny_siglip(out: Path) -> None:
    torch.manual_seed(0)
    model = timm.create_model("vit_base_patch16_siglip_224", pretrained=False, num_classes=0, **SIGLIP_ARGS)
    grid = SIGLIP_ARGS["img_size"] // SIGLIP_ARGS["patch_size"]
    with torch.no_grad():
        model.pos_embed.copy_(_row_major_mae_sincos(grid, SIGLIP_ARGS["embed_dim"])[None])
    _save_timm(out, model, SIGLIP_ARGS)


def write_tiny_clip(out: Path) -> None:
    _write_timm(out, "vit_large_patch14_clip_336", CLIP_ARGS)


def write_tiny_dinov2(out: Path) -> None:
    _write_timm(out, "vit_large_patch14_reg4_dinov2", DINOV2_ARGS, init_values=1.0)


def _write_open_clip(out: Path, model_cfg: dict, init=None) -> None:
    """An open_clip `CLIP` of `model_cfg` (seeded; `init(model)` adjusts it) as open_clip's local-dir: folder."""
    import open_clip  # imported on use: it is slow to import and only these flavours need it
    from open_clip.constants import HF_CONFIG_NAME, HF_SAFE_WEIGHTS_NAME, OPENAI_DATASET_MEAN, OPENAI_DATASET_STD

    torch.manual_seed(0)
    model = open_clip.CLIP(**model_cfg)  # the class open_clip's factory builds for this config
    if init:
        init(model)
    out.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_file(model.state_dict(), out / HF_SAFE_WEIGHTS_NAME)
    preprocess = {"mean": OPENAI_DATASET_MEAN, "std": OPENAI_DATASET_STD, "interpolation": "bicubic", "resize_mode": "shortest"}
    (out / HF_CONFIG_NAME).write_text(json.dumps({"model_cfg": model_cfg, "preprocess_cfg": preprocess}, indent=2))


def write_tiny_open_clip(out: Path) -> None:
    vision = OPEN_CLIP_CFG["vision_cfg"]
    grid = vision["image_size"] // vision["patch_size"]
    _write_open_clip(out, OPEN_CLIP_CFG, lambda model: _sincos_into(model.visual.positional_embedding, grid, prefix=1))


def write_tiny_open_clip_convnext(out: Path) -> None:
    _write_open_clip(out, OPEN_CLIP_CONVNEXT_CFG)
