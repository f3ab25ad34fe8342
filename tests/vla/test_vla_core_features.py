"""The VLA trains on the shared core, so the core's features apply: smart sifting (per-sample action-token losses),
LoRA adapters on the backbone, `init_from` a VLM run or an HF Llava folder, and a rerun that finds its finished run."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

import vla
from core.checkpoint import save_weights_atomic
from core.run import train
from tests.conftest import compose_cfg
from tests.vla.conftest import TASKS, vla_cfg
from tests.conftest import randomize
from tests.vla.test_vla_decode import frames
from vlm.hf_llava import export as export_llava
from vlm.model import build_vlm


def test_sifting_scores_action_token_losses_and_keeps_half(tmp_path, lerobot_dir):
    cfg = vla_cfg(tmp_path, lerobot_dir, "stage.phases.vla.max_steps=2", "sifting.enabled=true", "sifting.keep=0.5")
    results = json.loads((Path(train(cfg)["run_dir"]) / "results.json").read_text())
    assert results["sift/forwarded"] == 2 * 2 * 8 and results["sift/backpropagated"] == 2 * 8


def test_lora_trains_the_adapters_and_the_run_loads(tmp_path, lerobot_dir):
    cfg = vla_cfg(tmp_path, lerobot_dir, "stage.phases.vla.max_steps=2", "lora.enabled=true", "lora.rank=4")
    run_dir = Path(train(cfg)["run_dir"])
    keys = load_file(str(run_dir / "model.safetensors")).keys()
    assert any("lora_" in k for k in keys)
    policy = vla.load(run_dir)
    assert policy.predict_action(frames(2), TASKS).shape == (2, 1, 2)
    again = train(cfg)  # the same command finds its finished run: nothing trains again
    assert again["run_dir"] == str(run_dir)


def test_init_from_a_vlm_run_or_an_hf_llava_folder_starts_from_its_weights(tmp_path, lerobot_dir):
    vlm_cfg = compose_cfg("task=vlm")  # tiny_siglip x mlp x tiny_llama: the VLA's default components
    vlm = randomize(build_vlm(vlm_cfg))
    run = tmp_path / "vlm-run"
    run.mkdir()
    (run / "config.yaml").write_text(OmegaConf.to_yaml(vlm_cfg, resolve=True))
    save_weights_atomic(vlm, run / "model.safetensors")
    folder = export_llava(vlm, tmp_path / "hf-llava", "resize-naive")
    want = {k: v.clone() for k, v in vlm.state_dict().items()}
    for source, name in ((run, "from-run"), (folder, "from-hf")):
        cfg = vla_cfg(tmp_path / "runs", lerobot_dir, "stage.phases.vla.max_steps=1", "stage.phases.vla.optim.lr=0",
                      f"init_from={source}", f"run.name={name}")
        got = load_file(str(Path(train(cfg)["run_dir"]) / "model.safetensors"))
        for key in ("projector.0.weight", "backbone.model.model.layers.0.self_attn.q_proj.weight", "encoder.model.pos_embed"):
            torch.testing.assert_close(got[key], want[key], rtol=0, atol=1e-6)
