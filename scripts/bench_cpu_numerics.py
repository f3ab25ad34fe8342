"""CPU numerics modes: the step time of a cell-shaped training step when torch's kernels are held to one ISA.

    python scripts/bench_cpu_numerics.py [--steps 20] [--modes native,avx2,compatible]

Seeded one-thread training writes the same weights again on one kind of CPU but not across kinds
(docs/reproduction.md, runs 208-210), because ATen's vector kernels, MKL's GEMMs and oneDNN's JIT kernels each
dispatch on the CPU's instruction set. Each mode runs in its own process with the environment variables that pin
the three libraries' dispatch (they are read when the libraries first load, so they cannot be set later):
- `native`: nothing pinned (AVX-512 where the CPU has it);
- `avx2`: ATEN_CPU_CAPABILITY=avx2, MKL_CBWR=AVX2 (MKL documents the same results on every Intel CPU with AVX2,
  and AUTO, i.e. no guarantee, on others), ONEDNN_MAX_CPU_ISA=AVX2;
- `compatible`: ATen's default kernels, MKL_CBWR=COMPATIBLE (SSE2 without approximate reciprocals, the branch MKL
  offers for non-Intel CPUs too), oneDNN at SSE4.1.

The step: the study's tiny ViT (vit_base_patch16_siglip_224 at 64 px, patch 8, width 128, depth 4) and
`tiny:mini_llama_text` (written on first use) with a two-layer projector, batch 16, 64 image + 60 text tokens,
forward + backward + AdamW, fp32, one thread; three warm-up steps, then `--steps` timed. Prints one JSON object:
per mode the milliseconds per step, the final loss (to 17 digits: equal losses say the mode changed nothing on
this CPU) and ATen's capability in use.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODES = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "compatible": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41"},
}
PINNED = sorted({key for env in MODES.values() for key in env})


def mode_env(mode: str, base: dict[str, str]) -> dict[str, str]:
    """`base` with the mode's variables set and the other pinning variables removed (so `native` is native)."""
    if mode not in MODES:
        raise ValueError(f"unknown numerics mode {mode!r}; choose from {sorted(MODES)}")
    env = {k: v for k, v in base.items() if k not in PINNED}
    return {**env, "OMP_NUM_THREADS": "1", **MODES[mode]}


def one_mode(steps: int) -> dict:
    """Time the step in this process (its environment fixes the mode)."""
    import time

    import timm
    import torch
    from transformers import AutoModelForCausalLM

    from vlm.tiny import ensure_tiny

    torch.set_num_threads(1)
    torch.manual_seed(0)
    vit = timm.create_model("vit_base_patch16_siglip_224", pretrained=False, num_classes=0, img_size=64, patch_size=8,
                            embed_dim=128, depth=4, num_heads=4, global_pool="map")
    lm = AutoModelForCausalLM.from_pretrained(ensure_tiny("mini_llama_text"))
    width = lm.config.hidden_size
    projector = torch.nn.Sequential(torch.nn.Linear(vit.num_features, width), torch.nn.GELU(), torch.nn.Linear(width, width))
    params = [*vit.parameters(), *projector.parameters(), *lm.parameters()]
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    images = torch.randn(16, 3, 64, 64)
    ids = torch.randint(0, lm.config.vocab_size, (16, 60))

    def step() -> float:
        embeds = torch.cat([projector(vit.forward_features(images)), lm.get_input_embeddings()(ids)], dim=1)
        loss = lm(inputs_embeds=embeds).logits.logsumexp(-1).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.item()

    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    return {"ms_per_step": round((time.perf_counter() - start) / steps * 1000, 1), "final_loss": repr(loss),
            "aten_capability": torch.backends.cpu.get_cpu_capability()}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--modes", default="native,avx2,compatible", help=f"comma-separated, from {sorted(MODES)}")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        result = one_mode(args.steps)
        print(json.dumps(result))
        return result
    results = {}
    for mode in args.modes.split(","):
        done = subprocess.run([sys.executable, __file__, "--child", "--steps", str(args.steps)], cwd=ROOT,
                              env=mode_env(mode, dict(os.environ)), capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"mode {mode}: the benchmark process failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
        results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
