"""The one way refract turns an image file into pixels: `decode_image(path)` → an RGB PIL image.

Training (vlm/dataset.py), evaluation (eval/runners/base.py), chat (scripts/chat.py), the pretraining world
(vlm/pretrain/world.py) and data preparation (scripts/prepare_llava.py) all decode through it, so every consumer
sees the same pixels. What it does, in order:

- refuses an image larger than `max_pixels` (width x height, read from the header before any pixel is decoded)
  naming the file, the size and the config keys, or, with `oversize="downscale"`, decodes it and shrinks it
  (aspect kept) to fit the budget, saying so once;
- takes the first frame of an animated or multi-page file;
- applies the EXIF orientation (`PIL.ImageOps.exif_transpose`): a photo is seen the way a viewer shows it;
- converts every mode to 8-bit RGB by its meaning, not by PIL's default `convert("RGB")`:
  16-bit grayscale (`I;16*`, and `I`, PIL's mode for 16-bit sources) is scaled 0..65535 → 0..255 (PIL would clip
  it to white); 32-bit float (`F`) must hold intensities in [0, 1] and is scaled by 255 (values outside, or NaN,
  are refused); anything with transparency (`RGBA`, `LA`, `PA`, premultiplied modes, a palette or grayscale or
  RGB image with a transparent colour) is composited over `BACKGROUND` (white) instead of revealing whatever
  colour hides under transparent pixels; `CMYK`, `L`, `1`, `P`, `YCbCr`, `HSV` go through PIL's conversion
  (CMYK: R = (255-C)(255-K)/255, ...);
- any failure (missing, truncated, not an image, unsupported mode) raises `ImageDecodeError` (a `DataError`)
  naming the file.

`image_path(root, rel, allow_outside)` is where a dataset's relative image path is allowed to point: paths that
leave the image root (`..`, an absolute path, a symlink whose target is outside) are refused unless
`allow_outside` (config key `data.allow_images_outside_root`).

`ImagePolicy` carries the three data settings (`data.max_image_pixels`, `data.oversize_images`,
`data.allow_images_outside_root`) from the config to validation (data/llava.py) and decoding. The keys are not
written into conf/data/*.yaml (a run's name hashes its config: existing runs keep theirs); absent means the
defaults here, and a command line sets them with `+data.KEY=VALUE`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from data.errors import DataError

BACKGROUND = (255, 255, 255)  # what transparent pixels are composited over
DEFAULT_MAX_PIXELS = 89_478_485  # PIL's own decompression-bomb warning threshold (Image.MAX_IMAGE_PIXELS)
OVERSIZE_POLICIES = ("refuse", "downscale")
ALPHA_MODES = {"RGBA", "LA", "PA", "RGBa", "La"}
SIXTEEN_BIT_MODES = {"I;16", "I;16L", "I;16B", "I;16N", "I"}


class ImageDecodeError(DataError):
    """An image file that cannot be decoded into RGB pixels; the message names the file and the reason."""


@dataclass(frozen=True)
class ImagePolicy:
    """How a dataset's images are found and decoded (the `data.*` keys named in the module docstring)."""

    max_pixels: int | None = DEFAULT_MAX_PIXELS
    oversize: str = "refuse"
    allow_outside_root: bool = False

    def __post_init__(self):
        if self.oversize not in OVERSIZE_POLICIES:
            raise ValueError(f"data.oversize_images={self.oversize!r}; choose one of {OVERSIZE_POLICIES}")

    @classmethod
    def from_config(cls, data_cfg) -> ImagePolicy:
        """The policy of a `data` config node (absent keys: the defaults)."""
        get = data_cfg.get if data_cfg is not None else (lambda key, default=None: default)
        max_pixels = get("max_image_pixels", DEFAULT_MAX_PIXELS)
        return cls(None if max_pixels is None else int(max_pixels), str(get("oversize_images", "refuse")),
                   bool(get("allow_images_outside_root", False)))

    def decode(self, path: str | Path) -> Image.Image:
        return decode_image(path, self.max_pixels, self.oversize)

    def path(self, root: str | Path, rel: str) -> Path:
        return image_path(root, rel, self.allow_outside_root)

    def refuses_size(self, width: int, height: int) -> bool:
        return self.oversize == "refuse" and self.max_pixels is not None and width * height > self.max_pixels


DEFAULT_IMAGES = ImagePolicy()  # the defaults of the data.* image keys


