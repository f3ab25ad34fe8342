"""Strategy and precision configs: the FSDP preset composes and takes its wrap (and checkpointing) units from the
model, named classes must occur in it; FP8 filters small layers and refuses clearly without a Hopper-class GPU."""

import pytest
import timm.models.vision_transformer as vit
import torch
from hydra.utils import instantiate
from torch import nn
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

from core.fp8 import FP8Unavailable, apply_fp8, fp8_eligible
from core.strategies import FSDPUnitsError, UnitsFSDPStrategy, find_units, fsdp_strategy
from core.trainer import world_size
from tests.conftest import compose_cfg


def test_fsdp_preset_composes_and_takes_its_units_from_the_model():
    cfg = compose_cfg("trainer=fsdp")
    strategy = instantiate(cfg.trainer.strategy)
    assert isinstance(strategy, UnitsFSDPStrategy) and strategy.wrap is None and strategy.checkpoint_units
    assert strategy.units is None  # found in the model at set-up (tests/test_fsdp.py)
    assert strategy.sharding_strategy.name == "FULL_SHARD" and strategy._state_dict_type == "sharded"
    hybrid = instantiate(compose_cfg("trainer=fsdp", "trainer.strategy.sharding=hybrid", "trainer.strategy.activation_checkpointing=false",
                                     "trainer.strategy.state_dict=full").trainer.strategy)
    assert hybrid.sharding_strategy.name == "HYBRID_SHARD" and hybrid._state_dict_type == "full" and not hybrid.checkpoint_units
    named = fsdp_strategy(wrap=["transformers.models.llama.modeling_llama.LlamaDecoderLayer",
                                "timm.models.vision_transformer.Block"])
    assert named.wrap == {LlamaDecoderLayer, vit.Block}


def test_named_wrap_classes_must_occur_in_the_model():
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(vit.Block(8, 2), vit.Block(8, 2)))
    assert find_units(model, {vit.Block}) == {vit.Block: 2}
    with pytest.raises(FSDPUnitsError, match=r"LlamaDecoderLayer matches no module of the model \(Sequential\)"):
        find_units(model, {vit.Block, LlamaDecoderLayer})


def test_fsdp_rejects_unknown_classes_and_sharding_with_a_clear_message():
    with pytest.raises(ValueError, match="cannot be imported"):
        fsdp_strategy(wrap=["transformers.models.llama.modeling_llama.NoSuchLayer"])
    with pytest.raises(ValueError, match="choose one of"):
        fsdp_strategy(sharding="everything")


def test_world_size_from_devices_and_nodes():
    assert world_size(compose_cfg("trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.num_nodes=3").trainer) == 6
    assert world_size(compose_cfg("trainer=cpu").trainer) == 1


def test_fp8_converts_only_large_linear_layers_divisible_by_16():
    model = nn.ModuleDict({"big": nn.Linear(2048, 4096), "small": nn.Linear(256, 256), "odd": nn.Linear(2048, 2050),
                           "lm_head": nn.Linear(2048, 32000), "norm": nn.LayerNorm(2048)})
    eligible = [name for name, m in model.named_modules() if fp8_eligible(m, name)]
    assert eligible == ["big"]
    assert [n for n, m in model.named_modules() if fp8_eligible(m, n, min_features=128)] == ["big", "small"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_fp8_refuses_clearly_without_a_gpu_or_torchao():
    with pytest.raises(FP8Unavailable, match="torchao|CUDA GPU"):
        apply_fp8(nn.Linear(2048, 2048))
