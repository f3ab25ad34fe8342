"""Tests generated from conf/: every option of every group composes; every encoder and backbone config builds
and keeps its contract (tiny flavours) or fails offline with the clear load error (hub models; tests never reach
a hub); every projector maps widths; stages name real parts. Adding a YAML adds its cases."""

import copy
from functools import cache
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import get_object
from omegaconf import OmegaConf
from PIL import Image

from core.conf import group_option
from tests.conftest import CONF, SMALL, compose_cfg, composed, config_options, is_tiny, tiny_options
from vlm.hub import ComponentLoadError
from vlm.interfaces import ImageEncoder, LanguageBackbone
from vlm.model import build_component
from vlm.prompting import PromptFormat

GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and any(p.glob("*.yaml")))
# the primary configs, and the train config with each task (a task brings its own groups)
CONTEXTS = [(p.stem, []) for p in sorted(CONF.glob("*.yaml"))] + [("train", [f"task={t}"]) for t in config_options("task")]


@cache
def context_choices() -> list[tuple[str, list[str], list[str]]]:
    """(primary config, overrides, the group choices it composes: `GROUP` or `GROUP@PACKAGE`) per context."""
    out = []
    for config, overrides in CONTEXTS:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            choices = compose(config_name=config, overrides=overrides, return_hydra_config=True).hydra.runtime.choices
        out.append((config, overrides, list(choices)))
    return out


def choice_key(group: str) -> tuple[str, list[str], str] | None:
    """(primary config, overrides, `GROUP` or `GROUP@PACKAGE`) of the first context that selects `group`; None for
    a group whose options are read by name from inside another config (e.g. `backbone.prompt_format`)."""
    for config, overrides, choices in context_choices():
        for key in choices:
            if key == group or key.startswith(f"{group}@"):
                return config, overrides, key
    return None


