"""Image encoders (`vlm.interfaces.ImageEncoder`): timm ViTs, open_clip models, and fused pairs.

ViT features are the output of the second-to-last transformer block
(`feature_layer: -2`) with the prefix (class / register) tokens dropped, as in
Prismatic and HF Llava; the unused blocks and the head are pruned so that they
neither cost compute nor sit in the optimiser without gradients.
- `TimmEncoder`: any timm ViT by hub id (`hf-hub:timm/...`), folder
  (`local-dir:PATH`) or tiny flavour (`tiny:NAME`); `model_kwargs` go to
  `timm.create_model` (e.g. DINOv2's `img_size: 224`, OpenAI CLIP's `act_layer: quick_gelu`).
- `OpenClipEncoder`: an open_clip model (`model_name` + `pretrained` tag or file,
  or `hf-hub:` / `local-dir:` / `tiny:` names), its image tower only, with
  open_clip's own preprocessing. A ViT tower gives its blocks' tokens; a timm
  tower (ConvNeXt) gives a stage's feature map (`feature_layer: -1`, the last
  stage), one token per position.
- `FusedEncoder`: several encoders on the same image (Prismatic's DINOv2 +
  SigLIP); patch features concatenated along channels. Its transform stacks
  each encoder's own preprocessing into one (n, 3, H, W) tensor per image.
Each encoder names its FSDP wrap / activation-checkpointing units (`fsdp_units()`, read by
core/strategies.py): a timm ViT's block class, an open_clip ViT tower's residual block, a ConvNeXt trunk's
block, and for a fused encoder those of every tower.
"""

from __future__ import annotations

from collections.abc import Mapping

import timm
import torch
from torch import nn

from core.flops import decoder_flops_per_token, measure_flops, non_embedding_params
from vlm.hub import load_error, offline_unless_reachable, resolve_tiny
from vlm.images import StackTransforms, image_transform, open_clip_transform
from vlm.interfaces import ImageEncoder
from vlm.model import build_component


def _layer_index(depth: int, feature_layer: int) -> int:
    return depth + feature_layer if feature_layer < 0 else feature_layer


def block_classes(model: nn.Module, what: str) -> set[type[nn.Module]]:
    """The classes of a timm / open_clip tower's repeated blocks: a ViT's `blocks` or `transformer.resblocks`,
    a staged model's (ConvNeXt) `stages[i].blocks`. `what` names the model in the error."""
    if hasattr(model, "transformer") and hasattr(model.transformer, "resblocks"):
        blocks = list(model.transformer.resblocks)
    elif hasattr(model, "blocks"):
        blocks = list(model.blocks)
    elif hasattr(model, "stages"):
        blocks = [b for stage in model.stages for b in getattr(stage, "blocks", [])]
    else:
        blocks = []
    if not blocks:
        raise ValueError(f"{what} ({type(model).__name__}) has no blocks/stages to make FSDP units of; "
                             "set trainer.strategy.wrap to its block class")
    return {type(b) for b in blocks}


class TimmEncoder(nn.Module):
    """A timm ViT's patch features from block `feature_layer` (negative: counted from the end)."""

    def __init__(self, model_id: str, image_strategy: str = "resize-naive", feature_layer: int = -2, pretrained: bool = True,
                 model_kwargs: Mapping | None = None, config_key: str = "encoder"):
        """`config_key`: where these settings live in the run config (named in the load error's fix)."""
        super().__init__()
        model_id = resolve_tiny(model_id, f"{config_key}.model_id", folder_scheme="local-dir:")
        offline_unless_reachable(model_id.removeprefix("hf-hub:"))
        try:
            model = timm.create_model(model_id, pretrained=pretrained, num_classes=0, **dict(model_kwargs or {}))
        except Exception as err:  # hub/network/file errors all surface as one clear message
            raise load_error("encoder", model_id, f"{config_key}.model_id", err) from err
        self.model_id = model_id
        self.layer = _layer_index(len(model.blocks), feature_layer)
        model.prune_intermediate_layers(indices=[self.layer], prune_head=True, prune_norm=True)
        self.model = model
        self.embed_dim = model.embed_dim
        self.num_patches = model.patch_embed.num_patches
        self.grid_size = tuple(model.patch_embed.grid_size)
        self.image_size = tuple(model.patch_embed.img_size)
        self.data_config = timm.data.resolve_data_config({}, model=model)
        self.data_config["input_size"] = (3, *self.image_size)  # the checkpoint's size is stale after an img_size override
        self.transform = image_transform(self.data_config, image_strategy)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) → patch features (B, num_patches, embed_dim)."""
        (features,) = self.model.forward_intermediates(
            pixel_values, indices=[self.layer], norm=False, output_fmt="NLC", intermediates_only=True
        )
        return features

    def fsdp_units(self) -> set[type[nn.Module]]:
        """The ViT's block class (e.g. `timm.models.vision_transformer.Block`)."""
        return block_classes(self.model, f"timm encoder {self.model_id!r}")

    def flops_per_patch(self) -> float:
        """Training FLOPs per output patch: 6·N + 12·L·d·T over the blocks that run."""
        return decoder_flops_per_token(non_embedding_params(self), len(self.model.blocks), self.embed_dim, self.num_patches)


