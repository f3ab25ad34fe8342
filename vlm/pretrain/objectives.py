"""Pretraining objectives of the tiny image tower, as plain `nn.Module`s (no Lightning).

Every objective trains the SAME tower: timm's `vit_base_patch16_siglip_224`
architecture at the tiny widths of vlm/tiny/vision.py (`SIGLIP_ARGS`; `img_size`
a setting), its position table starting from the 2-D sin-cos values the
`tiny_siglip` flavour writes. `model.tower` is what gets exported
(`timm.models.save_for_hf`) and later loads through `vlm.encoders.TimmEncoder`.

- `ContrastiveObjective` (`clip` / `siglip`): the tower's pooled (MAP-head)
  feature projected to a joint space, open_clip's `TextTransformer` on the
  captions (open_clip's BPE tokenizer, short context), and open_clip's
  `ClipLoss` (learned temperature, CLIP's init 1/0.07) or `SigLipLoss` (learned
  scale and bias, SigLIP's init: log 10 and -10).
- `SupervisedObjective`: a linear head on the pooled feature, multi-label BCE
  over the scene's (colour, shape, size, sign word) categories — the ImageNet analog.
- `MAEObjective`: masked-image modelling with lightly's MAE parts
  (`MaskedVisionTransformerTIMM` around the tower, `MaskedVisionTransformerDecoderTIMM`,
  `random_token_mask`, `patchify`): the pixels of masked patches (normalised
  per patch, as MAE's best setting) regressed from the visible ones.

Each module's `loss(batch)` takes a dict with `pixel_values` (B, 3, H, W) and,
as its objective needs, `text` (B, context) token ids or `labels` (B, C) 0/1.
"""

from __future__ import annotations

import math

import timm
import torch
import torch.nn.functional as F
from torch import nn

from vlm.tiny.vision import SIGLIP_ARGS, _row_major_mae_sincos

TOWER_ARCHITECTURE = "vit_base_patch16_siglip_224"


def tower_args(img_size: int) -> dict:
    """timm model args of the tiny tower at `img_size` (the args `save_for_hf` records in config.json)."""
    if img_size % SIGLIP_ARGS["patch_size"]:
        raise ValueError(f"encoder_pretrain.img_size={img_size} is not a multiple of the patch size {SIGLIP_ARGS['patch_size']}")
    return {**SIGLIP_ARGS, "img_size": int(img_size)}


def build_tower(img_size: int = 64) -> nn.Module:
    """The tiny SigLIP-architecture ViT (no class token, MAP pooling head, no classifier), sin-cos positions."""
    args = tower_args(img_size)
    tower = timm.create_model(TOWER_ARCHITECTURE, pretrained=False, num_classes=0, **args)
    grid = args["img_size"] // args["patch_size"]
    with torch.no_grad():
        tower.pos_embed.copy_(_row_major_mae_sincos(grid, args["embed_dim"])[None])
    return tower


