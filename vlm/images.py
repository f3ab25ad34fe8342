"""Image preprocessing strategies applied before an encoder's own normalisation.

`resize-naive` squashes the image to the encoder's square input size,
`letterbox` pads it to a square with the encoder's mean colour first, and
`resize-crop` is timm's default (resize the shorter side, centre crop).
"""

from __future__ import annotations

import timm.data
from PIL import Image, ImageOps
from torchvision import transforms as T

STRATEGIES = ("resize-naive", "letterbox", "resize-crop")


class Letterbox:
    def __init__(self, fill: tuple[int, int, int]):
        self.fill = fill

    def __call__(self, image: Image.Image) -> Image.Image:
        w, h = image.size
        side = max(w, h)
        return ImageOps.pad(image, (side, side), color=self.fill, centering=(0.5, 0.5)) if w != h else image


def image_transform(data_config: dict, strategy: str):
    """PIL image → normalised float tensor (3, H, W) for an encoder with this timm data config."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown image strategy {strategy!r}; choose from {STRATEGIES}")
    if strategy == "resize-crop":
        return timm.data.create_transform(**data_config, is_training=False)
    size = data_config["input_size"][-2:]
    interpolation = T.InterpolationMode(data_config.get("interpolation", "bicubic"))
    steps = [T.Lambda(lambda im: im.convert("RGB"))]
    if strategy == "letterbox":
        steps.append(Letterbox(tuple(int(255 * m) for m in data_config["mean"])))
    steps += [
        T.Resize(tuple(size), interpolation=interpolation, antialias=True),
        T.ToTensor(),
        T.Normalize(data_config["mean"], data_config["std"]),
    ]
    return T.Compose(steps)
