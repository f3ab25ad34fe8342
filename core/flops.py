"""FLOP counts and accelerator peaks for throughput and MFU (model FLOPs utilisation).

MFU = achieved model FLOP/s ÷ the device's dense peak. Model FLOPs come from
the model's own count, not from the kernels run (recomputation from activation
checkpointing does not count):
- a decoder LM: `decoder_flops_per_token` = 6·N (non-embedding parameters;
  the output head counts, tied or not) + 12·L·d·T (attention scores and
  values at context length T), forward + backward, per token;
- anything else (an image encoder, a projector): `measure_flops` runs one
  forward under `torch.utils.flop_counter.FlopCounterMode` (attention in
  SDPA's math form, so that it is counted); training costs
  3x that (backward = 2x forward).

`peak_flops(device_name, dtype)` knows A100, H100 (SXM / PCIe / NVL) and H200
(SXM / NVL) by `torch.cuda.get_device_name()`; other devices return None and
MFU is left out unless `trainer.peak_flops` gives the figure.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

TERA = 1e12
# Dense (no sparsity) peak TFLOP/s from NVIDIA's data sheets, by chip and compute dtype.
PEAKS: dict[str, dict[str, float]] = {
    "a100": {"fp8": None, "bf16": 312, "fp16": 312, "tf32": 156, "fp32": 19.5},
    "h100-sxm": {"fp8": 1979, "bf16": 989, "fp16": 989, "tf32": 494.7, "fp32": 67},
    "h100-pcie": {"fp8": 1513, "bf16": 756, "fp16": 756, "tf32": 378, "fp32": 51},
    "h100-nvl": {"fp8": 1671, "bf16": 835, "fp16": 835, "tf32": 418, "fp32": 60},
    "h200-sxm": {"fp8": 1979, "bf16": 989, "fp16": 989, "tf32": 494.7, "fp32": 67},
    "h200-nvl": {"fp8": 1671, "bf16": 835, "fp16": 835, "tf32": 418, "fp32": 60},
}


def chip_of(device_name: str) -> str | None:
    """'NVIDIA H100 80GB HBM3' -> 'h100-sxm', 'NVIDIA H200' -> 'h200-sxm', 'NVIDIA A100-SXM4-80GB' -> 'a100'."""
    name = device_name.lower()
    for family in ("h200", "h100"):
        if family in name:
            if "nvl" in name:
                return f"{family}-nvl"
            if "pcie" in name or "hbm2e" in name:
                return f"{family}-pcie"
            return f"{family}-sxm"
    return "a100" if "a100" in name else None


def compute_dtype(precision: str, fp8: bool = False) -> str:
    """The matmul dtype a Lightning precision setting runs at: fp8 / bf16 / fp16 / tf32 / fp32."""
    if fp8:
        return "fp8"
    precision = str(precision)
    if precision.startswith("bf16"):
        return "bf16"
    if precision.startswith("16"):
        return "fp16"
    return "fp32" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def peak_flops(device_name: str, dtype: str) -> float | None:
    """Dense peak FLOP/s of one device, or None when the device or dtype is not in the table."""
    chip = chip_of(device_name)
    tflops = PEAKS.get(chip, {}).get(dtype) if chip else None
    return None if tflops is None else tflops * TERA


def device_peak_flops(device: torch.device, precision: str, fp8: bool = False, override: float | None = None) -> float | None:
    """`override` (trainer.peak_flops) if given; else the table's figure for a CUDA device; else None (CPU)."""
    if override:
        return float(override)
    if device.type != "cuda":
        return None
    return peak_flops(torch.cuda.get_device_name(device), compute_dtype(precision, fp8))


def non_embedding_params(model: nn.Module) -> int:
    """Parameters that do matmul work per token: all but the input embedding tables; an output head tied to
    an embedding table still counts (its matmul runs)."""
    params = {id(p): p for p in model.parameters()}
    embed = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    heads = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    return sum(p.numel() for i, p in params.items() if i not in embed or i in heads)


def decoder_flops_per_token(n_params: int, n_layers: int, d_model: int, seq_len: int) -> float:
    """Training (forward + backward) FLOPs per token of a decoder LM: 6·N + 12·L·d·T."""
    return 6.0 * n_params + 12.0 * n_layers * d_model * seq_len


def hf_decoder_flops_per_token(model: nn.Module, seq_len: int) -> float:
    """`decoder_flops_per_token` for a transformers causal LM, reading L and d from its config."""
    cfg = model.config
    return decoder_flops_per_token(non_embedding_params(model), cfg.num_hidden_layers, cfg.hidden_size, seq_len)


def measure_flops(fn: Callable[[], object]) -> float:
    """FLOPs of running `fn()` once, counted by torch's FlopCounterMode (matmuls, convolutions, attention).
    Attention runs in SDPA's math form so that its matmuls are counted on every device (the fused CPU
    kernel is invisible to the counter)."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


def mfu(flops: float, seconds: float, peak: float) -> float:
    """Model FLOPs utilisation: (flops / seconds) / peak."""
    return flops / seconds / peak
