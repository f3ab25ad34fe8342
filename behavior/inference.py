"""Load a trained behavior run: `behavior.inference.load(run_dir)` → the policy, ready to act.

A run directory holds `config.yaml`, `model.safetensors` (weights and the
normalisation buffers), `policy.json` (the shapes the policy was built with)
and, for token policies, `tokenizer/` (the fitted action tokenizer).

Loading runs none of the run's code (core/safe_load.py): the policy's `_target_` (from config.yaml, with the
arguments of policy.json merged in) must be one of conf/policy's, and a saved tokenizer's one of
behavior.tokenizers'. The weights are checked before use (core/weights.py): checksum, readability, finite
values, shapes, and the `policy` config they were trained with.
"""

from __future__ import annotations

from pathlib import Path

from hydra.utils import instantiate

from behavior.codec import ActionCodec
from behavior.tokenizers import load_tokenizer
from behavior.vision import CameraTokens
from core.safe_load import UnsafeConfigError, check_targets, load_run_config
from core.weights import load_weights, verify_config
from data.atomic import read_json, write_json

SPEC = "policy.json"
DEFAULT_WIDTH = 128  # camera tokens' width for a policy without `d_model` (the MLP)


def build_policy(node, kwargs: dict, shape: dict, codec: ActionCodec | None, source: str | None = None):
    """Instantiate `cfg.policy` (GPT with a codec, or the continuous MLP) for these shapes, with its camera
    encoder (`policy.vision`, behavior/vision.py) when the shape lists cameras; with `source` (the run directory
    being opened) the merged arguments may name no `_target_` but conf/policy's, and the encoder conf/encoder's."""
    args = {k: v for k, v in node.items() if k not in ("name", "tokenized", "vision")}
    args.update(kwargs)
    vision_cfg, cameras = node.get("vision"), list(shape.get("cameras") or [])
    if source is not None:
        check_targets(args, "policy", "policy", source)
        if vision_cfg is not None:
            check_targets(vision_cfg, "policy.vision", "encoder", source)
    if cameras and vision_cfg is None:
        raise ValueError(f"the policy observes cameras {cameras} (env.cameras) but policy.vision is not set: choose a "
                         "policy with a camera encoder (policy=gpt_image) or set env.cameras=[]")
    vision = None
    if cameras:
        vision = CameraTokens.from_config(vision_cfg, int(node.get("d_model", DEFAULT_WIDTH)), len(cameras))
    if node.get("tokenized"):
        return instantiate(args, codec=codec, vision=vision)
    return instantiate(args, action_dim=shape["action_dim"], chunk_size=shape["chunk_size"], vision=vision)


def save_policy_spec(run_dir: Path, kwargs: dict, shape: dict, codec: ActionCodec | None, data: dict | None = None) -> None:
    """policy.json: the constructor arguments, the shapes, and `data` (the task list, whether the dataset is
    simulated, the held-out episodes)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if codec is not None:
        codec.tokenizer.save(str(run_dir / "tokenizer"))
    write_json(run_dir / SPEC, {"kwargs": kwargs, "shape": shape, **(data or {})})


def load(run_dir, device: str = "cpu"):
    """The trained policy of a behavior run, in eval mode."""
    run_dir = Path(run_dir)
    for name in ("config.yaml", SPEC, "model.safetensors"):
        if not (run_dir / name).exists():
            raise FileNotFoundError(f"{run_dir / name} is missing: is {run_dir} a finished behavior run?")
    cfg = load_run_config(run_dir, {"policy": ("policy", "encoder")})
    spec = read_json(run_dir / SPEC)
    if not isinstance(spec, dict) or not isinstance(spec.get("kwargs"), dict) or not isinstance(spec.get("shape"), dict):
        raise UnsafeConfigError(f"{run_dir / SPEC} is not a policy spec ({{\"kwargs\": {{...}}, \"shape\": {{...}}}}); "
                                "restore it from the run's source or retrain")
    verify_config(run_dir, cfg, ("policy",))
    codec = None
    if cfg.policy.get("tokenized"):
        shape = spec["shape"]
        codec = ActionCodec(load_tokenizer(str(run_dir / "tokenizer")), shape["chunk_size"], shape["action_dim"],
                            max_tokens=shape.get("max_tokens"))
    policy = build_policy(cfg.policy, spec["kwargs"], spec["shape"], codec, source=f"{run_dir / 'config.yaml'} + {SPEC}")
    load_weights(policy, run_dir / "model.safetensors", run_dir, device=device, part_key=lambda _: "policy")
    # what the rollouts and the held-out metrics need to know (runs from before these were recorded: None)
    policy.tasks, policy.simulated = spec.get("tasks"), spec.get("simulated", True)
    policy.cameras, policy.heldout_episodes = list(spec["shape"].get("cameras") or []), spec.get("heldout_episodes") or []
    return policy.to(device).eval()
