"""VLA decoding (vla/inference.py): KV-cache generation equals a full recompute at every step, and
`predict_action` gives the decoded, un-normalised actions of the generated tokens."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from behavior.codec import ActionCodec
from vla.actions import ActionVocabulary

import vla
from tests.conftest import randomize
from tests.vla.conftest import TASKS
from vla.inference import generate_action_tokens


def frames(n=3, size=16, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def recompute(policy, images, instructions):
    """Greedy action tokens by a full forward over the prompt and every token so far (no cache), the suppressed ids
    masked, each row on its own (no padding)."""
    model, vocab = policy.model, policy.vocabulary
    allowed = torch.tensor(vocab.allowed)
    out = []
    for image, instruction in zip(images, instructions):
        pixels = policy.pixels([image])
        ids = policy.prompts([instruction])[0]
        tokens: list[int] = []
        for _ in range(vocab.num_tokens):
            seq = torch.tensor([ids + tokens])
            logits = model(seq, torch.ones_like(seq), pixel_values=pixels, image_mask=torch.tensor([True])).logits[0, -1]
            tokens.append(int(allowed[logits[allowed].argmax()]))
        out.append(tokens)
    return out


@torch.no_grad()
def test_kv_cache_decoding_equals_full_recompute(tiny_run):
    policy = vla.load(tiny_run)
    randomize(policy.model)
    longer = ActionCodec(policy.spec.codec.tokenizer, 4, 2)  # 4 actions per chunk: 8 tokens to decode
    policy.spec = replace(policy.spec, vocabulary=ActionVocabulary.for_backbone(longer, policy.model.backbone))
    assert policy.vocabulary.num_tokens == 8
    images, instructions = frames(), [TASKS[0], TASKS[1], "a much longer instruction that pads the others"]
    cached = policy.action_tokens(images, instructions)
    assert cached == recompute(policy, images, instructions)
    no_cache = generate_action_tokens(policy.model, policy.vocabulary, policy.pixels(images), policy.prompts(instructions),
                                      use_cache=False)
    assert cached == no_cache and len({tuple(r) for r in cached}) > 1


def test_predict_action_decodes_and_unnormalises_the_generated_tokens(tiny_run):
    policy = vla.load(tiny_run)
    images, instructions = frames(2), TASKS
    tokens = np.asarray(policy.action_tokens(images, instructions))
    actions = policy.predict_action(images, instructions)
    spec = policy.spec
    assert actions.shape == (2, 1, 2) and actions.dtype == np.float32
    codec_ids = tokens - spec.vocabulary.first                    # the openvla tokenizer: ids 0..255
    centres = spec.codec.tokenizer.bin_centers[np.clip(255 - codec_ids, 0, 254)]
    low, high = spec.normalizer.q01, spec.normalizer.q99
    expected = (centres.reshape(2, 1, 2) + 1) / 2 * (high - low) + low   # OpenVLA's un-normalisation
    np.testing.assert_allclose(actions, expected, rtol=0, atol=1e-6)
    again = policy.predict_action(policy.pixels(images), instructions)  # the encoder's inputs directly
    np.testing.assert_array_equal(actions, again)


def test_sampled_action_tokens_are_action_ids_and_reproducible_from_the_seed(tiny_run):
    policy = vla.load(tiny_run)
    randomize(policy.model, std=0.05)  # a flat distribution: samples differ from the greedy tokens
    images, instructions = frames(4, seed=1), TASKS * 2
    first = policy.action_tokens(images, instructions, temperature=1.0, seed=7)
    assert first == policy.action_tokens(images, instructions, temperature=1.0, seed=7)
    assert first != policy.action_tokens(images, instructions, temperature=1.0, seed=8)
    assert all(t in set(policy.vocabulary.allowed) for row in first for t in row)