class OpenClipEncoder(nn.Module):
    """An open_clip model's image tower: ViT block tokens or a timm trunk stage's feature map."""

    def __init__(self, model_name: str, pretrained: str | None = None, image_strategy: str = "resize-naive",
                 feature_layer: int = -2, model_kwargs: Mapping | None = None, config_key: str = "encoder"):
        """`model_name`: an open_clip config name (with `pretrained` a tag or a weights file; None: random
        init), or `hf-hub:ORG/REPO` / `local-dir:PATH` (config and weights from there). `model_kwargs` go to
        `open_clip.create_model` (e.g. `force_image_size`)."""
        import open_clip  # imported on use: it is slow to import

        super().__init__()
        model_name = resolve_tiny(model_name, f"{config_key}.model_name", folder_scheme="local-dir:")
        schema = model_name.split(":", 1)[0] if model_name.startswith(("hf-hub:", "local-dir:")) else None
        # what to name in a load error: the hub repo behind a tag (its folder loads as local-dir:), else the setting
        source, key = model_name, f"{config_key}.model_name"
        if pretrained and not schema:
            tag = open_clip.get_pretrained_cfg(model_name, pretrained).get("hf_hub", "").rstrip("/")
            source, key = (f"hf-hub:{tag}", key) if tag else (pretrained, f"{config_key}.pretrained")
        if source.startswith("hf-hub:"):
            offline_unless_reachable(source.removeprefix("hf-hub:"))
        try:
            model = open_clip.create_model(model_name, pretrained=pretrained, require_pretrained=bool(schema or pretrained),
                                           **dict(model_kwargs or {}))
        except Exception as err:
            raise load_error("encoder", source, key, err) from err
        visual = model.visual
        self.model_name = model_name
        self.image_size = tuple(visual.image_size)
        self.preprocess_cfg = dict(visual.preprocess_cfg)
        self.transform = open_clip_transform(self.preprocess_cfg, image_strategy)
        self.is_vit = hasattr(visual, "transformer")
        if self.is_vit:
            self.layer = _layer_index(len(visual.transformer.resblocks), feature_layer)
            visual.prune_intermediate_layers(indices=[self.layer], prune_norm=True, prune_head=True)
            self.model = visual  # the text tower is dropped
            self.embed_dim = visual.transformer.width
            self.grid_size = tuple(visual.grid_size)
        elif hasattr(visual, "trunk") and hasattr(visual.trunk, "prune_intermediate_layers"):
            trunk = visual.trunk  # a timm model (ConvNeXt); open_clip's pooling and projection head are dropped
            self.layer = _layer_index(len(trunk.feature_info), feature_layer)
            trunk.prune_intermediate_layers(indices=[self.layer], prune_norm=True, prune_head=True)
            self.model = trunk
            stage = trunk.feature_info[self.layer]
            self.embed_dim = stage["num_chs"]
            self.grid_size = tuple(size // stage["reduction"] for size in self.image_size)
        else:
            raise ValueError(f"open_clip model {model_name!r} has neither a ViT nor a timm image tower "
                             f"({type(visual).__name__}); use a ViT or ConvNeXt model")
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self._flops_per_patch = None

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) → patch features (B, num_patches, embed_dim): a ViT's tokens without the class token, or
        a conv stage's feature map, one token per position in row-major order."""
        if self.is_vit:
            out = self.model.forward_intermediates(pixel_values, indices=[self.layer], intermediates_only=True, output_fmt="NLC")
            return out["image_intermediates"][0]
        (feature_map,) = self.model.forward_intermediates(pixel_values, indices=[self.layer], intermediates_only=True)
        return feature_map.flatten(2).transpose(1, 2)

    def fsdp_units(self) -> set[type[nn.Module]]:
        """A ViT tower's residual block (`open_clip.transformer.ResidualAttentionBlock`) or a ConvNeXt trunk's block."""
        return block_classes(self.model, f"open_clip encoder {self.model_name!r}")

    def flops_per_patch(self) -> float:
        """A ViT: 6·N + 12·L·d·T over its blocks; a conv tower: 3x one image's counted forward FLOPs, per patch."""
        if self.is_vit:
            blocks = len(self.model.transformer.resblocks)
            return decoder_flops_per_token(non_embedding_params(self), blocks, self.embed_dim, self.num_patches)
        if self._flops_per_patch is None:
            weight = next(self.parameters())
            image = torch.zeros(1, 3, *self.image_size, device=weight.device, dtype=weight.dtype)
            with torch.no_grad():
                self._flops_per_patch = 3 * measure_flops(lambda: self(image)) / self.num_patches
        return self._flops_per_patch


