"""Tests for data/lerobot.py: v3.0 write -> read round trip against numpy, the
on-disk v3.0 layout, a hand-written v2.1 dataset, clear errors, crash-safe writing.

Run: python -m pytest -q tests/data/test_lerobot.py
"""
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data import lerobot as lr
from data import lerobot_write
from data.lerobot import Episode, LeRobotData, compute_stats, read_dataset, write_dataset
from data.errors import DataError

FPS = 10
QS = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}


def make_episodes(n=4, S=5, A=3, seed=0, success=True, reward=True):
    rng = np.random.default_rng(seed)
    eps = []
    for i in range(n):
        T = 7 + 3 * i
        eps.append(Episode(
            observation_state=rng.normal(size=(T, S)).astype(np.float32),
            action=rng.uniform(-1, 1, size=(T, A)).astype(np.float32),
            task=["reach-v3", "push-v3"][i % 2],
            success=(np.arange(T) >= T - 2) if success else None,
            reward=rng.uniform(0, 10, size=T).astype(np.float32) if reward else None,
            extra={"seed": 100 + i, "config_index": i * 7, "policy": "scripted"},
        ))
    return eps


def numpy_stats(x):
    """Independent reference: numpy over all frames, float64."""
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    out = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0), "count": np.array([len(x)])}
    out.update({k: np.quantile(x, q, axis=0) for k, q in QS.items()})
    return out


def assert_stats(stats, frames, keys, exact=True):
    for key in keys:
        ref = numpy_stats(frames[key])
        assert set(ref) <= set(stats[key]), (key, set(stats[key]))
        for s, v in ref.items():
            if exact or s in ("min", "max", "count") or s.startswith("q"):
                np.testing.assert_array_equal(stats[key][s], v, err_msg=f"{key}/{s}")
            else:
                np.testing.assert_allclose(stats[key][s], v, rtol=1e-10, atol=1e-12, err_msg=f"{key}/{s}")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    eps = make_episodes()
    root = write_dataset(tmp_path_factory.mktemp("v3") / "ds", eps, fps=FPS,
                         state_names=[f"s{i}" for i in range(5)])
    return eps, root


def test_round_trip(written):
    eps, root = written
    d = read_dataset(root)
    assert isinstance(d, LeRobotData)
    f = d.frames()
    lengths = [len(e.action) for e in eps]
    N = sum(lengths)
    np.testing.assert_array_equal(f["observation.state"], np.concatenate([e.observation_state for e in eps]))
    np.testing.assert_array_equal(f["action"], np.concatenate([e.action for e in eps]))
    np.testing.assert_array_equal(f["next.reward"], np.concatenate([e.reward for e in eps]))
    np.testing.assert_array_equal(f["next.success"], np.concatenate([e.success for e in eps]))
    assert f["observation.state"].dtype == np.float32 and f["next.success"].dtype == bool
    np.testing.assert_array_equal(f["index"], np.arange(N))
    np.testing.assert_array_equal(f["episode_index"], np.repeat(np.arange(len(eps)), lengths))
    np.testing.assert_array_equal(f["frame_index"], np.concatenate([np.arange(T) for T in lengths]))
    np.testing.assert_allclose(f["timestamp"], f["frame_index"] / FPS, rtol=1e-6)
    assert d.tasks == ["reach-v3", "push-v3"]
    np.testing.assert_array_equal(f["task_index"], np.repeat([0, 1, 0, 1], lengths))

    assert [e["episode_index"] for e in d.episodes] == [0, 1, 2, 3]
    for i, (e, src) in enumerate(zip(d.episodes, eps)):
        assert e["length"] == lengths[i] and e["tasks"] == [src.task]
        assert {k: e[k] for k in src.extra} == src.extra
        one = d.episode(i)
        np.testing.assert_array_equal(one["action"], src.action)
        np.testing.assert_array_equal(one["observation.state"], src.observation_state)
        assert (one["episode_index"] == i).all()
    with pytest.raises(IndexError):
        d.episode(len(eps))
    assert not f["action"].flags.writeable  # frames are shared read-only arrays

    assert_stats(d.stats, f, ["observation.state", "action", "next.reward", "next.success", "timestamp",
                              "frame_index", "episode_index", "index", "task_index"])
    assert d.stats["action"]["q01"].shape == (3,) and d.stats["timestamp"]["min"].shape == (1,)
    assert d.info["features"]["observation.state"]["names"] == [f"s{i}" for i in range(5)]


