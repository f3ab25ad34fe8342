"""HF Llava interop: export a run as a `LlavaForConditionalGeneration` folder, and start a run from one.

Export (`python scripts/export_hf.py RUN_DIR OUT_DIR`, or `export(model, out_dir, image_strategy)`)
writes weights, config, tokenizer (with an `<image>` token), image processor and a chat template that
`LlavaForConditionalGeneration.from_pretrained` / `AutoProcessor.from_pretrained` load, reproducing the
run's model: same prompt ids, same logits, same greedy tokens. Supported: one timm ViT encoder of the
CLIP (class token + pre-norm) or SigLIP (no prefix tokens) architecture and the `mlp` projector; any
other encoder or projector is refused with the reason. The vision tower keeps only the blocks the run
has (features = its last block, `vision_feature_layer=-1`); LoRA adapters (peft) are merged into a copy.
The processor reproduces the run's image transform exactly with the PIL backend
(`AutoProcessor.from_pretrained(OUT_DIR, backend="pil")`); transformers' default torchvision backend
resizes with slightly different kernels. Every export checks itself before it is moved into place: the
vision tower against the encoder, the image processor against the transform, the chat template's ids
against the prompt format's.

Import (`init_from=PATH`, PATH an HF Llava folder such as llava-hf/llava-1.5-7b-hf, via
`VLMTask.init_from`): the run's config must describe the same architecture (encoder, projector=mlp,
backbone); weights are converted into the built model, and mismatches are refused with the reason.
Without a run config (`evaluate.py init_from=PATH`), `vlm.inference.from_hf_llava` builds the VLM from the folder
itself, reusing the conversions below.
"""

from __future__ import annotations

import json
import warnings
from copy import deepcopy
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from timm.layers.activations import GELUTanh, QuickGELU
from timm.layers.activations import GELU as TimmGELU
from timm.models.vision_transformer import VisionTransformer
from tokenizers import AddedToken
from torch import nn
from transformers import (AutoConfig, AutoModel, AutoProcessor, AutoTokenizer, CLIPVisionConfig, LlavaConfig,
                          LlavaForConditionalGeneration, LlavaImageProcessor, LlavaProcessor, SiglipVisionConfig)
from transformers.image_utils import PILImageResampling

from data.atomic import atomic_directory, read_json

IMAGE_TOKEN = "<image>"
TANH_GELU = {"gelu_pytorch_tanh", "gelu_new"}


class HFLlavaError(ValueError):
    """An export or import that cannot be faithful; the message says why and what to change."""


# --- the vision tower: timm ViT <-> HF CLIP / SigLIP vision model ---------------------------------
def _act_name(act: nn.Module) -> str | None:
    if isinstance(act, nn.GELU):
        return {"none": "gelu", "tanh": "gelu_pytorch_tanh"}[act.approximate]
    return {TimmGELU: "gelu", GELUTanh: "gelu_pytorch_tanh", QuickGELU: "quick_gelu"}.get(type(act))


def vit_spec(encoder) -> dict:
    """What HF needs to know about the encoder's ViT; refuses encoders HF Llava cannot represent."""
    from vlm.encoders import TimmEncoder

    vit = getattr(encoder, "model", None)
    if not isinstance(encoder, TimmEncoder) or not isinstance(vit, VisionTransformer):
        raise HFLlavaError(
            f"HF Llava has a single CLIP or SigLIP vision tower; this run's encoder is {type(encoder).__name__}"
            f"{f' ({type(vit).__name__})' if vit is not None else ''}, which it cannot represent. Fused encoders "
            "(dinosiglip) and open_clip encoders are not exportable; use a timm CLIP or SigLIP ViT encoder.")
    cls, pre_norm = vit.cls_token is not None, isinstance(vit.norm_pre, nn.LayerNorm)
    kind = "clip" if cls and pre_norm else "siglip" if not cls and not pre_norm else None
    block = vit.blocks[0]
    act = _act_name(block.mlp.act)
    img, patch = tuple(vit.patch_embed.img_size), tuple(vit.patch_embed.patch_size)
    problems = [msg for bad, msg in [
        (kind is None, "neither CLIP (class token + pre-norm) nor SigLIP (no class token, no pre-norm)"),
        (vit.num_prefix_tokens != int(cls), "register tokens"), (vit.no_embed_class, "no position embedding for the class token"),
        (act is None, f"activation {type(block.mlp.act).__name__}"), (img[0] != img[1] or patch[0] != patch[1], "a non-square input or patch"),
        (getattr(vit, "dynamic_img_size", False), "dynamic image size"),
    ] if bad]
    if problems:
        arch = getattr(vit, "pretrained_cfg", {}).get("architecture", type(vit).__name__)
        raise HFLlavaError(f"the encoder's ViT ({arch}) has {', '.join(problems)}: HF's CLIP/SigLIP vision models cannot represent it")
    return {"kind": kind, "act": act, "eps": block.norm1.eps, "image_size": img[0], "patch_size": patch[0],
            "hidden_size": vit.embed_dim, "heads": block.attn.num_heads, "intermediate": block.mlp.fc1.out_features,
            "blocks": len(vit.blocks)}


