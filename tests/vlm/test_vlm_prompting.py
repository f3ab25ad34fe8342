"""Label masks: exactly the assistant tokens and their end-of-turn token are trained, for each format."""

import pytest

from core.conf import group_options
from vlm.prompting import IGNORE_INDEX, VICUNA_SYSTEM, PromptFormat, build_prompt_format

CONVERSATION = [
    ("human", "<image>\nWhat is the shape of the red object?"),
    ("gpt", "circle"),
    ("human", "Is the red object on the left or on the right?"),
    ("gpt", "left"),
]


@pytest.fixture(scope="module")
def tokenizer(tiny_vlm):
    return tiny_vlm.tokenizer


def enc(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def split_by_mask(ids, labels):
    trained = [i for i, label in zip(ids, labels) if label != IGNORE_INDEX]
    assert all(label in (IGNORE_INDEX, i) for i, label in zip(ids, labels))
    return trained


def test_base_format_masks_hand_built(tokenizer):
    tok = tokenizer
    ids, labels = build_prompt_format("base", tok).build(CONVERSATION)
    q1, q2 = "What is the shape of the red object?", "Is the red object on the left or on the right?"
    expected_ids = (
        [tok.bos_token_id] + enc(tok, f"In: {q1}\nOut:") + enc(tok, " circle") + [tok.eos_token_id]
        + enc(tok, f"In: {q2}\nOut:") + enc(tok, " left") + [tok.eos_token_id]
    )
    assert ids == expected_ids
    trained = split_by_mask(ids, labels)
    assert trained == enc(tok, " circle") + [tok.eos_token_id] + enc(tok, " left") + [tok.eos_token_id]
    assert tok.decode(ids) == f"<s>In: {q1}\nOut: circle</s>In: {q2}\nOut: left</s>"
    assert labels[0] == IGNORE_INDEX  # BOS


def test_vicuna_format_masks(tokenizer):
    tok = tokenizer
    ids, labels = build_prompt_format("vicuna", tok).build(CONVERSATION[:2])
    assert tok.decode(ids) == f"<s>{VICUNA_SYSTEM} USER: What is the shape of the red object? ASSISTANT: circle</s>"
    assert split_by_mask(ids, labels) == enc(tok, " circle") + [tok.eos_token_id]


def test_chat_template_format_masks(tokenizer):
    tok = tokenizer
    fmt = build_prompt_format("chat_template", tok)
    ids, labels = fmt.build(CONVERSATION)
    text = tok.decode(ids)
    assert text == (
        "<s>[INST] What is the shape of the red object? [/INST] circle</s>"
        "[INST] Is the red object on the left or on the right? [/INST] left</s>"
    )
    assert split_by_mask(ids, labels) == enc(tok, " circle</s>") + enc(tok, " left</s>")
    assert fmt.image_position == 1  # the template writes BOS first
    prompt, _ = fmt.build(CONVERSATION[:1], generation=True)
    assert tok.decode(prompt) == "<s>[INST] What is the shape of the red object? [/INST]"


def test_generation_prompt_is_the_training_prefix(tokenizer):
    fmt = build_prompt_format("base", tokenizer)
    train_ids, _ = fmt.build(CONVERSATION[:2])
    prompt_ids, _ = fmt.build(CONVERSATION[:1], generation=True)
    assert train_ids[: len(prompt_ids)] == prompt_ids


def test_unknown_format_lists_choices(tokenizer):
    with pytest.raises(ValueError, match="choose from"):
        build_prompt_format("alpaca", tokenizer)


@pytest.mark.parametrize("name", group_options("prompt_format"))
def test_every_prompt_format_config_builds_a_format_that_trains_only_the_answers(tokenizer, name):
    fmt = build_prompt_format(name, tokenizer)
    assert isinstance(fmt, PromptFormat)
    ids, labels = fmt.build(CONVERSATION)
    trained = tokenizer.decode(split_by_mask(ids, labels))
    assert "circle" in trained and "left" in trained and "shape" not in trained
