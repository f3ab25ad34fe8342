"""Multi-image samples: each image's patches go where its `<image>` placeholder is; one image stays right after BOS."""

import json

import pytest
import torch
from PIL import Image

from data.errors import DataError
from data.llava import load_llava
from vlm.dataset import Collator, VLMDataset, tokenize_records
from vlm.prompting import IGNORE_INDEX

COLORS = {"a.png": (220, 20, 20), "b.png": (20, 20, 220), "c.png": (20, 200, 20)}
PAIR = {"id": "pair", "image": ["a.png", "b.png"], "conversations": [
    {"from": "human", "value": "<image>\nCompare it with <image> please."}, {"from": "gpt", "value": "same"}]}
TWO_TURNS = {"id": "turns", "image": ["a.png", "b.png"], "conversations": [
    {"from": "human", "value": "<image>\nWhat is the shape?"}, {"from": "gpt", "value": "circle"},
    {"from": "human", "value": "And <image>?"}, {"from": "gpt", "value": "square"}]}
SINGLE = {"id": "single", "image": "c.png", "conversations": [
    {"from": "human", "value": "<image>\nWhat is the shape?"}, {"from": "gpt", "value": "circle"}]}
TEXT = {"id": "text", "conversations": [{"from": "human", "value": "Say hi."}, {"from": "gpt", "value": "hi"}]}


@pytest.fixture
def root(tmp_path):
    for name, color in COLORS.items():
        Image.new("RGB", (64, 64), color).save(tmp_path / name)
    return tmp_path


def write(root, records):
    path = root / "data.json"
    path.write_text(json.dumps(records))
    return path


def tok_ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_positions_are_where_the_placeholders_are(root, tiny_vlm):
    tok, fmt = tiny_vlm.tokenizer, tiny_vlm.prompt_format
    bos, eos = [tok.bos_token_id], [tok.eos_token_id]
    (pair, turns), dropped = tokenize_records([PAIR, TWO_TURNS], fmt, root, 512, tiny_vlm.encoder.num_patches, max_turns=1)
    assert not dropped and pair.images == [root / "a.png", root / "b.png"] and turns.id == "turns"  # kept whole
    a, b, c = tok_ids(tok, "In:"), tok_ids(tok, "Compare it with"), tok_ids(tok, " please.\nOut:")
    answer = tok_ids(tok, " same") + eos
    assert pair.input_ids == bos + a + b + c + answer
    assert pair.image_positions == [1 + len(a), 1 + len(a) + len(b)]
    assert pair.labels == [IGNORE_INDEX] * (1 + len(a) + len(b) + len(c)) + answer
    first = bos + tok_ids(tok, "In:")
    second = first + tok_ids(tok, "What is the shape?\nOut:") + tok_ids(tok, " circle") + eos + tok_ids(tok, "In: And")
    assert turns.input_ids == second + tok_ids(tok, "?\nOut:") + tok_ids(tok, " square") + eos
    assert turns.image_positions == [len(first), len(second)]


def test_single_image_and_text_samples_are_unchanged(root, tiny_vlm):
    fmt, P = tiny_vlm.prompt_format, tiny_vlm.encoder.num_patches
    (single, text), _ = tokenize_records([SINGLE, TEXT], fmt, root, 512, P)
    turns = [(t["from"], t["value"]) for t in SINGLE["conversations"]]
    assert (single.input_ids, single.labels) == fmt.build(turns) and single.image_positions == [fmt.image_position] == [1]
    assert text.image_positions == [] and text.image is None
    rows = [VLMDataset([single, text], tiny_vlm.encoder.transform)[i] for i in (0, 1)]
    collate = Collator(tiny_vlm.tokenizer.pad_token_id)
    explicit = collate(rows)
    default = collate([{k: v for k, v in r.items() if k != "image_positions"} for r in rows])  # the layout used so far
    keys = ("input_ids", "attention_mask", "labels", "pixel_values", "image_mask")
    with torch.no_grad():
        got = tiny_vlm.splice(*(explicit[k] for k in keys), explicit["image_positions"])
        want = tiny_vlm.splice(*(default[k] for k in keys))
    assert default["image_positions"] is None and all(torch.equal(g, w) for g, w in zip(got, want))


def expected_row(model, ids, labels, positions, patches, width):
    """Hand-built reference: text pieces and each image's patches concatenated in order, then zero padding."""
    embed = model.backbone.embed(torch.tensor(ids))
    cuts = [0, *positions, len(ids)]
    parts, mask, labs = [], [], []
    for k in range(len(cuts) - 1):
        if k:
            parts.append(patches[k - 1])
            mask += [1] * len(patches[k - 1])
            labs += [IGNORE_INDEX] * len(patches[k - 1])
        parts.append(embed[cuts[k] : cuts[k + 1]])
        mask += [1] * (cuts[k + 1] - cuts[k])
        labs += labels[cuts[k] : cuts[k + 1]]
    row = torch.cat(parts)
    pad = width - row.shape[0]
    return torch.cat([row, row.new_zeros(pad, row.shape[1])]), mask + [0] * pad, labs + [IGNORE_INDEX] * pad


