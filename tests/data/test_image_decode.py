"""data/image_decode.py: every PIL mode decoded to the RGB pixels it means (hand-computed references), EXIF
orientation, the pixel budget, damaged files and image paths that leave the image root."""

from __future__ import annotations

import io
import os
import warnings

import numpy as np
import pytest
from PIL import Image

from data.errors import DataError
from data.image_decode import BACKGROUND, ImageDecodeError, decode_image, fitting_size, image_path


def saved(tmp_path, image: Image.Image, name: str, **kwargs):
    path = tmp_path / name
    image.save(path, **kwargs)
    return path


def pixels(path, **kwargs) -> np.ndarray:
    rgb = decode_image(path, **kwargs)
    assert rgb.mode == "RGB"
    return np.asarray(rgb).astype(int)


def gray(values) -> np.ndarray:
    """(h, w) gray levels → the (h, w, 3) RGB array they stand for."""
    return np.repeat(np.asarray(values, dtype=int)[..., None], 3, axis=-1)


# --- modes ---------------------------------------------------------------------------------------------
def test_rgb_and_l_and_1_unchanged(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    assert (pixels(saved(tmp_path, Image.fromarray(rgb), "a.png")) == rgb).all()
    levels = np.array([[0, 17, 128, 255]], dtype=np.uint8)
    assert (pixels(saved(tmp_path, Image.fromarray(levels, "L"), "l.png")) == gray(levels)).all()
    bits = Image.fromarray(np.array([[0, 255, 0]], dtype=np.uint8)).convert("1")
    assert (pixels(saved(tmp_path, bits, "b.png")) == gray([[0, 255, 0]])).all()


@pytest.mark.parametrize("mode", ["I;16", "I;16B"])
def test_sixteen_bit_gray_is_scaled_not_clipped(tmp_path, mode):
    """PIL's convert("RGB") clips 16-bit values to 255 (all white); 0..65535 → 0..255 keeps the content."""
    values = np.array([[0, 257, 32896, 65535, 1000]], dtype=np.uint16)
    image = Image.frombytes(mode, (5, 1), values.astype(">u2" if mode == "I;16B" else "<u2").tobytes())
    assert image.mode == mode
    path = saved(tmp_path, image, "g.tif" if mode == "I;16B" else "g.png")
    assert (pixels(path) == gray([[0, 1, 128, 255, 4]])).all()  # 1000/257 = 3.9 → 4


def test_thirty_two_bit_int_in_sixteen_bit_range_and_out_of_range(tmp_path):
    ok = Image.fromarray(np.array([[0, 514, 65535]], dtype=np.int32), "I")
    assert (pixels(saved(tmp_path, ok, "i.tif")) == gray([[0, 2, 255]])).all()
    negative = Image.fromarray(np.array([[-5, 10]], dtype=np.int32), "I")
    with pytest.raises(ImageDecodeError, match=r"n\.tif.*0\.\.65535"):
        decode_image(saved(tmp_path, negative, "n.tif"))


def test_float_image_unit_range_scaled_and_others_refused(tmp_path):
    ok = Image.fromarray(np.array([[0.0, 0.5, 1.0, 0.25]], dtype=np.float32), "F")
    assert (pixels(saved(tmp_path, ok, "f.tif")) == gray([[0, 128, 255, 64]])).all()  # 127.5 → 128 (half to even)
    for name, values in [("big.tif", [[0.0, 3.0]]), ("nan.tif", [[np.nan, 0.5]])]:
        with pytest.raises(ImageDecodeError, match=rf"{name}.*\[0, 1\]"):
            decode_image(saved(tmp_path, Image.fromarray(np.array(values, dtype=np.float32), "F"), name))


def composite(color, alpha) -> np.ndarray:
    """Hand reference: `color` over the white background at opacity alpha/255."""
    color, a = np.asarray(color, dtype=float), alpha / 255
    return np.rint(color * a + np.asarray(BACKGROUND) * (1 - a)).astype(int)


def test_transparency_is_composited_over_white(tmp_path):
    rgba = Image.new("RGBA", (2, 1))
    rgba.putpixel((0, 0), (200, 10, 40, 255))
    rgba.putpixel((1, 0), (0, 0, 0, 0))  # fully transparent black: PIL's convert("RGB") would show black
    got = pixels(saved(tmp_path, rgba, "rgba.png"))
    assert (got[0, 0] == [200, 10, 40]).all() and (got[0, 1] == BACKGROUND).all()
    la = Image.new("LA", (1, 1), (100, 128))
    assert np.abs(pixels(saved(tmp_path, la, "la.png"))[0, 0] - composite([100] * 3, 128)).max() <= 1


def test_palette_with_transparent_index(tmp_path):
    palette = Image.new("P", (3, 1))
    palette.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 0] + [0] * 759)
    for x, index in enumerate([0, 1, 2]):
        palette.putpixel((x, 0), index)
    path = saved(tmp_path, palette, "p.png", transparency=2)  # index 2 (black) is transparent
    assert Image.open(path).mode == "P" and "transparency" in Image.open(path).info
    assert (pixels(path) == [[[255, 0, 0], [0, 255, 0], list(BACKGROUND)]]).all()
    gif = saved(tmp_path, palette, "p.gif", transparency=2)
    assert (pixels(gif) == [[[255, 0, 0], [0, 255, 0], list(BACKGROUND)]]).all()
    opaque = saved(tmp_path, palette, "opaque.png")
    assert (pixels(opaque) == [[[255, 0, 0], [0, 255, 0], [0, 0, 0]]]).all()


