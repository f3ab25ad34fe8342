"""Language backbone families (tiny flavours of vlm/tiny/text.py): label masks, BOS and end-of-turn handling against
hand-written references (EXPECTED), and, for every tiny backbone config, generation prompts against the tokenizer's
own chat template, the VLM's text forward against the HF model, and one training step of tiny_siglip × the backbone
× the mlp projector."""

import copy
import math

import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image
from transformers import AutoModelForCausalLM

from tests.conftest import composed, tiny_options
from vlm.dataset import Collator
from vlm.lightning import VLMModule
from vlm.model import VLM, build_component
from vlm.prompting import IGNORE_INDEX

FAMILIES = tiny_options("backbone")
CHAT = [name for name in FAMILIES if composed(f"backbone={name}").backbone.prompt_format == "chat_template"]
Q1, Q2 = "What is the shape of the red object?", "Is the red object on the left or on the right?"
CONVERSATION = [("human", f"<image>\n{Q1}"), ("gpt", "circle"), ("human", Q2), ("gpt", "left")]

# family: (the whole conversation decoded, each trained span decoded, image position, stop tokens)
EXPECTED = {
    "tiny_llama3": (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n" + Q1 + "<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\ncircle<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n" + Q2 + "<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nleft<|eot_id|>",
        ["circle<|eot_id|>", "left<|eot_id|>"], 1, ["<|eot_id|>", "<|end_of_text|>"],
    ),
    # each segment is tokenized with SentencePiece's leading "▁", as mistral-common tokenizes Mistral's turns
    "tiny_mistral": (
        f"<s>[INST] {Q1} [/INST] circle</s> [INST] {Q2} [/INST] left</s>",
        ["circle</s>", "left</s>"], 1, ["</s>"],
    ),
    # phi-2 style: no BOS is added (its "BOS" is the EOS/document separator), so the image goes first
    "tiny_phi": (
        f"In: {Q1}\nOut: circle<|endoftext|>In: {Q2}\nOut: left<|endoftext|>",
        [" circle<|endoftext|>", " left<|endoftext|>"], 0, ["<|endoftext|>"],
    ),
    # no BOS token at all; the newline after <|im_end|> is not trained
    "tiny_qwen2": (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        f"<|im_start|>user\n{Q1}<|im_end|>\n<|im_start|>assistant\ncircle<|im_end|>\n"
        f"<|im_start|>user\n{Q2}<|im_end|>\n<|im_start|>assistant\nleft<|im_end|>\n",
        ["circle<|im_end|>", "left<|im_end|>"], 0, ["<|im_end|>"],
    ),
    "tiny_gemma": (
        f"<bos><start_of_turn>user\n{Q1}<end_of_turn>\n<start_of_turn>model\ncircle<end_of_turn>\n"
        f"<start_of_turn>user\n{Q2}<end_of_turn>\n<start_of_turn>model\nleft<end_of_turn>\n",
        ["circle<end_of_turn>", "left<end_of_turn>"], 1, ["<end_of_turn>", "<eos>"],
    ),
}

@pytest.fixture(scope="module")
def vlm_of(tiny_component):
    """vlm_of(name): tiny_siglip × backbone `name` × a seeded mlp projector, copies of the session's tiny components,
    built once per test module."""
    built = {}

    def get(name):
        if name not in built:
            enc, llm = (copy.deepcopy(tiny_component(g, o)) for g, o in (("encoder", "tiny_siglip"), ("backbone", name)))
            torch.manual_seed(0)
            built[name] = VLM(enc, llm, build_component(composed("projector=mlp").projector)(enc.embed_dim, llm.hidden_size))
        return built[name]

    return get


def trained_spans(ids, labels):
    assert len(ids) == len(labels) and all(label in (IGNORE_INDEX, i) for i, label in zip(ids, labels))
    spans, current = [], []
    for i, label in zip(ids, labels):
        if label != IGNORE_INDEX:
            current.append(i)
        elif current:
            spans, current = spans + [current], []
    return spans + ([current] if current else [])


def messages(turns):
    return [{"role": "user" if r == "human" else "assistant", "content": t.replace("<image>\n", "")} for r, t in turns]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_label_masks_train_exactly_the_answers_and_end_of_turn(vlm_of, name):
    tok, fmt = vlm_of(name).tokenizer, vlm_of(name).prompt_format
    text, spans, image_position, stops = EXPECTED[name]
    ids, labels = fmt.build(CONVERSATION)
    assert tok.decode(ids) == text
    assert [tok.decode(span) for span in trained_spans(ids, labels)] == spans
    assert fmt.image_position == image_position
    assert all(label == IGNORE_INDEX for label in labels[: image_position + 1])
    assert tok.convert_ids_to_tokens(fmt.stop_token_ids) == stops
    has_bos = tok.bos_token_id is not None and ids[0] == tok.bos_token_id
    assert has_bos == (image_position == 1)  # patches go right after BOS, or first when there is none


