"""The VLM forward and generate: image splicing, text-only rows, stage freezing, KV-cache generation."""

import copy

import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image

from vlm.dataset import Collator
from vlm.lightning import VLMModule
from vlm.prompting import IGNORE_INDEX


def batch_of(model, conversations, with_image):
    rows = []
    for conv, has in zip(conversations, with_image):
        ids, labels = model.prompt_format.build(conv)
        pixels = model.encoder.transform(Image.new("RGB", (50, 40), (200, 30, 30))) if has else None
        rows.append({"input_ids": ids, "labels": labels, "pixel_values": pixels})
    return Collator(model.tokenizer.pad_token_id)(rows)


CONVS = [
    [("human", "<image>\nWhat is the shape of the red object?"), ("gpt", "circle")],
    [("human", "How many objects have the same shape as the blue object?"), ("gpt", "3")],
]


def test_splice_places_patches_after_bos_and_masks_them(tiny_vlm):
    model = tiny_vlm
    batch = batch_of(model, CONVS, [True, False])
    embeds, mask, labels = model.splice(**{k: batch[k] for k in ("input_ids", "attention_mask", "labels", "pixel_values", "image_mask")})
    P = model.encoder.num_patches
    n0, n1 = (batch["attention_mask"].sum(1)).tolist()
    assert embeds.shape[1] == batch["input_ids"].shape[1] + P
    patches = model.image_embeddings(batch["pixel_values"])[0]
    torch.testing.assert_close(embeds[0, 1 : 1 + P], patches)
    torch.testing.assert_close(embeds[0, 0], model.backbone.embed(batch["input_ids"][:1, :1])[0, 0])
    assert mask[0].sum() == n0 + P and mask[1].sum() == n1 and mask[1, n1:].sum() == 0
    assert (labels[0, : 1 + P] == IGNORE_INDEX).all()
    # the text-only row is the plain text forward: same logits as the backbone alone
    out = model(**batch)
    alone = model.backbone(input_ids=batch["input_ids"][1:, :n1]).logits
    torch.testing.assert_close(out.logits[1, :n1], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "stage, expected",
    [("align", {"projector"}), ("finetune", {"projector", "backbone"}), ("full_finetune", {"encoder", "projector", "backbone"})],
)
def test_stage_freezing_grads(tiny_vlm, stage, expected):
    from tests.conftest import compose_cfg

    cfg = compose_cfg(f"stage={stage}")
    (phase,) = cfg.stage.phases.values()
    module = VLMModule(tiny_vlm, OmegaConf.to_container(phase), total_steps=10)
    tiny_vlm.zero_grad(set_to_none=True)
    module.compute_loss(batch_of(tiny_vlm, CONVS, [True, True])).backward()
    got = {name for name, part in module.parts().items() if any(p.grad is not None and p.grad.abs().sum() > 0 for p in part.parameters())}
    assert got == expected
    for name, part in module.parts().items():
        assert all(p.requires_grad == (name in expected) for p in part.parameters())
    tiny_vlm.requires_grad_(True)
    tiny_vlm.zero_grad(set_to_none=True)


def greedy_without_cache(model, image, prompt, steps):
    """Reference decoding: the full forward of the VLM at every step, no KV cache."""
    ids, _ = model.prompt_format.build([("human", prompt)], generation=True)
    pixels = model.encoder.transform(image).unsqueeze(0)
    out = []
    for _ in range(steps):
        input_ids = torch.tensor([ids + out])
        logits = model(input_ids, torch.ones_like(input_ids), pixel_values=pixels, image_mask=torch.tensor([True]), use_cache=False).logits
        nxt = int(logits[0, -1].argmax())
        if nxt == model.tokenizer.eos_token_id:
            break
        out.append(nxt)
    return model.tokenizer.decode(out, skip_special_tokens=True).strip()


def test_generate_with_kv_cache_equals_full_recompute(tiny_vlm):
    model = copy.deepcopy(tiny_vlm).eval()
    torch.manual_seed(1)
    with torch.no_grad():  # make the untrained model's outputs less degenerate
        model.backbone.model.lm_head.weight.normal_(0, 0.5)
    images = [Image.new("RGB", (64, 64), c) for c in [(255, 0, 0), (0, 0, 255), (20, 200, 20)]]
    prompts = ["What is the shape of the red object?", "Hi", "Is the green object at the top or at the bottom?"]
    batched = model.generate(images, prompts, max_new_tokens=6)
    with torch.no_grad():
        expected = [greedy_without_cache(model, im, p, 6) for im, p in zip(images, prompts)]
    assert batched == expected
    assert any(batched)  # something was generated


def test_score_equals_normalised_likelihood_of_each_full_answer(tiny_vlm):
    model = copy.deepcopy(tiny_vlm).eval()
    image = Image.new("RGB", (64, 64), (255, 0, 0))
    prompt, options = "What is the shape of the red object?", ["circle", "square", "a red circle"]
    (probs,) = model.score([image], [prompt], [options])
    pixels = model.encoder.transform(image).unsqueeze(0)
    logliks = []
    with torch.no_grad():
        for opt in options:  # reference: one unpadded sequence at a time, summing log p over the answer tokens
            ids, labels = model.prompt_format.build([("human", prompt), ("gpt", opt)])
            out = model(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long), labels=torch.tensor([labels]),
                        pixel_values=pixels, image_mask=torch.tensor([True]))
            n_targets = sum(label != IGNORE_INDEX for label in labels)
            logliks.append(-out.loss.item() * n_targets)  # HF loss is the mean over the answer tokens
    expected = torch.softmax(torch.tensor(logliks), 0)
    torch.testing.assert_close(torch.tensor(probs), expected, atol=1e-5, rtol=1e-4)
    assert abs(sum(probs) - 1) < 1e-6


def test_batch_tokens_and_flops_count_text_and_patches(tiny_vlm):
    from tests.conftest import compose_cfg

    (phase,) = compose_cfg("stage=full_finetune").stage.phases.values()
    module = VLMModule(tiny_vlm, OmegaConf.to_container(phase), total_steps=1)
    batch = batch_of(tiny_vlm, CONVS, [True, False])
    P = tiny_vlm.encoder.num_patches
    assert module.batch_tokens(batch) == int(batch["attention_mask"].sum()) + P
    lm = tiny_vlm.backbone.model.config
    T = batch["input_ids"].shape[1] + P
    n_lm = sum(p.numel() for n, p in tiny_vlm.backbone.model.named_parameters() if "embed_tokens" not in n)
    expected_lm = module.batch_tokens(batch) * (6 * n_lm + 12 * lm.num_hidden_layers * lm.hidden_size * T)
    assert module.batch_flops(batch) > expected_lm
    assert module.batch_flops(batch) - expected_lm < 0.5 * expected_lm  # the ViT + projector part is the smaller one
