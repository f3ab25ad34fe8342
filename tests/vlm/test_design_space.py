"""The design space, pairwise: every tiny encoder, tiny backbone and projector config takes a training step (full
finetune) with every option of the other two groups at least once, with finite loss, a finite gradient for every
encoder and projector parameter, gradients in the backbone, and updated weights. The cases are computed from the
YAML lists (a greedy pairwise cover), so a new config adds its cases."""

from __future__ import annotations

import copy
from itertools import combinations, product

import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image

from tests.conftest import composed, config_options, tiny_options
from vlm.dataset import Collator
from vlm.lightning import VLMModule
from vlm.model import VLM, build_component

GROUPS = {"encoder": tiny_options("encoder"), "backbone": tiny_options("backbone"), "projector": config_options("projector")}


def pairwise_cover(levels: dict[str, list[str]]) -> list[dict[str, str]]:
    """Few rows (one option per group) in which every pair of options of two different groups occurs: the two
    largest groups' full product, each row completed greedily with the options that cover the most new pairs."""
    names = sorted(levels, key=lambda g: -len(levels[g]))
    uncovered = {((a, x), (b, y)) for a, b in combinations(names, 2) for x in levels[a] for y in levels[b]}
    rows = []
    for first, second in product(levels[names[0]], levels[names[1]]):
        row = {names[0]: first, names[1]: second}
        for group in names[2:]:
            row[group] = max(levels[group], key=lambda o: sum(((g, row[g]), (group, o)) in uncovered for g in row))
        uncovered -= {((a, row[a]), (b, row[b])) for a, b in combinations(names, 2)}
        rows.append(row)
    assert not uncovered, f"pairs left uncovered: {sorted(uncovered)[:5]}"
    return rows


CASES = pairwise_cover(GROUPS)


def test_the_cover_has_every_pair_of_options():
    for a, b in combinations(GROUPS, 2):
        assert {(row[a], row[b]) for row in CASES} == set(product(GROUPS[a], GROUPS[b]))
    assert len(CASES) == max(len(x) * len(y) for x, y in combinations(GROUPS.values(), 2))


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c.values()))
def test_every_pair_takes_a_training_step(tiny_component, case):
    enc = copy.deepcopy(tiny_component("encoder", case["encoder"]))
    llm = copy.deepcopy(tiny_component("backbone", case["backbone"]))
    cfg = composed("stage=full_finetune", "stage.phases.full_finetune.optim.warmup_ratio=0", f"projector={case['projector']}")
    model = VLM(enc, llm, build_component(cfg.projector)(enc.embed_dim, llm.hidden_size))
    (phase,) = cfg.stage.phases.values()
    module = VLMModule(model, OmegaConf.to_container(phase), total_steps=1)
    optimizer = module.configure_optimizers()["optimizer"]
    rows = []
    for i in range(2):
        ids, labels = model.prompt_format.build([("human", "<image>\nWhat shape?"), ("gpt", f"circle {i}")])
        rows.append({"input_ids": ids, "labels": labels,
                     "pixel_values": enc.transform(Image.new("RGB", (64 + 8 * i, 56), (40 * i, 90, 200)))})
    batch = Collator(model.tokenizer.pad_token_id)(rows)
    loss = module.compute_loss(batch)
    assert torch.isfinite(loss)
    loss.backward()
    for name in ("encoder", "projector"):
        missing = [n for n, p in getattr(model, name).named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
        assert not missing, (name, missing[:5])
    for name, part in module.parts().items():
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in part.parameters()), name
    before = [p.detach().clone() for p in (*model.encoder.parameters(), *model.projector.parameters())]
    optimizer.step()
    after = (*model.encoder.parameters(), *model.projector.parameters())
    assert all(not torch.equal(b, p) for b, p in zip(before, after) if b.ndim > 1)
    assert module.batch_flops(batch) > 0
