"""lm_pretrain: a micro-batch whose answers are all cut off has no target token; its loss is 0 with zero gradients
(transformers' mean gives 0/0 = NaN, which the core's NaN guard would stop the run on), and it warns once."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from vlm.pretrain.lm_task import CausalLM


def tiny_lm() -> CausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, max_position_embeddings=16)
    return CausalLM(LlamaForCausalLM(config), tokenizer=None)


def batch(labels):
    ids = torch.tensor([[1, 5, 6, 7]])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([labels])}


def test_no_target_tokens_give_a_zero_loss_and_zero_gradients():
    model = tiny_lm()
    with pytest.warns(UserWarning, match="no target tokens"):
        loss = model.loss(batch([-100, -100, -100, -100]))
    loss.backward()
    assert loss.item() == 0.0 and str(loss.item()) == "0.0"
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_a_target_token_gives_the_models_own_loss():
    model = tiny_lm()
    labels = [-100, -100, -100, 7]
    out = model.lm(**{k: v for k, v in batch(labels).items() if k != "labels"})
    reference = torch.nn.functional.cross_entropy(out.logits[0, 2], torch.tensor(7))  # the one target: token 3 from 2
    assert torch.allclose(model.loss(batch(labels)), reference, atol=1e-6)
