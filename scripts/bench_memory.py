"""Training memory: the per-GPU plan of each preset, its check on tiny models, and measured step peaks.

    python scripts/bench_memory.py --plan --gpus 8 [--micro 16]   # predicted GiB per GPU, every preset of conf/experiment
    python scripts/bench_memory.py --check                        # prediction vs measurement on tiny decoders (CPU)
    python scripts/bench_memory.py                                # measured step peak per variant (CPU or GPU)
    python scripts/bench_memory.py --hidden 2048 --layers 16 --seq 2048 --batch 4   # the same on a GPU

--plan: the arithmetic is core/memory.py (formulas in docs/scaling.md, "Memory plan"). Each preset is composed
with Hydra; the encoder's parameters, width and image tokens come from its timm model built on the meta device
(no download); the decoder's shapes from the published config.json of its model id (DECODERS below, since
the hub is not reachable here). The phase planned is the preset's last (projector + language model train).

--check: tiny Llama-family decoders (the tiny_llama flavour's shapes, vlm/tiny/text.py, and a GQA variant) in
fp32, DDP-style bf16 autocast over fp32 weights, and FSDP-style bf16 weights: (1) the bytes autograd saves for
backward, counted exactly with `torch.autograd.graph.saved_tensors_hooks` (unique storages, parameters
excluded) plus the logits the model returns, against the predicted activations; (2) for fp32 on CPU, the peak
of the step's allocations over those live before it (torch.profiler's memory events, summed in time order),
against the predicted peak (core.memory.activation_bytes); with checkpointing the peak falls in backward, when
the step's gradients (allocated in backward, `zero_grad(set_to_none=True)`) partly exist, so the measurement
lies between the predicted activations and activations + 4·P.

Default mode: each variant (plain, checkpointing, fsdp, fsdp+checkpointing) in its own process, forward +
backward + AdamW step after one warm-up step: on a GPU `torch.cuda.max_memory_allocated` over the measured
step minus the memory allocated before it; on CPU the same from torch.profiler's memory events. FSDP is FSDP2
`fully_shard` on one process (gloo / NCCL): it shows the wrapper's overhead, not sharding savings.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.memory import GIB, Decoder, Encoder, activation_bytes, mlp_projector_params, plan  # noqa: E402

VARIANTS = ("plain", "checkpointing", "fsdp", "fsdp+checkpointing")
# config.json of each model id the presets name (hidden_size, num_hidden_layers, intermediate_size,
# num_attention_heads, num_key_value_heads, vocab_size); Vicuna v1.5 keeps Llama-2's shapes.
DECODERS = {
    "lmsys/vicuna-7b-v1.5": Decoder(32, 4096, 11008, 32, 32, 32000),
    "meta-llama/Llama-2-7b-hf": Decoder(32, 4096, 11008, 32, 32, 32000),
    "lmsys/vicuna-13b-v1.5": Decoder(40, 5120, 13824, 40, 40, 32000),
}


def _timm_encoder(node) -> Encoder:
    import timm
    import torch

    name = str(node.model_id).removeprefix("hf-hub:timm/").rsplit(".", 1)[0]
    with torch.device("meta"):
        m = timm.create_model(name, pretrained=False, **{k: v for k, v in (node.get("model_kwargs") or {}).items()
                                                          if k != "act_layer"})
    return Encoder(sum(p.numel() for p in m.parameters()), m.num_features, m.patch_embed.num_patches)


def preset_shapes(name: str):
    """(decoder, encoder, projector params, seq, trainable of the last phase) of conf/experiment/NAME.yaml."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"experiment={name}"])
    if cfg.backbone.model_id not in DECODERS:
        raise SystemExit(f"{name}: no shapes for backbone {cfg.backbone.model_id}; add its config.json values to DECODERS")
    dec = DECODERS[cfg.backbone.model_id]
    parts = [_timm_encoder(n) for n in cfg.encoder.encoders.values()] if cfg.encoder.get("encoders") else [_timm_encoder(cfg.encoder)]
    enc = Encoder(sum(p.params for p in parts), sum(p.width for p in parts), parts[0].image_tokens)
    proj = mlp_projector_params(enc.width, dec.hidden, fused=cfg.projector.name == "fused_mlp")
    last = list(cfg.stage.phases.values())[-1]
    return dec, enc, proj, int(cfg.backbone.max_length), "backbone" in last.trainable


