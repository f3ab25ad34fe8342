"""Bad LLaVA input: a clear error naming the file and the record, or (skip_bad) skipped and counted."""

import json

import pytest
from PIL import Image

from data.errors import DataError
from data.llava import load_llava
from vlm.dataset import tokenize_records

GOOD = {"id": "ok", "image": "a.png", "conversations": [{"from": "human", "value": "<image>\nQ?"}, {"from": "gpt", "value": "A"}]}
BAD = {
    "missing image": {**GOOD, "id": "r-missing", "image": "nope.png"},
    "unreadable image": {**GOOD, "id": "r-unreadable", "image": "broken.png"},
    "turns do not alternate human/gpt": {**GOOD, "id": "r-order", "conversations": [{"from": "gpt", "value": "A"}, {"from": "human", "value": "Q"}]},
    "has an empty or missing 'conversations' list": {**GOOD, "id": "r-empty", "conversations": []},
}


@pytest.fixture
def root(tmp_path):
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    return tmp_path


def write(root, records):
    path = root / "data.json"
    path.write_text(json.dumps(records))
    return path


@pytest.mark.parametrize("reason", list(BAD))
def test_bad_record_error_names_file_and_record(root, reason):
    path = write(root, [GOOD, BAD[reason]])
    with pytest.raises(DataError) as err:
        load_llava(path, root)
    message = str(err.value)
    assert str(path) in message and BAD[reason]["id"] in message and "data.skip_bad=true" in message


def test_skip_bad_skips_and_counts_each_reason(root):
    path = write(root, [GOOD, *BAD.values(), GOOD])
    records, skipped = load_llava(path, root, skip_bad=True)
    assert [r["id"] for r in records] == ["ok", "ok"]
    assert dict(skipped) == {reason: 1 for reason in BAD}


@pytest.mark.parametrize("content", ['{"id": 1}', "not json at all", ""])
def test_file_that_is_not_a_list_of_records(root, content):
    path = root / "data.json"
    path.write_text(content)
    with pytest.raises(DataError, match=str(path)):
        load_llava(path, root, skip_bad=True)


def test_sample_with_all_targets_truncated_is_counted_not_trained(root, tiny_vlm):
    long_question = " ".join(["red"] * 80)
    records = [GOOD, {**GOOD, "id": "long", "conversations": [{"from": "human", "value": long_question}, {"from": "gpt", "value": "circle"}]}]
    samples, dropped = tokenize_records(records, tiny_vlm.prompt_format, root, max_length=tiny_vlm.encoder.num_patches + 40, num_patches=tiny_vlm.encoder.num_patches)
    assert [s.id for s in samples] == ["ok"] and dropped == {"truncated_no_targets": 1}


def test_max_turns_splits_conversations_and_keeps_the_image(root, tiny_vlm):
    turns = []
    for i in range(5):
        turns += [{"from": "human", "value": ("<image>\n" if i == 0 else "") + f"Q{i}?"}, {"from": "gpt", "value": f"A{i}"}]
    record = {**GOOD, "id": "multi", "conversations": turns}
    samples, _ = tokenize_records([record], tiny_vlm.prompt_format, root, 512, tiny_vlm.encoder.num_patches, max_turns=2)
    assert [s.id for s in samples] == ["multi", "multi#2", "multi#4"]
    assert all(s.image == root / "a.png" for s in samples)
    tok = tiny_vlm.tokenizer
    assert tok.decode(samples[2].input_ids) == "<s>In: Q4?\nOut: A4</s>"
    whole, _ = tokenize_records([record], tiny_vlm.prompt_format, root, 512, tiny_vlm.encoder.num_patches)
    assert len(whole) == 1 and tok.decode(whole[0].input_ids).count("</s>") == 5


def test_split_weights_repeat_and_subsample():
    from vlm.lightning import repeat

    items = list(range(10))
    assert repeat(items, 2.0, seed=0) == items + items
    half = repeat(items, 0.5, seed=0)
    assert len(half) == 5 and len(set(half)) == 5 and half == repeat(items, 0.5, seed=0)
    assert len(repeat(items, 1.3, seed=1)) == 13
