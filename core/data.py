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
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

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


class StreamDataModule(L.LightningDataModule):
    """Base data module: subclasses set `self.train_dataset` and `self.collate_fn` in `setup`."""

    train_dataset: Dataset
    collate_fn: Callable | None = None

    def __init__(self, micro_batch_size: int, seed: int, num_workers: int = 0):
        super().__init__()
        self.micro_batch_size = micro_batch_size
        self.seed = seed
        self.num_workers = num_workers

    def train_dataloader(self) -> DataLoader:
        consumed = getattr(self.trainer.lightning_module, "consumed_batches", 0) if self.trainer else 0
        sampler = StreamSampler(
            len(self.train_dataset),
            seed=self.seed,
            start=consumed * self.micro_batch_size,
            rank=self.trainer.global_rank if self.trainer else 0,
            world_size=self.trainer.world_size if self.trainer else 1,
            block=self.micro_batch_size,
        )
        return DataLoader(
            self.train_dataset,
            batch_size=self.micro_batch_size,
            sampler=sampler,
            collate_fn=self.collate_fn,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )
