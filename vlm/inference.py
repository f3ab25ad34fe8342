"""`vlm.load(run_dir)`: the trained VLM of a run, ready for `generate`.

Rebuilds the components from the run's `config.yaml` (the same builders as
training) and loads the weights of the latest finished phase from
`model.safetensors`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import OmegaConf
from safetensors.torch import load_model

from vlm.model import VLM, build_vlm


def load(run_dir: str | Path, device: str | torch.device = "cpu") -> VLM:
    run_dir = Path(run_dir)
    config, weights = run_dir / "config.yaml", run_dir / "model.safetensors"
    for path in (config, weights):
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: {run_dir} is not a finished run (train it with train.py first)")
    model = build_vlm(OmegaConf.load(config))
    load_model(model, str(weights))
    return model.to(device).eval()
