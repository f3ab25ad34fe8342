"""Reading and validating LLaVA-format conversation files (model-agnostic).

Format: a JSON list of records `{"id", "image" (optional: path relative to the
image root, or a list of paths), "conversations": [{"from": "human"|"gpt",
"value": str}, ...]}` with turns alternating human, gpt, human, ...

Images and `<image>` placeholders: a record with several images has exactly
one `<image>` in its human turns per image, in the order of its `image` list
(each image goes where its placeholder is); a single image may have one
placeholder or none (it goes first); a text-only record has none; gpt turns
have none.

Bad input never passes silently: a record with a missing or unreadable image, an image path that leaves the
image root (`..`, absolute, a symlink out: refused unless `data.allow_images_outside_root`), an image over the
pixel budget (`data.max_image_pixels`, unless `data.oversize_images=downscale`; data/image_decode.py),
turns that do not alternate, an empty conversation list, or a malformed field
raises `DataError` naming the file, the record id and the fix (also for a
placeholder count that does not match the images) — or, with
`skip_bad=True`, is skipped and counted by reason (the caller prints the
counts). A file that is not a JSON list of records is always an error.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from PIL import Image

from data.errors import DataError
from data.image_decode import DEFAULT_IMAGES, ImageDecodeError, ImagePolicy

IMAGE_TOKEN = "<image>"


def record_images(record: dict) -> list[str]:
    image = record.get("image")
    if image is None:
        return []
    return [image] if isinstance(image, str) else list(image)


def check_record(record: object, image_root: Path, images: ImagePolicy = DEFAULT_IMAGES) -> str | None:
    """The problem with one record, or None if it is usable. Images are opened and verified, not decoded (a file
    damaged past its header is caught at decode: vlm/dataset.py skips and counts it under skip_bad)."""
    if not isinstance(record, dict):
        return "is not a JSON object"
    conversations = record.get("conversations")
    if not isinstance(conversations, list) or not conversations:
        return "has an empty or missing 'conversations' list"
    for i, turn in enumerate(conversations):
        expected = "human" if i % 2 == 0 else "gpt"
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            return f"turn {i} is not an object with a string 'value'"
        if turn.get("from") != expected:
            return f"turn {i} is from {turn.get('from')!r} but turns must alternate human/gpt starting with human (expected {expected!r})"
    if len(conversations) % 2:
        return "ends with a human turn that has no gpt answer"
    image = record.get("image")
    if image is not None and not (isinstance(image, str) or (isinstance(image, list) and all(isinstance(x, str) for x in image))):
        return "has an 'image' that is neither a path nor a list of paths"
    problem = check_placeholders(conversations, len(record_images(record)))
    if problem:
        return problem
    for rel in record_images(record):
        try:
            path = images.path(image_root, rel)
        except ImageDecodeError as err:
            return f"image file outside the image root: {err}"
        if not path.is_file():
            return f"image file {path} does not exist"
        try:
            with Image.open(path) as im:
                size = im.size
                im.verify()
        except Exception as err:
            return f"image file {path} is unreadable ({type(err).__name__}: {err})"
        if images.refuses_size(*size):
            return (f"image file {path} is {size[0]}x{size[1]} pixels, over data.max_image_pixels={images.max_pixels} "
                    "(raise it with +data.max_image_pixels=N, or set +data.oversize_images=downscale)")
    return None


def check_placeholders(conversations: list[dict], num_images: int) -> str | None:
    """The mismatch between a conversation's `<image>` placeholders and its images, or None."""
    if any(IMAGE_TOKEN in t["value"] for t in conversations[1::2]):
        return f"has an {IMAGE_TOKEN} placeholder in a gpt turn; placeholders belong in human turns"
    count = sum(t["value"].count(IMAGE_TOKEN) for t in conversations[0::2])
    if count == num_images or (num_images == 1 and count == 0):
        return None
    return (f"has {num_images} image(s) but {count} {IMAGE_TOKEN} placeholder(s) in its human turns; "
            f"put exactly one {IMAGE_TOKEN} per image where it belongs")


def load_llava(json_path: str | Path, image_root: str | Path, skip_bad: bool = False,
               progress: Callable[..., Iterable] | None = None, images: ImagePolicy = DEFAULT_IMAGES) -> tuple[list[dict], Counter]:
    """Valid records of a LLaVA JSON file, and the count of skipped records by reason.

    `progress(iterable, description, total=...)` wraps the validation loop (e.g. `core.progress.track`; this package does
    not import the core)."""
    json_path, image_root = Path(json_path), Path(image_root)
    data = read_llava_json(json_path)
    records, skipped = [], Counter()
    rows = enumerate(data)
    if progress is not None:
        rows = progress(rows, f"validating {json_path.name}", total=len(data))
    for index, record in rows:
        problem = check_record(record, image_root, images)
        if problem is None:
            records.append(record)
            continue
        if not skip_bad:
            raise bad_record_error(json_path, record_id(record, index), problem)
        skipped[reason_key(problem)] += 1
    return records, skipped


def read_llava_json(json_path: Path) -> list:
    """The records of a LLaVA JSON file (unvalidated); DataError if it is missing or not a JSON list."""
    try:
        data = json.loads(Path(json_path).read_text())
    except FileNotFoundError as err:
        raise DataError(f"{json_path}: file not found; set data.json to a LLaVA-format JSON file") from err
    except json.JSONDecodeError as err:
        raise DataError(f"{json_path}: not valid JSON ({err}); fix the file") from err
    if not isinstance(data, list):
        raise DataError(f"{json_path}: expected a JSON list of records, found a {type(data).__name__}; "
                        "LLaVA files are [{\"id\", \"image\", \"conversations\": [...]}, ...]")
    return data


def record_id(record: object, index: int) -> str:
    return record.get("id", f"#{index}") if isinstance(record, dict) else f"#{index}"


def bad_record_error(json_path: Path, rid: object, problem: str) -> DataError:
    return DataError(f"{json_path}: record {rid}: {problem}. Fix the record, or run with data.skip_bad=true to skip and count bad records")


def reason_key(problem: str) -> str:
    """A short reason key for the skip counter (drops the record-specific path)."""
    if problem.startswith("image file"):
        if "leaves the image root" in problem or "outside the image root" in problem:
            return "image outside the image root"
        if "max_image_pixels" in problem:
            return "image over the pixel budget"
        return "missing image" if "does not exist" in problem else "unreadable image"
    if IMAGE_TOKEN in problem:
        return "image placeholders do not match images"
    if problem.startswith("turn"):
        return "turns do not alternate human/gpt"
    return problem
