"""`vlm.load(run_dir)`: the VLM of a run, ready for `generate` / `score`.

A trained run: the components are rebuilt from the run's `config.yaml` (the same builders as training) and the
weights of the latest finished phase are loaded from `model.safetensors`. Opening a run runs none of its code
(core/safe_load.py): every `_target_` under `encoder`, `backbone` and `projector` must be one of conf/'s, and a
`backbone.trust_remote_code` is honoured only with the caller's `trust_remote_code=True`. The weights are checked
before use (core/weights.py): their checksum, readability, finite values, shapes, and the config values they
were trained with (a hand-edited `backbone.prompt_format` fails, naming the key).

An imported run (`python evaluate.py init_from=HF_LLAVA_DIR ...`, written by core/imported.py): its `config.yaml`
holds `imported.source`, an HF Llava folder (`config.json` with `model_type: llava`), and the VLM is built from that
folder alone, no training and no refract config needed (`from_hf_llava`):
- encoder: a timm ViT of the folder's vision config (CLIP: class token + pre-norm; SigLIP: neither), features of
  the folder's `vision_feature_layer`, the weights converted from the vision tower (vlm/hf_llava.py); the image
  transform uses the folder's image processor's mean/std/size/resampling, and its resize strategy unless
  `imported.image_strategy` is set (`do_pad`: letterbox, centre crop: resize-crop, else resize-naive);
- projector: `mlp` (HF Llava's Linear-GELU-Linear) with the folder's weights;
- language model: the folder's text model and tokenizer, loaded by transformers straight from the folder's
  weight files (only the text weights are read; `imported.dtype`);
- prompt format: `imported.prompt_format`, or, when null, the `conf/prompt_format` option whose prompt ids equal
  the folder's chat template's (a folder exported by refract), else `vicuna` (LLaVA-1.5's `vicuna_v1`
  conversation, which its own evaluation scripts use; llava-hf's template drops the system line).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from omegaconf import OmegaConf
from rich.console import Console
from safetensors import safe_open

from core.safe_load import check_remote_code, load_run_config
from core.weights import load_weights, verify_config
from vlm.model import VLM, build_vlm

console = Console()
TEXT_KEYS = {r"^model\.language_model\.": "model.", r"^language_model\.model\.": "model.",
             r"^language_model\.lm_head\.": "lm_head."}  # both HF Llava weight layouts → a causal LM's names
TIMM_ARCH = {"clip": "vit_large_patch14_clip_336", "siglip": "vit_base_patch16_siglip_224"}
TIMM_ACT = {"quick_gelu": "quick_gelu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh"}
DEFAULT_FORMAT = "vicuna"
COMPONENTS = {"encoder": "encoder", "backbone": "backbone", "projector": "projector"}  # config key: its conf/ group
MODEL_KEYS = (*COMPONENTS, "lora")  # the config keys that define the weights


def load(run_dir: str | Path, device: str | torch.device = "cpu", trust_remote_code: bool = False) -> VLM:
    """The VLM of a run; `trust_remote_code=True` lets a backbone that asks for it run its model's own code."""
    run_dir = Path(run_dir)
    config, weights = run_dir / "config.yaml", run_dir / "model.safetensors"
    if config.exists():
        cfg = load_run_config(run_dir, COMPONENTS)
        if cfg.get("imported"):
            imp = cfg.imported
            return from_hf_llava(imp.source, image_strategy=imp.get("image_strategy"),
                                 prompt_format=imp.get("prompt_format"), dtype=imp.get("dtype") or "float32").to(device).eval()
    for path in (config, weights):
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: {run_dir} is not a finished run (train it with train.py first)")
    check_remote_code(cfg, "backbone", trust_remote_code, config,
                      "vlm.load(RUN_DIR, trust_remote_code=True), evaluate.py trust_remote_code=true, or --trust-remote-code")
    verify_config(run_dir, cfg, MODEL_KEYS)
    model = build_vlm(cfg)
    load_weights(model, weights, run_dir)
    return model.to(device).eval()


