"""Load a trained behavior run: `behavior.inference.load(run_dir)` → the policy, ready to act.

A run directory holds `config.yaml`, `model.safetensors` (weights and the
normalisation buffers), `policy.json` (the shapes the policy was built with)
and, for token policies, `tokenizer/` (the fitted action tokenizer).
"""

from __future__ import annotations

from pathlib import Path

from hydra.utils import instantiate
from omegaconf import OmegaConf
from safetensors.torch import load_model

from behavior.codec import ActionCodec
from behavior.tokenizers import load_tokenizer
from data.atomic import read_json, write_json

SPEC = "policy.json"


def build_policy(node, kwargs: dict, shape: dict, codec: ActionCodec | None):
    """Instantiate `cfg.policy` (GPT with a codec, or the continuous MLP) for these shapes."""
    args = {k: v for k, v in node.items() if k not in ("name", "tokenized")}
    args.update(kwargs)
    if node.get("tokenized"):
        return instantiate(args, codec=codec)
    return instantiate(args, action_dim=shape["action_dim"], chunk_size=shape["chunk_size"])


def save_policy_spec(run_dir: Path, kwargs: dict, shape: dict, codec: ActionCodec | None) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    if codec is not None:
        codec.tokenizer.save(str(run_dir / "tokenizer"))
    write_json(run_dir / SPEC, {"kwargs": kwargs, "shape": shape})


def load(run_dir, device: str = "cpu"):
    """The trained policy of a behavior run, in eval mode."""
    run_dir = Path(run_dir)
    for name in ("config.yaml", SPEC, "model.safetensors"):
        if not (run_dir / name).exists():
            raise FileNotFoundError(f"{run_dir / name} is missing: is {run_dir} a finished behavior run?")
    cfg = OmegaConf.load(run_dir / "config.yaml")
    spec = read_json(run_dir / SPEC)
    codec = None
    if cfg.policy.get("tokenized"):
        shape = spec["shape"]
        codec = ActionCodec(load_tokenizer(str(run_dir / "tokenizer")), shape["chunk_size"], shape["action_dim"],
                            max_tokens=shape.get("max_tokens"))
    policy = build_policy(cfg.policy, spec["kwargs"], spec["shape"], codec)
    load_model(policy, str(run_dir / "model.safetensors"), device=device)
    return policy.to(device).eval()
