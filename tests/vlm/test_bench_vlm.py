"""Smoke test of scripts/bench_vlm.py at tiny sizes: our VLM and the HF Llava built from it are the same model
(logits and first-step loss on the benchmark batch, greedy tokens), and each benchmark returns well-formed figures."""

import copy
import dataclasses

import pytest
import torch

from scripts import bench_vlm as bench


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    torch.manual_seed(0)
    return bench.build_pair(tmp_path_factory.mktemp("bench"), hidden=64, layers=2, heads=2)


def rows_for(pair, n, seed=0):
    tok, enc = pair.ours.tokenizer, pair.ours.encoder
    return bench.make_rows(n, enc.num_patches, enc.image_size[0], len(tok) - 1, tok.bos_token_id, seed=seed, max_len=120)


def fresh(pair):
    return dataclasses.replace(pair, ours=copy.deepcopy(pair.ours), hf=copy.deepcopy(pair.hf))


def test_benchmark_batch_is_the_same_for_both_models(pair):
    rows = rows_for(pair, 6)
    assert {len(r["image_positions"]) for r in rows} == {0, 1}  # a mixed batch: image and text-only rows
    pad, patches = pair.ours.tokenizer.pad_token_id, pair.ours.encoder.num_patches
    ours, hf = bench.our_batch(rows, pad), bench.hf_batch(rows, pad, pair.image_token_id, patches)
    assert (hf["input_ids"] == pair.image_token_id).sum(1).tolist() == [patches * len(r["image_positions"]) for r in rows]
    assert int(hf["attention_mask"].sum()) == bench.real_tokens(rows, patches)
    assert int((ours["labels"] != -100).sum()) == int((hf["labels"] != -100).sum()) > 0
    assert bench.max_logit_difference(pair, rows) < 1e-4
    other = fresh(pair)
    with torch.no_grad():  # the check sees a difference in the vision tower
        other.hf.model.vision_tower.encoder.layers[0].mlp.fc1.bias.add_(0.5)
    assert bench.max_logit_difference(other, rows) > 1e-3


def test_train_step_benchmark_starts_from_the_same_loss(pair):
    out = bench.bench_train_step(fresh(pair), rows_for(pair, 4), repeats=1, warmup=1)
    assert out["loss_ours"] == pytest.approx(out["loss_hf"], rel=1e-5)
    assert out["s_ours"] > 0 and out["s_hf"] > 0 and out["ratio"] == pytest.approx(out["s_hf"] / out["s_ours"])


def test_generation_benchmark_gives_identical_tokens(pair):
    out = bench.bench_generate(pair, batch=2, new_tokens=5, repeats=1, warmup=0)
    assert out["identical_tokens"] and out["identical_text"] and out["distinct_tokens"] > 1
    assert out["tok_s_ours"] > 0 and out["tok_s_hf"] > 0


def test_epoch_benchmark_grouped_batches_pad_less(pair):
    rows = rows_for(pair, 24, seed=1)
    patches = pair.ours.encoder.num_patches
    grouped = bench.epoch_batches(rows, 4, patches, grouped=True)
    shuffled = bench.epoch_batches(rows, 4, patches, grouped=False)
    for batches in (grouped, shuffled):
        assert sorted(i for b in batches for i in b) == list(range(len(rows)))  # one epoch: every sample once
    full = [b for b in grouped if len(b) == 4]
    assert all(len({len(rows[i]["image_positions"]) for i in b}) == 1 for b in full)  # one modality per micro-batch
    out = bench.bench_epoch(copy.deepcopy(pair.ours), rows, micro_batch=4, repeats=1)
    assert out["real_tokens"] == bench.real_tokens(rows, patches)
    assert 0 <= out["padding_grouped"] < out["padding_shuffled"] < 1
    assert out["ratio"] == pytest.approx(out["tok_s_grouped"] / out["tok_s_shuffled"])


def test_batched_prompt_embeddings_equal_each_prompt_alone_left_padded(tiny_vlm):
    """The prefill the generation benchmark times: one collated splice for the batch, rows moved to the right,
    all-padding columns dropped (here a long text-only row beside a short image row)."""
    image = bench.probe_images(1)[0]
    items = [(None, "Is the green object at the top or at the bottom of the picture? " * 3), (image, "Hi"),
             ([image, image.transpose(0)], "<image>\nCompare it with <image> please."), (None, "Hi")]
    with torch.no_grad():
        embeds, mask = tiny_vlm.prompt_embeddings([i for i, _ in items], [p for _, p in items])
        alone = [tiny_vlm.prompt_embeddings([i], [p]) for i, p in items]
    assert embeds.shape[1] == max(e.shape[1] for e, _ in alone)
    for row, (e, m) in enumerate(alone):
        pad = embeds.shape[1] - e.shape[1]
        assert mask[row].tolist() == [0] * pad + m[0].tolist()
        assert not embeds[row, :pad].any()
        torch.testing.assert_close(embeds[row, pad:], e[0], atol=1e-5, rtol=1e-5)
