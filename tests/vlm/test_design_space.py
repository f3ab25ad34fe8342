"""The design space: every tiny encoder × every tiny backbone × every projector builds and takes one training
step (full finetune), with finite loss, gradients in every part and updated weights."""

from __future__ import annotations

import copy

import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image

from tests.conftest import CONF, compose_cfg
from vlm.dataset import Collator
from vlm.lightning import VLMModule
from vlm.model import VLM, build_component


def tiny(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("tiny_*.yaml"))


ENCODERS, BACKBONES, PROJECTORS = tiny("encoder"), tiny("backbone"), sorted(p.stem for p in (CONF / "projector").glob("*.yaml"))


@pytest.fixture(scope="module")
def parts():
    torch.manual_seed(0)
    encoders = {n: build_component(compose_cfg(f"encoder={n}").encoder) for n in ENCODERS}
    backbones = {n: build_component(compose_cfg(f"backbone={n}").backbone) for n in BACKBONES}
    return encoders, backbones


def test_the_grid_is_the_full_design_space():
    assert len(ENCODERS) >= 5 and len(BACKBONES) >= 6 and set(PROJECTORS) == {"linear", "mlp", "fused_mlp"}


@pytest.mark.parametrize("projector", PROJECTORS)
@pytest.mark.parametrize("backbone", BACKBONES)
@pytest.mark.parametrize("encoder", ENCODERS)
def test_every_combination_takes_a_training_step(parts, encoder, backbone, projector):
    encoders, backbones = parts
    enc, llm = copy.deepcopy(encoders[encoder]), copy.deepcopy(backbones[backbone])
    cfg = compose_cfg("stage=full_finetune", "stage.phases.full_finetune.optim.warmup_ratio=0", f"projector={projector}")
    model = VLM(enc, llm, build_component(cfg.projector)(enc.embed_dim, llm.hidden_size))
    (phase,) = cfg.stage.phases.values()
    module = VLMModule(model, OmegaConf.to_container(phase), total_steps=1)
    optimizer = module.configure_optimizers()["optimizer"]
    rows = []
    for i in range(2):
        ids, labels = model.prompt_format.build([("human", "<image>\nWhat shape?"), ("gpt", f"circle {i}")])
        rows.append({"input_ids": ids, "labels": labels,
                     "pixel_values": enc.transform(Image.new("RGB", (64, 56), (40 * i, 90, 200)))})
    batch = Collator(model.tokenizer.pad_token_id)(rows)
    loss = module.compute_loss(batch)
    assert torch.isfinite(loss)
    loss.backward()
    for name, part in module.parts().items():
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in part.parameters()), name
    before = [p.detach().clone() for p in model.projector.parameters()]
    optimizer.step()
    assert all(not torch.equal(b, p) for b, p in zip(before, model.projector.parameters()))
