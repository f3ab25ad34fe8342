"""VLM training samples: LLaVA records → token ids, labels and pixels; the padding collator.

All records are tokenized once, up front, through the backbone's prompt
format, so every count is known before training starts: a sample whose
assistant tokens are all cut off by the length limit is dropped from training
and counted (`truncated_no_targets`), never trained on silently. Images are
read and transformed lazily in `__getitem__`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import Dataset

from data.llava import DataError, record_images
from vlm.prompting import IGNORE_INDEX


@dataclass
class Sample:
    id: str
    input_ids: list[int]
    labels: list[int]
    image: Path | None


def tokenize_records(records: list[dict], prompt_format, image_root: Path, max_length: int, num_patches: int,
                     max_turns: int | None = None) -> tuple[list[Sample], Counter]:
    """Samples ready for training and the count of records dropped (by reason).

    With `max_turns`, a conversation becomes several samples of at most that many question/answer
    pairs each (every sample keeps the record's image)."""
    samples, dropped = [], Counter()
    for record in records:
        images = record_images(record)
        if len(images) > 1:
            raise DataError(f"record {record.get('id')}: {len(images)} images; multi-image samples are not supported yet")
        turns = [(t["from"], t["value"]) for t in record["conversations"]]
        step = 2 * max_turns if max_turns else len(turns)
        for start in range(0, len(turns), step):
            ids, labels = prompt_format.build(turns[start : start + step])
            budget = max_length - (num_patches if images else 0)
            if len(ids) > budget:
                ids, labels = ids[:budget], labels[:budget]
                if all(label == IGNORE_INDEX for label in labels):
                    dropped["truncated_no_targets"] += 1
                    continue
            sid = str(record.get("id")) + (f"#{start // 2}" if start else "")
            samples.append(Sample(sid, ids, labels, image_root / images[0] if images else None))
    return samples, dropped


class VLMDataset(Dataset):
    def __init__(self, samples: list[Sample], transform):
        self.samples = samples
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict:
        sample = self.samples[index]
        pixels = None
        if sample.image is not None:
            try:
                with Image.open(sample.image) as im:
                    pixels = self.transform(im.convert("RGB"))
            except Exception as err:
                raise DataError(f"record {sample.id}: cannot read image {sample.image} ({err}); fix or remove the record") from err
        return {"input_ids": sample.input_ids, "labels": sample.labels, "pixel_values": pixels}


class Collator:
    """Right-pads ids (pad id) and labels (-100); stacks the pixels of the rows that have an image."""

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
        image_mask = torch.tensor([b["pixel_values"] is not None for b in batch])
        pixels = [b["pixel_values"] for b in batch if b["pixel_values"] is not None]
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "labels": labels,
            "pixel_values": torch.stack(pixels) if pixels else None,
            "image_mask": image_mask,
        }
