"""Every config in conf/ composes, and every component config builds (tiny ones) or, for hub
models, fails offline with the clear load error (tests never reach a hub)."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import CONF, SMALL, compose_cfg
from vlm.hub import ComponentLoadError
from vlm.model import build_component

GROUPS = ["task", "encoder", "backbone", "projector", "stage", "data", "trainer", "logger"]
HUB = {"encoder": {"siglip", "siglip_384", "clip", "dinov2", "in1k", "dinosiglip", "open_clip"}, "backbone": {"llama", "llama2", "llama3", "vicuna", "mistral", "phi", "qwen2", "gemma"}}


def options(group):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes(group, option):
    extra = ["data.json=x.json", "data.image_root=."] if (group, option) == ("data", "llava") else []
    cfg = compose_cfg(f"{group}={option}", *extra)
    OmegaConf.resolve(cfg)
    assert cfg[group] is not None


@pytest.mark.parametrize("group,option", [(g, o) for g in ("encoder", "backbone") for o in options(g)])
def test_components_build_or_fail_clearly_offline(group, option):
    node = compose_cfg(f"{group}={option}")[group]
    if option in HUB.get(group, ()):
        with pytest.raises(ComponentLoadError, match=rf"{group}\.[\w.]*model_(id|name)="):
            build_component(node)
    else:
        component = build_component(node)
        assert (component.embed_dim if group == "encoder" else component.hidden_size) > 0


@pytest.mark.parametrize("option", options("projector"))
def test_projectors_map_vision_width_to_llm_width(option):
    import torch

    proj = build_component(compose_cfg(f"projector={option}").projector)(24, 40)
    assert proj(torch.zeros(2, 5, 24)).shape == (2, 5, 40)


@pytest.mark.parametrize("option", options("stage"))
def test_stage_phases_name_real_parts_and_splits(option):
    cfg = compose_cfg(f"stage={option}")
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
