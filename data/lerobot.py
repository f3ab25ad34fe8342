"""Trajectories in the LeRobotDataset layout: write v3.0, read v3.0 and v2.1.

Plain numpy + pyarrow (pandas only for meta/tasks.parquet, written the way
LeRobot writes it: the task string as the DataFrame index, so
`pd.read_parquet` gives LeRobot's task -> task_index table).

v3.0 layout written by `write_dataset` (as LeRobot's `LeRobotDatasetMetadata`
and the v2.1 -> v3.0 converter write it):

    meta/info.json      codebase_version "v3.0", robot_type, total_episodes,
                        total_frames, total_tasks, chunks_size,
                        data_files_size_in_mb, video_files_size_in_mb, fps,
                        splits {"train": "0:N"}, data_path, video_path (null
                        without video features), features {name: {dtype,
                        shape, names, fps}}; a camera feature has shape
                        [H, W, 3], names ["height", "width", "channel"] (image)
                        or ["height", "width", "channels"] plus info
                        {video.height, video.width, video.codec, video.pix_fmt,
                        video.is_depth_map, video.fps, video.channels,
                        has_audio} (video)
    meta/stats.json     {feature: {min, max, mean, std, count, q01, q10, q50,
                        q90, q99}} over all frames (exact: np.quantile over the
                        frames; LeRobot itself averages per-episode histogram
                        quantiles, an approximation of the same numbers); a
                        camera feature's are per channel, pixel values / 255,
                        shape [3, 1, 1], over LeRobot's subsample of each
                        episode's frames (count = frames sampled;
                        data/lerobot_stats.py)
    meta/tasks.parquet  task (index) + task_index
    meta/episodes/chunk-000/file-000.parquet
                        one row per episode: episode_index, tasks (list of
                        str), length, data/chunk_index, data/file_index,
                        dataset_from_index, dataset_to_index,
                        meta/episodes/chunk_index, meta/episodes/file_index,
                        stats/{feature}/{stat} (per-episode stats), per video
                        feature videos/{key}/chunk_index, videos/{key}/file_index,
                        videos/{key}/from_timestamp, videos/{key}/to_timestamp
                        (where the episode lies in its mp4), and the episode's
                        `extra` metadata as plain columns
    data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet
                        one row per frame: observation.state and action as
                        fixed-size lists of float32, [next.reward float32],
                        [next.success bool], timestamp float32 (frame_index /
                        fps), frame_index, episode_index, index, task_index
                        (int64), image features as structs {bytes: PNG,
                        path: "frame-NNNNNN.png"} (HF datasets' Image).
                        Whole episodes per file; a new file starts when a file
                        would pass data_files_size_in_mb.
    videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4
                        video features (write_dataset(image_format="video")):
                        episodes one after another, frame t of an episode at
                        from_timestamp + timestamp[t]; libsvtav1 (AV1) yuv420p,
                        g=2, crf=30 as LeRobot encodes (data/lerobot_video.py);
                        a new file once one holds video_files_size_in_mb.

v2.1 (read only): meta/info.json (data_path
"data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet", chunks of
chunks_size episodes; video_path
"videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
one mp4 per episode, frame t at timestamp[t]; image structs hold the bytes or a
path relative to the dataset root, e.g. images/...png), meta/episodes.jsonl, meta/tasks.jsonl and
meta/episodes_stats.jsonl, whose per-episode stats are aggregated like
LeRobot's `aggregate_stats` (min of mins, max of maxes, count-weighted mean,
pooled std); quantiles, absent in v2.1, are computed from the frames. A v3.0
stats.json without quantiles (written before LeRobot added them) gets them the
same way.

Camera frames: `Episode.images` ({feature: (T, H, W, 3) uint8}) to write;
`LeRobotData.camera_keys` and `LeRobotData.camera_frames(key, transform=None)`
(every frame in dataset order, decoded only then) to read. A video frame is
matched to its timestamp within 1e-4 s (LeRobot's tolerance_s), else refused.

The output directory is written to a temporary sibling and renamed into place
(replacing an existing dataset there), so a crash never leaves a half dataset.
Bad input raises `LeRobotDataError` naming the file and what is wrong.

This module is the public API; the layout's constants live in data/lerobot_format.py,
the writer in data/lerobot_write.py, the reader in data/lerobot_read.py (its camera
checks and decoders in data/lerobot_cameras.py), mp4 encoding and decoding in
data/lerobot_video.py.
"""

from data.lerobot_format import CODEBASE_VERSION, SUPPORTED_VERSIONS, Episode, LeRobotDataError
from data.lerobot_read import LeRobotData, read_dataset
from data.lerobot_stats import aggregate_stats, compute_stats
from data.lerobot_write import write_dataset

__all__ = ["CODEBASE_VERSION", "SUPPORTED_VERSIONS", "Episode", "LeRobotData", "LeRobotDataError", "aggregate_stats",
           "compute_stats", "read_dataset", "write_dataset"]
