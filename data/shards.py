"""Prepared-sample shards: Arrow IPC files written once, read memory-mapped by every training process.

A prepared source is a folder holding `manifest.json` and `shard-NNNNN.arrow` files; each row is one training
sample: `id` (string), `input_ids`, `labels`, `image_positions` (list<int32>) and `images` (list<string>,
absolute paths; the pixels are decoded in the loader workers). `write_shards` writes them;
`SampleShards` opens them with `pyarrow.memory_map` (no Python list of records is built: a process's memory
holds only the pages it touches) and gives, per index, a sample object (the caller's sample class, e.g.
`vlm.dataset.Sample`). `lengths()` gives the token counts and image counts from the list offsets alone.

A `SampleShards` pickles as its folder (a spawned loader worker reopens the map).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa

SCHEMA = pa.schema([
    ("id", pa.string()),
    ("input_ids", pa.list_(pa.int32())),
    ("labels", pa.list_(pa.int32())),
    ("images", pa.list_(pa.string())),
    ("image_positions", pa.list_(pa.int32())),
])


def write_shards(table: pa.Table, folder: Path, rows_per_shard: int = 65536) -> list[str]:
    """Write `table` (SCHEMA's columns) as Arrow IPC shards under `folder`; their file names in order."""
    table = table.select(SCHEMA.names).cast(SCHEMA)
    names = []
    for k, start in enumerate(range(0, max(len(table), 1), rows_per_shard)):
        name = f"shard-{k:05d}.arrow"
        part = table.slice(start, rows_per_shard).combine_chunks()
        with pa.OSFile(str(Path(folder) / name), "wb") as sink, pa.ipc.new_file(sink, SCHEMA) as writer:
            writer.write_table(part, max_chunksize=len(part) or None)
        names.append(name)
    return names


class SampleShards:
    """The samples of one prepared source, memory-mapped: `len`, `[i]` → `make_sample(id, ids, labels, images,
    positions)`."""

    def __init__(self, folder: Path, shards: Iterable[str], make_sample: Callable):
        self.folder, self.shards, self.make_sample = Path(folder), list(shards), make_sample
        self._open()

    def _open(self) -> None:
        self._tables = []
        for name in self.shards:
            with pa.memory_map(str(self.folder / name), "r") as source:
                self._tables.append(pa.ipc.open_file(source).read_all().combine_chunks())
        self._starts = np.cumsum([0] + [len(t) for t in self._tables]).tolist()
        self._columns = [{name: t.column(name).chunk(0) if t.num_rows else None for name in SCHEMA.names}
                         for t in self._tables]

    def __getstate__(self) -> dict:
        return {"folder": self.folder, "shards": self.shards, "make_sample": self.make_sample}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._open()

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, index: int):
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} of {len(self)} in {self.folder}")
        shard = bisect.bisect_right(self._starts, index) - 1
        cols, j = self._columns[shard], index - self._starts[shard]
        return self.make_sample(cols["id"][j].as_py(), _ints(cols["input_ids"], j), _ints(cols["labels"], j),
                                [Path(p) for p in cols["images"][j].as_py()], _ints(cols["image_positions"], j))

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """(token count, image count) per sample, from the list offsets (no token is read)."""
        tokens, images = [], []
        for cols in self._columns:
            if cols["id"] is None:
                continue
            tokens.append(np.diff(cols["input_ids"].offsets.to_numpy()))
            images.append(np.diff(cols["images"].offsets.to_numpy()))
        empty = np.zeros(0, dtype=np.int64)
        return (np.concatenate(tokens) if tokens else empty), (np.concatenate(images) if images else empty)


def _ints(column: pa.ListArray, j: int) -> list[int]:
    offsets = column.offsets
    start, stop = offsets[j].as_py(), offsets[j + 1].as_py()
    return column.values.slice(start, stop - start).to_numpy(zero_copy_only=False).tolist()


class IndexedSamples:
    """Samples by index over several sources (`parts`: sequences) through one index array per part, in order:
    what a weighted mixture of prepared sources trains on without copying a sample."""

    def __init__(self, parts: list, indices: list[np.ndarray]):
        self.parts, self.indices = parts, [np.asarray(i, dtype=np.int64) for i in indices]
        self._starts = np.cumsum([0] + [len(i) for i in self.indices]).tolist()

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, index: int):
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} of {len(self)}")
        k = bisect.bisect_right(self._starts, index) - 1
        return self.parts[k][int(self.indices[k][index - self._starts[k]])]

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """(token count, image count) per sample, in order."""
        tokens, images = [], []
        for part, idx in zip(self.parts, self.indices):
            t, i = part.lengths()
            tokens.append(t[idx])
            images.append(i[idx])
        return np.concatenate(tokens), np.concatenate(images)