class ContrastiveObjective(nn.Module):
    """CLIP / SigLIP: image tower + tiny open_clip text tower, contrastive loss from open_clip."""

    def __init__(self, tower: nn.Module, kind: str, embed_dim: int = 64, context_length: int = 32,
                 text_width: int = 64, text_heads: int = 2, text_layers: int = 2, init_logit_bias: float = -10.0,
                 init_logit_scale: float | None = None):
        """`init_logit_bias` (SigLIP): the initial bias, SigLIP's -10 by default (see conf/task_train/encoder_pretrain.yaml).
        `init_logit_scale`: the initial scale (the learned log is its log), by default each loss's published init:
        CLIP 1/0.07, SigLIP 10."""
        from open_clip.loss import ClipLoss, SigLipLoss
        from open_clip.transformer import TextTransformer

        super().__init__()
        if kind not in ("clip", "siglip"):
            raise ValueError(f"contrastive objective {kind!r}: choose clip or siglip")
        self.kind = kind
        self.tower = tower
        self.image_proj = nn.Linear(tower.embed_dim, embed_dim, bias=False)
        self.text = TextTransformer(context_length=context_length, width=text_width, heads=text_heads,
                                    layers=text_layers, output_dim=embed_dim)
        self.context_length = context_length
        if kind == "clip":
            self.logit_scale = nn.Parameter(torch.tensor(math.log(init_logit_scale or 1 / 0.07)))
            self.logit_bias = None
            self.criterion = ClipLoss()
        else:
            self.logit_scale = nn.Parameter(torch.tensor(math.log(init_logit_scale or 10.0)))
            self.logit_bias = nn.Parameter(torch.tensor(float(init_logit_bias)))
            self.criterion = SigLipLoss()

    def encode_image(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Unit-norm image embeddings (B, embed_dim)."""
        return F.normalize(self.image_proj(self.tower(pixel_values)), dim=-1)

    def encode_text(self, text: torch.Tensor) -> torch.Tensor:
        """Unit-norm caption embeddings (B, embed_dim) of open_clip token ids (B, context_length)."""
        return F.normalize(self.text(text), dim=-1)

    def loss(self, batch: dict) -> torch.Tensor:
        image, text = self.encode_image(batch["pixel_values"]), self.encode_text(batch["text"])
        scale = self.logit_scale.exp()
        if self.logit_bias is None:
            return self.criterion(image, text, scale)
        return self.criterion(image, text, scale, self.logit_bias)

    def sample_losses(self, batch: dict) -> torch.Tensor:
        """Each pair's share of the loss: CLIP, its image's and its caption's cross-entropy (averaged); SigLIP, its
        image's sigmoid losses against every caption of the batch (the batch loss is their mean, as open_clip's)."""
        image, text = self.encode_image(batch["pixel_values"]), self.encode_text(batch["text"])
        logits = self.logit_scale.exp() * image @ text.T
        if self.logit_bias is None:
            labels = torch.arange(len(image), device=image.device)
            return (F.cross_entropy(logits, labels, reduction="none") + F.cross_entropy(logits.T, labels, reduction="none")) / 2
        signs = 2 * torch.eye(len(image), device=image.device, dtype=logits.dtype) - 1
        return -F.logsigmoid(signs * (logits + self.logit_bias)).sum(1)


class SupervisedObjective(nn.Module):
    """Multi-label attribute classification: a linear head on the tower's pooled feature, BCE with logits."""

    def __init__(self, tower: nn.Module, num_labels: int):
        super().__init__()
        if num_labels < 1:
            raise ValueError("supervised pretraining needs at least one label category (the world's scenes list none)")
        self.tower = tower
        self.head = nn.Linear(tower.embed_dim, num_labels)

    def logits(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.head(self.tower(pixel_values))

    def loss(self, batch: dict) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(self.logits(batch["pixel_values"]), batch["labels"].float())

    def sample_losses(self, batch: dict) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(self.logits(batch["pixel_values"]), batch["labels"].float(),
                                                  reduction="none").mean(1)


class MAEObjective(nn.Module):
    """Masked autoencoder (He et al. 2021) with lightly's modules around the tower; the tower has no prefix token,
    so every patch may be masked."""

    def __init__(self, tower: nn.Module, mask_ratio: float = 0.75, decoder_dim: int = 64, decoder_depth: int = 1,
                 decoder_heads: int = 4, norm_pix_loss: bool = True):
        from lightly.models.modules import MaskedVisionTransformerDecoderTIMM, MaskedVisionTransformerTIMM

        super().__init__()
        self.tower = tower
        # keep the tower's own (seeded timm) weights and sin-cos position table
        self.encoder = MaskedVisionTransformerTIMM(vit=tower, weight_initialization="skip", pos_embed_initialization="skip")
        self.patch_size = int(tower.patch_embed.patch_size[0])
        self.num_patches = int(tower.patch_embed.num_patches)
        self.mask_ratio = float(mask_ratio)
        self.norm_pix_loss = norm_pix_loss
        self.decoder_embed = nn.Linear(tower.embed_dim, decoder_dim)
        self.decoder = MaskedVisionTransformerDecoderTIMM(num_patches=self.num_patches, embed_dim=decoder_dim,
                                                          depth=decoder_depth, num_heads=decoder_heads, num_prefix_tokens=0)
        self.decoder_pred = nn.Linear(decoder_dim, self.patch_size**2 * 3)

    def loss(self, batch: dict) -> torch.Tensor:
        return F.mse_loss(*self._reconstruction(batch["pixel_values"]))

    def sample_losses(self, batch: dict) -> torch.Tensor:
        pred, target = self._reconstruction(batch["pixel_values"])
        return (pred - target).pow(2).mean((1, 2))

    def _reconstruction(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(predicted, target) pixels of the masked patches (rows, masked patches, pixels), the masking random."""
        from lightly.models import utils

        idx_keep, idx_mask = utils.random_token_mask(size=(images.shape[0], self.num_patches), mask_ratio=self.mask_ratio,
                                                     mask_class_token=True, device=images.device)
        encoded = self.encoder.encode(images=images, idx_keep=idx_keep)
        visible = self.decoder_embed(encoded)
        tokens = utils.repeat_token(self.decoder.mask_token, (images.shape[0], self.num_patches))
        decoded = self.decoder(utils.set_at_index(tokens, idx_keep, visible.type_as(tokens)))  # masked: mask token
        pred = self.decoder_pred(utils.get_at_index(decoded, idx_mask))
        target = utils.get_at_index(utils.patchify(images, self.patch_size), idx_mask)
        if self.norm_pix_loss:
            mean, var = target.mean(-1, keepdim=True), target.var(-1, keepdim=True)
            target = (target - mean) / (var + 1e-6).sqrt()
        return pred, target


def build_objective(objective: str, img_size: int, num_labels: int = 0, settings: dict | None = None,
                    tower: nn.Module | None = None) -> nn.Module:
    """The objective module `objective` (clip | siglip | supervised | mae) around `tower` (default: a fresh one);
    `settings` are the objective's own keyword arguments (e.g. `mask_ratio`, `embed_dim`)."""
    tower = build_tower(img_size) if tower is None else tower
    settings = dict(settings or {})
    if objective in ("clip", "siglip"):
        return ContrastiveObjective(tower, objective, **settings)
    if objective == "supervised":
        return SupervisedObjective(tower, num_labels, **settings)
    if objective == "mae":
        return MAEObjective(tower, **settings)
    raise ValueError(f"encoder_pretrain.objective={objective!r}: choose clip, siglip, supervised or mae")
