"""VLM training samples: LLaVA records → token ids, labels and pixels; the padding collator.

All records are tokenized once, up front, through the backbone's prompt
format, so every count is known before training starts: a sample whose
assistant tokens are all cut off by the length limit is dropped from training
and counted (`truncated_no_targets`), never trained on silently. Images are
decoded (data/image_decode.py, the one decoding function) and transformed lazily
in `__getitem__` (in the loader workers). An image that passed validation but
cannot be decoded (a truncated JPEG) stops the run naming the record and the file,
or with `skip_bad` the sample is skipped: the next sample that decodes takes its
place, the row says how many were skipped (`skipped_records`, summed by the
collator) and VLMModule counts them as `skipped/undecodable image`.

At scale (`data.cache`), the same tokenization runs once in Ray Data (data/prepare.py) and the samples are read
memory-mapped from its shards (data/shards.py); `preparation_key` is what that cache is keyed by, `prepared_samples`
the prepared samples of a phase's sources.

Images: a sample carries its image paths and, per image, the index in
`input_ids` its patches are spliced in front of (`image_positions`; one image:
right after BOS, as `PromptFormat.build_with_images` decides). The collator
stacks all the images of a batch in row order and pads the positions with -1.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils.data import Dataset

from data.errors import DataError
from data.image_decode import DEFAULT_IMAGES, ImageDecodeError, ImagePolicy
from data.llava import record_images
from vlm.prompting import IGNORE_INDEX


@dataclass
class Sample:
    id: str
    input_ids: list[int]
    labels: list[int]
    images: list[Path] = field(default_factory=list)
    image_positions: list[int] = field(default_factory=list)  # where each image's patches go in input_ids

    @property
    def image(self) -> Path | None:
        return self.images[0] if self.images else None


def tokenize_records(records: list[dict], prompt_format, image_root: Path, max_length: int, num_patches: int,
                     max_turns: int | None = None, progress: Callable[..., Iterable] | None = None) -> tuple[list[Sample], Counter]:
    """Samples ready for training and the count of records dropped (by reason).

    With `max_turns`, a conversation becomes several samples of at most that many question/answer
    pairs each (every sample keeps the record's image); records with several images are kept whole
    (their placeholders tie each image to its turn). Records are expected to be validated by
    `data.llava.load_llava` (one placeholder per image). Text-only records (no `image`) become text samples.
    `progress(iterable, description, total=...)` wraps the loop (e.g. `core.progress.track`)."""
    samples, dropped = [], Counter()
    for record in (progress(records, "tokenizing", total=len(records)) if progress else records):
        images = [image_root / rel for rel in record_images(record)]
        turns = [(t["from"], t["value"]) for t in record["conversations"]]
        step = 2 * max_turns if max_turns and len(images) <= 1 else len(turns)
        for start in range(0, len(turns), step):
            sid = str(record.get("id")) + (f"#{start // 2}" if start else "")
            try:
                ids, labels, positions = prompt_format.build_with_images(turns[start : start + step], len(images))
            except ValueError as err:
                raise DataError(f"record {sid}: {err}") from err
            budget = max_length - num_patches * len(images)
            if len(ids) > budget:
                ids, labels = ids[:budget], labels[:budget]
                if all(label == IGNORE_INDEX for label in labels):
                    dropped["truncated_no_targets"] += 1
                    continue
                if any(p > budget for p in positions):
                    dropped["truncated_image"] += 1
                    continue
            samples.append(Sample(sid, ids, labels, images, positions))
    return samples, dropped


def tokenizer_hash(tokenizer) -> str:
    """A hash of the tokenizer: its files (when loaded from a folder), its vocabulary and its special tokens."""
    h = hashlib.sha256()
    folder = Path(str(getattr(tokenizer, "name_or_path", "")))
    if folder.is_dir():
        for f in sorted(folder.iterdir()):
            if f.is_file() and ("token" in f.name or f.suffix in (".model", ".txt") or f.name.startswith(("vocab", "merges"))):
                h.update(f.name.encode() + f.read_bytes())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    h.update((backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))).encode())
    h.update(json.dumps([tokenizer.all_special_tokens, getattr(tokenizer, "chat_template", None)], default=str).encode())
    return h.hexdigest()


def preparation_key(prompt_format, max_length: int, num_patches: int, max_turns: int | None) -> dict:
    """What tokenized samples depend on: the tokenizer, the prompt format (class and settings), the max length, the
    image settings (patches per image: they share the length budget; pixels are decoded at load time) and max_turns."""
    settings = {k: v for k, v in vars(prompt_format).items()
                if k != "tokenizer" and isinstance(v, (str, int, float, bool, type(None), list, tuple))}
    fmt = f"{type(prompt_format).__module__}.{type(prompt_format).__qualname__}"
    return {"tokenizer": tokenizer_hash(prompt_format.tokenizer), "prompt_format": fmt, "prompt_settings": settings,
            "max_length": int(max_length), "num_patches": int(num_patches), "max_turns": max_turns}


def prepared_samples(sources, prompt_format, max_length: int, num_patches: int, max_turns: int | None, cache: Path,
                     skip_bad: bool, workers: int | None = None, ray_address: str | None = None, rank: int = 0,
                     log: Callable[[str], None] = print, images: ImagePolicy = DEFAULT_IMAGES) -> tuple[list, Counter, Counter]:
    """Per source, its samples read memory-mapped from the prepared cache (rank 0 builds a missing one with Ray
    Data; the other ranks wait for it); and the skipped and dropped counts (printed by the preparation).
    Image settings other than the defaults (`images`) join the cache key: they decide which records are valid."""
    from dataclasses import asdict

    from data.prepare import cache_folder, prepare_source, release_ray, wait_for
    from data.shards import SampleShards

    key = preparation_key(prompt_format, max_length, num_patches, max_turns)
    if images != DEFAULT_IMAGES:
        key["images"] = asdict(images)
    tokenize = functools.partial(tokenize_records, prompt_format=prompt_format, max_length=max_length,
                                 num_patches=num_patches, max_turns=max_turns)
    parts, skipped, dropped = [], Counter(), Counter()
    try:
        for src in sources:
            if rank == 0:
                folder, info = prepare_source(src, tokenize, key, Path(cache), skip_bad, workers, ray_address, log=log)
            else:
                folder = cache_folder(src, key, Path(cache), skip_bad)
                info = wait_for(folder, log=log)
            skipped.update(info["skipped"])
            dropped.update(info["dropped"])
            parts.append(SampleShards(folder, info["shards"], Sample))
    finally:
        release_ray()
    return parts, skipped, dropped


class VLMDataset(Dataset):
    MAX_SKIPPED_IN_A_ROW = 32  # with skip_bad, this many undecodable samples in a row stop the run (a broken dataset)

    def __init__(self, samples: list[Sample], transform, images: ImagePolicy = DEFAULT_IMAGES, skip_bad: bool = False):
        self.samples = samples
        self.transform = transform
        self.images = images
        self.skip_bad = skip_bad

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict:
        """ids, labels, image positions and pixels: None (text only), one image's tensor, or a list of them; with
        skip_bad, an undecodable sample is replaced by the next one that decodes and `skipped_records` says how
        many were skipped."""
        tries = min(len(self.samples), self.MAX_SKIPPED_IN_A_ROW) if self.skip_bad else 1
        for skipped in range(tries):
            sample = self.samples[(index + skipped) % len(self.samples)]
            try:
                pixels = [self._read(sample, path) for path in sample.images]
            except ImageDecodeError as err:
                if not self.skip_bad:
                    raise DataError(f"record {sample.id}: {err}; fix or remove the record, or run with data.skip_bad=true "
                                    "to skip and count it") from err
                print(f"data: skipping record {sample.id}: {err} (data.skip_bad=true; counted as skipped/undecodable image)",
                      file=sys.stderr)
                continue
            row = {"input_ids": sample.input_ids, "labels": sample.labels, "image_positions": sample.image_positions,
                   "pixel_values": None if not pixels else pixels[0] if len(pixels) == 1 else pixels}
            if skipped:
                row["skipped_records"] = skipped
            return row
        raise DataError(f"{tries} samples in a row from record {self.samples[index].id} have images that cannot be decoded "
                        "(see the messages above); the dataset's image files look damaged: check them")

    def _read(self, sample: Sample, path: Path) -> torch.Tensor:
        return self.transform(self.images.decode(path))


def row_images(row: dict) -> list[torch.Tensor]:
    """The pixel tensors of one collator row (`pixel_values`: None, one tensor, or a list of tensors)."""
    pixels = row["pixel_values"]
    return [] if pixels is None else list(pixels) if isinstance(pixels, (list, tuple)) else [pixels]


class Collator:
    """Right-pads ids (pad id) and labels (-100); stacks the pixels of all the rows' images in row order.

    Rows may give `image_positions` (dataset rows do); then the batch carries them as a (rows, most
    images in a row) tensor padded with -1. Without them each row has at most one image, which the
    VLM splices right after BOS."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, batch: list[dict]) -> dict:
        width = max(len(b["input_ids"]) for b in batch)
        ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, b in enumerate(batch):
            n = len(b["input_ids"])
            ids[row, :n] = torch.tensor(b["input_ids"])
            labels[row, :n] = torch.tensor(b["labels"])
            mask[row, :n] = 1
        images = [row_images(b) for b in batch]
        pixels = [p for row in images for p in row]
        positions = None
        if any(b.get("image_positions") is not None for b in batch):
            positions = torch.full((len(batch), max(1, *map(len, images))), -1, dtype=torch.long)
            for row, (b, imgs) in enumerate(zip(batch, images)):
                given = list(b.get("image_positions") or [])
                if len(given) != len(imgs):
                    raise ValueError(f"collator row {row}: {len(imgs)} images but {len(given)} image positions")
                positions[row, : len(given)] = torch.tensor(given, dtype=torch.long)
        elif any(len(row) > 1 for row in images):
            raise ValueError("rows with several images need `image_positions` (where each image goes)")
        out = {
            "input_ids": ids,
            "attention_mask": mask,
            "labels": labels,
            "pixel_values": torch.stack(pixels) if pixels else None,
            "image_mask": torch.tensor([bool(row) for row in images]),
            "image_positions": positions,
        }
        skipped = sum(b.get("skipped_records", 0) for b in batch)
        if skipped:  # samples skipped as undecodable (skip_bad) to make this batch; VLMModule counts and removes it
            out["skipped_records"] = skipped
        return out
