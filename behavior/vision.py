"""Camera frames → a few policy tokens per camera, through the project's own image encoders (`vlm/`).

`CameraTokens` wraps any `vlm.interfaces.ImageEncoder` (a timm or open_clip tower, tiny or from the hub, built
from a `policy.vision.encoder` config exactly as a VLM's `encoder` is): frames are preprocessed by the
encoder's own transform (`encoder.transform`, the VLM path: resize strategy and the checkpoint's mean/std),
the patch features are average-pooled to a `g x g` grid (`tokens_per_camera = g²`) and projected to the
policy's width, plus a learned embedding per camera.

`freeze: true` (the CPU default) keeps the encoder's weights fixed and in eval mode; its pooled features
then depend on the frame alone, so training computes them once per dataset (`features`) instead of every
step. `freeze: false` fine-tunes the encoder with the policy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from vlm.model import build_component


class CameraTokens(nn.Module):
    def __init__(self, encoder: nn.Module, d_model: int, num_cameras: int, tokens_per_camera: int = 4, freeze: bool = True):
        super().__init__()
        side = math.isqrt(int(tokens_per_camera))
        if side * side != tokens_per_camera or side < 1:
            raise ValueError(f"policy.vision.tokens_per_camera={tokens_per_camera}: must be a square (1, 4, 9, 16, ...): "
                             "the patch grid is pooled to a square grid")
        if num_cameras < 1:
            raise ValueError("CameraTokens needs at least one camera")
        self.encoder, self.side, self.freeze = encoder, side, bool(freeze)
        self.num_cameras, self.tokens_per_camera = int(num_cameras), int(tokens_per_camera)
        self.proj = nn.Linear(encoder.embed_dim, d_model)
        self.camera_embed = nn.Parameter(torch.zeros(num_cameras, 1, d_model))
        if self.freeze:
            self.encoder.requires_grad_(False)

    @classmethod
    def from_config(cls, vision: Mapping, d_model: int, num_cameras: int) -> CameraTokens:
        """From a `policy.vision` config: `encoder` (a conf/encoder-style node with `_target_`), `tokens_per_camera`,
        `freeze`."""
        encoder = build_component({**vision["encoder"], "config_key": "policy.vision.encoder"})
        return cls(encoder, d_model, num_cameras, int(vision.get("tokens_per_camera", 4)), bool(vision.get("freeze", True)))

    @property
    def num_tokens(self) -> int:
        return self.num_cameras * self.tokens_per_camera

    def pixels(self, frame: np.ndarray) -> np.ndarray:
        """One (H, W, 3) uint8 frame → the encoder's input (3, h, w) float32, by the encoder's own transform."""
        return self.encoder.transform(Image.fromarray(np.asarray(frame, dtype=np.uint8))).numpy()

    def features(self, pixels: torch.Tensor) -> torch.Tensor:
        """(B, C, 3, h, w) encoder inputs → pooled patch features (B, C, tokens_per_camera, embed_dim)."""
        b, c = pixels.shape[:2]
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.freeze):
            patches = self.encoder(pixels.flatten(0, 1))
        gh, gw = self.encoder.grid_size
        grid = patches.transpose(1, 2).reshape(b * c, -1, gh, gw)
        pooled = F.adaptive_avg_pool2d(grid, self.side).flatten(2).transpose(1, 2)
        return pooled.view(b, c, self.tokens_per_camera, -1)

    def forward(self, pixels: torch.Tensor | None = None, features: torch.Tensor | None = None) -> torch.Tensor:
        """Tokens (B, C · tokens_per_camera, d_model) from encoder inputs or from precomputed `features`."""
        if features is None:
            if pixels is None:
                raise ValueError("the policy reads camera frames: the batch needs 'images' (or 'image_features')")
            features = self.features(pixels)
        tokens = self.proj(features) + self.camera_embed
        return tokens.flatten(1, 2)