def test_mixed_batch_splices_each_image_at_its_placeholder(root, tiny_vlm):
    model, P = tiny_vlm, tiny_vlm.encoder.num_patches
    samples, _ = tokenize_records([PAIR, SINGLE, TEXT], model.prompt_format, root, 512, P)
    dataset = VLMDataset(samples, model.encoder.transform)
    batch = Collator(model.tokenizer.pad_token_id)([dataset[i] for i in range(3)])
    assert batch["pixel_values"].shape[0] == 3 and batch["image_mask"].tolist() == [True, True, False]
    assert batch["image_positions"].tolist() == [samples[0].image_positions, [1, -1], [-1, -1]]
    with torch.no_grad():
        embeds, mask, labels = model.splice(**{k: batch[k] for k in ("input_ids", "attention_mask", "labels", "pixel_values",
                                                                        "image_mask", "image_positions")})
        patches = {name: model.image_embeddings(model.encoder.transform(Image.open(root / name).convert("RGB"))[None])[0]
                   for name in COLORS}
        width = batch["input_ids"].shape[1] + 2 * P
        assert embeds.shape[1] == width
        for row, (sample, names) in enumerate(zip(samples, [["a.png", "b.png"], ["c.png"], []])):
            want_e, want_m, want_l = expected_row(model, sample.input_ids, sample.labels, sample.image_positions,
                                                  [patches[n] for n in names], width)
            assert mask[row].tolist() == want_m and labels[row].tolist() == want_l
            real = torch.tensor(want_m, dtype=torch.bool)  # padding may hold pad-token embeddings; it is masked
            torch.testing.assert_close(embeds[row, real], want_e[real])
        # the single-image row: BOS, then its patches, then its text (the layout of a single-image batch)
        torch.testing.assert_close(embeds[1, 1 : 1 + P], patches["c.png"])
        # the multi-image row computes the same loss alone as in the batch (padding is masked)
        alone = Collator(model.tokenizer.pad_token_id)([dataset[0]])
        torch.testing.assert_close(model(**alone).logits[0], model(**batch).logits[0, : alone["input_ids"].shape[1] + 2 * P],
                                   atol=1e-5, rtol=1e-5)


def test_truncation_that_cuts_an_image_drops_the_sample(root, tiny_vlm):
    fmt, P = tiny_vlm.prompt_format, tiny_vlm.encoder.num_patches
    (full,), _ = tokenize_records([TWO_TURNS], fmt, root, 512, P)
    budget = full.image_positions[1] - 2  # keeps the first answer, cuts before the second image's place
    samples, dropped = tokenize_records([TWO_TURNS], fmt, root, budget + 2 * P, P)
    assert samples == [] and dropped == {"truncated_image": 1}


@pytest.mark.parametrize("record, count", [
    ({**PAIR, "id": "one-missing", "conversations": [{"from": "human", "value": "<image>\nCompare."}, {"from": "gpt", "value": "x"}]}, 1),
    ({**SINGLE, "id": "two-for-one", "conversations": [{"from": "human", "value": "<image> <image>"}, {"from": "gpt", "value": "x"}]}, 2),
    ({**TEXT, "id": "no-image", "conversations": [{"from": "human", "value": "<image>\nHi"}, {"from": "gpt", "value": "x"}]}, 1),
    ({**PAIR, "id": "in-answer", "conversations": [{"from": "human", "value": "<image> <image>"}, {"from": "gpt", "value": "<image>"}]}, None),
])
def test_placeholder_count_mismatch_is_a_data_error(root, record, count):
    path = write(root, [SINGLE, record])
    with pytest.raises(DataError) as err:
        load_llava(path, root)
    message = str(err.value)
    assert str(path) in message and record["id"] in message and "<image>" in message
    if count is not None:
        assert f"but {count} <image> placeholder" in message
    records, skipped = load_llava(path, root, skip_bad=True)
    assert [r["id"] for r in records] == ["single"] and dict(skipped) == {"image placeholders do not match images": 1}


def test_single_image_without_placeholder_is_valid(root):
    record = {**SINGLE, "conversations": [{"from": "human", "value": "Describe."}, {"from": "gpt", "value": "x"}]}
    records, _ = load_llava(write(root, [record, PAIR, TEXT]), root)
    assert len(records) == 3


def test_generate_takes_several_images_per_prompt(root, tiny_vlm):
    model = tiny_vlm.eval()
    a, b = (Image.open(root / n).convert("RGB") for n in ("a.png", "b.png"))
    prompt = "<image>\nCompare it with <image> please."
    with torch.no_grad():
        embeds, mask = model.prompt_embeddings([[a, b]], [prompt])
        ids, _, positions = model.prompt_format.build_interleaved([("human", prompt)], generation=True)
        patches = [model.image_embeddings(model.encoder.transform(im)[None])[0] for im in (a, b)]
        want, want_mask, _ = expected_row(model, ids, [0] * len(ids), positions, patches, embeds.shape[1])
    torch.testing.assert_close(embeds[0], want)
    assert mask[0].tolist() == want_mask
    assert isinstance(model.generate([[a, b]], [prompt], max_new_tokens=2)[0], str)
    with pytest.raises(ValueError, match="2 images but 1 <image> placeholders"):
        model.generate([[a, b]], ["<image> only one"], max_new_tokens=2)
