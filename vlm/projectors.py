"""Projectors from vision features to the language model's embedding width.

`linear`; `mlp` = Linear(dv→d)–GELU–Linear(d→d) (HF Llava's projector);
`fused_mlp` = Linear(dv→4dv)–GELU–Linear(4dv→d)–GELU–Linear(d→d) (Prismatic's
projector for fused encoders). Built by Hydra as partials (`vlm.interfaces.ProjectorFactory`) and completed
with the encoder and backbone widths.
"""

from __future__ import annotations

from torch import nn


def linear(vision_dim: int, llm_dim: int) -> nn.Module:
    return nn.Linear(vision_dim, llm_dim)


def mlp(vision_dim: int, llm_dim: int) -> nn.Module:
    return nn.Sequential(nn.Linear(vision_dim, llm_dim), nn.GELU(), nn.Linear(llm_dim, llm_dim))


def fused_mlp(vision_dim: int, llm_dim: int) -> nn.Module:
    hidden = 4 * vision_dim
    return nn.Sequential(
        nn.Linear(vision_dim, hidden), nn.GELU(), nn.Linear(hidden, llm_dim), nn.GELU(), nn.Linear(llm_dim, llm_dim)
    )
