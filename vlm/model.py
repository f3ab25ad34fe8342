"""The VLM: image encoder → projector → patch embeddings spliced into the language model.

Plain `nn.Module`, free of Lightning. `forward` takes a right-padded batch (the
collator's output) and returns the backbone's output (loss when labels are
given). Rows without an image are allowed: their text is followed by masked
padding in place of the patches. `generate` takes PIL images and user
messages, applies the backbone's prompt format, and decodes greedily (or by
sampling) with the KV cache, returning strings.
"""

from __future__ import annotations

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from PIL import Image
from torch import nn

from vlm.hub import ComponentLoadError
from vlm.prompting import IGNORE_INDEX


class VLM(nn.Module):
    def __init__(self, encoder: nn.Module, backbone: nn.Module, projector: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.backbone = backbone
        self.projector = projector

    @property
    def tokenizer(self):
        return self.backbone.tokenizer

    @property
    def prompt_format(self):
        return self.backbone.prompt_format

    def image_embeddings(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.projector(self.encoder(pixel_values))

    def splice(self, input_ids, attention_mask, labels, pixel_values, image_mask):
        """Insert projected patches after position `image_position` of every row that has an image."""
        embeds = self.backbone.embed(input_ids)
        if pixel_values is None or not bool(image_mask.any()):
            return embeds, attention_mask, labels
        patches = self.image_embeddings(pixel_values).to(embeds.dtype)
        batch, num_patches = input_ids.shape[0], patches.shape[1]
        rows = image_mask.nonzero().squeeze(1)
        full = embeds.new_zeros(batch, num_patches, embeds.shape[-1]).index_copy(0, rows, patches)
        p = self.prompt_format.image_position
        has = image_mask[:, None]
        pad_mask = attention_mask.new_zeros(batch, num_patches)
        with_image = torch.cat([embeds[:, :p], full, embeds[:, p:]], 1)
        without = torch.cat([embeds, full], 1)  # full is zero on text-only rows
        embeds = torch.where(has[..., None], with_image, without)
        attention_mask = torch.where(
            has,
            torch.cat([attention_mask[:, :p], pad_mask + 1, attention_mask[:, p:]], 1),
            torch.cat([attention_mask, pad_mask], 1),
        )
        if labels is not None:
            ignore = labels.new_full((batch, num_patches), IGNORE_INDEX)
            labels = torch.where(has, torch.cat([labels[:, :p], ignore, labels[:, p:]], 1), torch.cat([labels, ignore], 1))
        return embeds, attention_mask, labels

    def forward(self, input_ids, attention_mask, labels=None, pixel_values=None, image_mask=None, **kwargs):
        embeds, attention_mask, labels = self.splice(input_ids, attention_mask, labels, pixel_values, image_mask)
        return self.backbone(inputs_embeds=embeds, attention_mask=attention_mask, labels=labels, **kwargs)

    # --- inference ---------------------------------------------------------------------------
    def prompt_embeddings(self, images: list[Image.Image | None], prompts: list[str]):
        """Left-padded prompt embeddings and attention mask for a batch of (image, user message)."""
        device = next(self.parameters()).device
        rows = []
        for image, prompt in zip(images, prompts, strict=True):
            ids, _ = self.prompt_format.build([("human", prompt)], generation=True)
            ids_t = torch.tensor([ids], device=device)
            mask = torch.ones_like(ids_t)
            if image is not None:
                pixels = self.encoder.transform(image).unsqueeze(0).to(device)
                emb, mask, _ = self.splice(ids_t, mask, None, pixels, torch.ones(1, dtype=torch.bool, device=device))
            else:
                emb = self.backbone.embed(ids_t)
            rows.append((emb[0], mask[0]))
        width = max(e.shape[0] for e, _ in rows)
        embeds = torch.stack([torch.cat([e.new_zeros(width - e.shape[0], e.shape[1]), e]) for e, _ in rows])
        masks = torch.stack([torch.cat([m.new_zeros(width - m.shape[0]), m]) for _, m in rows])
        return embeds, masks

    @torch.no_grad()
    def generate(self, images, prompts, max_new_tokens: int = 32, do_sample: bool = False, **gen_kwargs) -> list[str]:
        """images: PIL images (or None for text-only); prompts: the user's messages. Returns the answers."""
        embeds, masks = self.prompt_embeddings(list(images), list(prompts))
        tok = self.tokenizer
        out = self.backbone.model.generate(
            inputs_embeds=embeds,
            attention_mask=masks,
            max_new_tokens=max_new_tokens,
            do_sample=do_sample,
            use_cache=True,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            **gen_kwargs,
        )
        return [text.strip() for text in tok.batch_decode(out, skip_special_tokens=True)]


    @torch.no_grad()
    def score(self, images, prompts, options: list[list[str]], batch_size: int = 32) -> list[list[float]]:
        """Probabilities over each item's answer options (normalised over its options).

        An option's score is the log-likelihood of the complete assistant answer (its tokens and the
        end-of-turn token, exactly as the answer would be trained) after the prompt."""
        from vlm.dataset import Collator  # the training collator pads rows the same way

        device = next(self.parameters()).device
        rows, owners = [], []
        for item, (image, prompt, opts) in enumerate(zip(images, prompts, options, strict=True)):
            pixels = self.encoder.transform(image) if image is not None else None
            for opt in opts:
                ids, labels = self.prompt_format.build([("human", prompt), ("gpt", opt)])
                rows.append({"input_ids": ids, "labels": labels, "pixel_values": pixels})
                owners.append(item)
        collate = Collator(self.tokenizer.pad_token_id)
        loglik = []
        for start in range(0, len(rows), batch_size):
            batch = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in collate(rows[start : start + batch_size]).items()}
            embeds, mask, labels = self.splice(batch["input_ids"], batch["attention_mask"], batch["labels"], batch["pixel_values"], batch["image_mask"])
            logits = self.backbone(inputs_embeds=embeds, attention_mask=mask).logits.float()
            targets = labels[:, 1:]
            logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, targets.clamp(min=0)[..., None])[..., 0]
            loglik += (logp * (targets != IGNORE_INDEX)).sum(1).tolist()
        out: list[list[float]] = [[] for _ in prompts]
        for owner, value in zip(owners, loglik):
            out[owner].append(value)
        return [torch.softmax(torch.tensor(v), 0).tolist() for v in out]


def build_vlm(cfg) -> VLM:
    """Encoder, backbone and projector from the run config (`cfg.encoder`, `cfg.backbone`, `cfg.projector`)."""
    encoder = build_component(cfg.encoder)
    backbone = build_component(cfg.backbone)
    projector = build_component(cfg.projector)(encoder.embed_dim, backbone.hidden_size)
    return VLM(encoder, backbone, projector)


def build_component(node):
    """Instantiate a component config (its `name` names the run and is not a constructor argument).
    A load failure surfaces as the component's own `ComponentLoadError`, not Hydra's wrapper."""
    try:
        return instantiate({k: v for k, v in node.items() if k != "name"})
    except InstantiationException as err:
        if isinstance(err.__cause__, ComponentLoadError):
            raise err.__cause__ from None
        raise
