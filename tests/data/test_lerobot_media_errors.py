"""The errors a wrong camera layout of a LeRobot dataset gives (data/lerobot_read.py, data/lerobot_cameras.py,
data/lerobot_write.py), each naming the file and the feature: v2.1 folders with a missing video or a path leaving
the root, missing or short videos, mismatched timestamps, missing episode-table columns, image columns missing,
of the wrong size or type or undecodable, a key that is not a camera, and bad camera input to the writer.

The datasets come from the fixtures and builders of tests/data/test_lerobot_media.py.
Run: python -m pytest -q tests/data/test_lerobot_media_errors.py
"""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from data.lerobot import LeRobotDataError, read_dataset, write_dataset
from tests.data.test_lerobot_media import (  # noqa: F401  (image_ds, video_ds: fixtures used by name)
    CAM, CAM2, DATA, FPS, H, LENGTHS, W, all_frames, copy_of, edit_table, encode_file, image_ds, make_episodes, set_column,
    video_ds, write_v21_media)


def test_v21_errors(tmp_path):
    eps = make_episodes()
    root = write_v21_media(tmp_path / "v21", eps)
    missing = root / f"videos/chunk-000/{CAM}/episode_000002.mp4"
    missing.rename(missing.with_suffix(".bak"))
    with pytest.raises(LeRobotDataError, match=rf"episode_000002.mp4: video file not found \(feature '{CAM}', episode 2\)"):
        read_dataset(root)
    missing.with_suffix(".bak").rename(missing)
    encode_file(missing, eps[2].images[CAM][:-2])  # two frames short
    with pytest.raises(LeRobotDataError, match=rf"episode_000002.mp4: feature '{CAM}', episode 2, frame_index 5: no video frame"):
        read_dataset(root).camera_frames(CAM)
    encode_file(missing, eps[2].images[CAM], start_pts=3)  # frames at other times than the timestamps
    with pytest.raises(LeRobotDataError, match=rf"episode_000002.mp4: feature '{CAM}', episode 2, frame_index 0: .*0.300000 s"):
        read_dataset(root).camera_frames(CAM)
    rel = root / f"images/{CAM2}/episode_000001/frame_000004.png"
    rel.write_bytes(b"not a png")
    with pytest.raises(LeRobotDataError, match=rf"episode_000001.parquet: feature '{CAM2}', episode 1, frame_index 4"):
        read_dataset(root).camera_frames(CAM2)


# --- wrong layouts (v3.0) ---------------------------------------------------------------------------------------

def test_missing_video_file(video_ds, tmp_path):
    root = copy_of(video_ds[1], tmp_path)
    (root / f"videos/{CAM2}/chunk-000/file-000.mp4").unlink()
    with pytest.raises(LeRobotDataError, match=rf"{CAM2}/chunk-000/file-000.mp4: video file not found \(feature '{CAM2}', episode 0\)"):
        read_dataset(root)


def test_video_with_fewer_frames(video_ds, tmp_path):
    eps, good = video_ds
    root = copy_of(good, tmp_path)
    encode_file(root / f"videos/{CAM}/chunk-000/file-000.mp4", all_frames(eps, CAM)[:-3])
    d = read_dataset(root)
    np.testing.assert_array_equal(d.camera_frames(CAM2).shape[0], sum(LENGTHS))  # the other camera still reads
    with pytest.raises(LeRobotDataError, match=rf"{CAM}/chunk-000/file-000.mp4: feature '{CAM}', episode 2, "
                                               rf"frame_index 4: no video frame within 0.0001 s of timestamp 1.900000 s"):
        d.camera_frames(CAM)


def test_video_timestamps_that_do_not_match(video_ds, tmp_path):
    root = copy_of(video_ds[1], tmp_path)
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    column = f"videos/{CAM}/from_timestamp"
    edit_table(path, lambda t: set_column(t, column, pa.array(np.array(t.column(column).to_pylist()) + [0, 0.05, 0])))
    with pytest.raises(LeRobotDataError, match=rf"file-000.mp4: feature '{CAM}', episode 1, frame_index 0: no video "
                                               rf"frame within 0.0001 s of timestamp 0.650000 s"):
        read_dataset(root).camera_frames(CAM)


def test_video_columns_missing_from_episodes_table(video_ds, tmp_path):
    root = copy_of(video_ds[1], tmp_path)
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    edit_table(path, lambda t: t.drop_columns([f"videos/{CAM}/file_index"]))
    with pytest.raises(LeRobotDataError, match=rf"meta/episodes: episode 0 lacks .* video feature '{CAM}'"):
        read_dataset(root)


