"""The VLM: image encoder → projector → patch embeddings spliced into the language model.

The parts are typed by their contracts in vlm/interfaces.py.
Plain `nn.Module`, free of Lightning. `forward` takes a right-padded batch (the
collator's output) and returns the backbone's output (loss when labels are
given). Rows without an image are allowed: their text is followed by masked
padding in place of the patches. A row's one image goes right after BOS;
several images go where their `<image>` placeholders were (`image_positions`).
`generate` takes PIL images and user messages, applies the backbone's prompt
format, and decodes greedily (or by sampling, seeded) with the KV cache,
returning strings cut at optional stop strings.
"""

from __future__ import annotations

import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from torch import nn

from vlm.hub import ComponentLoadError
from vlm.interfaces import ImageEncoder, LanguageBackbone, ProjectorFactory
from vlm.prompting import IGNORE_INDEX


class VLM(nn.Module):
    def __init__(self, encoder: ImageEncoder, backbone: LanguageBackbone, projector: nn.Module):
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

    def splice(self, input_ids, attention_mask, labels, pixel_values, image_mask, image_positions=None):
        """Insert each image's projected patches in front of its position in `input_ids`.

        `pixel_values` holds the batch's images in row order; `image_positions` (rows, k) gives, per
        row, the ascending positions of its images, -1 where a row has fewer. Without it every row with
        an image (`image_mask`) has one, right after BOS (`prompt_format.image_position`). Rows keep
        their padding after the text; rows with fewer images than the most in the batch end with masked
        zeros. Patch positions get label -100."""
        embeds = self.backbone.embed(input_ids)
        if pixel_values is None or not bool(image_mask.any()):
            return embeds, attention_mask, labels
        patches = self.image_embeddings(pixel_values).to(embeds.dtype)
        (batch, length), (_, num_patches, dim) = input_ids.shape, patches.shape
        if image_positions is None:
            image_positions = torch.where(image_mask, self.prompt_format.image_position, -1)[:, None]
        image_positions = image_positions.to(input_ids.device)
        valid = image_positions >= 0
        width = length + num_patches * int(valid.sum(1).max())
        # text token j moves right by the patches of every image placed at or before it
        j = torch.arange(length, device=input_ids.device)
        text_to = j + num_patches * ((image_positions[:, :, None] <= j) & valid[:, :, None]).sum(1)
        rows, k = valid.nonzero(as_tuple=True)  # row-major: the order of `pixel_values`
        patch_rows = rows[:, None].expand(-1, num_patches)
        patch_to = (image_positions[rows, k] + num_patches * k)[:, None] + torch.arange(num_patches, device=j.device)
        embeds = embeds.new_zeros(batch, width, dim).scatter(1, text_to[..., None].expand(-1, -1, dim), embeds)
        embeds = embeds.index_put((patch_rows, patch_to), patches)
        attention_mask = attention_mask.new_zeros(batch, width).scatter(1, text_to, attention_mask)
        attention_mask = attention_mask.index_put((patch_rows, patch_to), attention_mask.new_ones(()))
        if labels is not None:
            labels = labels.new_full((batch, width), IGNORE_INDEX).scatter(1, text_to, labels)
        return embeds, attention_mask, labels

    def forward(self, input_ids, attention_mask, labels=None, pixel_values=None, image_mask=None, image_positions=None,
                **kwargs):
        embeds, attention_mask, labels = self.splice(input_ids, attention_mask, labels, pixel_values, image_mask, image_positions)
        return self.backbone(inputs_embeds=embeds, attention_mask=attention_mask, labels=labels, **kwargs)

    # --- inference ---------------------------------------------------------------------------
    def prompt_embeddings(self, images: list, prompts: list[str]):
        """Left-padded prompt embeddings and attention mask for a batch of (image, user message).

        An item's image may be None (text only), a PIL image, or a list of them (one `<image>`
        placeholder per image in the message, where each image goes). The prompts are collated and
        spliced as one right-padded batch (all images through the encoder at once); then each row is
        rotated right by its padding, and columns that are padding in every row are dropped."""
        from vlm.dataset import Collator  # the training collator pads rows the same way

        device = next(self.parameters()).device
        rows = []
        for image, prompt in zip(images, prompts, strict=True):
            pics = [] if image is None else list(image) if isinstance(image, (list, tuple)) else [image]
            ids, labels, positions = self.prompt_format.build_with_images([("human", prompt)], len(pics), generation=True)
            rows.append({"input_ids": ids, "labels": labels, "image_positions": positions,
                         "pixel_values": [self.encoder.transform(p) for p in pics]})
        batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in Collator(self.tokenizer.pad_token_id)(rows).items()}
        embeds, masks, _ = self.splice(batch["input_ids"], batch["attention_mask"], None, batch["pixel_values"],
                                       batch["image_mask"], batch["image_positions"])
        full, lengths = masks.shape[1], masks.sum(1)  # a spliced row is its positions, then padding
        index = ((torch.arange(full, device=device) - (full - lengths)[:, None]) % full)[:, full - int(lengths.max()):]
        masks = masks.gather(1, index)
        embeds = embeds.gather(1, index[..., None].expand(-1, -1, embeds.shape[-1])).masked_fill(masks[..., None] == 0, 0)
        return embeds, masks

    @torch.no_grad()
    def generate(self, images, prompts, max_new_tokens: int = 32, do_sample: bool = False, temperature: float | None = None,
                 top_p: float | None = None, top_k: int | None = None, stop: list[str] | None = None,
                 seed: int | None = None, **gen_kwargs) -> list[str]:
        """images: PIL images (or None for text-only, or a list per item); prompts: the user's messages.
        Returns the answers.

        Greedy by default; `do_sample=True` samples with `temperature` / `top_p` / `top_k` (HF generate's
        own logits processors); `seed` makes sampling reproducible without touching the global RNG.
        Each answer is cut before the first of the `stop` strings, and a row stops generating once
        it produced one (HF's `stop_strings`)."""
        embeds, masks = self.prompt_embeddings(list(images), list(prompts))
        tok = self.tokenizer
        sampling = {k: v for k, v in dict(temperature=temperature, top_p=top_p, top_k=top_k).items() if v is not None}
        if sampling and not do_sample:
            raise ValueError(f"{sorted(sampling)} only apply when sampling; pass do_sample=True")
        if stop:
            gen_kwargs.update(stop_strings=list(stop), tokenizer=tok)
        with torch.random.fork_rng(devices=[embeds.device] if embeds.device.type == "cuda" else [], enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            out = self.backbone.model.generate(
                inputs_embeds=embeds,
                attention_mask=masks,
                max_new_tokens=max_new_tokens,
                do_sample=do_sample,
                use_cache=True,
                eos_token_id=self.prompt_format.stop_token_ids,  # the template's end-of-turn token and EOS
                pad_token_id=tok.pad_token_id,
                **sampling,
                **gen_kwargs,
            )
        return [cut_at_stop(text, stop).strip() for text in tok.batch_decode(out, skip_special_tokens=True)]


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


def cut_at_stop(text: str, stop: list[str] | None) -> str:
    """`text` up to (not including) the earliest occurrence of any stop string."""
    ends = [i for i in (text.find(s) for s in stop or [] if s) if i >= 0]
    return text[: min(ends)] if ends else text


def build_vlm(cfg) -> VLM:
    """Encoder, backbone and projector from the run config (`cfg.encoder`, `cfg.backbone`, `cfg.projector`);
    with `cfg.lora.enabled` the backbone gets LoRA adapters (vlm/lora.py)."""
    encoder: ImageEncoder = build_component(cfg.encoder)
    backbone: LanguageBackbone = build_component(cfg.backbone)
    if cfg.get("lora") and cfg.lora.get("enabled"):
        from vlm.lora import apply_lora

        apply_lora(backbone, {k: v for k, v in cfg.lora.items() if k != "enabled"})
    make_projector: ProjectorFactory = build_component(cfg.projector)
    return VLM(encoder, backbone, make_projector(encoder.embed_dim, backbone.hidden_size))


def build_component(node):
    """Instantiate a component config (its `name` names the run and is not a constructor argument).
    A load failure surfaces as the component's own `ComponentLoadError`, not Hydra's wrapper."""
    try:
        return instantiate({k: v for k, v in node.items() if k != "name"})
    except InstantiationException as err:
        if isinstance(err.__cause__, ComponentLoadError):
            raise err.__cause__ from None
        raise
