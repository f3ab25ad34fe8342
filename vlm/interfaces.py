"""The parts a VLM is assembled from, as `typing.Protocol`s: an image encoder, a language backbone, a projector.

An encoder config (`conf/encoder/*.yaml`) builds an `ImageEncoder`, a backbone
config (`conf/backbone/*.yaml`) a `LanguageBackbone`, and a projector config a
`ProjectorFactory`, which `vlm.model.build_vlm` calls with the encoder's and the
backbone's widths. All are structural: a class conforms by having the members
below (both parts are also `nn.Module`s), and `isinstance(obj, ImageEncoder)`
checks the names at run time; tests/test_configs.py checks every tiny flavour's
shapes and types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from vlm.prompting import PromptFormat


@runtime_checkable
class ImageEncoder(Protocol):
    """An `nn.Module` from images to patch features.

    `transform` turns one PIL image into the tensor the encoder takes (a (3, H, W) image, or (n, 3, H, W) for
    an encoder that runs n towers on the same image); calling the encoder on a batch of those gives patch
    features (B, num_patches, embed_dim), prefix (class / register) tokens dropped."""

    embed_dim: int
    num_patches: int
    grid_size: tuple[int, int]  # patches per (row, column); num_patches = rows x columns
    image_size: tuple[int, int]  # the (height, width) `transform` produces
    transform: Callable[[Any], torch.Tensor]

    def __call__(self, pixel_values: torch.Tensor) -> torch.Tensor: ...

    def flops_per_patch(self) -> float:
        """Training FLOPs (forward + backward) per output patch, for throughput and MFU."""
        ...

    def fsdp_units(self) -> set[type[nn.Module]]:
        """The module classes of its repeated blocks (each tower's, for several towers): the FSDP wrap and
        activation-checkpointing units (core.strategies.DeclaresFSDPUnits). Each occurs in the encoder."""
        ...


@runtime_checkable
class LanguageBackbone(Protocol):
    """An `nn.Module` around a transformers causal LM (`model`) and its tokenizer.

    `embed(input_ids)` gives what the model's own embedding layer gives (image patches are spliced among
    these); calling the backbone forwards keyword arguments (`inputs_embeds`, `attention_mask`, `labels`, ...)
    to `model` and returns its output (`.logits`, `.loss`). `prompt_format` turns conversations into token
    ids and labels and knows where an image goes."""

    model: nn.Module
    tokenizer: Any
    hidden_size: int
    max_length: int
    prompt_format: PromptFormat

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor: ...

    def fsdp_units(self) -> set[type[nn.Module]]:
        """The module classes of its decoder layers (transformers' `_no_split_modules`): the FSDP wrap and
        activation-checkpointing units (core.strategies.DeclaresFSDPUnits). Each occurs in the backbone."""
        ...

    def __call__(self, **kwargs) -> Any: ...


ProjectorFactory = Callable[[int, int], nn.Module]
"""A projector config builds this: (vision width, language width) → an `nn.Module` from (..., vision width)
features to (..., language width) embeddings."""
