"""Modality/length-grouped batches: less padding, every sample once per epoch, seeded, resumable, and wired to data config."""

import itertools
import json

import torch
from PIL import Image

from core.data import GroupedStreamSampler, StreamSampler
from tests.conftest import compose_cfg

BLOCK = 8


def take(sampler, n):
    return list(itertools.islice(iter(sampler), n))


def mixed_dataset(n=400, seed=0):
    """Lengths of text-only samples (10..300 tokens) and image samples (64 patches + 10..300 tokens)."""
    gen = torch.Generator().manual_seed(seed)
    groups = torch.randint(0, 2, (n,), generator=gen).tolist()
    lengths = [int(t) + 64 * g for t, g in zip(torch.randint(10, 300, (n,), generator=gen).tolist(), groups)]
    return lengths, groups


def padding_fraction(indices, lengths, groups, patches=64):
    """Padding of micro-batches after the splice: text padded to the longest row, patches only where a row has none."""
    pad = total = 0
    for start in range(0, len(indices), BLOCK):
        rows = indices[start : start + BLOCK]
        text = [lengths[i] - patches * groups[i] for i in rows]
        width = max(text) + patches * max(groups[i] for i in rows)
        pad += sum(width - lengths[i] for i in rows)
        total += width * len(rows)
    return pad / total


def test_grouped_batches_pad_less_than_random_batches():
    lengths, groups = mixed_dataset()
    n = len(lengths)
    grouped = take(GroupedStreamSampler(lengths, groups, seed=1, block=BLOCK), n)
    plain = take(StreamSampler(n, seed=1, block=BLOCK), n)
    ours, theirs = padding_fraction(grouped, lengths, groups), padding_fraction(plain, lengths, groups)
    assert ours < 0.25 * theirs, (ours, theirs)
    blocks = [grouped[i : i + BLOCK] for i in range(0, n, BLOCK)]
    mixed = [b for b in blocks if len({groups[i] for i in b}) > 1]
    assert len(mixed) <= 1  # only the leftover block at the end of the epoch may mix modalities
    assert mixed == [] or mixed[0] is blocks[-1]


def test_every_sample_once_per_epoch_and_deterministic_by_seed():
    lengths, groups = mixed_dataset(n=203)  # not a multiple of the block: leftovers close each epoch
    stream = take(GroupedStreamSampler(lengths, groups, seed=3, block=BLOCK), 3 * 203)
    epochs = [stream[i * 203 : (i + 1) * 203] for i in range(3)]
    assert all(sorted(e) == list(range(203)) for e in epochs) and epochs[0] != epochs[1]
    assert take(GroupedStreamSampler(lengths, groups, seed=3, block=BLOCK), 3 * 203) == stream
    assert take(GroupedStreamSampler(lengths, groups, seed=4, block=BLOCK), 203) != epochs[0]


def test_resume_and_ranks_follow_the_same_grouped_stream():
    lengths, groups = mixed_dataset(n=96)
    full = take(GroupedStreamSampler(lengths, groups, seed=5, block=BLOCK), 240)
    for start in (0, 8, 40, 96, 150):  # consumed micro-batches x micro batch, across epochs
        assert take(GroupedStreamSampler(lengths, groups, seed=5, block=BLOCK, start=start), 240 - start) == full[start:]
    r0 = take(GroupedStreamSampler(lengths, groups, seed=5, block=BLOCK, rank=0, world_size=2), 48)
    r1 = take(GroupedStreamSampler(lengths, groups, seed=5, block=BLOCK, rank=1, world_size=2, start=16), 32)
    blocks = [full[i : i + BLOCK] for i in range(0, 96, BLOCK)]
    assert [r0[i : i + BLOCK] for i in range(0, 48, BLOCK)] == blocks[0::2]  # whole micro-batches, round robin
    assert [r1[i : i + BLOCK] for i in range(0, 32, BLOCK)] == blocks[5::2]


def test_data_config_switches_the_sampler(tmp_path):
    """data.group_by_length=true: the VLM data module's loader draws micro-batches of one modality."""
    from vlm.lightning import VLMTask
    from vlm.model import build_vlm

    Image.new("RGB", (64, 64), (200, 0, 0)).save(tmp_path / "a.png")
    records = []
    for i in range(24):
        question = "Describe it in detail" + " please" * (i % 7)
        record = {"id": f"r{i}", "conversations": [{"from": "human", "value": question}, {"from": "gpt", "value": "ok"}]}
        records.append({**record, "image": "a.png"} if i % 2 else record)
    (tmp_path / "d.json").write_text(json.dumps(records))
    cfg = compose_cfg("data=llava", f"data.json={tmp_path / 'd.json'}", f"data.image_root={tmp_path}", "data.num_workers=0",
                      "stage=finetune")
    model = build_vlm(cfg)
    (phase,) = cfg.stage.phases.values()
    task = VLMTask()
    plain = task.build_datamodule(cfg, phase, model, tmp_path, micro_batch_size=4, seed=0)
    plain.setup()
    assert type(plain.train_dataloader().sampler) is StreamSampler
    cfg.data.group_by_length = True
    grouped = task.build_datamodule(cfg, phase, model, tmp_path, micro_batch_size=4, seed=0)
    grouped.setup()
    assert isinstance(grouped.train_dataloader().sampler, GroupedStreamSampler)

    def epoch(module):  # 6 micro-batches of 4 = the 24 samples; padding after the splice
        pad, modalities = 0, set()
        for batch in itertools.islice(iter(module.train_dataloader()), 6):
            _, mask, _ = model.splice(batch["input_ids"], batch["attention_mask"], None, batch["pixel_values"],
                                      batch["image_mask"], batch["image_positions"])
            pad += int((1 - mask).sum())
            modalities.add(tuple(batch["image_mask"].tolist()))
        return pad, modalities

    with torch.no_grad():
        (pad, modalities), (pad_plain, modalities_plain) = epoch(grouped), epoch(plain)
    assert modalities == {(True,) * 4, (False,) * 4} and len(modalities_plain) > 2
    assert pad < 0.25 * pad_plain
