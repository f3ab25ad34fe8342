"""Trainer presets: every preset extends conf/trainer/_base.yaml and sets all its keys; the default preset
(`trainer=auto`) resolves to the `cpu` preset's values without a CUDA GPU and to the `gpu` preset's with one."""

import functools

import pytest
import torch
from omegaconf import OmegaConf

from tests.conftest import CONF, compose_cfg

PRESETS = sorted(p.stem for p in (CONF / "trainer").glob("[!_]*.yaml"))


@functools.cache
def composed(*overrides: str):
    return compose_cfg(*overrides)


def resolved_trainer(*overrides: str) -> dict:
    """The trainer node, resolved now (with whatever torch.cuda.is_available says at this moment)."""
    return OmegaConf.to_container(composed(*overrides).trainer, resolve=True, throw_on_missing=True)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_sets_exactly_the_base_keys_in_the_base_order(preset):
    base = list(OmegaConf.load(CONF / "trainer" / "_base.yaml"))
    assert list(resolved_trainer(f"trainer={preset}")) == base


def test_cpu_and_gpu_presets_differ_in_device_precision_and_micro_batch_only():
    cpu, gpu = resolved_trainer("trainer=cpu"), resolved_trainer("trainer=gpu")
    assert {k: (cpu[k], gpu[k]) for k in cpu if cpu[k] != gpu[k]} == {
        "accelerator": ("cpu", "gpu"), "precision": ("32-true", "bf16-mixed"), "micro_batch_size": (None, 16)}


@pytest.mark.parametrize("cuda,preset", [(False, "cpu"), (True, "gpu")])
def test_default_preset_is_the_gpu_preset_with_cuda_and_the_cpu_preset_without(monkeypatch, cuda, preset):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert resolved_trainer() == resolved_trainer(f"trainer={preset}")
    assert resolved_trainer("task=behavior") == resolved_trainer(f"trainer={preset}", "task=behavior")
