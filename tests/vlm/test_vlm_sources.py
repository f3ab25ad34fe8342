"""A phase's data from several sources, each with its own image root (data=llava_v15's layout), text-only records
trained as text, `phase.prompt_format` (LLaVA's plain stage 1), and progress lines while preparing the data."""

import json

import pytest
import torch
from omegaconf import OmegaConf

from core.run import train
from tests.conftest import BASE, compose_cfg
from tests.data.llava_layout import write_llava_v15
from vlm.dataset import Collator
from vlm.lightning import VLMTask
from vlm.prompting import build_prompt_format


@pytest.fixture
def layout(tmp_path):
    """LLaVA's playground/data in small: LCS captions under LLaVA-Pretrain/images, mix665k records under ROOT
    (images in coco/ and gqa/), two text-only records."""
    return write_llava_v15(tmp_path / "llava")


def datamodule(model, root, data, prompt_format=None, **phase_keys):
    cfg = compose_cfg("data=llava_v15", f"data.root={root}", "data.num_workers=0")
    phase = OmegaConf.create({"name": "p", "data": data, "prompt_format": prompt_format, **phase_keys})
    dm = VLMTask().build_datamodule(cfg, phase, model, root, micro_batch_size=2, seed=0)
    dm.setup()
    return dm


def turns(record):
    return [(t["from"], t["value"]) for t in record["conversations"]]


def test_two_image_roots_text_only_records_and_a_phase_prompt_format(layout, tiny_vlm, capsys):
    lcs = json.loads((layout / "LLaVA-Pretrain/blip_laion_cc_sbu_558k.json").read_text())
    align = datamodule(tiny_vlm, layout, {"align": 1}, prompt_format="plain")
    samples = align.train_dataset.samples
    assert [s.images for s in samples] == [[layout / "LLaVA-Pretrain/images" / r["image"]] for r in lcs]
    plain = build_prompt_format("plain", tiny_vlm.tokenizer)
    assert [(s.input_ids, s.labels) for s in samples] == [plain.build(turns(r)) for r in lcs]
    out = capsys.readouterr().out  # not a TTY: plain progress lines
    assert "validating blip_laion_cc_sbu_558k.json: 4/4 (100%)" in out and "tokenizing: 4/4 (100%)" in out

    instruct = datamodule(tiny_vlm, layout, {"instruct": 1, "align": 2})  # no prompt_format: the backbone's
    ids = [s.id for s in instruct.train_dataset.samples]
    assert ids == ["inst0", "inst1", "inst2", "inst3", "text0", "text1"] + 2 * ["lcs0", "lcs1", "lcs2", "lcs3"]
    by_id = dict(zip(ids, instruct.train_dataset.samples))
    assert by_id["inst0"].images == [layout / "gqa/images/0.jpg"] and by_id["inst1"].images == [layout / "coco/train2017/1.jpg"]
    assert by_id["text0"].images == [] and by_id["text0"].image_positions == []
    assert (by_id["lcs0"].input_ids, by_id["lcs0"].labels) == tiny_vlm.prompt_format.build(turns(lcs[0]))
    assert instruct.train_dataset[4]["pixel_values"] is None and instruct.train_dataset[1]["pixel_values"].ndim == 3


def test_text_only_row_in_an_image_batch_equals_the_record_alone(layout, tiny_vlm):
    """A batch mixing an image row and a text-only row (mix665k holds ~40k text-only records): the text row's
    logits and loss terms are those of the same record tokenized and run alone (no image anywhere)."""
    dm = datamodule(tiny_vlm, layout, {"instruct": 1})
    data, collate = dm.train_dataset, Collator(tiny_vlm.tokenizer.pad_token_id)
    text = data.samples[4]
    assert text.id == "text0"
    batch = collate([data[0], data[4]])
    alone = collate([data[4]])
    assert batch["image_mask"].tolist() == [True, False] and alone["pixel_values"] is None
    n = len(text.input_ids)
    with torch.no_grad():
        mixed = tiny_vlm(**batch)
        single = tiny_vlm(**alone)
        _, _, labels = tiny_vlm.splice(*(batch[k] for k in ("input_ids", "attention_mask", "labels", "pixel_values",
                                                             "image_mask", "image_positions")))
    torch.testing.assert_close(mixed.logits[1, :n], single.logits[0, :n], atol=1e-5, rtol=1e-5)
    assert labels[1, :n].tolist() == text.labels and (labels[1, n:] == -100).all()
    want = [i for i, label in zip(text.input_ids, text.labels) if label != -100]
    assert tiny_vlm.tokenizer.decode(want) == " 1 2</s>"


def test_a_phase_may_group_by_length_when_the_data_does_not(layout, tiny_vlm):
    assert not datamodule(tiny_vlm, layout, {"instruct": 1}).group_by_length  # data.group_by_length: false
    grouped = datamodule(tiny_vlm, layout, {"instruct": 1}, group_by_length=True)
    assert grouped.group_by_length and grouped.group_keys == [1, 1, 1, 1, 0, 0]


def test_two_stage_run_on_llava_v15_layout_with_plain_stage_one(layout, tmp_path):
    """train(): align with LLaVA's plain format on LCS's image root, then finetune on mix665k's (text-only rows too)."""
    cfg = compose_cfg(*BASE, f"run.root={tmp_path / 'runs'}", "run.name=llava", "data=llava_v15", f"data.root={layout}",
                      "data.num_workers=0", "stage=two_stage", "+stage.phases.align.prompt_format=plain",
                      "stage.phases.align.global_batch_size=2", "stage.phases.finetune.global_batch_size=3",
                      "+stage.phases.finetune.group_by_length=true", "trainer.max_steps=2")
    train(cfg)
    progress = json.loads((tmp_path / "runs/llava/progress.json").read_text())
    assert progress["completed"] == {"align": 2, "finetune": 2}