def print_plan(gpus: int, micro: int) -> None:
    print(f"Predicted per-GPU memory (GiB), {gpus} GPUs, micro-batch {micro}, bf16-mixed, AdamW, last phase; "
          f"ckpt = activation checkpointing of the decoder layers")
    print("| preset | params | strategy | ckpt | weights | grads | AdamW | working | activations | total |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in sorted((ROOT / "conf" / "experiment").glob("*.yaml")):
        dec, enc, proj, seq, train_dec = preset_shapes(path.stem)
        for strategy in ("ddp", "fsdp"):
            for ckpt in (False, True):
                p = plan(dec, enc, proj, seq, micro, gpus, strategy, ckpt, train_decoder=train_dec)
                n = (dec.params + enc.params + proj) / 1e9
                print(f"| {path.stem} | {n:.2f}B | {strategy} | {'yes' if ckpt else 'no'} | {p.weights / GIB:.1f} | "
                      f"{p.grads / GIB:.1f} | {p.optimizer / GIB:.1f} | {p.working / GIB:.1f} | "
                      f"{p.activations / GIB:.1f} | {p.total / GIB:.1f} |")


def _saved_bytes(model, ids, autocast: bool) -> int:
    """Bytes of the unique non-parameter storages autograd saves in one forward, plus the returned logits."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = model(input_ids=ids, labels=ids)
    seen.setdefault(out.logits.untyped_storage().data_ptr(), out.logits.untyped_storage().nbytes())
    return sum(n for k, n in seen.items() if k not in params)


def _step_peak(model, ids) -> int:
    """Peak bytes allocated during one training step above those live before it (torch.profiler memory events)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # optimizer state exists before the measurement
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    cur = best = 0
    for e in sorted(prof.events(), key=lambda e: e.time_range.start):
        cur += e.self_cpu_memory_usage
        best = max(best, cur)
    return best


def check(batch: int, seq: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from vlm.tiny.text import LLAMA_ARGS, LLAMA_VOCAB

    torch.set_num_threads(1)
    print(f"tiny decoders, batch {batch} x seq {seq}: predicted vs measured activation bytes")
    print("| model | mode | predicted MiB | measured MiB | measured / predicted | predicted + gradients (4P) MiB |")
    print("|---|---|---|---|---|---|")
    tokens = batch * seq
    for label, kv in (("tiny_llama", LLAMA_ARGS["num_key_value_heads"]), ("tiny_llama, GQA kv_heads=2", 2)):
        args = dict(LLAMA_ARGS, num_key_value_heads=kv, max_position_embeddings=seq)
        d = Decoder(args["num_hidden_layers"], args["hidden_size"], args["intermediate_size"],
                    args["num_attention_heads"], kv, LLAMA_VOCAB)
        for mode in ("fp32", "ddp-bf16", "fsdp-bf16"):
            torch.manual_seed(0)
            model = LlamaForCausalLM(LlamaConfig(vocab_size=LLAMA_VOCAB, **args))
            if mode == "fsdp-bf16":
                model = model.bfloat16()  # what FSDP's bf16 param_dtype gathers
            ids = torch.randint(0, LLAMA_VOCAB, (batch, seq))
            measured = _saved_bytes(model, ids, autocast=mode != "fp32")
            pred = activation_bytes(d, tokens, mode, False)
            if mode == "ddp-bf16":  # the bf16 weight casts autograd keeps (plan's `working` term)
                pred += 2 * (d.layers * d.layer_linear_params + d.vocab * d.hidden)
            print(f"| {label} | {mode} saved for backward | {pred / 2**20:.2f} | {measured / 2**20:.2f} | {measured / pred:.3f} | - |")
        torch.manual_seed(0)
        for ckpt in (False, True):
            model = LlamaForCausalLM(LlamaConfig(vocab_size=LLAMA_VOCAB, **args))
            if ckpt:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})  # as backbone.gradient_checkpointing
            model.train()
            ids = torch.randint(0, LLAMA_VOCAB, (batch, seq))
            measured = _step_peak(model, ids)
            pred = activation_bytes(d, tokens, "fp32", ckpt)
            grads = 4 * sum(p.numel() for p in model.parameters())  # allocated during backward (zero_grad set_to_none)
            print(f"| {label} | fp32 step peak{' + ckpt' if ckpt else ''} | {pred / 2**20:.2f} | {measured / 2**20:.2f} | "
                  f"{measured / pred:.3f} | {(pred + grads) / 2**20:.2f} |")


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
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    d = Decoder(cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads,
                cfg.num_key_value_heads, cfg.vocab_size)
    ckpt = "checkpointing" in args.variant
    predicted = activation_bytes(d, ids.numel(), "fp32", ckpt)
    if cuda:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for i in range(2):
            if i == 1:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        step_mem = torch.cuda.max_memory_allocated() - base
    else:
        step_mem = _step_peak(model, ids)
    params = sum(p.numel() for p in model.parameters())
    return {"variant": args.variant, "device": torch.cuda.get_device_name() if cuda else "cpu", "params": params,
            "step_bytes": step_mem, "predicted_bytes": predicted}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plan", action="store_true", help="print the predicted per-GPU memory of every preset")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--micro", type=int, default=16, help="micro-batch per GPU for --plan")
    p.add_argument("--check", action="store_true", help="prediction vs measurement on tiny decoders")
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
    if args.plan:
        return print_plan(args.gpus, args.micro)
    if args.check:
        return check(args.batch, args.seq)
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
    print(f"{'variant':<20} {'step memory MiB':>16} {'vs plain':>9} {'predicted fp32 MiB':>19}")
    for r in rows:
        ratio = r["step_bytes"] / ref["step_bytes"] if ref["step_bytes"] else float("nan")
        print(f"{r['variant']:<20} {r['step_bytes'] / 2**20:>16.1f} {ratio:>9.2f} {r['predicted_bytes'] / 2**20:>19.1f}")


if __name__ == "__main__":
    main()
