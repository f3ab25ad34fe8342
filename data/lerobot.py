"""Trajectories in the LeRobotDataset layout: write v3.0, read v3.0 and v2.1.

Plain numpy + pyarrow (pandas only for meta/tasks.parquet, written the way
LeRobot writes it: the task string as the DataFrame index, so
`pd.read_parquet` gives LeRobot's task -> task_index table).

v3.0 layout written by `write_dataset` (as LeRobot's `LeRobotDatasetMetadata`
and the v2.1 -> v3.0 converter write it; no videos):

    meta/info.json      codebase_version "v3.0", robot_type, total_episodes,
                        total_frames, total_tasks, chunks_size,
                        data_files_size_in_mb, video_files_size_in_mb, fps,
                        splits {"train": "0:N"}, data_path, video_path null,
                        features {name: {dtype, shape, names, fps}}
    meta/stats.json     {feature: {min, max, mean, std, count, q01, q10, q50,
                        q90, q99}} over all frames (exact: np.quantile over the
                        frames; LeRobot itself averages per-episode histogram
                        quantiles, an approximation of the same numbers)
    meta/tasks.parquet  task (index) + task_index
    meta/episodes/chunk-000/file-000.parquet
                        one row per episode: episode_index, tasks (list of
                        str), length, data/chunk_index, data/file_index,
                        dataset_from_index, dataset_to_index,
                        meta/episodes/chunk_index, meta/episodes/file_index,
                        stats/{feature}/{stat} (per-episode stats) and the
                        episode's `extra` metadata as plain columns
    data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet
                        one row per frame: observation.state and action as
                        fixed-size lists of float32, [next.reward float32],
                        [next.success bool], timestamp float32 (frame_index /
                        fps), frame_index, episode_index, index, task_index
                        (int64). Whole episodes per file; a new file starts
                        when a file would pass data_files_size_in_mb.

v2.1 (read only): meta/info.json (data_path
"data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet", chunks of
chunks_size episodes), meta/episodes.jsonl, meta/tasks.jsonl and
meta/episodes_stats.jsonl, whose per-episode stats are aggregated like
LeRobot's `aggregate_stats` (min of mins, max of maxes, count-weighted mean,
pooled std); quantiles, absent in v2.1, are computed from the frames. A v3.0
stats.json without quantiles (written before LeRobot added them) gets them the
same way.

The output directory is written to a temporary sibling and renamed into place
(replacing an existing dataset there), so a crash never leaves a half dataset.
Bad input raises `LeRobotDataError` naming the file and what is wrong.

This module is the public API; the layout's constants live in data/lerobot_format.py,
the writer in data/lerobot_write.py, the reader in data/lerobot_read.py.
"""

from data.lerobot_format import CODEBASE_VERSION, SUPPORTED_VERSIONS, Episode, LeRobotDataError
from data.lerobot_read import LeRobotData, read_dataset
from data.lerobot_stats import aggregate_stats, compute_stats
from data.lerobot_write import write_dataset

__all__ = ["CODEBASE_VERSION", "SUPPORTED_VERSIONS", "Episode", "LeRobotData", "LeRobotDataError", "aggregate_stats",
           "compute_stats", "read_dataset", "write_dataset"]