def test_cmyk(tmp_path):
    """R = (255-C)(255-K)/255 and so on (hand-computed), through a CMYK JPEG and TIFF."""
    cmyk = Image.new("CMYK", (8, 8), (100, 50, 20, 40))
    want = np.rint([155 * 215 / 255, 205 * 215 / 255, 235 * 215 / 255])
    assert (pixels(saved(tmp_path, cmyk, "c.tif"))[0, 0] == want).all()
    assert np.abs(pixels(saved(tmp_path, cmyk, "c.jpg", quality=100))[4, 4] - want).max() <= 3  # lossy


@pytest.mark.parametrize("orientation, rotate", [(1, 0), (3, 2), (6, -1), (8, 1)])
def test_exif_orientation_applied(tmp_path, orientation, rotate):
    """EXIF 6 = the camera was turned: a viewer rotates 90° clockwise (np.rot90 k=-1); 8 counter-clockwise; 3 180°."""
    array = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3) * 10
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = saved(tmp_path, Image.fromarray(array), f"o{orientation}.png", exif=exif)
    assert (pixels(path) == np.rot90(array, k=rotate)).all()


def test_first_frame_of_an_animation(tmp_path):
    frames = [Image.new("RGB", (2, 2), c) for c in [(255, 0, 0), (0, 0, 255)]]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:])
    assert (pixels(path) == [255, 0, 0]).all()


# --- damaged files ------------------------------------------------------------------------------------
def test_truncated_jpeg_passes_verify_but_decode_names_the_file(tmp_path):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(buf, "JPEG")
    path = tmp_path / "cut.jpg"
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with Image.open(path) as im:
        im.verify()  # what validation checks: passes
    with pytest.raises(ImageDecodeError, match=r"cut\.jpg.*truncated") as err:
        decode_image(path)
    assert isinstance(err.value, DataError)


@pytest.mark.parametrize("content", [b"", b"not an image at all", b"\x89PNG\r\n\x1a\n" + b"\0" * 20])
def test_not_an_image(tmp_path, content):
    path = tmp_path / "bad.png"
    path.write_bytes(content)
    with pytest.raises(ImageDecodeError, match=r"bad\.png"):
        decode_image(path)


def test_missing_file(tmp_path):
    with pytest.raises(ImageDecodeError, match=r"nothere\.png does not exist"):
        decode_image(tmp_path / "nothere.png")


# --- pixel budget -------------------------------------------------------------------------------------
def test_budget_refuses_before_decoding(tmp_path):
    path = saved(tmp_path, Image.new("RGB", (40, 30)), "big.png")
    assert decode_image(path, max_pixels=1200).size == (40, 30)  # exactly at the budget
    with pytest.raises(ImageDecodeError, match=r"big\.png is 40x30 = 1200 pixels.*1199.*data\.max_image_pixels.*downscale"):
        decode_image(path, max_pixels=1199)
    with pytest.raises(ValueError, match="oversize"):
        decode_image(path, oversize="crop")


@pytest.mark.parametrize("name", ["big.png", "big.jpg"])
def test_budget_downscales_keeping_the_aspect(tmp_path, name):
    array = np.zeros((300, 400, 3), dtype=np.uint8)
    array[:, 200:] = 255  # left half black, right half white
    path = saved(tmp_path, Image.fromarray(array), name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        image = decode_image(path, max_pixels=1200, oversize="downscale")
    assert image.size == (40, 30) and fitting_size(400, 300, 1200) == (40, 30)
    assert any("downscaled to 40x30" in str(w.message) and name in str(w.message) for w in caught)
    got = np.asarray(image).astype(int)
    assert got[:, :18].max() < 20 and got[:, 22:].min() > 235  # the content is scaled, not cropped


# --- paths leaving the image root ---------------------------------------------------------------------
def test_paths_leaving_the_root_are_refused_unless_allowed(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "secret"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "x.png").write_bytes(b"x")
    (root / "sub" / "in.png").write_bytes(b"x")
    os.symlink(outside / "x.png", root / "link.png")
    os.symlink(root / "sub" / "in.png", root / "inner_link.png")
    assert image_path(root, "sub/in.png") == root / "sub" / "in.png"
    assert image_path(root, "sub/../sub/in.png") == root / "sub/../sub/in.png"  # '..' that stays inside
    assert image_path(root, "inner_link.png") == root / "inner_link.png"  # a symlink that stays inside
    for rel, how in [("../secret/x.png", "'..'"), (str(outside / "x.png"), "absolute"), ("link.png", "symlink")]:
        with pytest.raises(ImageDecodeError, match=rf"{how}.*data\.allow_images_outside_root=true"):
            image_path(root, rel)
        assert image_path(root, rel, allow_outside=True).is_file()
