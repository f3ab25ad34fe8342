"""Label masks: exactly the assistant tokens and their end-of-turn token are trained, for each format."""

import pytest

from core.conf import group_options
from vlm.prompting import IGNORE_INDEX, VICUNA_SYSTEM, PlainFormat, PromptFormat, build_prompt_format

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


IMAGE_TOKEN_INDEX = -200  # llava/constants.py


def llava_tokenizer_image_token(prompt, tokenizer_ids, bos):
    """LLaVA's llava/mm_utils.py `tokenizer_image_token`, with `tokenizer(chunk).input_ids` = `tokenizer_ids(chunk)`:

        prompt_chunks = [tokenizer(chunk).input_ids for chunk in prompt.split('<image>')]
        ...
        if len(prompt_chunks) > 0 and len(prompt_chunks[0]) > 0 and prompt_chunks[0][0] == tokenizer.bos_token_id:
            offset = 1
            input_ids.append(prompt_chunks[0][0])
        for x in insert_separator(prompt_chunks, [image_token_index] * (offset + 1)):
            input_ids.extend(x[offset:])
    """
    chunks = [tokenizer_ids(chunk) for chunk in prompt.split("<image>")]
    offset, ids = 0, []
    if chunks and chunks[0] and chunks[0][0] == bos:
        offset = 1
        ids.append(chunks[0][0])
    separated = [x for chunk in chunks for x in (chunk, [IMAGE_TOKEN_INDEX] * (offset + 1))][:-1]
    for x in separated:
        ids.extend(x[offset:])
    return ids


def test_plain_format_is_llavas_conv_llava_plain(tokenizer):
    """LLaVA-1.5 stage 1 (`--version plain`), haotian-liu/LLaVA llava/train/train.py `preprocess_plain`:

        assert len(source) == 2
        assert DEFAULT_IMAGE_TOKEN in source[0]['value']
        source[0]['value'] = DEFAULT_IMAGE_TOKEN
        conversation = source[0]['value'] + source[1]['value'] + conversation_lib.default_conversation.sep
        ...
        tokenized_len = len(tokenizer_image_token(source[0]['value'], tokenizer))
        target[:tokenized_len] = IGNORE_INDEX

    with `conv_llava_plain` (llava/conversation.py): system="", roles=("", ""), sep_style=PLAIN, sep="\n".
    Vicuna's tokenizer adds BOS, so `tokenizer(chunk).input_ids` is BOS + the chunk's tokens. refract splices the
    image's patches where LLaVA's IMAGE_TOKEN_INDEX is, so its ids are LLaVA's without that one entry."""
    tok = tokenizer
    bos = tok.bos_token_id

    def with_bos(text):
        return [bos] + enc(tok, text)

    human, caption = "Give a brief description of the image.\n<image>", "a red circle left of a blue square"
    prompt = "<image>" + caption + "\n"  # the human text is dropped
    llava_ids = llava_tokenizer_image_token(prompt, with_bos, bos)
    llava_labels = list(llava_ids)
    masked = len(llava_tokenizer_image_token("<image>", with_bos, bos))
    llava_labels[:masked] = [IGNORE_INDEX] * masked
    assert llava_ids[:2] == [bos, IMAGE_TOKEN_INDEX] and masked == 2  # hand check: BOS, image, then the caption

    fmt = build_prompt_format("plain", tok)
    ids, labels, positions = fmt.build_with_images([("human", human), ("gpt", caption)], num_images=1)
    where = llava_ids.index(IMAGE_TOKEN_INDEX)
    assert positions == [where] == [fmt.image_position]
    assert ids == llava_ids[:where] + llava_ids[where + 1:]
    assert labels == llava_labels[:where] + llava_labels[where + 1:]
    assert tok.decode([i for i, label in zip(ids, labels) if label != IGNORE_INDEX]) == caption + "\n"
    with pytest.raises(ValueError, match="one human turn and one caption"):
        fmt.build(CONVERSATION)


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
    if isinstance(fmt, PlainFormat):  # one caption per record (LLaVA asserts it): checked on its own turn pair
        ids, labels = fmt.build(CONVERSATION[:2])
        assert "circle" in tokenizer.decode(split_by_mask(ids, labels))
        return
    ids, labels = fmt.build(CONVERSATION)
    trained = tokenizer.decode(split_by_mask(ids, labels))
    assert "circle" in trained and "left" in trained and "shape" not in trained