def vision_config(spec: dict):
    cls = CLIPVisionConfig if spec["kind"] == "clip" else SiglipVisionConfig
    extra = {} if spec["kind"] == "clip" else {"vision_use_head": False}
    return cls(hidden_size=spec["hidden_size"], intermediate_size=spec["intermediate"], num_hidden_layers=spec["blocks"],
               num_attention_heads=spec["heads"], image_size=spec["image_size"], patch_size=spec["patch_size"],
               hidden_act=spec["act"], layer_norm_eps=spec["eps"], **extra)


def vision_pairs(kind: str, blocks: int) -> list[tuple[str, list[str]]]:
    """timm parameter → the HF vision-model parameters it holds, concatenated along the first dimension."""
    emb = "embeddings."
    pairs = [("patch_embed.proj.weight", [emb + "patch_embedding.weight"]), ("pos_embed", [emb + "position_embedding.weight"])]
    if kind == "clip":
        pairs += [("cls_token", [emb + "class_embedding"])] + [(f"norm_pre.{p}", [f"pre_layrnorm.{p}"]) for p in ("weight", "bias")]
    else:
        pairs.append(("patch_embed.proj.bias", [emb + "patch_embedding.bias"]))
    for i in range(blocks):
        t, h = f"blocks.{i}.", f"encoder.layers.{i}."
        for p in ("weight", "bias"):
            pairs += [(f"{t}norm1.{p}", [f"{h}layer_norm1.{p}"]), (f"{t}attn.qkv.{p}", [f"{h}self_attn.{x}_proj.{p}" for x in "qkv"]),
                      (f"{t}attn.proj.{p}", [f"{h}self_attn.out_proj.{p}"]), (f"{t}norm2.{p}", [f"{h}layer_norm2.{p}"]),
                      (f"{t}mlp.fc1.{p}", [f"{h}mlp.fc1.{p}"]), (f"{t}mlp.fc2.{p}", [f"{h}mlp.fc2.{p}"])]
    return pairs


def timm_to_hf_vision(vit: nn.Module, spec: dict, hf_shapes: dict) -> dict:
    state, pairs = vit.state_dict(), vision_pairs(spec["kind"], spec["blocks"])
    extra = sorted(set(state) - {t for t, _ in pairs})
    if extra:
        raise HFLlavaError(f"the encoder's ViT has parameters HF's {spec['kind']} vision model lacks: {extra[:5]}")
    out = {}
    for t, hs in pairs:
        for h, piece in zip(hs, state[t].reshape(len(hs), -1)):
            out[h] = piece.reshape(hf_shapes[h]).clone()
    return out


def hf_to_timm_vision(hf_state: dict, spec: dict, timm_shapes: dict) -> dict:
    return {t: torch.cat([hf_state[h].reshape(-1) for h in hs]).reshape(timm_shapes[t])
            for t, hs in vision_pairs(spec["kind"], spec["blocks"])}


def check_projector(projector: nn.Module) -> None:
    layers = list(projector) if isinstance(projector, nn.Sequential) else [projector]
    shape = "-".join("GELU" if isinstance(m, nn.GELU) else type(m).__name__ for m in layers)
    ok = (shape == "Linear-GELU-Linear" and layers[1].approximate == "none" and all(m.bias is not None for m in layers[::2]))
    if not ok:
        raise HFLlavaError(f"HF Llava's multi_modal_projector is Linear-GELU-Linear (projector=mlp); this run's projector is "
                           f"{shape}, which LlavaForConditionalGeneration cannot represent. Only projector=mlp runs are exportable.")


def base_language_model(backbone_model: nn.Module) -> nn.Module:
    """The transformers causal LM inside a peft wrapper (LoRA layers keep their base weights under `.base_layer`)."""
    from peft import PeftModel

    return backbone_model.get_base_model() if isinstance(backbone_model, PeftModel) else backbone_model


