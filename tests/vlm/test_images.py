"""Image strategies against hand-computed cases: letterbox pastes at the rounded-down centre offset
(LLaVA's expand2square), so HF's pad_to_square reproduces it pixel for pixel."""

import numpy as np
from PIL import Image

from vlm.images import Letterbox


def test_letterbox_pads_with_the_fill_colour_at_the_floor_offset():
    image = Image.fromarray(np.full((64, 67, 3), 200, dtype=np.uint8))  # 67 wide, 64 high: 3 rows of padding
    out = np.asarray(Letterbox((1, 2, 3))(image))
    assert out.shape == (67, 67, 3)
    assert (out[:1] == (1, 2, 3)).all() and (out[1:65] == 200).all() and (out[65:] == (1, 2, 3)).all()  # 1 above, 2 below
    tall = np.asarray(Letterbox((9, 9, 9))(image.rotate(90, expand=True)))
    assert (tall[:, :1] == 9).all() and (tall[:, 1:65] == 200).all() and (tall[:, 65:] == 9).all()


def test_letterbox_leaves_square_images_alone():
    image = Image.new("RGB", (5, 5), (7, 7, 7))
    assert Letterbox((0, 0, 0))(image) is image
