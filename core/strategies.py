"""Strategy factories named by `conf/trainer/*.yaml` (`strategy: {_target_: core.strategies.fsdp_strategy, ...}`).

`fsdp_strategy` builds `UnitsFSDPStrategy`, Lightning's `FSDPStrategy` whose wrap units come from the model:
- `sharding`: `full` (params, grads and optimizer state sharded), `shard_grad_op`
  (params gathered for the whole step: faster, more memory) or `hybrid`
  (full sharding inside a node, replication across nodes);
- `wrap`: null (the default) takes the units from the model itself: when the strategy is set up (the model
  is built by then), every sub-module with a `fsdp_units()` method (`DeclaresFSDPUnits`, e.g. a VLM's
  backbone — transformers' `_no_split_modules` — and its encoder's blocks, each tower of a fused encoder)
  names the module classes that become FSDP units; a list of dotted class paths (e.g.
  `transformers.models.llama.modeling_llama.LlamaDecoderLayer`) names them by hand instead. Either way
  every class must match at least one module of the model — a class that matches nothing is an error
  naming the class and the model, never an empty policy; the units found are printed once (rank 0);
- `activation_checkpointing`: the same units get activation checkpointing;
- `state_dict`: `sharded` (each rank writes its shard: large models) or `full`.

The core imports no model package: the model tells the strategy its units through `fsdp_units()`.
Lightning refuses its own `FSDPStrategy` on CPU; this subclass is allowed there (gloo), which the 2-process
CPU test (tests/test_fsdp.py) uses.
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from lightning.pytorch.strategies import FSDPStrategy
from lightning.pytorch.utilities import rank_zero_only
from torch import nn

SHARDING = {"full": "FULL_SHARD", "shard_grad_op": "SHARD_GRAD_OP", "hybrid": "HYBRID_SHARD", "no_shard": "NO_SHARD"}


class FSDPUnitsError(ValueError):
    """The model declares no wrap units, or a wrap class matches no module of the model."""


@runtime_checkable
class DeclaresFSDPUnits(Protocol):
    """A sub-module that knows which of its module classes are FSDP wrap (and activation-checkpointing) units."""

    def fsdp_units(self) -> set[type[nn.Module]]: ...


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


def _describe(module: nn.Module, path: str) -> str:
    return f"{path or 'the model'} ({type(module).__name__})"


def _count(module: nn.Module, classes: Iterable[type[nn.Module]], owner: str) -> Counter:
    """Modules of `module` per class; a class with none is an error naming it and `owner`."""
    counts = Counter()
    classes = tuple(classes)
    for sub in module.modules():
        for cls in classes:
            if isinstance(sub, cls):
                counts[cls] += 1
    for cls in classes:
        if not counts[cls]:
            raise FSDPUnitsError(f"FSDP wrap class {cls.__module__}.{cls.__qualname__} matches no module of {owner}; "
                                 "an empty wrap policy would shard nothing and checkpoint nothing. Name a class the "
                                 "model contains in trainer.strategy.wrap, or leave it null to take the units from the model")
    return counts


def find_units(model: nn.Module, classes: Iterable[type[nn.Module]] | None = None) -> Counter:
    """The FSDP units of `model`: class -> number of modules of that class.

    `classes` None: the classes every `DeclaresFSDPUnits` sub-module (the model included) declares, each of which
    must occur inside the module that declares it; otherwise the given classes, each of which must occur in `model`."""
    if classes is not None:
        return _count(model, classes, _describe(model, ""))
    declared: set[type[nn.Module]] = set()
    found = False
    for path, module in model.named_modules():
        if isinstance(module, DeclaresFSDPUnits):
            found = True
            units = set(module.fsdp_units())
            _count(module, units, _describe(module, path))  # each declared class occurs where it is declared
            declared |= units
    if not found:
        raise FSDPUnitsError(f"no module of {_describe(model, '')} declares its FSDP units (a `fsdp_units()` method); "
                             "set trainer.strategy.wrap to the dotted class paths of its blocks")
    return _count(model, declared, _describe(model, ""))  # the policy wraps every module of these classes


def describe_units(counts: Counter) -> str:
    return ", ".join(f"{n} x {cls.__name__}" for cls, n in sorted(counts.items(), key=lambda kv: kv[0].__name__))


class UnitsFSDPStrategy(FSDPStrategy):
    """`FSDPStrategy` whose wrap and activation-checkpointing policy is found in the model at set-up."""

    def __init__(self, wrap: set[type[nn.Module]] | None = None, activation_checkpointing: bool = True, **kwargs):
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        # a placeholder policy (Lightning wants one for hybrid sharding at construction), replaced in `setup`
        super().__init__(auto_wrap_policy=ModuleWrapPolicy(set()), **kwargs)
        self.wrap = wrap
        self.checkpoint_units = activation_checkpointing
        self.units: Counter | None = None

    def setup(self, trainer) -> None:
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        self.units = find_units(self.lightning_module, self.wrap)
        classes = set(self.units)
        self.kwargs["auto_wrap_policy"] = ModuleWrapPolicy(classes)
        self._activation_checkpointing_kwargs = {"auto_wrap_policy": ModuleWrapPolicy(classes)} if self.checkpoint_units else {}
        if rank_zero_only.rank == 0:
            checkpointed = " (activation checkpointing on)" if self.checkpoint_units else ""
            print(f"FSDP units: {describe_units(self.units)}{checkpointed}")
        super().setup(trainer)

    def _setup_model(self, model: nn.Module) -> nn.Module:
        """Lightning's wrapping, except on CPU: torch's FSDP runs there (gloo) only when given the device, and
        Lightning gives it none (it supports FSDP on GPUs only)."""
        if self.root_device.type != "cpu":
            return super()._setup_model(model)
        from lightning.fabric.strategies.fsdp import _setup_activation_checkpointing
        from torch.distributed.fsdp import FullyShardedDataParallel

        model = FullyShardedDataParallel(module=model, cpu_offload=self.cpu_offload, mixed_precision=self.mixed_precision_config,
                                         sharding_strategy=self.sharding_strategy, device_id=self.root_device, **self.kwargs)
        _setup_activation_checkpointing(model, self._activation_checkpointing_kwargs)
        return model


def fsdp_wrapped(model: nn.Module) -> bool:
    """Whether FSDP has wrapped modules of `model` (in place, when a phase trained it)."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    return any(isinstance(m, FullyShardedDataParallel) for m in model.modules())


