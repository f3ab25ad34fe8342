"""FP8 training through torchao's float8 (`trainer.fp8=true`): Hopper-class GPUs only.

`apply_fp8(model)` swaps eligible `nn.Linear` layers for torchao `Float8Linear`
(dynamic tensorwise scaling; master weights and optimizer state stay in the
run's precision). Small layers are left alone: FP8 GEMMs need both dimensions
divisible by 16 and only pay off above a size (`min_features`); output heads
(`lm_head`) are kept in high precision, as torchtitan does. Anything that cannot
run FP8 (no torchao, no GPU, a GPU before compute capability 8.9) is refused
with a message saying why, instead of silently training in bf16.

Install: `pip install -e ".[gpu]"` (torchao).
"""

from __future__ import annotations

import torch
from torch import nn

SKIP_NAMES = ("lm_head", "output")


class FP8Unavailable(RuntimeError):
    pass


def fp8_eligible(module: nn.Module, fqn: str, min_features: int = 1024) -> bool:
    """An nn.Linear worth converting: both dims divisible by 16, both at least `min_features`, not an output head."""
    if not isinstance(module, nn.Linear):
        return False
    if fqn.split(".")[-1] in SKIP_NAMES:
        return False
    dims = (module.in_features, module.out_features)
    return all(d % 16 == 0 and d >= min_features for d in dims)


def check_fp8_hardware() -> None:
    """Raise FP8Unavailable unless torchao is importable and a CUDA GPU of compute capability >= 8.9 is present."""
    try:
        import torchao.float8  # noqa: F401
    except ImportError as err:
        raise FP8Unavailable(f"trainer.fp8=true needs torchao ({err}); install it with `pip install -e \".[gpu]\"`") from err
    if not torch.cuda.is_available():
        raise FP8Unavailable("trainer.fp8=true needs a CUDA GPU with FP8 tensor cores (Hopper H100/H200 or Ada); none is available")
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9):
        raise FP8Unavailable(f"trainer.fp8=true needs FP8 tensor cores (compute capability >= 8.9, e.g. H100/H200); "
                             f"{torch.cuda.get_device_name()} has {major}.{minor}")


def apply_fp8(model: nn.Module, min_features: int = 1024) -> list[str]:
    """Convert the eligible linear layers of `model` in place; returns their names."""
    check_fp8_hardware()
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    converted: list[str] = []

    def keep(module: nn.Module, fqn: str) -> bool:
        ok = fp8_eligible(module, fqn, min_features)
        if ok:
            converted.append(fqn)
        return ok

    convert_to_float8_training(model, config=Float8LinearConfig(), module_filter_fn=keep)
    if not converted:
        raise FP8Unavailable(f"trainer.fp8=true converted no layer: no nn.Linear has both dims divisible by 16 and >= {min_features}")
    return converted
