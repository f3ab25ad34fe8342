"""The OmegaConf resolvers refract's configs use, and `register_resolvers()` that makes them known.

- `${gpu_or_cpu:A,B}`: A when a CUDA GPU is available, else B (the default trainer preset,
  conf/trainer/auto.yaml, takes the `gpu` preset's values with a GPU and the `cpu` preset's without).

Resolvers here are pure: they read the machine, never write anything. `core.trainer` registers them when
it is imported, so any code that trains a composed config has them; code that only composes and resolves
a config (tests, tools) calls `register_resolvers()` first.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf


def gpu_or_cpu(if_gpu: Any, if_cpu: Any) -> Any:
    """`if_gpu` when torch sees a CUDA GPU, else `if_cpu`."""
    import torch

    return if_gpu if torch.cuda.is_available() else if_cpu


RESOLVERS = {"gpu_or_cpu": gpu_or_cpu}


def register_resolvers() -> None:
    """Register every resolver in `RESOLVERS` with OmegaConf (idempotent)."""
    for name, resolver in RESOLVERS.items():
        OmegaConf.register_new_resolver(name, resolver, replace=True)
