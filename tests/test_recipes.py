"""Published recipes: the headline command resolves to Prismatic's recipe, the demo stays the demo, every preset
matches the table of values in docs/recipes.md (each row cites its source file), and the demo recipe refuses
components it was not made for."""

import json
import re
import time
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from core.conf import group_options
from core.run import RecipeError, evaluate, refuse_oversized_parts, train
from data.errors import DataError
from tests.conftest import BASE, ROOT, compose_cfg, composed
from tests.data.llava_layout import write_llava_v15
from tests.eval.fixtures import make_vqav2

ROWS = re.search(r"<!-- values: .*? -->\n(.*?)<!-- end values -->", (ROOT / "docs/recipes.md").read_text(), re.S).group(1)
VALUES = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in ROWS.splitlines()[2:] if line.strip()]


def test_headline_command_resolves_to_prismatics_single_stage_recipe_on_llava_data():
    cfg = compose_cfg("encoder=siglip", "backbone=llama")
    assert cfg.stage.name == "single_stage" and cfg.data.name == "llava_v15"
    (finetune,) = cfg.stage.phases.values()
    assert list(finetune.trainable) == ["projector", "backbone"]  # the encoder stays frozen
    assert (finetune.optim.lr, finetune.global_batch_size, finetune.optim.weight_decay) == (2e-5, 128, 0.1)


@pytest.mark.parametrize("overrides", [[], ["encoder=tiny_clip"], ["backbone=tiny_qwen2"], ["encoder=siglip", "backbone=tiny_llama"]])
def test_a_tiny_flavour_brings_the_demo_recipe_and_data(overrides):
    cfg = compose_cfg(*overrides)
    assert cfg.stage.name == "scratch" and cfg.data.name == "sort_of_clevr"


def test_a_preset_keeps_its_recipe_with_tiny_flavours_swapped_in_and_the_command_line_wins():
    cfg = compose_cfg("experiment=llava_v15_7b", "encoder=tiny_clip", "backbone=tiny_llama")
    assert (cfg.stage.name, cfg.data.name, cfg.encoder.name) == ("llava_v15", "llava_v15", "tiny_clip")
    assert compose_cfg("encoder=tiny_clip", "stage=two_stage").stage.name == "two_stage"


def test_every_preset_has_documented_values_and_every_documented_value_is_what_the_preset_resolves_to():
    assert {row[0] for row in VALUES} == set(group_options("experiment"))
    for preset, key, value, source in VALUES:
        assert source, f"{preset} {key}: no source"
        got = OmegaConf.select(composed(f"experiment={preset}"), key)
        got = OmegaConf.to_container(got, resolve=True) if OmegaConf.is_config(got) else got
        assert got == yaml.safe_load(value), f"experiment={preset}: {key} is {got!r}, docs/recipes.md says {value}"


def test_the_contract_keys_of_every_phase_of_every_preset():
    for preset in group_options("experiment"):
        for phase in composed(f"experiment={preset}").stage.phases.values():
            assert phase.optim.lr > 0 and phase.optim.weight_decay >= 0 and phase.global_batch_size > 0 and phase.epochs >= 1


class Parts(torch.nn.Module):
    def __init__(self, encoder: int, backbone: int):
        super().__init__()
        self.encoder, self.projector, self.backbone = torch.nn.Linear(encoder, 1), torch.nn.Linear(1, 1), torch.nn.Linear(backbone, 1)


def test_the_demo_recipe_refuses_a_part_above_its_cap_unless_asked():
    stage = compose_cfg().stage
    OmegaConf.update(stage, "phases.scratch.max_part_params", 50)
    refuse_oversized_parts(Parts(10, 10), stage)  # 11 parameters each: fine
    with pytest.raises(RecipeError, match=r"trains the backbone .*stage.allow_large=true"):
        refuse_oversized_parts(Parts(10, 99), stage)
    OmegaConf.update(stage, "allow_large", True)
    refuse_oversized_parts(Parts(10, 99), stage)
    refuse_oversized_parts(Parts(10**3, 10**3), compose_cfg("encoder=siglip", "backbone=llama").stage)  # no cap


def test_without_the_data_the_headline_command_fails_before_loading_any_weights(tmp_path):
    """Hub components cannot load here (tests are offline): a DataError rather than a load error shows the data
    check comes first."""
    cfg = compose_cfg("encoder=siglip", "backbone=llama", "logger=csv", f"data.root={tmp_path / 'none'}",
                      f"run.root={tmp_path / 'runs'}")
    start = time.monotonic()
    with pytest.raises(DataError, match=r"(?s)llava_v1_5_mix665k\.json.*python scripts/prepare_llava\.py --out"):
        train(cfg)
    assert time.monotonic() - start < 10


def preset_overrides(preset: str, root: Path, runs: Path) -> list[str]:
    """`experiment=PRESET` with the tiny flavours swapped in, tiny batches, one step per phase, on the layout `root`."""
    phases = composed(f"experiment={preset}").stage.phases
    return [f"experiment={preset}", "encoder=tiny_clip", "backbone=tiny_llama", *BASE, "trainer.max_steps=1",
            f"data.root={root}", f"run.root={runs}", f"run.name={preset}",
            *(f"stage.phases.{name}.global_batch_size=2" for name in phases)]


@pytest.mark.parametrize("preset", group_options("experiment"))
def test_every_preset_trains_every_phase_with_tiny_flavours_and_evaluates(preset, tmp_path):
    root = write_llava_v15(tmp_path / "llava")  # two image roots and text-only records
    mix = json.loads((root / "llava_v1_5_mix665k.json").read_text())
    for extra in ("lvis_instruct4v_220k.json", "lrv/lrv_instruct_343k.json"):  # Prismatic's mixture: its other parts
        (root / extra).parent.mkdir(parents=True, exist_ok=True)
        (root / extra).write_text(json.dumps(mix[:3]))
    results = train(compose_cfg(*preset_overrides(preset, root, tmp_path / "runs")))
    run_dir = tmp_path / "runs" / preset
    phases = list(composed(f"experiment={preset}").stage.phases)
    assert all(f"{name}/train_loss" in results for name in phases)
    assert (run_dir / "checkpoints/last.ckpt").exists() and (run_dir / "model.safetensors").exists()
    expected = make_vqav2(tmp_path / "bench")
    metrics = evaluate(compose_cfg(f"run={run_dir}", "benchmark=vqav2", f"benchmark.root={tmp_path / 'bench'}", config="eval"))
    assert metrics["n"] == len(expected)
    assert json.loads((run_dir / "results.json").read_text())["benchmarks"]["vqav2"]["n"] == len(expected)
