#!/usr/bin/env bash
# One short check for a session that has a GPU (about 5-8 minutes on an H100/H200; no network needed):
#   1. matmul peak actually reachable (bf16 8192^3);
#   2. tokens/s and MFU of a ~1.1B Llama-shaped decoder (hidden 2048 x 16 layers, vocab 32000,
#      batch 4 x seq 2048) in bf16, bf16 + torch.compile, FP8 (torchao float8) + compile, FSDP2 on one GPU;
#   3. peak memory of a training step with/without activation checkpointing and FSDP (scripts/bench_memory.py);
#   4. the tiny VLM end to end through train.py: trainer=gpu (bf16) and trainer=fsdp on one GPU.
# Usage: bash scripts/gpu_check.sh            (VARIANTS="bf16 fp8" to choose; OUT=dir for the logs)
# Prints a summary at the end; copy its figures into docs/scaling.md.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-runs/gpu_check}
VARIANTS=${VARIANTS:-"bf16 bf16+compile fp8+compile fsdp"}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

VARIANTS="$VARIANTS" timeout 420 "$PY" - <<'EOF' 2>&1 | tee "$OUT/throughput.txt"
import os, time, torch
from transformers import LlamaConfig, LlamaForCausalLM
from core.flops import device_peak_flops, hf_decoder_flops_per_token

dev = torch.device("cuda")
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
for _ in range(3): a @ a
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(20): a @ a
torch.cuda.synchronize()
print(f"RESULT matmul_bf16_tflops={20 * 2 * 8192**3 / (time.perf_counter() - t) / 1e12:.0f}")
del a

B, T = 4, 2048
cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                  num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=T)
for variant in os.environ["VARIANTS"].split():
    try:
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg).to(dev)
        flops_tok = hf_decoder_flops_per_token(model, T)
        if variant.startswith("fp8"):
            from core.fp8 import apply_fp8
            print(f"fp8: {len(apply_fp8(model.model))} linear layers converted")
        if variant == "fsdp":
            import torch.distributed as dist
            from torch.distributed.fsdp import fully_shard
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29511")
            if not dist.is_initialized():
                dist.init_process_group("nccl", rank=0, world_size=1)
            for layer in model.model.layers:
                fully_shard(layer)
            fully_shard(model)
        step_model = torch.compile(model) if "compile" in variant else model
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=variant != "fsdp")
        ids = torch.randint(0, cfg.vocab_size, (B, T), device=dev)
        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(input_ids=ids, labels=ids).loss
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        for _ in range(3): step()
        torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); t = time.perf_counter()
        n = 10
        for _ in range(n): step()
        torch.cuda.synchronize(); dt = (time.perf_counter() - t) / n
        tok_s = B * T / dt
        peak = device_peak_flops(dev, "bf16-mixed", fp8=variant.startswith("fp8"))
        mfu = f"{tok_s * flops_tok / peak:.3f}" if peak else "n/a"
        print(f"RESULT {variant}: params={sum(p.numel() for p in model.parameters())/1e9:.2f}B tokens/s={tok_s:.0f} "
              f"step={dt*1e3:.0f}ms mfu={mfu} (peak {peak and peak/1e12:.0f} TFLOP/s) mem={torch.cuda.max_memory_allocated()/2**30:.1f}GiB")
        del model, step_model, opt
        torch.cuda.empty_cache()
    except Exception as err:  # one failing variant must not hide the others
        print(f"RESULT {variant}: FAILED {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
EOF

timeout 240 "$PY" scripts/bench_memory.py --hidden 2048 --layers 8 --seq 2048 --batch 4 --vocab 32000 2>&1 | tee "$OUT/memory.txt"

SMALL="logger=csv trainer.progress_bar=false data.generator.n_train=200 data.generator.n_test=10 trainer.max_steps=30 trainer.log_every_n_steps=10 run.root=$OUT"
timeout 180 "$PY" train.py trainer=gpu $SMALL run.name=tiny-bf16 > "$OUT/tiny-bf16.log" 2>&1; echo "train.py trainer=gpu: exit $?" | tee -a "$OUT/e2e.txt"
timeout 180 "$PY" train.py trainer=fsdp trainer.devices=1 $SMALL run.name=tiny-fsdp > "$OUT/tiny-fsdp.log" 2>&1; echo "train.py trainer=fsdp devices=1: exit $?" | tee -a "$OUT/e2e.txt"

echo "================ summary ================"
cat "$OUT/gpu.txt"
grep RESULT "$OUT/throughput.txt"
cat "$OUT/memory.txt"
cat "$OUT/e2e.txt"
for r in tiny-bf16 tiny-fsdp; do
  [ -f "$OUT/$r/metrics.csv" ] && echo "$r last log row:" && tail -1 "$OUT/$r/metrics.csv"
done
