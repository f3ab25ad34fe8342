"""Image preprocessing strategies applied before an encoder's own normalisation.

`resize-naive` squashes the image to the encoder's square input size,
`letterbox` pads it to a square with the encoder's mean colour first, and
`resize-crop` is timm's default (resize the shorter side, centre crop).
`open_clip_transform` maps the same strategies onto open_clip's own eval
preprocessing; `StackTransforms` stacks several encoders' inputs for a fused encoder.
Images reach these transforms decoded by data/image_decode.py (already RGB); an image
handed in some other mode is converted by the same rules (`to_rgb`), not by PIL's
`convert("RGB")`.
"""

from __future__ import annotations

import timm.data
import torch
from PIL import Image
from torchvision import transforms as T

from data.image_decode import to_rgb

STRATEGIES = ("resize-naive", "letterbox", "resize-crop")
OPEN_CLIP_RESIZE_MODES = {"resize-naive": "squash", "letterbox": "squash", "resize-crop": "shortest"}  # letterbox pads first


class Letterbox:
    def __init__(self, fill: tuple[int, int, int]):
        self.fill = fill

    def __call__(self, image: Image.Image) -> Image.Image:
        """Pad to a square, the image pasted at the rounded-down centre offset (LLaVA's `expand2square`, HF's
        `pad_to_square`), so exported processors reproduce it pixel for pixel."""
        w, h = image.size
        if w == h:
            return image
        side = max(w, h)
        square = Image.new(image.mode, (side, side), self.fill)
        square.paste(image, ((side - w) // 2, (side - h) // 2))
        return square


def _check(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown image strategy {strategy!r}; choose from {STRATEGIES}")


def image_transform(data_config: dict, strategy: str):
    """PIL image → normalised float tensor (3, H, W) for an encoder with this timm data config."""
    _check(strategy)
    if strategy == "resize-crop":
        return timm.data.create_transform(**data_config, is_training=False)
    size = data_config["input_size"][-2:]
    interpolation = T.InterpolationMode(data_config.get("interpolation", "bicubic"))
    steps = [T.Lambda(to_rgb)]
    if strategy == "letterbox":
        steps.append(Letterbox(tuple(int(255 * m) for m in data_config["mean"])))
    steps += [
        T.Resize(tuple(size), interpolation=interpolation, antialias=True),
        T.ToTensor(),
        T.Normalize(data_config["mean"], data_config["std"]),
    ]
    return T.Compose(steps)


def open_clip_transform(preprocess_cfg: dict, strategy: str):
    """open_clip's own eval transform for a model's `visual.preprocess_cfg`, resized by `strategy`
    (`resize-naive` → open_clip's `squash`, `resize-crop` → `shortest`; `letterbox` pads to a square with
    the mean colour first, then squashes)."""
    from open_clip.transform import PreprocessCfg, image_transform_v2, merge_preprocess_dict

    _check(strategy)
    cfg = PreprocessCfg(**merge_preprocess_dict(preprocess_cfg, {"resize_mode": OPEN_CLIP_RESIZE_MODES[strategy]}))
    transform = image_transform_v2(cfg, is_train=False)
    if strategy == "letterbox":
        transform = T.Compose([T.Lambda(to_rgb), Letterbox(tuple(int(255 * m) for m in cfg.mean)), transform])
    return transform


class StackTransforms:
    """One PIL image → (n, 3, H, W): each of n transforms applied to it (a fused encoder's input)."""

    def __init__(self, transforms: list):
        self.transforms = list(transforms)

    def __call__(self, image: Image.Image) -> torch.Tensor:
        return torch.stack([t(image) for t in self.transforms])