def test_v3_layout_on_disk(written):
    eps, root = written
    info = json.loads((root / "meta/info.json").read_text())
    assert set(info) >= {"codebase_version", "robot_type", "total_episodes", "total_frames", "total_tasks",
                         "chunks_size", "data_files_size_in_mb", "video_files_size_in_mb", "fps", "splits",
                         "data_path", "video_path", "features"}
    N = sum(len(e.action) for e in eps)
    assert info["codebase_version"] == "v3.0" and info["robot_type"] == "sawyer"
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"], info["fps"]) == (4, N, 2, FPS)
    assert info["splits"] == {"train": "0:4"} and info["video_path"] is None
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["features"]["observation.state"]["shape"] == [5] and info["features"]["action"]["dtype"] == "float32"
    assert {"timestamp", "frame_index", "episode_index", "index", "task_index", "next.success"} <= set(info["features"])

    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == ["data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet",
                     "meta/info.json", "meta/stats.json", "meta/tasks.parquet"]
    data = pq.read_table(root / "data/chunk-000/file-000.parquet")
    assert data.schema.field("observation.state").type == pa.list_(pa.float32(), 5)  # fixed-size list
    assert data.schema.field("index").type == pa.int64() and data.schema.field("timestamp").type == pa.float32()
    assert data.num_rows == N
    ep = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert ep[1]["dataset_from_index"] == 7 and ep[1]["dataset_to_index"] == 17 and ep[1]["tasks"] == ["push-v3"]
    assert ep[1]["data/chunk_index"] == 0 and ep[1]["meta/episodes/file_index"] == 0 and ep[1]["seed"] == 101
    np.testing.assert_allclose(ep[1]["stats/action/mean"], eps[1].action.astype(np.float64).mean(0))
    tasks = pq.read_table(root / "meta/tasks.parquet").to_pandas()  # LeRobot: task string is the index
    assert tasks.loc["push-v3", "task_index"] == 1
    stats = json.loads((root / "meta/stats.json").read_text())
    assert set(stats["action"]) >= {"min", "max", "mean", "std", "count", "q01", "q99"}


def test_stored_stats_are_kept_and_missing_quantiles_filled(tmp_path):
    root = write_dataset(tmp_path / "ds", make_episodes(n=2), fps=FPS)
    stats = json.loads((root / "meta/stats.json").read_text())
    stats["action"]["q01"] = [-7.0, -7.0, -7.0]  # as stored by another writer (e.g. LeRobot's histogram quantiles)
    for q in ("q10", "q50", "q90", "q99"):
        del stats["action"][q]  # a v3.0 stats.json from before LeRobot stored quantiles
    (root / "meta/stats.json").write_text(json.dumps(stats))
    d = read_dataset(root)
    assert d.stats["action"]["q01"].tolist() == [-7.0] * 3
    np.testing.assert_array_equal(d.stats["action"]["q99"], np.quantile(d.frames()["action"].astype(np.float64), 0.99, 0))


def test_multiple_data_files_and_chunks(tmp_path):
    eps = make_episodes(n=5, success=False, reward=False)
    root = write_dataset(tmp_path / "ds", eps, fps=FPS, chunks_size=2, data_files_size_in_mb=1e-4)  # ~105 bytes
    got = sorted(str(p.relative_to(root)) for p in (root / "data").rglob("*.parquet"))
    assert got == ["data/chunk-000/file-000.parquet", "data/chunk-000/file-001.parquet",
                   "data/chunk-001/file-000.parquet", "data/chunk-001/file-001.parquet",
                   "data/chunk-002/file-000.parquet"]
    d = read_dataset(root)
    assert "next.success" not in d.frames() and "next.reward" not in d.info["features"]
    assert [(e["data/chunk_index"], e["data/file_index"]) for e in d.episodes] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
    for i, e in enumerate(eps):
        np.testing.assert_array_equal(d.episode(i)["action"], e.action)
    assert_stats(d.stats, d.frames(), ["action", "observation.state"])