def required_keys(tree, prefix: str = "") -> list[str]:
    """Dotted keys whose value is `???` (the user must give it)."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else []
    return [k for key, value in items
            for k in ([f"{prefix}{key}"] if value == "???" else required_keys(value, f"{prefix}{key}."))]


def test_groups_are_found_from_the_conf_directory():
    assert {"encoder", "backbone", "projector", "stage", "task", "trainer"} <= set(GROUPS)


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in config_options(g)])
def test_every_option_composes(group, option):
    if choice_key(group) is None:  # read by name (core.conf.group_option): its _target_ must name a class or function
        assert callable(get_object(group_option(group, option)._target_))
        return
    config, overrides, key = choice_key(group)
    cfg = copy.deepcopy(composed(*overrides, f"{key}={option}", config=config))
    for missing in required_keys(OmegaConf.to_container(cfg, resolve=False)):  # e.g. data=llava's json; any value will do
        OmegaConf.update(cfg, missing, "x")
    OmegaConf.resolve(cfg)
    if (CONF / group / f"{option}.yaml").read_text().startswith("# @package _global_"):  # no node of its own
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            hydra_cfg = compose(config_name=config, overrides=[*overrides, f"{key}={option}"], return_hydra_config=True)
        assert hydra_cfg.hydra.runtime.choices[key] == option
    else:
        assert OmegaConf.select(cfg, key.split("@")[-1] if "@" in key else group) is not None


def check_encoder(encoder):
    assert isinstance(encoder, ImageEncoder) and isinstance(encoder, torch.nn.Module)
    assert isinstance(encoder.embed_dim, int) and encoder.embed_dim > 0
    rows, cols = encoder.grid_size
    assert encoder.num_patches == rows * cols > 0
    pixels = encoder.transform(Image.new("RGB", (72, 48), (200, 40, 90)))
    assert tuple(pixels.shape[-2:]) == tuple(encoder.image_size)
    with torch.no_grad():
        features = encoder(torch.stack([pixels, pixels]))
    assert features.shape == (2, encoder.num_patches, encoder.embed_dim) and torch.isfinite(features).all()
    assert encoder.flops_per_patch() > 0


def check_backbone(backbone):
    assert isinstance(backbone, LanguageBackbone) and isinstance(backbone, torch.nn.Module)
    assert isinstance(backbone.prompt_format, PromptFormat) and backbone.max_length > 0
    ids, _ = backbone.prompt_format.build([("human", "What shape?"), ("gpt", "circle")])
    embeds = backbone.embed(torch.tensor([ids]))
    assert embeds.shape == (1, len(ids), backbone.hidden_size)
    with torch.no_grad():
        logits = backbone(inputs_embeds=embeds, attention_mask=torch.ones(1, len(ids), dtype=torch.long)).logits
    assert logits.shape[:2] == (1, len(ids)) and logits.shape[-1] >= len(backbone.tokenizer)


@pytest.mark.parametrize("group,option", [(g, o) for g in ("encoder", "backbone") for o in config_options(g)])
def test_components_keep_their_contract_or_fail_clearly_offline(tiny_component, group, option):
    node = composed(f"{group}={option}")[group]
    if is_tiny(node):
        (check_encoder if group == "encoder" else check_backbone)(tiny_component(group, option))
    else:
        with pytest.raises(ComponentLoadError, match=rf"{group}\.[\w.]*model_(id|name)="):
            build_component(node)


def test_an_unknown_tiny_flavour_names_the_setting_and_the_choices():
    with pytest.raises(ComponentLoadError, match=r"'tiny_nope' in backbone.model_id=tiny:tiny_nope\n.*tiny:tiny_llama"):
        build_component(compose_cfg("backbone=tiny_llama", "backbone.model_id=tiny:tiny_nope").backbone)


@pytest.mark.parametrize("option", config_options("projector"))
def test_projectors_map_vision_width_to_llm_width(option):
    proj = build_component(composed(f"projector={option}").projector)(24, 40)
    x = torch.randn(2, 5, 24)
    out = proj(x)
    assert out.shape == (2, 5, 40)
    assert not torch.allclose(out[:, 0], out[:, 1])  # each patch is mapped from its own features
    torch.testing.assert_close(proj(x[:, :1]), out[:, :1])


def test_composing_and_resolving_a_config_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("REFRACT_CACHE", str(tmp_path))
    for group in ("encoder", "backbone"):
        for option in tiny_options(group):
            OmegaConf.to_yaml(composed(f"{group}={option}"), resolve=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option", config_options("stage"))
def test_stage_phases_name_real_parts_and_splits(option):
    data = ["data=mini_world"] if option.startswith("mini_") else []  # the study's recipes train on the mini world
    cfg = composed(f"stage={option}", *data)
    assert len(cfg.stage.phases) >= 1
    for key, phase in cfg.stage.phases.items():
        assert phase.name == key
        assert set(phase.trainable) <= {"encoder", "projector", "backbone"}
        assert set(phase.data) <= set(cfg.data.splits)
        assert phase.optim.lr > 0 and phase.global_batch_size > 0


def test_two_stage_is_align_then_finetune():
    phases = compose_cfg("stage=two_stage").stage.phases
    assert list(phases) == ["align", "finetune"]
    assert list(phases.align.trainable) == ["projector"] and list(phases.finetune.trainable) == ["projector", "backbone"]


def test_mlflow_logger_is_the_default_and_continues_its_run(tmp_path, monkeypatch):
    from core.run import train

    monkeypatch.chdir(tmp_path)
    overrides = [o for o in SMALL if o != "logger=csv"] + ["stage.phases.scratch.global_batch_size=2", "trainer.max_steps=1",
                                                           "run.name=tracked", f"run.root={tmp_path / 'runs'}"]
    train(compose_cfg(*overrides))
    run_id = (tmp_path / "runs" / "tracked" / "mlflow_run_id").read_text()
    assert (tmp_path / "runs" / "mlflow.db").exists() and run_id
    train(compose_cfg(*overrides[:-3], "trainer.max_steps=2", "run.name=tracked", f"run.root={tmp_path / 'runs'}"))
    assert (tmp_path / "runs" / "tracked" / "mlflow_run_id").read_text() == run_id
    assert Path(tmp_path / "runs" / "tracked" / "metrics.csv").exists()
