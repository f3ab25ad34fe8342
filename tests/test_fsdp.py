"""FSDP units come from the model: for every tiny encoder and backbone config (generated from conf/, so a new YAML
adds its case) the units found by core.strategies.find_units number its blocks / decoder layers, counted
independently from the checkpoint's own config file (HF `num_hidden_layers`, timm `depth`, open_clip `layers`)
and the config's `feature_layer` (a ViT encoder keeps the blocks up to that one). A wrap class that matches
nothing is an error naming the class and the model. A 2-process CPU FSDP run (gloo) gives the per-step losses
and final weights of 1 process accumulating the same micro-batches.
"""

import json
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from timm.models.vision_transformer import Block
from torch import nn

from core.run import train
from core.strategies import FSDPUnitsError, find_units, fsdp_strategy
from tests.conftest import ROOT, compose_cfg, composed, tiny_options
from tests.test_resume import assert_same_losses, command, overrides, step_losses
from vlm.hub import resolve_tiny

CONVNEXT_ATTO_BLOCKS = 2 + 2 + 6 + 2  # timm's convnext_atto: depths (2, 2, 6, 2); feature_layer -1 keeps every stage


def kept(depth: int, feature_layer: int) -> int:
    """Blocks a ViT encoder keeps when its features come from block `feature_layer` (negative: from the end)."""
    return depth + feature_layer + 1 if feature_layer < 0 else feature_layer + 1


def expected_encoder_units(node) -> int:
    if "encoders" in node:  # fused: every tower's blocks
        return sum(expected_encoder_units(tower) for tower in node.encoders.values())
    if "model_id" in node:  # timm
        folder = Path(resolve_tiny(node.model_id, "encoder.model_id"))
        return kept(json.loads((folder / "config.json").read_text())["model_args"]["depth"], node.feature_layer)
    folder = Path(resolve_tiny(node.model_name, "encoder.model_name"))
    vision = json.loads((folder / "open_clip_config.json").read_text())["model_cfg"]["vision_cfg"]
    if vision.get("timm_model_name") == "convnext_atto":
        assert node.feature_layer == -1
        return CONVNEXT_ATTO_BLOCKS
    return kept(vision["layers"], node.feature_layer)


@pytest.mark.parametrize("option", tiny_options("encoder"))
def test_units_of_every_tiny_encoder_are_its_blocks(tiny_component, option):
    encoder = tiny_component("encoder", option)
    units = find_units(encoder)
    assert sum(units.values()) == expected_encoder_units(composed(f"encoder={option}").encoder) > 0


@pytest.mark.parametrize("option", tiny_options("backbone"))
def test_units_of_every_tiny_backbone_are_its_decoder_layers(tiny_component, option):
    backbone = tiny_component("backbone", option)
    folder = Path(resolve_tiny(composed(f"backbone={option}").backbone.model_id, "backbone.model_id"))
    layers = json.loads((folder / "config.json").read_text())["num_hidden_layers"]
    units = find_units(backbone)
    assert sum(units.values()) == layers > 0
    assert len(units) == 1 and next(iter(units)).__name__ in backbone.model._no_split_modules


def test_a_vlm_gets_the_units_of_its_encoder_and_backbone(tiny_component):
    model = nn.ModuleDict({"encoder": tiny_component("encoder", "tiny_dinosiglip"),
                           "backbone": tiny_component("backbone", "tiny_qwen2")})
    units = {cls.__name__: n for cls, n in find_units(model).items()}
    assert units == {"Block": expected_encoder_units(composed("encoder=tiny_dinosiglip").encoder), "Qwen2DecoderLayer": 2}


def test_a_wrap_class_that_matches_nothing_is_an_error_naming_class_and_model(tiny_component, monkeypatch):
    backbone = tiny_component("backbone", "tiny_mistral")
    with pytest.raises(FSDPUnitsError, match=r"timm\.models\.vision_transformer\.Block matches no module of .*HFBackbone"):
        find_units(backbone, {Block})
    monkeypatch.setattr(backbone.model, "_no_split_modules", ["LlamaDecoderLayer"])  # a stale class name
    with pytest.raises(ValueError, match=r"\['LlamaDecoderLayer'\] .* match no module of backbone .*tiny_mistral"):
        find_units(backbone)
    with pytest.raises(FSDPUnitsError, match="no module of .*Linear.* declares its FSDP units"):
        find_units(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="wrap nothing"):
        fsdp_strategy(wrap=[])


FSDP = ["trainer=fsdp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.precision=32-true"]


TWO_PHASES = ("stage.phases.scratch_captions.global_batch_size=4", "stage.phases.scratch.global_batch_size=4")


def test_two_process_cpu_fsdp_equals_one_process_accumulating(tmp_path):
    """1 process, micro batch 2 x accumulation 2 vs 2 FSDP processes (gloo) x micro batch 2, full sharding, units from
    the model and activation checkpointing on, over the demo recipe's two phases (the second phase wraps a fresh
    model and loads the first phase's gathered weights): the same global batches, so the same losses and weights.

    Tolerance: with `trainer.strategy.sharding=no_shard` the losses and weights are bit-identical to 1 process;
    full sharding's sharded gradient reduction changes the rounding, which Adam carries to at most 1e-4 of the
    loss and 7e-5 in a weight after a few steps (measured); the bounds below are 10x those."""
    steps = dict(steps=3, every=100, stage=TWO_PHASES)
    train(compose_cfg(*overrides(tmp_path, "one", "trainer.micro_batch_size=2", **steps)))
    run = subprocess.run(command(tmp_path, "fsdp", *FSDP, "trainer.micro_batch_size=2", **steps), cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout.replace("\n", " ")
    assert out.count("FSDP units: 3 x Block, 3 x LlamaDecoderLayer (activation checkpointing on)") == 2, out[-2000:]
    assert out.count("(2 x 1 accumulation)") == 2
    assert_same_losses(step_losses(tmp_path / "fsdp"), step_losses(tmp_path / "one"), 6, tolerance=1e-3)
    sharded, single = load_file(tmp_path / "fsdp" / "model.safetensors"), load_file(tmp_path / "one" / "model.safetensors")
    assert sharded.keys() == single.keys()  # gathered from the shards, every tensor once
    for name, tensor in single.items():
        torch.testing.assert_close(sharded[name], tensor, rtol=0, atol=1e-3, msg=name)
