"""Image encoders loaded through timm (SigLIP, CLIP, DINOv2, ... by hub id or local folder).

Features are the output of the second-to-last transformer block with the
prefix (class / register) tokens dropped, as in Prismatic and HF Llava
(`vision_feature_layer=-2`). The unused last block and head are pruned so that
they neither cost compute nor sit in the optimiser without gradients.
A tiny flavour is a real timm checkpoint folder (`config.json` +
`model.safetensors`) loaded as `local-dir:PATH`, the same path hub ids take.
"""

from __future__ import annotations

import timm
import torch
from torch import nn

from vlm.hub import load_error, offline_unless_reachable
from vlm.images import image_transform


class TimmEncoder(nn.Module):
    def __init__(self, model_id: str, image_strategy: str = "resize-naive", feature_layer: int = -2, pretrained: bool = True):
        super().__init__()
        offline_unless_reachable(model_id.removeprefix("hf-hub:"))
        try:
            model = timm.create_model(model_id, pretrained=pretrained, num_classes=0)
        except Exception as err:  # hub/network/file errors all surface as one clear message
            raise load_error("encoder", model_id, "encoder.model_id", err) from err
        self.layer = len(model.blocks) + feature_layer if feature_layer < 0 else feature_layer
        model.prune_intermediate_layers(indices=[self.layer], prune_head=True, prune_norm=True)
        self.model = model
        self.embed_dim = model.embed_dim
        self.num_patches = model.patch_embed.num_patches
        self.data_config = timm.data.resolve_data_config({}, model=model)
        self.transform = image_transform(self.data_config, image_strategy)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) → patch features (B, num_patches, embed_dim)."""
        (features,) = self.model.forward_intermediates(
            pixel_values, indices=[self.layer], norm=False, output_fmt="NLC", intermediates_only=True
        )
        return features
