"""core/memory.py: parameter counts against published model sizes, formulas against hand-computed cases, and
the activation formula against the bytes autograd actually saves for a small Llama (saved_tensors_hooks)."""

import pytest
import torch

from core.memory import (Decoder, Encoder, activation_bytes, head_activation_bytes_per_token,
                         layer_activation_bytes_per_token, mlp_projector_params, plan)

LLAMA2_7B = Decoder(32, 4096, 11008, 32, 32, 32000)
LLAMA2_13B = Decoder(40, 5120, 13824, 40, 40, 32000)


def test_param_counts_match_published_sizes():
    assert LLAMA2_7B.params == 6_738_415_616  # Llama-2-7b-hf
    assert LLAMA2_13B.params == 13_015_864_320  # Llama-2-13b-hf
    assert mlp_projector_params(1024, 4096) == 1024 * 4096 + 4096 + 4096 * 4096 + 4096  # LLaVA-1.5's mm_projector
    # fused: 2176 -> 8704 -> 4096 -> 4096, with biases
    assert mlp_projector_params(2176, 4096, fused=True) == 2176 * 8704 + 8704 + 8704 * 4096 + 4096 + 4096 * 4096 + 4096


def test_activation_formulas_hand_computed():
    d = Decoder(layers=2, hidden=4, intermediate=8, heads=2, kv_heads=1, vocab=10)  # kv_dim 2
    assert layer_activation_bytes_per_token(d, "fp32") == 32 * 4 + 8 * 2 + 16 * 8 + 4 * 2 == 280
    assert layer_activation_bytes_per_token(d, "ddp-bf16") == 120 + 8 + 64 + 8 == 200
    assert layer_activation_bytes_per_token(d, "fsdp-bf16") == 80 + 8 + 64 + 8 == 160
    assert head_activation_bytes_per_token(d, "fp32") == 48 + 80
    # no checkpointing: 3 tokens x (2 layers x 280 + 128); checkpointing: 3 x (2 x 16 + max(128, 280 + 32))
    assert activation_bytes(d, 3, "fp32", False) == 3 * (560 + 128)
    assert activation_bytes(d, 3, "fp32", True) == 3 * (32 + 312)
    # projector: 2 image tokens x 4 bytes x (dv 6 + 2h)
    assert activation_bytes(d, 3, "fp32", False, image_tokens=2, vision_dim=6) == 3 * 688 + 2 * 4 * 14
    with pytest.raises(ValueError, match="unknown compute mode"):
        layer_activation_bytes_per_token(d, "fp16")


def test_plan_hand_computed_ddp_and_fsdp():
    d = Decoder(layers=2, hidden=4, intermediate=8, heads=2, kv_heads=1, vocab=10)
    # layer: 4*(4+4) + 16 + 3*32 + 8 = 152; root: 2*40 + 4 = 84; decoder 388
    assert (d.layer_params, d.root_params, d.params) == (152, 84, 388)
    enc = Encoder(params=100, width=6, image_tokens=2)
    ddp = plan(d, enc, projector_params=12, seq=3, micro_batch=1, gpus=4, strategy="ddp", checkpointing=False)
    assert ddp.weights == 4 * 500 and ddp.grads == 8 * 400 and ddp.optimizer == 8 * 400
    assert ddp.working == 2 * (2 * 144 + 40)  # bf16 casts of the matmul weights and the head
    assert ddp.activations == 3 * (2 * 200 + 40 + 60) + 2 * 2 * 14
    fsdp = plan(d, enc, 12, 3, 1, 4, "fsdp", False)
    assert (fsdp.weights, fsdp.grads, fsdp.optimizer) == (500, 400, 800)
    assert fsdp.working == 2 * 96 + 3 * 2 * 152 + 2 * 96
    frozen = plan(d, enc, 12, 3, 1, 4, "fsdp", False, train_decoder=False)
    assert (frozen.grads, frozen.optimizer) == (12, 24) and frozen.working == 2 * 96 + 3 * 2 * 152 + 2 * 12
    assert fsdp.total == fsdp.weights + fsdp.grads + fsdp.optimizer + fsdp.activations + fsdp.working
    with pytest.raises(ValueError, match="strategy"):
        plan(d, enc, 12, 3, 1, 4, "zero3", False)


def test_presets_fit_where_llava_trained_them():
    """LLaVA-1.5 7B/13B finetune ran on 8 x 80 GB with ZeRO-3, micro-batch 16, 2048 tokens, checkpointing."""
    enc = Encoder(params=304_000_000, width=1024, image_tokens=576)
    for d in (LLAMA2_7B, LLAMA2_13B):
        proj = mlp_projector_params(1024, d.hidden)
        fsdp = plan(d, enc, proj, 2048, 16, 8, "fsdp", True).total
        assert fsdp < 80e9
        assert plan(d, enc, proj, 2048, 16, 8, "ddp", True).total > 80e9  # full replicas do not fit
        assert plan(d, enc, proj, 2048, 16, 8, "fsdp", False).total > 3 * fsdp


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_activation_formula_matches_autograd_saved_bytes(kv_heads):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg)
    ids = torch.randint(0, 256, (2, 64))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, labels=ids)
    seen[out.logits.untyped_storage().data_ptr()] = out.logits.untyped_storage().nbytes()
    measured = sum(n for k, n in seen.items() if k not in params)
    d = Decoder(2, 64, 160, 4, kv_heads, 256)
    predicted = activation_bytes(d, ids.numel(), "fp32", False)
    assert measured == pytest.approx(predicted, rel=0.03)
