"""Strategy factories named by `conf/trainer/*.yaml` (`strategy: {_target_: core.strategies.fsdp_strategy, ...}`).

`fsdp_strategy` builds Lightning's `FSDPStrategy` from plain config values:
- `sharding`: `full` (params, grads and optimizer state sharded), `shard_grad_op`
  (params gathered for the whole step: faster, more memory) or `hybrid`
  (full sharding inside a node, replication across nodes);
- `wrap`: dotted class paths of the blocks that become FSDP units, e.g.
  `transformers.models.llama.modeling_llama.LlamaDecoderLayer` and
  `timm.models.vision_transformer.Block` (the backbone's decoder layer and the
  encoder's block); the same classes get activation checkpointing when
  `activation_checkpointing` is true;
- `state_dict`: `sharded` (each rank writes its shard: large models) or `full`.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from torch import nn

SHARDING = {"full": "FULL_SHARD", "shard_grad_op": "SHARD_GRAD_OP", "hybrid": "HYBRID_SHARD", "no_shard": "NO_SHARD"}


def import_class(path: str) -> type[nn.Module]:
    """`package.module.Class` -> the class; a clear error when it cannot be imported."""
    module_name, _, name = str(path).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"FSDP wrap class {path!r} cannot be imported ({err}); give a dotted path like "
                         "transformers.models.llama.modeling_llama.LlamaDecoderLayer") from err
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ValueError(f"FSDP wrap class {path!r} is not an nn.Module subclass")
    return cls


def wrap_classes(paths: Iterable[str]) -> set[type[nn.Module]]:
    return {import_class(p) for p in dict.fromkeys(str(p) for p in paths if p)}


def fsdp_strategy(sharding: str = "full", wrap: Iterable[str] = (), activation_checkpointing: bool = True,
                  state_dict: str = "sharded", cpu_offload: bool = False, **kwargs):
    """Lightning FSDPStrategy with the wrap / activation-checkpointing policy given by class paths."""
    from lightning.pytorch.strategies import FSDPStrategy

    if sharding not in SHARDING:
        raise ValueError(f"trainer.strategy.sharding={sharding!r}: choose one of {sorted(SHARDING)}")
    if state_dict not in ("full", "sharded"):
        raise ValueError(f"trainer.strategy.state_dict={state_dict!r}: choose full or sharded")
    classes = wrap_classes(wrap)
    return FSDPStrategy(
        sharding_strategy=SHARDING[sharding],
        auto_wrap_policy=classes or None,
        activation_checkpointing_policy=classes if activation_checkpointing and classes else None,
        state_dict_type=state_dict,
        cpu_offload=cpu_offload,
        **kwargs,
    )