# --- the prompt format as a chat template ---------------------------------------------------------
def _render(fmt, turns, generation: bool) -> str:
    tok = fmt.tokenizer
    lead = tok.bos_token if fmt.uses_bos else ""
    return lead + "".join(t + (tok.eos_token if trained and fmt.appends_eos else "") for t, trained in fmt.segments(turns, generation))


def chat_template(fmt) -> str:
    """A Jinja chat template that renders (user, assistant, ...) messages exactly as `fmt` does, with `<image>` where the
    model splices the patches (right after BOS). The user turn includes the assistant cue, as in the prompt formats."""
    head = fmt.tokenizer.bos_token if fmt.image_position == 1 else ""
    u1, a1, u2 = "\x02u1\x03", "\x02a1\x03", "\x02u2\x03"

    def body(turns, generation):
        text = _render(fmt, turns, generation)
        if not text.startswith(head):
            raise HFLlavaError("the prompt format does not start with BOS where the image goes; cannot write a chat template")
        return text[len(head):]

    try:
        q0, upost = body([("human", u1)], True).split(u1)
        first = q0 + u1 + upost
        apre, apost = body([("human", u1), ("gpt", a1)], False)[len(first):].split(a1)
        upre, tail = body([("human", u1), ("gpt", a1), ("human", u2)], True)[len(first + apre + a1 + apost):].split(u2)
        assert tail == upost
    except (ValueError, AssertionError) as err:
        raise HFLlavaError(f"the prompt format {type(fmt).__name__} does not render turns independently; cannot write a chat template") from err
    lit = json.dumps
    text = ("{%- if m['content'] is string -%}{%- set text = m['content'] -%}{%- else -%}{%- set text = m['content'] | "
            "selectattr('type', 'equalto', 'text') | map(attribute='text') | join(' ') -%}{%- endif -%}")
    return (
        "{%- set ns = namespace(images=0) -%}{%- for m in messages -%}{%- if m['content'] is not string -%}"
        "{%- for p in m['content'] -%}{%- if p['type'] == 'image' -%}{%- set ns.images = ns.images + 1 -%}{%- endif -%}"
        "{%- endfor -%}{%- endif -%}{%- endfor -%}"
        "{%- if ns.images > 1 -%}{{ raise_exception('this model takes one image per conversation') }}{%- endif -%}"
        f"{{{{ {lit(head)} }}}}{{%- if ns.images -%}}{{{{ {lit(IMAGE_TOKEN)} }}}}{{%- endif -%}}"
        "{%- for m in messages -%}" + text +
        f"{{%- if m['role'] == 'user' -%}}{{{{ {lit(q0)} if loop.first else {lit(upre)} }}}}{{{{ text | trim }}}}{{{{ {lit(upost)} }}}}"
        f"{{%- elif m['role'] == 'assistant' -%}}{{{{ {lit(apre)} }}}}{{{{ text | trim }}}}{{{{ {lit(apost)} }}}}"
        "{%- else -%}{{ raise_exception('only user and assistant messages are supported') }}{%- endif -%}{%- endfor -%}"
    )


# --- the image processor --------------------------------------------------------------------------
def image_processor_kwargs(data_config: dict, strategy: str) -> dict:
    h, w = data_config["input_size"][-2:]
    kwargs = dict(do_convert_rgb=True, do_rescale=True, rescale_factor=1 / 255, do_normalize=True, image_mean=list(data_config["mean"]),
                  image_std=list(data_config["std"]), resample=PILImageResampling[data_config.get("interpolation", "bicubic").upper()],
                  crop_size={"height": h, "width": w}, do_pad=strategy == "letterbox")
    if strategy == "resize-crop":  # timm's eval transform: shorter side to size / crop_pct, centre crop
        return {**kwargs, "size": {"shortest_edge": int(h / data_config.get("crop_pct", 1.0))}, "do_center_crop": True}
    return {**kwargs, "size": {"height": h, "width": w}, "do_center_crop": False}


def _probe_images() -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in [(96, 80), (37, 61), (67, 64), (300, 200)]]


# --- export ---------------------------------------------------------------------------------------
def export(model, out_dir: str | Path, image_strategy: str, dtype: torch.dtype = torch.float32) -> Path:
    """Write `model` (a VLM) as an HF Llava folder at `out_dir` (staged, then moved into place once it checks out)."""
    from vlm.lora import merged

    spec = vit_spec(model.encoder)
    check_projector(model.projector)
    model = merged(model)  # LoRA adapters merged into a copy (peft merge_and_unload); the model itself keeps them
    out = Path(out_dir)
    with atomic_directory(out) as stage:
        _write(model, spec, stage, image_strategy, dtype)
    return out