def write_v21(root: Path, eps, fps=FPS):
    """A v2.1 dataset written by hand following LeRobot's v2.1 layout."""
    tasks = list(dict.fromkeys(e.task for e in eps))
    (root / "meta").mkdir(parents=True)
    start, ep_lines, stat_lines = 0, [], []
    for i, e in enumerate(eps):
        T = len(e.action)
        cols = {
            "observation.state": pa.array(list(e.observation_state), type=pa.list_(pa.float32())),
            "action": pa.array(list(e.action), type=pa.list_(pa.float32())),
            "timestamp": pa.array(np.arange(T, dtype=np.float32) / fps),
            "frame_index": pa.array(np.arange(T)),
            "episode_index": pa.array(np.full(T, i)),
            "index": pa.array(np.arange(start, start + T)),
            "task_index": pa.array(np.full(T, tasks.index(e.task))),
        }
        path = root / f"data/chunk-{i // 2:03d}/episode_{i:06d}.parquet"  # chunks_size 2 below
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(cols), path)
        ep_lines.append({"episode_index": i, "tasks": [e.task], "length": T})
        arrays = {"observation.state": e.observation_state, "action": e.action,
                  "timestamp": np.arange(T, dtype=np.float32) / fps, "index": np.arange(start, start + T)}
        stat_lines.append({"episode_index": i, "stats": {
            k: {"min": np.min(v, 0).reshape(-1).tolist(), "max": np.max(v, 0).reshape(-1).tolist(),
                "mean": np.mean(v, 0, dtype=np.float64).reshape(-1).tolist(),
                "std": np.std(v, 0, dtype=np.float64).reshape(-1).tolist(), "count": [T]}
            for k, v in arrays.items()}})
        start += T
    feats = {"observation.state": {"dtype": "float32", "shape": [5], "names": None},
             "action": {"dtype": "float32", "shape": [3], "names": None},
             **{k: {"dtype": "int64", "shape": [1], "names": None}
                for k in ("frame_index", "episode_index", "index", "task_index")},
             "timestamp": {"dtype": "float32", "shape": [1], "names": None}}
    info = {"codebase_version": "v2.1", "robot_type": "sawyer", "total_episodes": len(eps), "total_frames": start,
            "total_tasks": len(tasks), "total_videos": 0, "total_chunks": (len(eps) + 1) // 2, "chunks_size": 2,
            "fps": fps, "splits": {"train": f"0:{len(eps)}"},
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "video_path": None, "features": feats}
    return write_v21_meta(root, info, ep_lines, tasks, stat_lines)


def write_v21_meta(root: Path, info: dict, ep_lines: list, tasks: list, stat_lines: list) -> Path:
    """A v2.1 folder's meta/: info.json, episodes.jsonl, tasks.jsonl, episodes_stats.jsonl (LeRobot's layout)."""
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))
    jl = lambda rows: "".join(json.dumps(r) + "\n" for r in rows)  # noqa: E731
    (root / "meta/episodes.jsonl").write_text(jl(ep_lines))
    (root / "meta/tasks.jsonl").write_text(jl({"task_index": i, "task": t} for i, t in enumerate(tasks)))
    (root / "meta/episodes_stats.jsonl").write_text(jl(stat_lines))
    return root


def test_v21_reads_to_same_frames_and_stats(tmp_path):
    eps = make_episodes(n=3, success=False, reward=False)
    v21 = read_dataset(write_v21(tmp_path / "v21", eps))
    v3 = read_dataset(write_dataset(tmp_path / "v3", eps, fps=FPS))
    assert v21.info["codebase_version"] == "v2.1" and v21.tasks == v3.tasks
    f21, f3 = v21.frames(), v3.frames()
    assert set(f21) == set(f3)
    for k in f3:
        np.testing.assert_array_equal(f21[k], f3[k], err_msg=k)
        assert f21[k].dtype == f3[k].dtype, k
    assert [(e["episode_index"], e["length"], e["tasks"]) for e in v21.episodes] == \
           [(e["episode_index"], e["length"], e["tasks"]) for e in v3.episodes]
    np.testing.assert_array_equal(v21.episode(2)["action"], eps[2].action)
    # min/max/quantiles exact; mean/std pooled from per-episode stats (float rounding only)
    assert_stats(v21.stats, f21, ["observation.state", "action", "timestamp", "index"], exact=False)
    assert_stats(v21.stats, f21, ["frame_index", "task_index"])  # not in episodes_stats: computed from frames


def test_compute_stats_matches_numpy():
    rng = np.random.default_rng(1)
    arrays = {"a": rng.normal(size=(50, 4)).astype(np.float32), "b": np.arange(9), "ok": rng.random(9) > 0.5,
              "name": np.array(["x"] * 9, dtype=object)}
    st = compute_stats(arrays)
    assert "name" not in st
    for k in ("a", "b", "ok"):
        for s, v in numpy_stats(arrays[k]).items():
            np.testing.assert_array_equal(st[k][s], v, err_msg=f"{k}/{s}")
    assert st["b"]["mean"].tolist() == [4.0] and st["b"]["q50"].tolist() == [4.0]


