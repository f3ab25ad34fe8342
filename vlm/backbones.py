"""Language backbones (`vlm.interfaces.LanguageBackbone`) loaded through transformers (AutoModelForCausalLM + AutoTokenizer).

A backbone is a hub id, a local folder written by `save_pretrained`, or
`tiny:NAME`, a tiny flavour's local checkpoint (vlm/tiny/) loaded the same way. A tokenizer without a
pad token gets one, and the embeddings are resized (to a multiple of 64).
`trust_remote_code` stays off unless the config turns it on; a trained run is reopened with it only on the
caller's explicit opt-in (`vlm.load(..., trust_remote_code=True)`, core/safe_load.py).
`gradient_checkpointing=True` turns on HF activation checkpointing
(use_reentrant=False) of the decoder layers; HF applies it only while the model
is in training mode, i.e. in phases that train the backbone (a frozen part is
kept in eval mode).
`fsdp_units()` gives the FSDP wrap / activation-checkpointing units (read by core/strategies.py): the
classes transformers' `_no_split_modules` names for this model (its decoder layer: `LlamaDecoderLayer`,
`MistralDecoderLayer`, `Qwen2DecoderLayer`, `GemmaDecoderLayer`, `PhiDecoderLayer`, ...).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer

from vlm.hub import load_error, offline_unless_reachable, resolve_tiny
from vlm.prompting import build_prompt_format


class HFBackbone(nn.Module):
    def __init__(
        self,
        model_id: str,
        prompt_format: str = "base",
        dtype: str = "float32",
        pad_to_multiple_of: int = 64,
        max_length: int = 2048,
        trust_remote_code: bool = False,
        attn_implementation: str | None = "sdpa",
        gradient_checkpointing: bool = False,
        load_kwargs: dict | None = None,
    ):
        super().__init__()
        model_id = resolve_tiny(model_id, "backbone.model_id")
        self.model_id = model_id
        offline_unless_reachable(model_id)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=trust_remote_code)
            self.model = AutoModelForCausalLM.from_pretrained(
                model_id,
                dtype=getattr(torch, dtype),
                trust_remote_code=trust_remote_code,
                attn_implementation=attn_implementation,
                **(load_kwargs or {}),  # e.g. the text model of an HF Llava folder (vlm/inference.py: config, key_mapping)
            )
        except Exception as err:  # hub/network/file errors all surface as one clear message
            raise load_error("backbone", model_id, "backbone.model_id", err) from err
        if self.tokenizer.pad_token is None:
            self.tokenizer.add_special_tokens({"pad_token": "<pad>"})
        if len(self.tokenizer) > self.model.get_input_embeddings().num_embeddings:
            self.model.resize_token_embeddings(len(self.tokenizer), pad_to_multiple_of=pad_to_multiple_of)
        self.tokenizer.padding_side = "right"
        if gradient_checkpointing:
            self.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        self.hidden_size = self.model.config.hidden_size
        self.max_length = max_length
        self.prompt_format = build_prompt_format(prompt_format, self.tokenizer)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """What the model's own embedding layer gives (Gemma's includes its sqrt(hidden) scale, which the model
        does not apply again to `inputs_embeds`), so spliced image patches enter the decoder unscaled."""
        return self.model.get_input_embeddings()(input_ids)

    def fsdp_units(self) -> set[type[nn.Module]]:
        """The module classes transformers' `_no_split_modules` names (each must occur in the model)."""
        names = set(getattr(self.model, "_no_split_modules", None) or ())
        what = f"backbone {self.model_id!r} ({type(self.model).__name__})"
        if not names:
            raise ValueError(f"{what} declares no `_no_split_modules`; set trainer.strategy.wrap to its decoder layer class")
        classes = {type(m) for m in self.model.modules() if type(m).__name__ in names}
        missing = sorted(names - {c.__name__ for c in classes})
        if missing:
            raise ValueError(f"FSDP wrap class(es) {missing} from `_no_split_modules` match no module of {what}; "
                                 "set trainer.strategy.wrap to its decoder layer class")
        return classes

    def forward(self, **kwargs):
        """With gradients, no KV cache: a checkpointed decoder layer (FSDP activation checkpointing) recomputes its
        forward in the backward pass, and would append its keys to the cache a second time."""
        if torch.is_grad_enabled():
            kwargs.setdefault("use_cache", False)
        return self.model(**kwargs)
