"""Projectors from vision features to the language model's embedding width.

`linear`; `mlp` = Linear(dv→d)–GELU–Linear(d→d) (HF Llava's projector);
`fused_mlp` = Linear(dv→4dv)–GELU–Linear(4dv→d)–GELU–Linear(d→d) (Prismatic's
projector for fused encoders). Built by Hydra as partials (`vlm.interfaces.ProjectorFactory`) and completed
with the encoder and backbone widths.

`standardize_features=True` puts a `FeatureStandardizer` in front: each vision-feature channel standardised over
the patches of the batch (BatchNorm without affine, MAE's linear-probe protocol), for an encoder whose patches
share one large constant vector (a masked autoencoder's: docs/reproduction.md). HF Llava cannot represent it, so
such runs are not exportable (vlm/hf_llava.py says so).
"""

from __future__ import annotations

import torch
from torch import nn


class FeatureStandardizer(nn.BatchNorm1d):
    """(..., dim) features standardised per channel: over the batch's patches while training (running statistics
    kept, momentum 0.1), with those running statistics in evaluation. No affine parameters: the next Linear has them."""

    def __init__(self, dim: int):
        super().__init__(dim, affine=False)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return super().forward(features.reshape(-1, features.shape[-1])).reshape(features.shape)


def _standardized(layers: nn.Module, vision_dim: int, standardize_features: bool) -> nn.Module:
    """`layers` (a Sequential or one layer), after a `FeatureStandardizer` when asked."""
    if not standardize_features:
        return layers
    return nn.Sequential(FeatureStandardizer(vision_dim), *(layers if isinstance(layers, nn.Sequential) else [layers]))


def linear(vision_dim: int, llm_dim: int, standardize_features: bool = False) -> nn.Module:
    return _standardized(nn.Linear(vision_dim, llm_dim), vision_dim, standardize_features)


def mlp(vision_dim: int, llm_dim: int, standardize_features: bool = False) -> nn.Module:
    return _standardized(nn.Sequential(nn.Linear(vision_dim, llm_dim), nn.GELU(), nn.Linear(llm_dim, llm_dim)),
                         vision_dim, standardize_features)


def fused_mlp(vision_dim: int, llm_dim: int, standardize_features: bool = False) -> nn.Module:
    hidden = 4 * vision_dim
    return _standardized(nn.Sequential(
        nn.Linear(vision_dim, hidden), nn.GELU(), nn.Linear(hidden, llm_dim), nn.GELU(), nn.Linear(llm_dim, llm_dim)
    ), vision_dim, standardize_features)