def test_overwrite_replaces_dataset(tmp_path):
    write_dataset(tmp_path / "ds", make_episodes(n=4), fps=FPS)
    write_dataset(tmp_path / "ds", make_episodes(n=2, seed=5), fps=FPS)
    assert read_dataset(tmp_path / "ds").info["total_episodes"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_crash_while_writing_leaves_nothing(tmp_path, monkeypatch):
    real, calls = lerobot_write._write_table, []

    def flaky(table, path):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        real(table, path)

    monkeypatch.setattr(lerobot_write, "_write_table", flaky)
    with pytest.raises(OSError, match="disk full"):
        write_dataset(tmp_path / "ds", make_episodes(), fps=FPS)
    assert len(calls) == 2 and list(tmp_path.iterdir()) == []  # no dataset, no temporary folder


def test_bad_writes():
    good = make_episodes(n=2)
    cases = [
        ([], "non-empty"),
        ([Episode(np.zeros((3, 2)), np.zeros((4, 1)), "t")], "same number of frames"),
        ([good[0], Episode(np.zeros((3, 9)), np.zeros((3, 3)), "t")], "differ"),
        ([good[0], Episode(good[1].observation_state, good[1].action, "t")], "some episodes but not others"),
        ([Episode(np.full((3, 2), np.nan), np.zeros((3, 1)), "t")], "NaN"),
        ([Episode(np.zeros((3, 2)), np.zeros((3, 1)), "t", extra={"length": 3})], "reserved"),
        ([Episode(np.zeros((3, 2)), np.zeros((3, 1)), "")], "task"),
    ]
    for eps, msg in cases:
        with pytest.raises(ValueError, match=msg):
            write_dataset("/nonexistent-never-written", eps, fps=FPS)


def test_bad_inputs_give_clear_errors(tmp_path, written):
    _, good = written
    with pytest.raises(DataError, match="not a LeRobot dataset"):
        read_dataset(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(lr.LeRobotDataError, match="meta/info.json does not exist"):
        read_dataset(tmp_path / "plain")

    def copy_with(name, edit):
        import shutil
        root = tmp_path / name
        shutil.copytree(good, root)
        edit(root)
        return root

    def set_version(root, v):
        info = json.loads((root / "meta/info.json").read_text())
        info["codebase_version"] = v
        (root / "meta/info.json").write_text(json.dumps(info))

    root = copy_with("old", lambda r: set_version(r, "v2.0"))
    with pytest.raises(lr.LeRobotDataError, match=r"info.json: unsupported codebase_version 'v2.0'"):
        read_dataset(root)
    root = copy_with("badjson", lambda r: (r / "meta/info.json").write_text("{oops"))
    with pytest.raises(lr.LeRobotDataError, match="info.json: not valid JSON"):
        read_dataset(root)

    data = "data/chunk-000/file-000.parquet"

    def drop_action(r):
        t = pq.read_table(r / data)
        pq.write_table(t.drop_columns(["action"]), r / data)

    root = copy_with("nocol", drop_action)
    with pytest.raises(lr.LeRobotDataError, match=r"file-000.parquet: missing columns \['action'\]"):
        read_dataset(root)
    root = copy_with("nofile", lambda r: (r / data).unlink())
    with pytest.raises(lr.LeRobotDataError, match="file-000.parquet: file not found"):
        read_dataset(root)
    root = copy_with("notasks", lambda r: (r / "meta/tasks.parquet").write_bytes(b"not parquet"))
    with pytest.raises(lr.LeRobotDataError, match="tasks.parquet: not a readable parquet"):
        read_dataset(root)

    def shorten(r):
        t = pq.read_table(r / data)
        pq.write_table(t.slice(0, t.num_rows - 1), r / data)

    root = copy_with("short", shorten)
    with pytest.raises(lr.LeRobotDataError, match="episode metadata lists"):
        read_dataset(root)

    eps = make_episodes(n=2, success=False, reward=False)
    v21 = write_v21(tmp_path / "v21", eps)
    (v21 / "meta/episodes_stats.jsonl").unlink()
    with pytest.raises(lr.LeRobotDataError, match="episodes_stats.jsonl: file not found"):
        read_dataset(v21)
