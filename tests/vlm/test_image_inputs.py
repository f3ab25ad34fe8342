"""Images of a LLaVA dataset as training meets them: paths leaving the image root and images over the pixel budget
refused at validation (or skipped and counted); an image that passes validation but cannot be decoded stops the
run naming the record and the file, or under data.skip_bad=true is skipped and counted in results.json."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest
from PIL import Image

from core.run import train
from data.errors import DataError
from data.image_decode import ImagePolicy
from data.llava import load_llava
from tests.conftest import BASE, compose_cfg
from vlm.dataset import Collator, Sample, VLMDataset

QUESTION = [{"from": "human", "value": "<image>\nColour?"}, {"from": "gpt", "value": "red"}]


def record(rid: str, image: str) -> dict:
    return {"id": rid, "image": image, "conversations": QUESTION}


def truncated_jpeg(path) -> None:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, "JPEG")
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])


@pytest.fixture
def root(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    Image.new("RGB", (32, 32), (255, 0, 0)).save(images / "red.png")
    Image.new("RGB", (64, 64), (255, 0, 0)).save(images / "big.png")
    truncated_jpeg(images / "cut.jpg")
    Image.new("RGB", (8, 8)).save(tmp_path / "outside.png")
    os.symlink(tmp_path / "outside.png", images / "link.png")
    return images


def write(root, records):
    path = root.parent / "d.json"
    path.write_text(json.dumps(records))
    return path


OUTSIDE = {"dotdot": "../outside.png", "absolute": "ABS", "symlink": "link.png"}


@pytest.mark.parametrize("how", list(OUTSIDE))
def test_image_paths_leaving_the_root_are_refused_naming_file_record_and_key(root, how):
    rel = str(root.parent / "outside.png") if OUTSIDE[how] == "ABS" else OUTSIDE[how]
    path = write(root, [record("ok", "red.png"), record("escape", rel)])
    with pytest.raises(DataError) as err:
        load_llava(path, root)
    message = str(err.value)
    assert str(path) in message and "escape" in message and "allow_images_outside_root=true" in message
    records, skipped = load_llava(path, root, skip_bad=True)
    assert [r["id"] for r in records] == ["ok"] and dict(skipped) == {"image outside the image root": 1}
    records, skipped = load_llava(path, root, images=ImagePolicy(allow_outside_root=True))
    assert [r["id"] for r in records] == ["ok", "escape"] and not skipped


def test_pixel_budget_at_validation_refuses_or_lets_downscale_through(root):
    path = write(root, [record("small", "red.png"), record("big", "big.png")])
    budget = ImagePolicy(max_pixels=32 * 32)
    with pytest.raises(DataError, match=r"record big: image file .*big\.png is 64x64 pixels, over data\.max_image_pixels=1024"):
        load_llava(path, root, images=budget)
    _, skipped = load_llava(path, root, skip_bad=True, images=budget)
    assert dict(skipped) == {"image over the pixel budget": 1}
    records, _ = load_llava(path, root, images=ImagePolicy(max_pixels=32 * 32, oversize="downscale"))
    assert len(records) == 2
    dataset = VLMDataset([Sample("big", [1], [1], [root / "big.png"], [1])], lambda im: im.size,
                         ImagePolicy(max_pixels=32 * 32, oversize="downscale"))
    with pytest.warns(UserWarning, match="downscaled to 32x32"):
        assert dataset[0]["pixel_values"] == (32, 32)


def test_policy_from_config_overrides():
    assert ImagePolicy.from_config(compose_cfg("data=llava").data) == ImagePolicy()
    cfg = compose_cfg("data=llava", "+data.max_image_pixels=100", "+data.oversize_images=downscale",
                      "+data.allow_images_outside_root=true")
    assert ImagePolicy.from_config(cfg.data) == ImagePolicy(100, "downscale", True)
    with pytest.raises(ValueError, match="oversize_images='crop'"):
        ImagePolicy.from_config(compose_cfg("data=llava", "+data.oversize_images=crop").data)


def test_undecodable_image_after_validation_fails_or_is_skipped_and_counted(root, capsys):
    path = write(root, [record("good", "red.png"), record("cut", "cut.jpg")])
    records, skipped = load_llava(path, root)  # the truncated JPEG passes validation (verify reads its header only)
    assert len(records) == 2 and not skipped
    samples = [Sample(r["id"], [1, 2], [1, 2], [root / r["image"]], [1]) for r in records]
    with pytest.raises(DataError, match=r"record cut: cannot decode image .*cut\.jpg.*data\.skip_bad=true"):
        VLMDataset(samples, lambda im: im.size)[1]
    dataset = VLMDataset(samples, lambda im: im.size, skip_bad=True)
    row = dataset[1]  # the next sample (wrapping round) takes the broken one's place
    assert row["pixel_values"] == (32, 32) and row["skipped_records"] == 1
    assert "skipping record cut" in capsys.readouterr().err
    assert "skipped_records" not in dataset[0]
    broken = VLMDataset(samples[1:], lambda im: im.size, skip_bad=True)
    with pytest.raises(DataError, match="1 samples in a row from record cut"):
        broken[0]


def test_collator_sums_the_skipped_records():
    row = {"input_ids": [1], "labels": [1], "image_positions": [], "pixel_values": None}
    assert "skipped_records" not in Collator(0)([row, row])
    assert Collator(0)([{**row, "skipped_records": 2}, row, {**row, "skipped_records": 1}])["skipped_records"] == 3


def run_cfg(tmp_path, path, root, *extra):
    return compose_cfg(*BASE, f"run.root={tmp_path / 'runs'}", "data=llava", f"data.json={path}", f"data.image_root={root}",
                       "data.num_workers=0", "stage=single_stage", "stage.phases.finetune.global_batch_size=2",
                       "trainer.max_steps=2", *extra)


def test_training_skips_and_counts_an_undecodable_image_or_stops_naming_it(root, tmp_path):
    path = write(root, [record("g1", "red.png"), record("cut", "cut.jpg"), record("g2", "red.png"), record("g3", "red.png")])
    results = train(run_cfg(tmp_path, path, root, "data.skip_bad=true"))
    assert results["finetune/skipped/undecodable image"] == 1  # the 4 samples of the 2 steps hold it once
    saved = json.loads((tmp_path / "runs" / results["run_dir"].rsplit("/", 1)[-1] / "results.json").read_text())
    assert saved["train"]["finetune/skipped/undecodable image"] == 1
    with pytest.raises(DataError, match=r"record cut: cannot decode image .*cut\.jpg"):
        train(run_cfg(tmp_path, path, root, "data.skip_bad=false", "run.name=strict"))


@pytest.mark.parametrize("strategy", ["resize-naive", "letterbox"])
def test_an_image_handed_to_the_transform_in_another_mode_is_converted_as_decoding_does(strategy):
    from vlm.images import image_transform

    data_config = {"input_size": (3, 8, 8), "interpolation": "bicubic", "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}
    transform = image_transform(data_config, strategy)
    rgba = Image.new("RGBA", (8, 6), (0, 0, 0, 0))  # transparent black: white once composited
    white = Image.new("RGB", (8, 6), (255, 255, 255))
    assert (transform(rgba) == transform(white)).all()
    sixteen = Image.frombytes("I;16", (8, 6), np.full((6, 8), 32896, dtype="<u2").tobytes())  # mid-gray in 16 bits
    assert (transform(sixteen) == transform(Image.new("RGB", (8, 6), (128, 128, 128)))).all()