# --- an HF Llava folder as a refract VLM ------------------------------------------------------------------
def from_hf_llava(path: str | Path, image_strategy: str | None = None, prompt_format: str | None = None,
                  dtype: str = "float32") -> VLM:
    """The VLM of the HF Llava folder `path` (see the module docstring), weights and all."""
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    from vlm.backbones import HFBackbone
    from vlm.encoders import TimmEncoder
    from vlm.hf_llava import HFLlavaError, _copy, check_projector, hf_to_timm_vision, is_hf_llava, vit_spec
    from vlm.projectors import mlp

    path = Path(path)
    if not is_hf_llava(path):
        raise HFLlavaError(f"{path} is not an HF Llava folder (no config.json with model_type 'llava'); pass the folder of "
                           "e.g. llava-hf/llava-1.5-7b-hf, or run=RUN_DIR for a refract run")
    config = AutoConfig.from_pretrained(path)
    vc, layer = config.vision_config, config.vision_feature_layer
    kind = {"clip_vision_model": "clip", "siglip_vision_model": "siglip"}.get(vc.model_type)
    strategy = ("full" if kind == "siglip" else "default")
    problems = [msg for bad, msg in [
        (kind is None, f"vision model {vc.model_type} (CLIP and SigLIP are supported)"),
        (not isinstance(layer, int) or layer == 0, f"vision_feature_layer={layer!r} (one transformer layer is supported)"),
        (vc.hidden_act not in TIMM_ACT, f"vision activation {vc.hidden_act}"),
        (config.vision_feature_select_strategy != strategy,
         f"vision_feature_select_strategy={config.vision_feature_select_strategy} ({kind} needs {strategy!r})"),
        (config.projector_hidden_act != "gelu" or not getattr(config, "multimodal_projector_bias", True),
         "a projector other than Linear-GELU-Linear with biases"),
    ] if bad]
    if problems:
        raise HFLlavaError(f"{path}/config.json: cannot import {', '.join(problems)}")
    processor = image_processor_config(path)
    image_strategy = image_strategy or strategy_of(processor)
    size = vc.image_size
    overlay = {"mean": tuple(processor.get("image_mean", (0.5, 0.5, 0.5))), "std": tuple(processor.get("image_std", (0.5, 0.5, 0.5))),
               "interpolation": {2: "bilinear", 3: "bicubic", 0: "nearest"}.get(processor.get("resample", 3), "bicubic"),
               "input_size": (3, size, size), "crop_pct": _crop_pct(processor, size)}
    encoder = TimmEncoder(TIMM_ARCH[kind], image_strategy=image_strategy, pretrained=False,
                          feature_layer=layer - 1 if layer > 0 else layer, config_key="imported",
                          model_kwargs={"img_size": size, "patch_size": vc.patch_size, "embed_dim": vc.hidden_size,
                                        "depth": vc.num_hidden_layers, "num_heads": vc.num_attention_heads,
                                        "mlp_ratio": (vc.intermediate_size + 0.5) / vc.hidden_size,
                                        "act_layer": TIMM_ACT[vc.hidden_act], "pretrained_cfg_overlay": overlay})
    spec = vit_spec(encoder)
    if abs(spec["eps"] - vc.layer_norm_eps) > 1e-12:
        raise HFLlavaError(f"{path}: layer_norm_eps {vc.layer_norm_eps} differs from timm's {kind} ViT ({spec['eps']})")
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its report would list every vision weight as unexpected
    try:
        backbone = HFBackbone(str(path), prompt_format=prompt_format or DEFAULT_FORMAT, dtype=dtype,
                              load_kwargs={"config": config.text_config, "key_mapping": TEXT_KEYS})
    finally:
        hf_logging.set_verbosity(verbosity)
    if prompt_format is None:
        backbone.prompt_format = _detect_format(path, backbone.tokenizer, config.image_token_index)
    model = VLM(encoder, backbone, mlp(encoder.embed_dim, backbone.hidden_size))
    check_projector(model.projector)
    vision, projector = _read_prefixed(path, ("model.vision_tower.vision_model.", "vision_tower.vision_model.",  # llava-1.5-hf
                                              "model.vision_tower.", "vision_tower."),  # transformers 5
                                       ("model.multi_modal_projector.", "multi_modal_projector."))
    vit = encoder.model
    kept = {k: v for k, v in vision.items() if not k.startswith(("post_layernorm", "head."))
            and not (k.startswith("encoder.layers.") and int(k.split(".")[2]) >= spec["blocks"])}
    with torch.no_grad():
        _copy(vit, hf_to_timm_vision(kept, spec, {k: v.shape for k, v in vit.state_dict().items()}), f"{path} (vision tower)")
        for i, j in ((1, 0), (2, 2)):
            _copy(model.projector[j], {p: projector[f"linear_{i}.{p}"] for p in ("weight", "bias")}, f"{path} (projector)")
    return model


