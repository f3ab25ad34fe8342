"""Resumable data streams for the core.

Training is counted in optimizer steps, so the data is an endless, seeded
stream of sample indices: epoch `e` of the stream is a permutation seeded by
`(seed, e)`, and the k-th sample a rank takes is a pure function of
`(seed, k, rank, world_size, block)`. Ranks take the stream in blocks of one
micro-batch, round robin: rank r's i-th micro-batch is block `i * world + r`.
So a step of W ranks sees exactly the micro-batches one process with W-fold
gradient accumulation would see, in the same grouping. A resumed run therefore continues at the exact
sample where the checkpoint stopped: `StreamDataModule` starts the stream at
`module.consumed_batches * micro_batch_size`, which the module restores from
the checkpoint before the dataloader is built.

With smart sifting on (core/sifting.py) each micro-batch slot draws its own stream from
`stream_sampler` and the loop's dataloader only counts micro-batches (`MicroBatchTicks`).

`GroupedStreamSampler` keeps all of that and only changes each epoch's order:
micro-batch blocks of one group (e.g. one modality) and similar length, so
padding stays low; a data module turns it on by setting `lengths` (and
`group_keys`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Sampler


class StreamSampler(Sampler[int]):
    """Endless seeded stream of indices into a dataset of `size` samples, sharded across ranks."""

    def __init__(self, size: int, seed: int, start: int = 0, rank: int = 0, world_size: int = 1, shuffle: bool = True,
                 block: int = 1):
        if size <= 0:
            raise ValueError("cannot stream an empty dataset: no usable training samples (see the data report above)")
        self.size, self.seed, self.start = size, seed, start
        self.rank, self.world_size, self.shuffle, self.block = rank, world_size, shuffle, block

    def _epoch_order(self, epoch: int) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(self.size)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.size, generator=gen)

    def __iter__(self) -> Iterator[int]:
        k = self.start  # this rank's own sample count; its global stream position follows from the block layout
        epoch, order = -1, None
        while True:
            b, j = divmod(k, self.block)
            position = (b * self.world_size + self.rank) * self.block + j
            e, i = divmod(position, self.size)
            if e != epoch:
                epoch, order = e, self._epoch_order(e)
            yield int(order[i])
            k += 1


class GroupedStreamSampler(StreamSampler):
    """A `StreamSampler` whose epoch order is made of whole blocks (micro-batches) of one group and similar length.

    Epoch `e` (seeded by `(seed, e)`, like the plain stream, so resuming stays exact): each group's samples
    in a random order are cut into megabatches of `megabatch` blocks; each megabatch is sorted by length
    (longest first) and cut into blocks; the full blocks of all groups are shuffled together, and the few
    leftovers (less than a block per group) close the epoch. Blocks line up with the ranks' micro-batches
    when the dataset size is a multiple of the block (else one block per epoch boundary straddles two
    epochs). Like LLaVA's modality/length-grouped sampler."""

    def __init__(self, lengths: Sequence[int], groups: Sequence[int] | None = None, megabatch: int = 50, **kwargs):
        super().__init__(len(lengths), **kwargs)
        self.lengths = torch.as_tensor(list(lengths), dtype=torch.long)
        self.groups = torch.as_tensor(list(groups) if groups is not None else [0] * len(lengths), dtype=torch.long)
        if self.groups.shape != self.lengths.shape:
            raise ValueError(f"{len(self.groups)} group keys for {len(self.lengths)} lengths")
        self.megabatch = megabatch

    def _epoch_order(self, epoch: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        perm = torch.randperm(self.size, generator=gen) if self.shuffle else torch.arange(self.size)
        blocks, rest = [], []
        span = self.block * self.megabatch
        for group in torch.unique(self.groups).tolist():
            members = perm[self.groups[perm] == group]
            for start in range(0, len(members), span):
                mega = members[start : start + span]
                mega = mega[torch.argsort(self.lengths[mega], descending=True, stable=True)]
                for chunk in mega.split(self.block):
                    (blocks if len(chunk) == self.block else rest).append(chunk)
        if self.shuffle:
            blocks = [blocks[i] for i in torch.randperm(len(blocks), generator=gen).tolist()]
        tail = torch.cat(rest) if rest else perm[:0]
        return torch.cat([*blocks, tail[torch.argsort(self.lengths[tail], descending=True, stable=True)]])


class StreamDataModule(L.LightningDataModule):
    """Base data module: subclasses set `self.train_dataset` and `self.collate_fn` in `setup`, and may set
    `self.lengths` (and `self.group_keys`), one per sample, to group micro-batches (`GroupedStreamSampler`)."""

    train_dataset: Dataset
    collate_fn: Callable | None = None
    lengths: Sequence[int] | None = None
    group_keys: Sequence[int] | None = None

    def __init__(self, micro_batch_size: int, seed: int, num_workers: int = 0):
        super().__init__()
        self.micro_batch_size = micro_batch_size
        self.seed = seed
        self.num_workers = num_workers

    sifting = False  # set by core.run with `sifting.enabled`: the loop's batches are only counts (core/sifting.py)

    def stream_sampler(self, start: int, rank: int, world_size: int) -> StreamSampler:
        """The seeded stream of sample indices of one rank (or one sifting lane), from sample `start` on."""
        stream = dict(seed=self.seed, start=start, rank=rank, world_size=world_size, block=self.micro_batch_size)
        if self.lengths is None:
            return StreamSampler(len(self.train_dataset), **stream)
        return GroupedStreamSampler(self.lengths, self.group_keys, **stream)

    def train_dataloader(self) -> DataLoader:
        if self.sifting:  # the sifter draws the data itself; the loop only needs one item per micro-batch
            return DataLoader(MicroBatchTicks(), batch_size=None)
        consumed = getattr(self.trainer.lightning_module, "consumed_batches", 0) if self.trainer else 0
        sampler = self.stream_sampler(start=consumed * self.micro_batch_size,
                                      rank=self.trainer.global_rank if self.trainer else 0,
                                      world_size=self.trainer.world_size if self.trainer else 1)
        return DataLoader(
            self.train_dataset,
            batch_size=self.micro_batch_size,
            sampler=sampler,
            collate_fn=self.collate_fn,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )


class MicroBatchTicks(torch.utils.data.IterableDataset):
    """An endless stream of micro-batch numbers: what the training loop iterates while a sifter makes the batches."""

    def __iter__(self) -> Iterator[torch.Tensor]:
        k = 0
        while True:
            yield torch.tensor(k)
            k += 1