@pytest.mark.parametrize("name", CHAT)
def test_generation_prompt_is_the_tokenizers_chat_template(vlm_of, name):
    tok, fmt = vlm_of(name).tokenizer, vlm_of(name).prompt_format
    prompt, _ = fmt.build(CONVERSATION[:1], generation=True)
    reference = tok.apply_chat_template(messages(CONVERSATION[:1]), add_generation_prompt=True)["input_ids"]
    assert prompt == list(reference)
    train_ids, _ = fmt.build(CONVERSATION)
    prompt3, _ = fmt.build(CONVERSATION[:3], generation=True)
    assert train_ids[: len(prompt3)] == prompt3  # what generation sees is what training saw
    if name != "tiny_mistral":  # (Mistral: turn-wise "▁" prefixes, see EXPECTED, differ from one-string tokenization)
        reference3 = tok.apply_chat_template(messages(CONVERSATION[:3]), add_generation_prompt=True)["input_ids"]
        assert prompt3 == list(reference3)


@pytest.mark.parametrize("name", FAMILIES)
def test_text_only_forward_equals_the_hf_model(vlm_of, name):
    model = vlm_of(name).eval()
    fmt = model.prompt_format
    rows = [fmt.build(CONVERSATION)[0], fmt.build(CONVERSATION[:2])[0]]
    batch = Collator(model.tokenizer.pad_token_id)([{"input_ids": r, "labels": r, "pixel_values": None} for r in rows])
    reference = AutoModelForCausalLM.from_pretrained(model.tokenizer.name_or_path).eval()
    with torch.no_grad():
        logits = model(**batch).logits
        for row, ids in enumerate(rows):
            expected = reference(input_ids=torch.tensor([ids])).logits[0]
            torch.testing.assert_close(logits[row, : len(ids), : expected.shape[-1]], expected, atol=1e-5, rtol=1e-5)
    if name == "tiny_gemma":  # Gemma scales token embeddings by sqrt(hidden) exactly once, inside its embedding
        ids = torch.tensor(rows[1])
        by_hand = reference.get_input_embeddings().weight[ids] * math.sqrt(reference.config.hidden_size)
        torch.testing.assert_close(model.backbone.embed(ids), by_hand)


@pytest.mark.parametrize("name", FAMILIES)
def test_one_training_step(vlm_of, name):
    model = vlm_of(name)
    cfg = composed(f"backbone={name}", "stage=finetune", "stage.phases.finetune.optim.lr=1e-3",
                   "stage.phases.finetune.optim.warmup_ratio=0")
    module = VLMModule(model, OmegaConf.to_container(cfg.stage.phases.finetune), total_steps=1)
    image = model.encoder.transform(Image.new("RGB", (64, 64), (200, 30, 30)))
    rows = [(CONVERSATION, image), (CONVERSATION[:2], None)]
    batch = Collator(model.tokenizer.pad_token_id)(
        [dict(zip(("input_ids", "labels"), model.prompt_format.build(c)), pixel_values=p) for c, p in rows])
    embeds, _, labels = model.splice(*(batch[k] for k in ("input_ids", "attention_mask", "labels", "pixel_values", "image_mask")))
    trained = labels != IGNORE_INDEX  # every trained position holds the embedding of its own label token
    torch.testing.assert_close(embeds[trained], model.backbone.embed(labels[trained]))
    assert int(trained.sum()) == int((batch["labels"] != IGNORE_INDEX).sum())

    optimizer = module.configure_optimizers()["optimizer"]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss = module.compute_loss(batch)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    changed = {n.split(".")[0] for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed == {"projector", "backbone"}
    with torch.no_grad():
        assert module.compute_loss(batch) < loss
    for n, p in model.named_parameters():  # leave the shared model as it was
        p.data.copy_(before[n])
    model.requires_grad_(True)


@pytest.mark.parametrize("name", ["tiny_llama3", "tiny_gemma"])
def test_generation_stops_at_the_templates_end_of_turn(vlm_of, name):
    """Llama-3 and Gemma end a turn with a token that is not EOS (<|eot_id|>, <end_of_turn>): generation stops on it."""
    model = vlm_of(name).eval()
    eot = model.prompt_format.end_of_turn_id
    assert eot != model.tokenizer.eos_token_id
    calls = []

    def prefer_end_of_turn(module, args, logits):
        calls.append(1)
        logits[..., eot] += 1e4
        return logits

    handle = model.backbone.model.get_output_embeddings().register_forward_hook(prefer_end_of_turn)
    try:
        assert model.generate([None], ["Hi"], max_new_tokens=5) == [""]
    finally:
        handle.remove()
    assert len(calls) == 1  # the first new token is the end of turn, and nothing follows it