def _write(model, spec: dict, stage: Path, image_strategy: str, dtype: torch.dtype) -> None:
    # tokenizer with an <image> token, on a spare embedding row when there is one
    model.tokenizer.save_pretrained(stage)
    tok = AutoTokenizer.from_pretrained(stage)
    if IMAGE_TOKEN not in tok.get_vocab():
        tok.add_tokens([AddedToken(IMAGE_TOKEN, special=True, normalized=False)], special_tokens=True)
    image_id = tok.convert_tokens_to_ids(IMAGE_TOKEN)
    tok.padding_side = "left"  # batched generation
    lm = model.backbone.model
    head = lm.get_output_embeddings()
    head_key = next(n for n, m in lm.named_modules() if m is head) + ".weight"
    embed_key = next(n for n, m in lm.base_model.named_modules() if m is lm.get_input_embeddings()) + ".weight"
    text_state = dict(lm.base_model.state_dict())
    outside = set(lm.state_dict()) - {f"{lm.base_model_prefix}.{k}" for k in text_state} - {head_key}
    if outside:
        raise HFLlavaError(f"{type(lm).__name__} has weights outside its base model and output embeddings ({sorted(outside)[:3]}); "
                           "HF Llava cannot hold them")
    lm_head = head.weight.detach()
    rows, grown = lm_head.shape[0], []
    if image_id >= rows:  # no spare row: add zero rows for the <image> token and never generate it
        grown = list(range(rows, image_id + 1))
        pad = lm_head.new_zeros(len(grown), lm_head.shape[1])
        text_state[embed_key] = torch.cat([text_state[embed_key], pad])
        lm_head = torch.cat([lm_head, pad])

    text_config = lm.config.to_dict()
    text_config.update(vocab_size=lm_head.shape[0], dtype=str(dtype).removeprefix("torch."))
    text_config.pop("_name_or_path", None)
    num_patches = model.encoder.num_patches
    config = LlavaConfig(vision_config=vision_config(spec), text_config=text_config, image_token_index=image_id, image_seq_length=num_patches,
                         projector_hidden_act="gelu", vision_feature_layer=-1, multimodal_projector_bias=True,
                         vision_feature_select_strategy="default" if spec["kind"] == "clip" else "full",
                         tie_word_embeddings=bool(getattr(lm.config, "tie_word_embeddings", False)))

    # vision tower: converted, then checked against the encoder on a probe input
    tower = AutoModel.from_config(config.vision_config)
    vision_state = timm_to_hf_vision(model.encoder.model, spec, {k: v.shape for k, v in tower.state_dict().items()})
    missing = [k for k in tower.load_state_dict(vision_state, strict=False).missing_keys if "post_layernorm" not in k]
    if missing:
        raise HFLlavaError(f"no timm counterpart for HF vision parameters {missing[:5]}")
    param = next(model.encoder.parameters())
    tower.to(device=param.device, dtype=param.dtype).eval()
    size = spec["image_size"]
    pixels = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0)).to(param)
    with torch.no_grad():
        ours = model.encoder(pixels)
        theirs = tower(pixels, output_hidden_states=True).hidden_states[-1][:, int(spec["kind"] == "clip"):]
    if not torch.allclose(ours, theirs, rtol=1e-3, atol=1e-4 * float(ours.abs().max())):
        raise HFLlavaError(f"the converted vision tower does not reproduce the encoder (max difference {float((ours - theirs).abs().max()):.3g}); "
                           "the timm ViT has a component HF's CLIP/SigLIP vision model lacks")

    state = {f"model.vision_tower.{k}": v.detach() for k, v in tower.state_dict().items()}
    state.update({f"model.multi_modal_projector.linear_{i}.{p}": getattr(model.projector[j], p).detach()
                  for i, j in ((1, 0), (2, 2)) for p in ("weight", "bias")})
    state.update({f"model.language_model.{k}": v for k, v in text_state.items()})
    state["lm_head.weight"] = lm_head
    with torch.device("meta"):
        llava = LlavaForConditionalGeneration(config)
    llava.load_state_dict({k: v.to("cpu", dtype) for k, v in state.items()}, strict=True, assign=True)
    if config.tie_word_embeddings:
        llava.tie_weights()
    gen = deepcopy(lm.generation_config)
    gen.bos_token_id, gen.eos_token_id, gen.pad_token_id = tok.bos_token_id, model.prompt_format.stop_token_ids, tok.pad_token_id
    if grown:
        gen.suppress_tokens = grown
    llava.generation_config = gen
    llava.save_pretrained(stage)

    processor = LlavaProcessor(image_processor=LlavaImageProcessor(**image_processor_kwargs(model.encoder.data_config, image_strategy)),
                               tokenizer=tok, patch_size=spec["patch_size"], chat_template=chat_template(model.prompt_format),
                               vision_feature_select_strategy=config.vision_feature_select_strategy,
                               num_additional_image_tokens=int(spec["kind"] == "clip"), image_token=IMAGE_TOKEN)
    processor.save_pretrained(stage)
    # transformers does not save padding_side; without it batched HF generation would right-pad the prompts
    tok_config = stage / "tokenizer_config.json"
    tok_config.write_text(json.dumps({**read_json(tok_config), "padding_side": "left"}, indent=2))
    verify_processor(model, stage, image_id, num_patches, image_strategy)