def decode_image(path: str | Path, max_pixels: int | None = DEFAULT_MAX_PIXELS, oversize: str = "refuse") -> Image.Image:
    """The RGB image of the file at `path` (its first frame, EXIF-oriented, converted by its mode's meaning).

    `max_pixels` (None: no budget) bounds width x height; an image above it is refused, or with
    `oversize="downscale"` shrunk to fit. Raises `ImageDecodeError` naming the file on any failure."""
    if oversize not in OVERSIZE_POLICIES:
        raise ValueError(f"oversize={oversize!r}; choose one of {OVERSIZE_POLICIES} (data.oversize_images)")
    path = Path(path)
    if not path.is_file():
        raise ImageDecodeError(f"image {path} does not exist (or is not a file)")
    try:
        with Image.open(path) as im:
            width, height = im.size
            too_big = max_pixels is not None and width * height > max_pixels
            if too_big and oversize == "refuse":
                raise ImageDecodeError(
                    f"image {path} is {width}x{height} = {width * height} pixels, over the budget of {max_pixels} "
                    "(+data.max_image_pixels=N); raise the budget, or set +data.oversize_images=downscale to shrink it at decode")
            if too_big and im.format == "JPEG":  # decode a JPEG at a reduced scale instead of at full size
                im.draft("RGB", fitting_size(width, height, max_pixels))
            rgb = to_rgb(ImageOps.exif_transpose(im), path)
    except ImageDecodeError:
        raise
    except Exception as err:  # truncated, corrupt, not an image, unsupported mode
        raise ImageDecodeError(f"cannot decode image {path} ({type(err).__name__}: {err})") from err
    if too_big:  # the original's aspect (a JPEG draft rounds it), turned as EXIF turned the image
        size = fitting_size(width, height, max_pixels)
        size = size if (rgb.width >= rgb.height) == (width >= height) else size[::-1]
        warnings.warn(f"image {path} ({width}x{height}) is over data.max_image_pixels={max_pixels}: "
                      f"downscaled to {size[0]}x{size[1]} (data.oversize_images=downscale)", stacklevel=2)
        rgb = rgb.resize(size, Image.Resampling.LANCZOS)
    return rgb


def fitting_size(width: int, height: int, max_pixels: int) -> tuple[int, int]:
    """The largest (w, h) with the aspect of width x height and w*h <= max_pixels (at least 1x1)."""
    if width * height <= max_pixels:
        return width, height
    scale = math.sqrt(max_pixels / (width * height))
    return max(1, math.floor(width * scale)), max(1, math.floor(height * scale))


def to_rgb(im: Image.Image, path: Path | str = "<image>") -> Image.Image:
    """8-bit RGB pixels of `im` by what its mode means (see the module docstring)."""
    mode = im.mode
    if mode in SIXTEEN_BIT_MODES:
        values = np.asarray(im).astype(np.int64)
        if values.size and (values.min() < 0 or values.max() > 65535):
            raise ImageDecodeError(f"image {path}: a 32-bit integer image with values in [{values.min()}, {values.max()}]; "
                                   "only 0..65535 (16-bit) is understood: save it as 8- or 16-bit")
        return gray_to_rgb(np.rint(values / 257.0))
    if mode == "F":
        values = np.asarray(im, dtype=np.float64)
        if values.size and not (np.isfinite(values).all() and values.min() >= 0.0 and values.max() <= 1.0):
            raise ImageDecodeError(f"image {path}: a float image must hold intensities in [0, 1] "
                                   f"(found {'non-finite values' if not np.isfinite(values).all() else f'[{values.min()}, {values.max()}]'}); "
                                   "save it as an 8- or 16-bit image")
        return gray_to_rgb(np.rint(values * 255.0))
    if mode in ALPHA_MODES or "transparency" in im.info:
        rgba = im.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (*BACKGROUND, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    if mode == "RGB":
        im.load()
        return im
    return im.convert("RGB")


def gray_to_rgb(values: np.ndarray) -> Image.Image:
    return Image.fromarray(values.astype(np.uint8), "L").convert("RGB")


def image_path(root: str | Path, rel: str, allow_outside: bool = False) -> Path:
    """`root / rel`, refused (ImageDecodeError) when it leaves `root`: an absolute `rel`, `..` above the root, or a
    symlink resolving outside the resolved root; `allow_outside` (data.allow_images_outside_root) allows all."""
    root, path = Path(root), Path(root) / rel
    if allow_outside:
        return path
    fix = "fix the path, or set +data.allow_images_outside_root=true if the dataset is meant to point there"
    if Path(rel).is_absolute():
        raise ImageDecodeError(f"image path {rel!r} is absolute, outside the image root {root}; {fix}")
    inside = root.resolve()
    if not path.resolve().is_relative_to(inside):
        how = "through a symlink" if ".." not in Path(rel).parts else "with '..'"
        raise ImageDecodeError(f"image path {rel!r} leaves the image root {root} {how} (to {path.resolve()}); {fix}")
    return path