def test_image_column_missing(image_ds, tmp_path):
    root = copy_of(image_ds[1], tmp_path)
    edit_table(root / DATA, lambda t: t.drop_columns([CAM2]))
    with pytest.raises(LeRobotDataError, match=rf"file-000.parquet: missing columns \['{CAM2}'\]"):
        read_dataset(root)


def test_image_shape_differs_from_info(image_ds, tmp_path):
    root = copy_of(image_ds[1], tmp_path)
    info = json.loads((root / "meta/info.json").read_text())
    info["features"][CAM]["shape"] = [H, W + 2, 3]
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(LeRobotDataError, match=rf"file-000.parquet: column '{CAM}' holds 16x24 \(HxW\) images but "
                                               rf"meta/info.json's features\['{CAM}'\] shape says 16x26"):
        read_dataset(root)


def test_image_of_other_size_inside_the_column(image_ds, tmp_path):
    eps, good = image_ds
    root = copy_of(good, tmp_path)
    buf = io.BytesIO()
    Image.fromarray(np.zeros((H, W - 2, 3), np.uint8)).save(buf, format="PNG")

    def shrink_row_8(t):
        cells = t.column(CAM).to_pylist()
        cells[8]["bytes"] = buf.getvalue()
        return set_column(t, CAM, pa.array(cells, type=t.schema.field(CAM).type))

    edit_table(root / DATA, shrink_row_8)
    with pytest.raises(LeRobotDataError, match=rf"file-000.parquet: feature '{CAM}', episode 1, frame_index 2 "
                                               rf"\(row 8 of the file\): the frame is 16x22"):
        read_dataset(root).camera_frames(CAM)


def test_image_column_not_image_structs(image_ds, tmp_path):
    root = copy_of(image_ds[1], tmp_path)
    edit_table(root / DATA, lambda t: set_column(t, CAM, pa.array(np.arange(t.num_rows))))
    with pytest.raises(LeRobotDataError, match=rf"file-000.parquet: column '{CAM}' is int64, but meta/info.json "
                                               "says it is an image feature"):
        read_dataset(root)


def test_undecodable_image_bytes(image_ds, tmp_path):
    root = copy_of(image_ds[1], tmp_path)

    def garble_row_3(t):
        cells = t.column(CAM2).to_pylist()
        cells[3]["bytes"] = b"\x89PNG garbage"
        return set_column(t, CAM2, pa.array(cells, type=t.schema.field(CAM2).type))

    edit_table(root / DATA, garble_row_3)
    with pytest.raises(LeRobotDataError, match=rf"file-000.parquet: feature '{CAM2}', episode 0, frame_index 3 "
                                               rf"\(row 3 of the file\): undecodable image bytes"):
        read_dataset(root).camera_frames(CAM2)


def test_not_a_camera_feature(image_ds):
    d = read_dataset(image_ds[1])
    with pytest.raises(LeRobotDataError, match=rf"info.json: 'action' is not a camera feature; the camera features "
                                               rf"are \['{CAM}', '{CAM2}'\]"):
        d.camera_frames("action")
    with pytest.raises(LeRobotDataError, match="no feature 'nope'"):
        d.feature("nope")


def test_bad_camera_writes():
    good = make_episodes(lengths=(3, 4))
    frames = good[1].images[CAM]

    def with_images(images, i=1):
        eps = make_episodes(lengths=(3, 4))
        eps[i].images = images
        return eps

    cases = [
        (with_images({CAM: frames}), r"episode 1: cameras \['observation.images.corner2'\] differ"),
        (with_images({CAM: frames.astype(np.float32), CAM2: good[1].images[CAM2]}), rf"episode 1: images\['{CAM}'\] is float32"),
        (with_images({CAM: frames[:3], CAM2: good[1].images[CAM2]}), rf"episode 1: images\['{CAM}'\] has 3 frames but .* 4"),
        (with_images({CAM: frames[:, :8], CAM2: good[1].images[CAM2]}), rf"episode 1: images\['{CAM}'\] frames are 8x24"),
        (with_images({CAM: frames[..., :1], CAM2: good[1].images[CAM2]}), rf"images\['{CAM}'\] is uint8 \(4, 16, 24, 1\)"),
        (with_images({"action": good[0].images[CAM]}, i=0), "camera key 'action'"),
    ]
    for eps, msg in cases:
        with pytest.raises(ValueError, match=msg):
            write_dataset("/nonexistent-never-written", eps, fps=FPS)
    odd = make_episodes(lengths=(3,), cameras=((CAM, 15, 24),))
    with pytest.raises(ValueError, match="odd height or width"):
        write_dataset("/nonexistent-never-written", odd, fps=FPS, image_format="video")
    with pytest.raises(ValueError, match="image_format"):
        write_dataset("/nonexistent-never-written", good, fps=FPS, image_format="gif")
