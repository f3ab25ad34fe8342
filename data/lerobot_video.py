"""The mp4 files of a LeRobot dataset's video features, with PyAV: `VideoEncoder` writes frames, `video_info` describes
a written file the way LeRobot's info.json does, `decode_at` decodes the frames shown at given timestamps.

Encoding follows LeRobot's defaults (`encode_video_frames`): codec libsvtav1 (AV1), pix_fmt yuv420p, g=2 (a key frame
every 2 frames, so any frame decodes after at most one other), crf=30; frame k of a file has pts k in time base 1/fps,
so episodes written one after another into one file continue each other's timestamps. When the PyAV build has no
SVT-AV1 encoder the first available of libx264 / libopenh264 / mpeg4 is used (`choose_encoder`); the codec that was
used is what `video_info` reads back from the file (info.json's `video.codec`). Encoders run single-threaded.

Decoding matches every wanted timestamp to the nearest decoded frame (presentation time = pts x time_base) and refuses
one further than `TOLERANCE_S` = 1e-4 s (LeRobot's default `tolerance_s`): a file with fewer frames, or frames at other
times than the data files' `timestamp` column (plus the episode's `from_timestamp` in v3.0), raises
`LeRobotDataError` naming the file and, through the caller's `describe`, the feature, the episode and the frame.
The tolerance is far below half a frame period at any real fps, so at most one decoded frame can match.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from data.lerobot_format import LeRobotDataError

ENCODER_PREFERENCE = ("libsvtav1", "libx264", "libopenh264", "mpeg4")  # LeRobot's default first
PIX_FMT = "yuv420p"
GOP = 2
CRF = 30
TOLERANCE_S = 1e-4


def choose_encoder() -> str:
    """The first encoder of ENCODER_PREFERENCE that this PyAV build has."""
    for name in ENCODER_PREFERENCE:
        try:
            av.codec.Codec(name, "w")
            return name
        except ValueError:  # av.codec.codec.UnknownCodecError
            continue
    raise RuntimeError(f"PyAV {av.__version__} has none of the video encoders {ENCODER_PREFERENCE}")


def _encoder_options(codec: str) -> dict[str, str]:
    options = {"g": str(GOP)}
    if codec == "libsvtav1":
        options.update(crf=str(CRF), **{"svtav1-params": "lp=1"})
    elif codec == "libx264":
        options.update(crf=str(CRF), threads="1")
    else:
        options["threads"] = "1"
    return options


class VideoEncoder:
    """One mp4 file being written: `write` (T, H, W, 3) uint8 frames (any number of calls), then `close`."""

    def __init__(self, path: Path, fps: int, height: int, width: int, codec: str | None = None):
        self.path, self.fps, self.frames = Path(path), int(fps), 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.codec = codec or choose_encoder()
        self._container = av.open(str(self.path), "w")
        self._stream = self._container.add_stream(self.codec, rate=self.fps, options=_encoder_options(self.codec))
        self._stream.pix_fmt, self._stream.width, self._stream.height = PIX_FMT, width, height
        self._stream.time_base = Fraction(1, self.fps)

    def write(self, frames: np.ndarray) -> None:
        for rgb in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
            frame.pts, frame.time_base = self.frames, Fraction(1, self.fps)
            self._container.mux(self._stream.encode(frame))
            self.frames += 1

    def bytes_written(self) -> int:
        """Bytes in the file so far (the encoder holds back a few frames until `close`)."""
        return self.path.stat().st_size if self.path.exists() else 0

    def close(self) -> None:
        if self._container is not None:
            self._container.mux(self._stream.encode())  # flush the frames the encoder holds back
            self._container.close()
            self._container = None

    def __enter__(self) -> VideoEncoder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _open(path: Path):
    try:
        container = av.open(str(path), "r")
    except FileNotFoundError as err:
        raise LeRobotDataError(f"{path}: video file not found; the dataset's metadata refers to it") from err
    except av.error.FFmpegError as err:
        raise LeRobotDataError(f"{path}: not a readable video file ({err})") from err
    if not container.streams.video:
        container.close()
        raise LeRobotDataError(f"{path}: the file holds no video stream")
    return container


def video_info(path: Path, fps: int) -> dict:
    """The `info` of a video feature in meta/info.json, read from the file (LeRobot's `get_video_info` keys)."""
    with _open(path) as container:
        stream = container.streams.video[0]
        return {"video.height": stream.height, "video.width": stream.width,
                "video.codec": stream.codec_context.codec.canonical_name, "video.pix_fmt": stream.pix_fmt,
                "video.is_depth_map": False, "video.fps": int(fps), "video.channels": 3,
                "has_audio": bool(container.streams.audio)}


def decode_at(path: Path, times: np.ndarray, emit: Callable[[int, np.ndarray], None],
              describe: Callable[[int], str], tolerance_s: float = TOLERANCE_S) -> None:
    """Decode `path` once, front to back, calling `emit(i, rgb)` with the (H, W, 3) uint8 frame shown at `times[i]`
    (seconds) for every i; LeRobotDataError (the file, `describe(i)`) when no frame lies within `tolerance_s`."""
    times = np.asarray(times, dtype=np.float64)
    if times.size == 0:
        return
    order = np.argsort(times, kind="stable")
    wanted = times[order]
    best = np.full(len(wanted), np.inf)
    seen: list[float] = []
    with _open(path) as container:
        stream = container.streams.video[0]
        stream.codec_context.thread_count = 1
        try:
            for frame in container.decode(stream):
                if frame.pts is None:
                    continue
                t = float(frame.pts * frame.time_base)
                seen.append(t)
                lo = int(np.searchsorted(wanted, t - tolerance_s, side="left"))
                hi = int(np.searchsorted(wanted, t + tolerance_s, side="right"))
                rgb = None
                for j in range(lo, hi):
                    if abs(wanted[j] - t) < best[j]:
                        rgb = frame.to_ndarray(format="rgb24") if rgb is None else rgb
                        best[j] = abs(wanted[j] - t)
                        emit(int(order[j]), rgb)
                if t > wanted[-1] + tolerance_s:
                    break
        except av.error.FFmpegError as err:
            raise LeRobotDataError(f"{path}: decoding failed after {len(seen)} frames ({err})") from err
    missing = np.flatnonzero(np.isinf(best))
    if missing.size:
        j = int(missing[0])
        t = wanted[j]
        if seen:
            near = min(seen, key=lambda s: abs(s - t))
            found = (f"the nearest decoded frame is at {near:.6f} s; {len(seen)} frames were decoded, from "
                     f"{seen[0]:.6f} s to {seen[-1]:.6f} s")
        else:
            found = "the file decodes to no frames"
        raise LeRobotDataError(f"{path}: {describe(int(order[j]))}: no video frame within {tolerance_s} s of "
                               f"timestamp {t:.6f} s ({found}; {missing.size} wanted frames are missing in all); "
                               "the video does not hold the frames the data files' timestamps name")