def save_weights(strategy, model: nn.Module, path) -> None:
    """`model`'s weights as safetensors at `path`, written by rank 0; every rank must call it.

    Other strategies: `core.checkpoint.save_weights_atomic` on rank 0. FSDP: the shards are gathered on every
    rank (a collective, not written back) and rank 0 writes a copy, one entry per tensor (tied weights once,
    as safetensors' `save_model` does; `load_model` restores the ties)."""
    from core.checkpoint import save_weights_atomic

    if not isinstance(strategy, FSDPStrategy) or strategy.model is None:
        if strategy.global_rank == 0:
            save_weights_atomic(model, path)
        return
    from safetensors.torch import save_file
    from torch.distributed.fsdp import FullyShardedDataParallel

    from data.atomic import atomic_file

    with FullyShardedDataParallel.summon_full_params(strategy.model, writeback=False):
        if strategy.global_rank == 0:
            weights, seen = {}, set()
            for name, tensor in model.state_dict().items():  # gathered params are views of one flat tensor: copy
                if tensor.data_ptr() not in seen:
                    seen.add(tensor.data_ptr())
                    weights[name] = tensor.detach().to("cpu", copy=True).contiguous()
            with atomic_file(path) as tmp:
                save_file(weights, str(tmp))


def fsdp_strategy(sharding: str = "full", wrap: Iterable[str] | None = None, activation_checkpointing: bool = True,
                  state_dict: str = "sharded", cpu_offload: bool = False, **kwargs) -> UnitsFSDPStrategy:
    """The FSDP strategy; `wrap` None: units from the model's `fsdp_units()`, else from these class paths."""
    if sharding not in SHARDING:
        raise ValueError(f"trainer.strategy.sharding={sharding!r}: choose one of {sorted(SHARDING)}")
    if state_dict not in ("full", "sharded"):
        raise ValueError(f"trainer.strategy.state_dict={state_dict!r}: choose full or sharded")
    if wrap is not None and not isinstance(wrap, str) and not list(wrap):
        raise ValueError("trainer.strategy.wrap=[] would wrap nothing: leave it null (units from the model) or "
                         "name the block classes")
    classes = None if wrap is None else wrap_classes([wrap] if isinstance(wrap, str) else wrap)
    return UnitsFSDPStrategy(
        wrap=classes,
        activation_checkpointing=activation_checkpointing,
        sharding_strategy=SHARDING[sharding],
        state_dict_type=state_dict,
        cpu_offload=cpu_offload,
        **kwargs,
    )