class FusedEncoder(nn.Module):
    """Encoders run on the same image, patch features concatenated along channels (embed_dim = their sum).

    `encoders` maps a name to an encoder or to its config (built here; a fused config lists them under
    `encoder.encoders.NAME`). `image_strategy`, when set, applies to every encoder built from a config.
    Patch grids must match, and so must input sizes (each image becomes one (n, 3, H, W) tensor)."""

    def __init__(self, encoders: Mapping[str, ImageEncoder | Mapping], image_strategy: str | None = None):
        super().__init__()
        if len(encoders) < 2:
            raise ValueError(f"a fused encoder needs at least two encoders; got {list(encoders)}")
        built = {}
        for name, enc in encoders.items():
            if not isinstance(enc, nn.Module):
                overrides = {"image_strategy": image_strategy} if image_strategy else {}
                enc = build_component({**enc, "config_key": f"encoder.encoders.{name}", **overrides})
            built[name] = enc
        self.encoders = nn.ModuleDict(built)
        for attr, what in (("grid_size", "patch grids"), ("image_size", "input sizes")):
            values = {name: tuple(getattr(enc, attr)) for name, enc in built.items()}
            if len(set(values.values())) > 1:
                shown = ", ".join(f"{name} {'x'.join(map(str, v))}" for name, v in values.items())
                raise ValueError(f"fused encoders need equal {what}; got {shown}. Choose image sizes (e.g. "
                                 f"`model_kwargs: {{img_size: ...}}`) that give every encoder the same {attr}")
        first = next(iter(built.values()))
        self.grid_size, self.image_size, self.num_patches = first.grid_size, first.image_size, first.num_patches
        self.embed_dim = sum(enc.embed_dim for enc in built.values())
        self.transform = StackTransforms([enc.transform for enc in built.values()])

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """(B, n, 3, H, W), image i for encoder i → (B, num_patches, sum of embed_dims)."""
        if pixel_values.ndim != 5 or pixel_values.shape[1] != len(self.encoders):
            raise ValueError(f"fused encoder expects (B, {len(self.encoders)}, 3, H, W) pixels from its own transform; "
                             f"got {tuple(pixel_values.shape)}")
        return torch.cat([enc(pixel_values[:, i]) for i, enc in enumerate(self.encoders.values())], -1)

    def fsdp_units(self) -> set[type[nn.Module]]:
        """Every tower's units."""
        return set().union(*(enc.fsdp_units() for enc in self.encoders.values()))

    def flops_per_patch(self) -> float:
        return sum(enc.flops_per_patch() for enc in self.encoders.values())
