"""The LeRobot reader refuses what a policy must not train on: non-finite values in any numeric column, and frames
out of order within an episode (frame_index / timestamp), naming the file, the column, the episode and the frame."""

import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data.lerobot import read_dataset, write_dataset
from data.lerobot_format import LeRobotDataError
from tests.data.test_lerobot import FPS, make_episodes, write_v21

DATA = "data/chunk-000/file-000.parquet"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = write_dataset(tmp_path_factory.mktemp("v3") / "ds", make_episodes(n=3), fps=FPS)
    read_dataset(root)  # the unedited dataset reads
    return root


def edited(good, tmp_path, column, edit, path=DATA):
    """A copy of `good` with `edit(values)` applied to `column` of one data file (values: a numpy copy)."""
    root = tmp_path / "edited"
    shutil.copytree(good, root)
    table = pq.read_table(root / path)
    col = table.column(column)
    nested = pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type)
    values = np.array(col.to_pylist(), dtype=(col.type.value_type if nested else col.type).to_pandas_dtype())
    edit(values)
    array = pa.array(list(values) if values.ndim == 2 else values, type=col.type)
    pq.write_table(table.set_column(table.column_names.index(column), column, array), root / path)
    return root


def row_of(episode: int, frame: int) -> int:
    return sum(7 + 3 * i for i in range(episode)) + frame  # make_episodes: episode i has 7 + 3i frames


@pytest.mark.parametrize("column, value", [("action", np.nan), ("observation.state", np.inf),
                                           ("observation.state", -np.inf), ("next.reward", np.nan),
                                           ("timestamp", np.nan)])
def test_non_finite_values_are_refused_naming_file_column_episode_and_frame(good, tmp_path, column, value):
    def put(values):
        values[row_of(1, 4)] = value

    root = edited(good, tmp_path, column, put)
    with pytest.raises(LeRobotDataError, match=rf"file-000\.parquet: column '{column}' holds a non-finite value in "
                                                r"episode 1, frame_index 4"):
        read_dataset(root)


@pytest.mark.parametrize("column", ["frame_index", "timestamp"])
def test_frames_out_of_order_within_an_episode_are_refused(good, tmp_path, column):
    def swap(values):
        a, b = row_of(2, 3), row_of(2, 4)
        values[[a, b]] = values[[b, a]]

    with pytest.raises(LeRobotDataError, match=rf"file-000\.parquet: frames out of order in episode 2: {column} goes "
                                                r"from .* at row"):
        read_dataset(edited(good, tmp_path, column, swap))


def test_a_repeated_timestamp_is_out_of_order(good, tmp_path):
    def repeat(values):
        values[row_of(0, 5)] = values[row_of(0, 4)]

    with pytest.raises(LeRobotDataError, match="frames out of order in episode 0: timestamp"):
        read_dataset(edited(good, tmp_path, "timestamp", repeat))


def test_v21_episode_file_with_nan_is_named(tmp_path):
    root = write_v21(tmp_path / "v21", make_episodes(n=2, success=False, reward=False))
    path = root / "data/chunk-000/episode_000001.parquet"
    table = pq.read_table(path)
    actions = np.array(table.column("action").to_pylist(), dtype=np.float32)
    actions[2, 1] = np.nan
    pq.write_table(table.set_column(table.column_names.index("action"), "action",
                                    pa.array(list(actions), type=table.column("action").type)), path)
    with pytest.raises(LeRobotDataError, match=r"episode_000001\.parquet: column 'action' holds a non-finite value in "
                                                r"episode 1, frame_index 2 \(row 2 of the file\)"):
        read_dataset(root)


def test_stored_statistics_that_are_not_finite_are_refused(good, tmp_path):
    import json

    root = tmp_path / "stats"
    shutil.copytree(good, root)
    stats = json.loads((root / "meta/stats.json").read_text())
    stats["action"]["mean"][1] = float("nan")
    (root / "meta/stats.json").write_text(json.dumps(stats))
    with pytest.raises(LeRobotDataError, match=r"stats\.json: the stored 'mean' of 'action' is not finite"):
        read_dataset(root)
    v21 = write_v21(tmp_path / "v21", make_episodes(n=2, success=False, reward=False))
    lines = (v21 / "meta/episodes_stats.jsonl").read_text().splitlines()
    second = json.loads(lines[1])
    second["stats"]["observation.state"]["std"][0] = float("inf")
    (v21 / "meta/episodes_stats.jsonl").write_text(lines[0] + "\n" + json.dumps(second) + "\n")
    with pytest.raises(LeRobotDataError, match=r"episodes_stats\.jsonl: line 2: the stored 'std' of 'observation.state'"):
        read_dataset(v21)
