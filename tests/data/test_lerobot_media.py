"""Camera features of data/lerobot.py: image (PNG structs in the data files) and video (mp4) features written as
LeRobot v3.0 and read back, hand-written LeRobot v2.1 folders with both, the per-channel pixel stats, `transform`,
(the errors a wrong layout gives: tests/data/test_lerobot_media_errors.py).

Run: python -m pytest -q tests/data/test_lerobot_media.py
"""
import io
import json
import shutil
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from data import lerobot_cameras, lerobot_write
from data.lerobot import Episode, read_dataset, write_dataset
from tests.data.test_lerobot import write_v21_meta

FPS = 10
H, W = 16, 24
CAM, CAM2 = "observation.images.corner2", "observation.images.wrist"
LENGTHS = (6, 9, 7)
DATA = "data/chunk-000/file-000.parquet"
QS = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}


def smooth_frames(T, h, w, seed):
    """Frames a lossy codec keeps close: gradients that move from frame to frame, plus a little noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    frames = np.empty((T, h, w, 3), dtype=np.uint8)
    for t in range(T):
        for c in range(3):
            wave = 127 + 90 * np.sin((x + 2 * t) / (7 + 2 * c) + y / (9 + c) + seed)
            frames[t, :, :, c] = np.clip(wave + rng.normal(0, 2, (h, w)), 0, 255)
    return frames


def make_episodes(lengths=LENGTHS, cameras=((CAM, H, W), (CAM2, 8, 10)), seed=0):
    rng = np.random.default_rng(seed)
    return [Episode(rng.normal(size=(T, 4)).astype(np.float32), rng.uniform(-1, 1, (T, 2)).astype(np.float32),
                    ["pick", "place"][i % 2],
                    images={key: smooth_frames(T, h, w, seed=10 * i + n) for n, (key, h, w) in enumerate(cameras)})
            for i, T in enumerate(lengths)]


def all_frames(eps, key):
    return np.concatenate([e.images[key] for e in eps])


def pixel_reference(frames):
    """numpy over every pixel of (N, H, W, 3) frames, scaled to [0, 1], per channel."""
    x = frames.reshape(-1, 3).astype(np.float64) / 255.0
    out = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0)}
    out.update({k: np.quantile(x, q, axis=0) for k, q in QS.items()})
    return out


def assert_pixel_stats(stats, frames):
    for name, ref in pixel_reference(frames).items():
        assert np.asarray(stats[name]).shape == (3, 1, 1), name
        np.testing.assert_allclose(np.asarray(stats[name]).reshape(3), ref, rtol=0, atol=1e-12, err_msg=name)
        assert ((np.asarray(stats[name]) >= 0) & (np.asarray(stats[name]) <= 1)).all()
    assert np.asarray(stats["count"]).tolist() == [len(frames)]  # < 100 frames per episode: every frame sampled


def decode_file(path):
    """Every frame of an mp4 and its time, decoded here with PyAV (independently of data/lerobot_video.py)."""
    with av.open(str(path)) as c:
        frames = [(float(f.pts * f.time_base), f.to_ndarray(format="rgb24")) for f in c.decode(c.streams.video[0])]
    return np.array([t for t, _ in frames]), np.stack([f for _, f in frames])


def encode_file(path, frames, fps=FPS, codec="mpeg4", start_pts=0):
    """An mp4 written here with PyAV (mpeg4: a different codec than the writer's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as c:
        s = c.add_stream(codec, rate=fps, options={"qscale": "2"} if codec == "mpeg4" else {})
        s.pix_fmt, s.width, s.height, s.time_base = "yuv420p", frames.shape[2], frames.shape[1], Fraction(1, fps)
        for k, rgb in enumerate(frames):
            f = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            f.pts, f.time_base = start_pts + k, Fraction(1, fps)
            c.mux(s.encode(f))
        c.mux(s.encode())


@pytest.fixture(scope="module")
def image_ds(tmp_path_factory):
    eps = make_episodes()
    return eps, write_dataset(tmp_path_factory.mktemp("img") / "ds", eps, fps=FPS, image_format="image")


@pytest.fixture(scope="module")
def video_ds(tmp_path_factory):
    eps = make_episodes()
    return eps, write_dataset(tmp_path_factory.mktemp("vid") / "ds", eps, fps=FPS, image_format="video")


def copy_of(root, tmp_path, name="copy"):
    dst = tmp_path / name
    shutil.copytree(root, dst)
    return dst


def edit_table(path, edit):
    pq.write_table(edit(pq.read_table(path)), path)


def set_column(table, name, array):
    return table.set_column(table.column_names.index(name), name, array)


# --- image features -------------------------------------------------------------------------------------------

def test_image_round_trip_is_exact(image_ds, monkeypatch):
    eps, root = image_ds
    calls = []
    real = lerobot_cameras.decode_image_struct
    monkeypatch.setattr(lerobot_cameras, "decode_image_struct", lambda *a: calls.append(1) or real(*a))
    d = read_dataset(root)
    assert calls == []  # read_dataset keeps the encoded images
    assert d.camera_keys == [CAM, CAM2]
    assert CAM not in d.frames() and "action" in d.frames()
    for key in (CAM, CAM2):
        got = d.camera_frames(key)
        assert got.dtype == np.uint8 and got.shape == (sum(LENGTHS), *eps[0].images[key].shape[1:])
        np.testing.assert_array_equal(got, all_frames(eps, key))
    assert len(calls) == 2 * sum(LENGTHS)
    np.testing.assert_array_equal(d.frames()["action"], np.concatenate([e.action for e in eps]))
    assert d.feature(CAM) == {"dtype": "image", "shape": [H, W, 3], "names": ["height", "width", "channel"], "fps": FPS}


def test_image_layout_on_disk(image_ds):
    eps, root = image_ds
    table = pq.read_table(root / DATA)
    assert table.schema.field(CAM).type == pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    cells = table.column(CAM).to_pylist()
    assert all(c["bytes"][:8] == b"\x89PNG\r\n\x1a\n" for c in cells)
    first = np.asarray(Image.open(io.BytesIO(cells[LENGTHS[0]]["bytes"])))  # episode 1, frame 0, decoded by PIL here
    np.testing.assert_array_equal(first, eps[1].images[CAM][0])
    info = json.loads((root / "meta/info.json").read_text())
    assert info["video_path"] is None and list(info["features"]).index(CAM) < list(info["features"]).index("timestamp")
    assert not (root / "videos").exists()


def test_image_stats_are_per_channel_in_unit_range(image_ds):
    eps, root = image_ds
    stats = json.loads((root / "meta/stats.json").read_text())
    assert_pixel_stats(stats[CAM], all_frames(eps, CAM))
    assert_pixel_stats(read_dataset(root).stats[CAM2], all_frames(eps, CAM2))
    rows = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    for row, e in zip(rows, eps):
        assert_pixel_stats({k.split("/")[-1]: v for k, v in row.items() if k.startswith(f"stats/{CAM}/")}, e.images[CAM])


def test_stats_subsample_long_episodes(tmp_path):
    """LeRobot samples ~T^0.75 frames (at least 100) of a long episode for its image stats."""
    T = 1000
    frames = np.zeros((T, 4, 6, 3), dtype=np.uint8)
    frames[:, :, :, 0] = (np.arange(T) % 256)[:, None, None]
    ep = Episode(np.zeros((T, 1), np.float32), np.zeros((T, 1), np.float32), "t", images={CAM: frames})
    stats = read_dataset(write_dataset(tmp_path / "ds", [ep], fps=FPS)).stats[CAM]
    picked = np.round(np.linspace(0, T - 1, 177)).astype(int)  # int(1000 ** 0.75) = 177 frames
    assert stats["count"].tolist() == [177]
    np.testing.assert_allclose(stats["mean"].reshape(3), pixel_reference(frames[picked])["mean"], atol=1e-12)


def test_transform_is_applied_per_frame(image_ds, video_ds):
    def gray_half(rgb):
        assert rgb.shape == (H, W, 3) and rgb.dtype == np.uint8
        return rgb[::2, ::2].mean(-1).astype(np.float32)

    eps, root = image_ds
    got = read_dataset(root).camera_frames(CAM, transform=gray_half)
    assert got.shape == (sum(LENGTHS), H // 2, W // 2) and got.dtype == np.float32
    np.testing.assert_array_equal(got, np.stack([gray_half(f) for f in all_frames(eps, CAM)]))
    _, vroot = video_ds
    d = read_dataset(vroot)
    np.testing.assert_array_equal(d.camera_frames(CAM, transform=gray_half),
                                  np.stack([gray_half(f) for f in d.camera_frames(CAM)]))
    with pytest.raises(ValueError, match="one fixed shape"):
        read_dataset(root).camera_frames(CAM, transform=lambda rgb: np.zeros(int(rgb[0, 0, 0]) % 3 + 1))


# --- video features -------------------------------------------------------------------------------------------

def test_video_round_trip(video_ds):
    eps, root = video_ds
    d = read_dataset(root)
    assert d.camera_keys == [CAM, CAM2]
    for key in (CAM, CAM2):
        got, ref = d.camera_frames(key), all_frames(eps, key)
        assert got.shape == ref.shape and got.dtype == np.uint8
        err = np.abs(got.astype(np.float64) - ref).mean()
        assert err < 6, (key, err)  # lossy (crf 30) but close
        # each decoded frame is nearest to its own source frame, not to a neighbour (frames are not shifted)
        for i in (0, LENGTHS[0], len(ref) - 1):
            dists = np.abs(got[i].astype(np.float64) - ref.astype(np.float64)).mean(axis=(1, 2, 3))
            assert int(np.argmin(dists)) == i, (key, i)
    assert d.stats[CAM]["mean"].shape == (3, 1, 1)
    assert_pixel_stats(d.stats[CAM], all_frames(eps, CAM))  # from the frames given, before encoding (as LeRobot)


def test_video_layout_episodes_share_one_file(video_ds):
    eps, root = video_ds
    info = json.loads((root / "meta/info.json").read_text())
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    ft = info["features"][CAM]
    assert ft["dtype"] == "video" and ft["shape"] == [H, W, 3] and ft["names"] == ["height", "width", "channels"]
    assert list(ft["info"]) == ["video.height", "video.width", "video.codec", "video.pix_fmt", "video.is_depth_map",
                                "video.fps", "video.channels", "has_audio"]
    assert (ft["info"]["video.height"], ft["info"]["video.width"], ft["info"]["video.pix_fmt"]) == (H, W, "yuv420p")
    assert ft["info"]["video.fps"] == FPS and ft["info"]["has_audio"] is False
    files = sorted(str(p.relative_to(root)) for p in (root / "videos").rglob("*.mp4"))
    assert files == [f"videos/{CAM}/chunk-000/file-000.mp4", f"videos/{CAM2}/chunk-000/file-000.mp4"]
    assert CAM not in pq.read_table(root / DATA).column_names

    mp4 = root / files[0]
    with av.open(str(mp4)) as c:
        assert c.streams.video[0].codec_context.codec.canonical_name == ft["info"]["video.codec"]
    times, decoded = decode_file(mp4)  # all three episodes, one after another
    assert len(times) == sum(LENGTHS)
    np.testing.assert_allclose(times, np.arange(sum(LENGTHS)) / FPS, atol=1e-9)
    rows = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    starts = np.concatenate([[0], np.cumsum(LENGTHS)[:-1]])
    for row, start, T in zip(rows, starts, LENGTHS):
        assert (row[f"videos/{CAM}/chunk_index"], row[f"videos/{CAM}/file_index"]) == (0, 0)
        assert row[f"videos/{CAM}/from_timestamp"] == pytest.approx(start / FPS, abs=1e-12)
        assert row[f"videos/{CAM}/to_timestamp"] == pytest.approx((start + T) / FPS, abs=1e-12)
    # episode 2 starts at its from_timestamp: the reader's first frame of it is the file's frame at that time
    got = read_dataset(root).camera_frames(CAM)
    k = int(np.argmin(np.abs(times - rows[2][f"videos/{CAM}/from_timestamp"])))
    assert k == starts[2]
    np.testing.assert_array_equal(got[starts[2]], decoded[k])
    np.testing.assert_array_equal(got, decoded)


def test_video_files_split_by_size_and_chunks(tmp_path):
    eps = make_episodes(lengths=(40, 40, 40, 40), cameras=((CAM, H, W),))
    root = write_dataset(tmp_path / "ds", eps, fps=FPS, image_format="video", video_files_size_in_mb=1e-9,
                         chunks_size=2)
    d = read_dataset(root)
    locations = [(e[f"videos/{CAM}/chunk_index"], e[f"videos/{CAM}/file_index"]) for e in d.episodes]
    assert len(set(locations)) > 1, locations  # some episode starts a new file once a file holds bytes
    for (c, f) in set(locations):
        assert (root / f"videos/{CAM}/chunk-{c:03d}/file-{f:03d}.mp4").is_file()
        assert f < 2
    starts = [e[f"videos/{CAM}/from_timestamp"] for e in d.episodes]
    assert starts[0] == 0 and all(s == 0 for s, loc, prev in zip(starts[1:], locations[1:], locations) if loc != prev)
    err = np.abs(d.camera_frames(CAM).astype(np.float64) - all_frames(eps, CAM)).mean()
    assert err < 6


def test_crash_while_encoding_leaves_nothing(tmp_path, monkeypatch):
    real, calls = lerobot_write.VideoEncoder.write, []

    def flaky(self, frames):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        real(self, frames)

    monkeypatch.setattr(lerobot_write.VideoEncoder, "write", flaky)
    with pytest.raises(OSError, match="disk full"):
        write_dataset(tmp_path / "ds", make_episodes(), fps=FPS, image_format="video")
    assert list(tmp_path.iterdir()) == []


# --- hand-written LeRobot v2.1 ----------------------------------------------------------------------------------

def write_v21_media(root: Path, eps):
    """A v2.1 dataset laid out as LeRobot v2.1 does: per-episode parquet files with CAM2 as image structs (episode 0:
    embedded PNG bytes; the others: a path relative to the root, images/...png), CAM as per-episode mp4s."""
    (root / "meta").mkdir(parents=True)
    tasks = list(dict.fromkeys(e.task for e in eps))
    start, ep_lines, stat_lines = 0, [], []
    for i, e in enumerate(eps):
        T = len(e.action)
        structs = []
        for t, rgb in enumerate(e.images[CAM2]):
            buf = io.BytesIO()
            Image.fromarray(rgb).save(buf, format="PNG")
            if i == 0:
                structs.append({"bytes": buf.getvalue(), "path": None})
            else:
                rel = f"images/{CAM2}/episode_{i:06d}/frame_{t:06d}.png"
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(buf.getvalue())
                structs.append({"bytes": None, "path": rel})
        cols = {"observation.state": pa.array(list(e.observation_state), type=pa.list_(pa.float32())),
                "action": pa.array(list(e.action), type=pa.list_(pa.float32())),
                CAM2: pa.array(structs, type=pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                "timestamp": pa.array(np.arange(T, dtype=np.float32) / FPS),
                "frame_index": pa.array(np.arange(T)), "episode_index": pa.array(np.full(T, i)),
                "index": pa.array(np.arange(start, start + T)), "task_index": pa.array(np.full(T, tasks.index(e.task)))}
        path = root / f"data/chunk-000/episode_{i:06d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(cols), path)
        encode_file(root / f"videos/chunk-000/{CAM}/episode_{i:06d}.mp4", e.images[CAM])
        ep_lines.append({"episode_index": i, "tasks": [e.task], "length": T})
        stats = {k: {"min": np.min(v, 0).tolist(), "max": np.max(v, 0).tolist(),
                     "mean": np.mean(v, 0, dtype=np.float64).tolist(), "std": np.std(v, 0, dtype=np.float64).tolist(),
                     "count": [T]} for k, v in (("observation.state", e.observation_state), ("action", e.action))}
        for key in (CAM, CAM2):
            x = e.images[key].astype(np.float64) / 255
            stats[key] = {s: getattr(np, s)(x, axis=(0, 1, 2)).reshape(3, 1, 1).tolist()
                          for s in ("min", "max", "mean", "std")} | {"count": [T]}
        stat_lines.append({"episode_index": i, "stats": stats})
        start += T
    video_info = {"video.height": H, "video.width": W, "video.codec": "mpeg4", "video.pix_fmt": "yuv420p",
                  "video.is_depth_map": False, "video.fps": FPS, "video.channels": 3, "has_audio": False}
    feats = {"observation.state": {"dtype": "float32", "shape": [4], "names": None},
             "action": {"dtype": "float32", "shape": [2], "names": None},
             CAM: {"dtype": "video", "shape": [H, W, 3], "names": ["height", "width", "channels"], "info": video_info},
             CAM2: {"dtype": "image", "shape": [8, 10, 3], "names": ["height", "width", "channel"]},
             "timestamp": {"dtype": "float32", "shape": [1], "names": None},
             **{k: {"dtype": "int64", "shape": [1], "names": None}
                for k in ("frame_index", "episode_index", "index", "task_index")}}
    info = {"codebase_version": "v2.1", "robot_type": "sawyer", "total_episodes": len(eps), "total_frames": start,
            "total_tasks": len(tasks), "total_videos": len(eps), "total_chunks": 1, "chunks_size": 1000, "fps": FPS,
            "splits": {"train": f"0:{len(eps)}"},
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
            "features": feats}
    return write_v21_meta(root, info, ep_lines, tasks, stat_lines)


def test_v21_images_and_videos(tmp_path):
    eps = make_episodes()
    root = write_v21_media(tmp_path / "v21", eps)
    d = read_dataset(root)
    assert d.camera_keys == [CAM, CAM2]
    np.testing.assert_array_equal(d.camera_frames(CAM2), all_frames(eps, CAM2))  # bytes and relative paths
    video = d.camera_frames(CAM)
    independent = np.concatenate([decode_file(root / f"videos/chunk-000/{CAM}/episode_{i:06d}.mp4")[1]
                                  for i in range(len(eps))])
    np.testing.assert_array_equal(video, independent)  # each episode's file from its own time 0
    assert np.abs(video.astype(np.float64) - all_frames(eps, CAM)).mean() < 6
    np.testing.assert_array_equal(d.episode(1)["action"], eps[1].action)
    for key in (CAM, CAM2):  # aggregated from episodes_stats.jsonl
        ref = pixel_reference(all_frames(eps, key))
        assert d.stats[key]["mean"].shape == (3, 1, 1)
        np.testing.assert_allclose(d.stats[key]["mean"].reshape(3), ref["mean"], atol=1e-12)
        np.testing.assert_allclose(d.stats[key]["std"].reshape(3), ref["std"], atol=1e-12)
        np.testing.assert_array_equal(d.stats[key]["max"].reshape(3), ref["max"])
