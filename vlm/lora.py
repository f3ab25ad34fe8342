"""LoRA adapters on the language backbone, through peft.

`lora.enabled=true` (the top-level `lora:` block of conf/task/vlm.yaml: rank,
alpha, dropout, targets) makes `vlm.model.build_vlm` wrap the backbone's HF
model with `peft.get_peft_model`, so `backbone.model` becomes a
`PeftModelForCausalLM` whose base weights are frozen. In a phase that trains
`backbone`, only the adapters train (`freeze_all_but_adapters`, applied by
`vlm.lightning.VLMModule`); the encoder and projector train as the phase says.

A LoRA run's `model.safetensors` holds the base weights and the adapters under
the wrapped names; `vlm.load(run_dir)` rebuilds the same wrapped model from the
run's config.yaml before loading, so the weights come back identically.
`merged(vlm)` gives a copy with the adapters merged into the base weights (peft
`merge_and_unload`): a plain VLM, loadable into a model built with
`lora.enabled=false` (what an HF export wants). `load_plain_weights` loads the
weights of a run without LoRA into a model with adapters (a LoRA finetune
that starts, via `init_from`, from a plain aligned run); the adapters keep
their initial no-op values.
"""

from __future__ import annotations

import copy
import warnings

from omegaconf import DictConfig, ListConfig, OmegaConf
from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn

ADAPTER_PREFIX = "lora_"  # peft's LoRA parameter names: ...lora_A.default.weight, ...lora_B.default.weight


def lora_config(rank: int = 16, alpha: float = 32, dropout: float = 0.0, targets: str | list[str] = "all-linear",
                **_: object) -> LoraConfig:
    """peft's LoraConfig for a causal LM (targets: "all-linear", which leaves the output head out, or module names)."""
    if isinstance(targets, ListConfig):
        targets = list(OmegaConf.to_container(targets))
    return LoraConfig(r=int(rank), lora_alpha=alpha, lora_dropout=float(dropout), target_modules=targets,
                      bias="none", task_type="CAUSAL_LM")


def apply_lora(backbone: nn.Module, cfg: DictConfig | dict) -> nn.Module:
    """Wrap `backbone.model` (a transformers causal LM) with LoRA adapters from the `lora:` config block."""
    if has_lora(backbone):
        raise ValueError("the backbone already has LoRA adapters")
    with warnings.catch_warnings():  # peft reads HF's deprecated `is_gradient_checkpointing`
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.* is deprecated")
        backbone.model = get_peft_model(backbone.model, lora_config(**dict(cfg)))
    return backbone


def has_lora(module: nn.Module) -> bool:
    """Whether `module` (a VLM, a backbone, or an HF model) contains a peft-wrapped model."""
    return any(isinstance(m, PeftModel) for m in module.modules())


def is_adapter(name: str) -> bool:
    return ADAPTER_PREFIX in name


def freeze_all_but_adapters(module: nn.Module) -> None:
    """Keep `requires_grad` only on the LoRA adapter parameters of `module` (the base weights freeze)."""
    for name, param in module.named_parameters():
        if not is_adapter(name):
            param.requires_grad_(False)


def merged(vlm: nn.Module) -> nn.Module:
    """A copy of `vlm` whose backbone has its adapters merged into the base weights (peft
    `merge_and_unload`), i.e. a plain model; `vlm` itself keeps its adapters. A model without
    adapters is returned as it is (no copy)."""
    if not has_lora(vlm):
        return vlm
    out = copy.deepcopy(vlm)
    out.backbone.model = out.backbone.model.merge_and_unload()
    return out


def plain_name(name: str) -> str:
    """The name a LoRA-wrapped parameter has in the same model without adapters."""
    return name.replace("base_model.model.", "", 1).replace(".base_layer.", ".")


def load_plain_weights(model: nn.Module, state: dict, where: str = "weights") -> None:
    """Load `state` (a model's weights saved without LoRA) into `model`, which has adapters."""
    own = {n: plain_name(n) for n in model.state_dict() if not is_adapter(n)}
    missing = sorted(k for k in own.values() if k not in state)
    unused = sorted(set(state) - set(own.values()))
    if missing or unused:
        raise ValueError(f"{where} do not fit this model (missing {missing[:5]}, unexpected {unused[:5]}); "
                         "init_from needs a run of the same encoder, backbone and projector")
    model.load_state_dict({n: state[k] for n, k in own.items()}, strict=False)
