"""Each task's per-sample losses (`sample_losses`, what smart sifting ranks by) against the task's own batch loss:
a row's loss is the batch loss of that row alone (the VLM: transformers' own shifted loss), and where every row
weighs the same the batch loss is their mean (open_clip's ClipLoss / SigLipLoss, BCE, MAE, the policies)."""

import numpy as np
import pytest
import torch

from behavior.codec import ActionCodec
from behavior.policy import GPTPolicy, MLPPolicy
from behavior.tokenizers import build_tokenizer
from vlm.dataset import Collator
from vlm.lightning import VLMModule
from vlm.pretrain.objectives import build_objective

PHASE = {"name": "p", "optim": {"lr": 1e-3}, "trainable": ["projector"]}


def test_vlm_row_losses_are_each_rows_own_transformers_loss(tiny_vlm):
    module = VLMModule(tiny_vlm, PHASE, total_steps=1).eval()
    fmt, rows = tiny_vlm.prompt_format, []
    for k, (question, answer) in enumerate([("what shape is the red object?", "circle"), ("is it left?", "no, right"),
                                            ("count them", "3")]):
        ids, labels, positions = fmt.build_with_images([("human", "<image>\n" + question), ("gpt", answer)], 1)
        rows.append({"input_ids": ids, "labels": labels, "image_positions": positions,
                     "pixel_values": torch.randn(3, 64, 64, generator=torch.Generator().manual_seed(k))})
    collate = Collator(tiny_vlm.tokenizer.pad_token_id)
    with torch.no_grad():
        losses = module.sample_losses(collate(rows))
        for r, row in enumerate(rows):
            torch.testing.assert_close(losses[r], tiny_vlm(**collate([row])).loss, rtol=1e-5, atol=1e-5)
    assert losses.shape == (3,) and len(set(losses.tolist())) == 3


@pytest.mark.parametrize("objective", ["clip", "siglip", "supervised", "mae"])
def test_encoder_objectives_row_losses_average_to_the_library_loss(objective):
    torch.manual_seed(0)
    model = build_objective(objective, img_size=64, num_labels=5).eval()
    batch = {"pixel_values": torch.randn(4, 3, 64, 64), "text": torch.randint(1, 100, (4, 32)),
             "labels": torch.randint(0, 2, (4, 5))}
    with torch.no_grad():
        torch.manual_seed(1)  # MAE masks at random: the same masks for both
        rows = model.sample_losses(batch)
        torch.manual_seed(1)
        whole = model.loss(batch)
    assert rows.shape == (4,)
    torch.testing.assert_close(rows.mean(), whole, rtol=1e-5, atol=1e-6)


def test_policies_row_losses_are_each_rows_own_loss():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    chunks = np.clip(np.cumsum(rng.normal(0, 0.2, (64, 2, 4)), 1), -1, 1)
    codec = ActionCodec(build_tokenizer("uniform"), 2, 4).fit(chunks)
    states, task = torch.randn(3, 1, 39), torch.tensor([0, 1, 2])
    tokens = torch.from_numpy(codec.encode(chunks[:3])[0])
    gpt = GPTPolicy(codec, state_dim=39, num_tasks=3, d_model=32, n_layers=2, n_heads=2).eval()
    mlp = MLPPolicy(state_dim=39, num_tasks=3, n_obs=1, action_dim=4, chunk_size=2, hidden=16).eval()
    for policy, batch in ((gpt, {"states": states, "task": task, "tokens": tokens}),
                          (mlp, {"states": states, "task": task, "actions": torch.from_numpy(chunks[:3]).float()})):
        with torch.no_grad():
            rows = policy.sample_losses(batch)
            for r in range(3):
                torch.testing.assert_close(rows[r], policy.loss({k: v[r : r + 1] for k, v in batch.items()}))
