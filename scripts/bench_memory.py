"""Peak memory of one training step of a Llama-shaped decoder: plain, with activation checkpointing, with FSDP.

    python scripts/bench_memory.py                              # CPU: small model, every variant
    python scripts/bench_memory.py --hidden 2048 --layers 16 --seq 2048 --batch 4   # on a GPU

Each variant runs in its own process (forward + backward + AdamW step, after one
warm-up step): on a GPU the figure is `torch.cuda.max_memory_allocated` over the
measured step; on CPU it is the growth of the process's peak resident memory
(ru_maxrss) during the measured steps over the resident memory before them,
which counts what the step allocated beyond the weights and optimizer state.
Activation checkpointing wraps each decoder layer (the same class list the FSDP
preset uses); `fsdp` shards with FSDP2 `fully_shard` over one process (gloo on
CPU, NCCL on GPU): with one rank it shows the wrapper's overhead, not sharding
savings. Ratios are against the plain step measured by the same command.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

VARIANTS = ("plain", "checkpointing", "fsdp", "fsdp+checkpointing")


def worker(args) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda" if cuda else "cpu")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=int(args.hidden * 8 / 3) // 16 * 16,
                      num_hidden_layers=args.layers, num_attention_heads=max(1, args.hidden // 64), max_position_embeddings=args.seq)
    model = LlamaForCausalLM(cfg).to(device)
    if "fsdp" in args.variant:
        import torch.distributed as dist
        from torch.distributed.fsdp import fully_shard

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    if "checkpointing" in args.variant:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing

        apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, LlamaDecoderLayer))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)

    def step():
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up: optimizer state and allocator caches exist before the measurement
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss_bytes()
    for _ in range(2):
        step()
    if cuda:
        torch.cuda.synchronize()
        peak, step_mem = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        step_mem = max(0, peak - base)
    params = sum(p.numel() for p in model.parameters())
    return {"variant": args.variant, "device": torch.cuda.get_device_name() if cuda else "cpu", "params": params,
            "peak_bytes": peak, "step_bytes": step_mem}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cpu", action="store_true", help="measure on CPU even when a GPU is present")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--variant", help=argparse.SUPPRESS)  # set in the per-variant worker process
    args = p.parse_args()
    if args.variant:
        print(json.dumps(worker(args)))
        return
    rows = []
    for variant in args.variants.split(","):
        cmd = [sys.executable, __file__, *sys.argv[1:], "--variant", variant]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{variant}: failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
            continue
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    if not rows:
        sys.exit(1)
    ref = next((r for r in rows if r["variant"] == "plain"), rows[0])
    print(f"Llama-shaped decoder: {ref['params'] / 1e6:.1f}M params, hidden {args.hidden} x {args.layers} layers, "
          f"batch {args.batch} x seq {args.seq}, device {ref['device']}")
    print(f"{'variant':<20} {'step memory MiB':>16} {'peak MiB':>10} {'vs plain':>9}")
    for r in rows:
        ratio = r["step_bytes"] / ref["step_bytes"] if ref["step_bytes"] else float("nan")
        print(f"{r['variant']:<20} {r['step_bytes'] / 2**20:>16.1f} {r['peak_bytes'] / 2**20:>10.1f} {ratio:>9.2f}")


if __name__ == "__main__":
    main()
