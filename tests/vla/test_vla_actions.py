"""Action tokens ↔ backbone token ids (vla/actions.py): the round trip, OpenVLA's own ids on a Llama-2-sized
vocabulary, the ids a backbone cannot give up, and tokenizers that are no tokens."""

from __future__ import annotations

import numpy as np
import pytest

from behavior.codec import IGNORE, ActionCodec
from behavior.tokenizers import build_tokenizer
from vla.actions import ActionVocabulary, ActionVocabularyError

H, D = 2, 4


def chunks(n=200, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, H, D))


@pytest.mark.parametrize("name", ["openvla", "uniform", "quantile"])
def test_action_tokens_round_trip_through_the_last_ids_of_the_vocabulary(name):
    x = chunks()
    codec = ActionCodec(build_tokenizer(name), H, D).fit(x)
    vocab = ActionVocabulary(codec, base_vocab=1000, special_ids=[0, 1, 2, 1000], end_of_turn_id=2, model_vocab=1024)
    ids, _ = codec.encode(x)
    tokens = vocab.to_tokens(ids)
    assert tokens.shape == (len(x), H * D) and tokens.min() >= 1000 - 256 and tokens.max() <= 999
    assert vocab.first == 744 and vocab.allowed == list(range(744, 1000))
    assert set(vocab.suppressed) == set(range(1024)) - set(range(744, 1000))
    np.testing.assert_array_equal(vocab.to_codec(tokens), ids)        # exact inverse
    np.testing.assert_array_equal(tokens - ids, 744)                 # in order: id k -> 744 + k
    decoded = vocab.decode(tokens)                                   # the codec's own decoding, through the map
    np.testing.assert_array_equal(decoded, codec.decode(ids.tolist()))
    bound = codec.tokenizer.roundtrip_bound()
    if bound is not None:
        assert np.abs(decoded - x).max() <= bound + 1e-12
    with pytest.raises(ActionVocabularyError, match="not action tokens"):
        vocab.to_codec(np.array([[743]]))


def test_openvla_tokenizer_on_a_llama2_vocabulary_gives_openvlas_token_ids():
    """OpenVLA writes bin d (np.digitize on 256 edges) as Llama-2 token 32000 - d: with the tokenizer counting down
    from 32000 (as OpenVLA's), the mapping is the identity; with the default 256 ids, the same tokens."""
    x = chunks(50, seed=1)
    expected = 32000 - np.digitize(np.clip(x, -1, 1), np.linspace(-1, 1, 256)).reshape(len(x), -1)
    for vocab_size in (32000, 256):
        codec = ActionCodec(build_tokenizer("openvla", vocab_size=vocab_size), H, D)
        vocab = ActionVocabulary(codec, base_vocab=32000, special_ids=[0, 1, 2, 32000], end_of_turn_id=2)
        np.testing.assert_array_equal(vocab.encode(x), expected)
        assert vocab.first == 31744


def test_a_backbone_whose_special_tokens_are_in_the_range_or_whose_vocabulary_is_too_small_is_refused():
    codec = ActionCodec(build_tokenizer("uniform"), H, D)
    with pytest.raises(ActionVocabularyError, match=r"special token ids \[999\]"):
        ActionVocabulary(codec, base_vocab=1000, special_ids=[0, 999], end_of_turn_id=0)
    with pytest.raises(ActionVocabularyError, match="only 100"):
        ActionVocabulary(codec, base_vocab=100, special_ids=[0], end_of_turn_id=0)
    with pytest.raises(ActionVocabularyError, match="continuous residual offset"):
        ActionVocabulary(ActionCodec(build_tokenizer("kmeans", k=4), 1, D), base_vocab=1000, special_ids=[], end_of_turn_id=0)


def test_a_variable_length_tokenizer_ends_with_the_end_of_turn_token():
    x = np.cumsum(np.random.default_rng(2).normal(0, 0.05, (64, 8, 2)), 1).clip(-1, 1)
    codec = ActionCodec(build_tokenizer("fast", chunk_size=8, bpe_vocab_size=300), 8, 2).fit(x)
    vocab = ActionVocabulary(codec, base_vocab=2000, special_ids=[0, 1, 2], end_of_turn_id=2)
    ids, _ = codec.encode(x)
    tokens = vocab.to_tokens(ids)
    for row_ids, row in zip(ids, tokens):
        n = int((row_ids != IGNORE).sum())
        assert row[n - 1] == 2 and (row[n:] == IGNORE).all() and (row[: n - 1] >= vocab.first).all()
    np.testing.assert_array_equal(vocab.to_codec(tokens), ids)
    assert 2 in vocab.allowed and not vocab.fixed_length


@pytest.mark.parametrize("backbone", ["tiny_llama", "tiny_llama3", "tiny_mistral", "tiny_qwen2", "tiny_phi",
                                      "tiny_gemma", "tiny_smollm2"])
def test_every_tiny_backbone_gives_up_its_last_ids_and_keeps_its_special_tokens(tiny_component, backbone):
    bb = tiny_component("backbone", backbone)
    vocab = ActionVocabulary.for_backbone(ActionCodec(build_tokenizer("openvla"), 1, D), bb)
    tok = bb.tokenizer
    assert vocab.base_vocab == tok.vocab_size and vocab.first == tok.vocab_size - 256
    assert not set(tok.all_special_ids) & set(vocab.allowed)
    assert vocab.end_of_turn_id == bb.prompt_format.end_of_turn_id and vocab.end_of_turn_id not in vocab.allowed
    assert vocab.model_vocab == bb.model.get_output_embeddings().weight.shape[0] >= len(tok)
