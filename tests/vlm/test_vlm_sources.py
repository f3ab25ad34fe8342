"""A phase's data from several sources, each with its own image root (data=llava_v15's layout), text-only records
trained as text, `phase.prompt_format` (LLaVA's plain stage 1), and progress lines while preparing the data."""

import json

import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image

from tests.conftest import compose_cfg
from vlm.dataset import Collator
from vlm.lightning import VLMTask
from vlm.prompting import build_prompt_format

CAPTION = [{"from": "human", "value": "Describe the image briefly.\n<image>"}, {"from": "gpt", "value": "a red square"}]
Q = [{"from": "human", "value": "<image>\nWhat colour is it?"}, {"from": "gpt", "value": "blue"}]
TEXT = [{"from": "human", "value": "Say hi."}, {"from": "gpt", "value": "hi there"}]


@pytest.fixture
def layout(tmp_path):
    """LLaVA's playground/data in small: LCS captions under LLaVA-Pretrain/images, mix665k-style records under ROOT."""
    root = tmp_path / "llava"
    for rel, color in {"LLaVA-Pretrain/images/00000/0.jpg": (220, 20, 20), "coco/train2017/1.jpg": (20, 20, 220),
                       "gqa/images/2.jpg": (20, 200, 20)}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (16, 16), color).save(root / rel)
    (root / "LLaVA-Pretrain/blip_laion_cc_sbu_558k.json").write_text(
        json.dumps([{"id": "lcs0", "image": "00000/0.jpg", "conversations": CAPTION}]))
    (root / "llava_v1_5_mix665k.json").write_text(json.dumps([
        {"id": "coco1", "image": "coco/train2017/1.jpg", "conversations": Q},
        {"id": "text", "conversations": TEXT},
        {"id": "gqa2", "image": "gqa/images/2.jpg", "conversations": Q}]))
    return root


def datamodule(model, root, data, prompt_format=None, **phase_keys):
    cfg = compose_cfg("data=llava_v15", f"data.root={root}", "data.num_workers=0")
    phase = OmegaConf.create({"name": "p", "data": data, "prompt_format": prompt_format, **phase_keys})
    dm = VLMTask().build_datamodule(cfg, phase, model, root, micro_batch_size=2, seed=0)
    dm.setup()
    return dm


def test_two_image_roots_text_only_records_and_a_phase_prompt_format(layout, tiny_vlm, capsys):
    align = datamodule(tiny_vlm, layout, {"align": 1}, prompt_format="plain")
    (sample,) = align.train_dataset.samples
    assert sample.images == [layout / "LLaVA-Pretrain/images/00000/0.jpg"]
    plain = build_prompt_format("plain", tiny_vlm.tokenizer)
    assert (sample.input_ids, sample.labels) == plain.build([(t["from"], t["value"]) for t in CAPTION])
    out = capsys.readouterr().out  # not a TTY: plain progress lines
    assert "validating blip_laion_cc_sbu_558k.json: 1/1 (100%)" in out and "tokenizing: 1/1 (100%)" in out

    instruct = datamodule(tiny_vlm, layout, {"instruct": 1, "align": 2})  # no prompt_format: the backbone's
    ids = [s.id for s in instruct.train_dataset.samples]
    assert ids == ["coco1", "text", "gqa2", "lcs0", "lcs0"]
    by_id = dict(zip(ids, instruct.train_dataset.samples))
    assert by_id["coco1"].images == [layout / "coco/train2017/1.jpg"] and by_id["text"].images == []
    base = tiny_vlm.prompt_format
    assert (by_id["lcs0"].input_ids, by_id["lcs0"].labels) == base.build([(t["from"], t["value"]) for t in CAPTION])
    assert instruct.train_dataset[1]["pixel_values"] is None and instruct.train_dataset[2]["pixel_values"].ndim == 3


def test_text_only_row_in_an_image_batch_equals_the_record_alone(layout, tiny_vlm):
    """A batch mixing an image row and a text-only row (mix665k holds ~40k text-only records): the text row's
    logits and loss terms are those of the same record tokenized and run alone (no image anywhere)."""
    dm = datamodule(tiny_vlm, layout, {"instruct": 1})
    data, collate = dm.train_dataset, Collator(tiny_vlm.tokenizer.pad_token_id)
    batch = collate([data[0], data[1]])
    alone = collate([data[1]])
    assert batch["image_mask"].tolist() == [True, False] and alone["pixel_values"] is None
    n = len(data.samples[1].input_ids)
    with torch.no_grad():
        mixed = tiny_vlm(**batch)
        single = tiny_vlm(**alone)
        _, _, labels = tiny_vlm.splice(*(batch[k] for k in ("input_ids", "attention_mask", "labels", "pixel_values",
                                                             "image_mask", "image_positions")))
    torch.testing.assert_close(mixed.logits[1, :n], single.logits[0, :n], atol=1e-5, rtol=1e-5)
    assert labels[1, :n].tolist() == data.samples[1].labels and (labels[1, n:] == -100).all()
    want = [i for i, label in zip(data.samples[1].input_ids, data.samples[1].labels) if label != -100]
    assert tiny_vlm.tokenizer.decode(want) == " hi there</s>"


def test_a_phase_may_group_by_length_when_the_data_does_not(layout, tiny_vlm):
    assert not datamodule(tiny_vlm, layout, {"instruct": 1}).group_by_length  # data.group_by_length: false
    grouped = datamodule(tiny_vlm, layout, {"instruct": 1}, group_by_length=True)
    assert grouped.group_by_length and grouped.group_keys == [1, 0, 1]