def strategy_of(processor: dict) -> str:
    """The refract image strategy an HF image processor config describes."""
    if processor.get("do_pad"):
        return "letterbox"
    return "resize-crop" if processor.get("do_center_crop") else "resize-naive"


def image_processor_config(path: Path) -> dict:
    """The folder's image processor settings: `preprocessor_config.json` (the hub's llava-hf folders) or the
    `image_processor` entry of `processor_config.json` (transformers 5's `save_pretrained`)."""
    if (path / "preprocessor_config.json").exists():
        return _read_json(path / "preprocessor_config.json")
    return _read_json(path / "processor_config.json").get("image_processor", {})


def _crop_pct(processor: dict, size: int) -> float:
    shortest = (processor.get("size") or {}).get("shortest_edge")
    return size / shortest if processor.get("do_center_crop") and shortest else 1.0


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _read_prefixed(path: Path, *prefix_sets: tuple[str, ...]) -> list[dict]:
    """For each set of alternative key prefixes, the folder's tensors under one of them (prefix removed)."""
    index = path / "model.safetensors.index.json"
    files = sorted(set(_read_json(index)["weight_map"].values())) if index.exists() else ["model.safetensors"]
    out: list[dict] = [{} for _ in prefix_sets]
    for name in files:
        with safe_open(str(path / name), framework="pt") as f:
            for key in f.keys():
                for got, prefixes in zip(out, prefix_sets):
                    hit = next((p for p in prefixes if key.startswith(p)), None)
                    if hit:
                        got[key[len(hit):]] = f.get_tensor(key).float()
    return out


def _detect_format(path: Path, tokenizer, image_token_id: int):
    """The prompt format whose single-turn prompt ids equal those of the folder's chat template, else vicuna."""
    from transformers import AutoProcessor

    from core.conf import group_options
    from vlm.prompting import build_prompt_format

    question = "What is shown in the picture?"
    try:
        processor = AutoProcessor.from_pretrained(path)
        text = processor.apply_chat_template([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}],
                                             add_generation_prompt=True, tokenize=False)
        theirs = [i for i in tokenizer(text, add_special_tokens=False)["input_ids"] if i != image_token_id]
    except Exception:  # no processor or no chat template
        theirs = None
    for name in group_options("prompt_format"):
        try:
            fmt = build_prompt_format(name, tokenizer)
            if theirs is not None and fmt.build([("human", question)], generation=True)[0] == theirs:
                return fmt
        except Exception:  # e.g. chat_template without a template in the tokenizer
            continue
    console.print(f"{path}: no prompt format reproduces its chat template; using {DEFAULT_FORMAT!r} "
                  "(LLaVA-1.5's conversation; set imported.prompt_format=NAME to choose)")
    return build_prompt_format(DEFAULT_FORMAT, tokenizer)