def verify_processor(model, path: Path, image_id: int, num_patches: int, image_strategy: str) -> None:
    """The saved processor (PIL backend) must give the run's pixels and prompt ids."""
    processor = AutoProcessor.from_pretrained(path, backend="pil")
    for image in _probe_images():
        hf = processor.image_processor(images=image, return_tensors="pt")["pixel_values"][0]
        ours = model.encoder.transform(image)
        if hf.shape != ours.shape or not torch.allclose(hf, ours, atol=1e-5):
            diff = float((hf - ours).abs().max()) if hf.shape == ours.shape else f"shape {tuple(hf.shape)} vs {tuple(ours.shape)}"
            raise HFLlavaError(f"HF's image processor cannot reproduce this run's image strategy {image_strategy!r} (pixel difference {diff} "
                               f"on a {image.size[0]}x{image.size[1]} image); export runs whose HF preprocessing is exact (resize-naive or letterbox)")
    fmt, image = model.prompt_format, _probe_images()[0]
    for turns in ([("human", "What is in the picture?")], [("human", "Describe it."), ("gpt", "A red circle."), ("human", "How many?")]):
        messages = [{"role": "user" if r == "human" else "assistant", "content": [{"type": "text", "text": t}]} for r, t in turns]
        messages[0]["content"].insert(0, {"type": "image", "image": image})
        got = list(processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"][0])
        ids, _ = fmt.build(turns, generation=True)
        want = ids[: fmt.image_position] + [image_id] * num_patches + ids[fmt.image_position:]
        if got != want:
            at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            msg = (f"the exported chat template tokenizes {turns} differently from the run's prompt format ({type(fmt).__name__}), "
                   f"from token {at}: HF {processor.tokenizer.convert_ids_to_tokens(got[at:at + 4])} vs the run's "
                   f"{processor.tokenizer.convert_ids_to_tokens(want[at:at + 4])} (the format tokenizes each turn on its own; "
                   "the tokenizer merges text across turns)")
            if len(turns) == 1:
                raise HFLlavaError(msg)
            warnings.warn(msg + "; single-turn prompts match exactly", stacklevel=3)


def export_run(run_dir: str | Path, out_dir: str | Path, dtype: torch.dtype = torch.float32,
               trust_remote_code: bool = False) -> Path:
    """Export the run in `run_dir` (loaded by vlm.load, which runs none of the run's code unless `trust_remote_code`)."""
    from core.safe_load import load_run_config
    from vlm.inference import COMPONENTS, load

    model = load(run_dir, trust_remote_code=trust_remote_code)
    strategy = load_run_config(run_dir, COMPONENTS).encoder.get("image_strategy", "resize-naive")
    return export(model, out_dir, strategy, dtype)


# --- import ---------------------------------------------------------------------------------------
def is_hf_llava(path: str | Path) -> bool:
    config = Path(path) / "config.json"
    return config.exists() and read_json(config).get("model_type") == "llava"


def load_hf_llava(model, path: str | Path) -> None:
    """Copy the weights of the HF Llava folder `path` into `model` (a VLM of the same architecture)."""
    path = Path(path)
    config = AutoConfig.from_pretrained(path)
    spec = vit_spec(model.encoder)
    check_projector(model.projector)
    vc, tc = config.vision_config, config.text_config
    layer = config.vision_feature_layer
    if not isinstance(layer, int) or layer == 0:
        raise HFLlavaError(f"{path}/config.json: vision_feature_layer={layer!r}; only a single transformer layer is supported")
    block = vc.num_hidden_layers + layer if layer < 0 else layer - 1
    want_kind = {"clip_vision_model": "clip", "siglip_vision_model": "siglip"}.get(vc.model_type)
    hf_act, act = vc.hidden_act, spec["act"]
    mismatches = [f"{name}: HF {a} vs run {b}" for name, a, b in [
        ("vision model", want_kind, spec["kind"]), ("hidden_size", vc.hidden_size, spec["hidden_size"]),
        ("intermediate_size", vc.intermediate_size, spec["intermediate"]), ("heads", vc.num_attention_heads, spec["heads"]),
        ("image_size", vc.image_size, spec["image_size"]), ("patch_size", vc.patch_size, spec["patch_size"]),
        ("feature block", block, spec["blocks"] - 1), ("layer_norm_eps", vc.layer_norm_eps, spec["eps"]),
        ("activation", hf_act, act),
        ("vision_feature_select_strategy", config.vision_feature_select_strategy, "default" if spec["kind"] == "clip" else "full"),
        ("projector_hidden_act", config.projector_hidden_act, "gelu"), ("multimodal_projector_bias", config.multimodal_projector_bias, True),
        ("text model", tc.model_type, model.backbone.model.config.model_type),
    ] if a != b and not (name == "activation" and {a, b} <= TANH_GELU)]
    if mismatches:
        raise HFLlavaError(f"{path} does not match this run's architecture ({'; '.join(mismatches)}); choose an encoder/backbone config "
                           "of the same architecture (llava-1.5-7b-hf: encoder=clip backbone=vicuna projector=mlp)")
    _check_tokenizer(model.tokenizer, path)
    hf, info = LlavaForConditionalGeneration.from_pretrained(path, dtype="auto", output_loading_info=True)
    missing = [k for k in info["missing_keys"] if "post_layernorm" not in k and ".head." not in k]
    if missing:
        raise HFLlavaError(f"{path}: weights missing from the checkpoint ({sorted(missing)[:5]}); is it a complete Llava folder?")
    vit = model.encoder.model
    vit_state = hf_to_timm_vision(hf.model.vision_tower.state_dict(), spec, {k: v.shape for k, v in vit.state_dict().items()})
    lm = base_language_model(model.backbone.model)
    with torch.no_grad():
        _copy(vit, vit_state, f"{path} (vision tower)")
        for i, j in ((1, 0), (2, 2)):
            _copy(model.projector[j], getattr(hf.model.multi_modal_projector, f"linear_{i}").state_dict(), f"{path} (projector)")
        _copy(lm.base_model, hf.model.language_model.state_dict(), f"{path} (language model)")
        _copy(lm.get_output_embeddings(), hf.lm_head.state_dict(), f"{path} (lm_head)")


def _copy(module: nn.Module, state: dict, where: str) -> None:
    """Copy `state` into `module`'s tensors (peft-wrapped layers keep their weights under `.base_layer`; adapters stay)."""
    used = set()
    for name, target in module.state_dict(keep_vars=True).items():
        if "lora_" in name:
            continue
        key = name.replace(".base_layer.", ".")
        if key not in state:
            raise HFLlavaError(f"{where}: no weight for {key}")
        if state[key].shape != target.shape:
            raise HFLlavaError(f"{where}: {key} has shape {tuple(state[key].shape)}, the run's model {tuple(target.shape)}; "
                               "the run's config must describe the same architecture (and vocabulary size)")
        target.data.copy_(state[key].to(target.dtype))
        used.add(key)
    unused = sorted(set(state) - used)
    if unused:
        raise HFLlavaError(f"{where}: weights the run's model has no place for: {unused[:5]}")


def _check_tokenizer(tok, path: Path) -> None:
    """Token ids must mean the same in the run's tokenizer and the HF folder's (when the folder has one)."""
    if not any((path / f).exists() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        return
    theirs = AutoTokenizer.from_pretrained(path).get_vocab()  # tokens added beyond the base vocabulary (our pad) may differ
    differ = [t for t, i in tok.get_vocab().items() if i < tok.vocab_size and theirs.get(t) != i]
    if differ:
        raise HFLlavaError(f"{path}: its tokenizer gives different ids than the run's backbone tokenizer (e.g. {differ[:3]}); "
                           "set backbone.model_id to the language model this Llava was built from")
