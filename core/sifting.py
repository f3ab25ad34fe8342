"""Smart sifting: drop the samples the model already handles before their backward pass (`sifting.*`).

Before a micro-batch trains, a no-grad forward (eval mode, global RNG untouched) gives each drawn
sample its loss (`TrainModule.sample_losses`: the task says what a sample's loss is). A selector
keeps some of them:

- `sifting.keep=null`: the relative-probability rule of selective backprop (Jiang et al. 2019): a
  sample is kept with probability `percentile ** beta`, its loss's percentile among the last
  `sifting.history` losses (its own micro-batch's included);
- `sifting.keep=F`: exactly the fraction F of the drawn samples, the highest losses of each drawn
  micro-batch (the count carries the remainder over, so the long-run fraction is F to one sample);
- `sifting.selector=uniform`: the same fraction F chosen at random, without the scoring forward
  (the control that tells whether the losses matter).

Kept samples accumulate until a full micro-batch is ready, so every optimizer step sees the
configured batch. Sifting starts after `sifting.warmup_steps` optimizer steps (before that every
drawn sample trains and no scoring forward runs).

Data: each micro-batch slot of the global batch is a *lane*: with W ranks and A-fold
accumulation, lane `a * W + r` is rank r's a-th micro-batch of every step, and draws its own
stream of whole micro-batches, block `n * L + lane` of the run's seeded stream (L = W * A lanes;
core.data.StreamSampler with rank = lane, world size = L). So 2 ranks and 1 process accumulating 2
have the same lanes and sift alike, and with nothing dropped a lane draws exactly the micro-batches
the unsifted run trains on. The Lightning loop then only counts micro-batches
(`StreamDataModule.sifting`); each lane's position, its queue of kept sample indices, its loss
window, its RNG and its counts are in every checkpoint (all ranks' lanes; a resume must keep the
number of lanes). The scoring forward runs on the unwrapped model: under DDP it needs no
collectives, so ranks may draw different numbers of micro-batches and still stay in step. FSDP
(whose forward gathers shards on every rank) is refused.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import percentileofscore
from torch.utils.data import DataLoader, Dataset

SELECTORS = ("loss", "uniform")
SKIPPED = "skipped_records"  # a collated batch's count of samples skipped as undecodable (vlm/dataset.py)


def keep_probability(losses: np.ndarray, window: np.ndarray, beta: float) -> np.ndarray:
    """Selective backprop's rule: each loss's percentile among `window` (the fraction at or below it), to the `beta`."""
    return (percentileofscore(window, losses, kind="weak") / 100.0) ** beta


def mean_token_loss_per_row(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """A causal LM's loss per row: the mean cross-entropy of the row's supervised next tokens (0 for a row with none),
    the per-row version of transformers' shifted loss."""
    targets = labels[:, 1:]
    losses = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), targets.flatten(), ignore_index=ignore_index,
                             reduction="none").view(targets.shape)
    counted = (targets != ignore_index).sum(1)
    return losses.sum(1) / counted.clamp(min=1)


def fixed_keep_count(drawn_before: int, drawn_now: int, keep: float) -> int:
    """How many of `drawn_now` new samples to keep so that the kept count stays floor(keep * drawn)."""
    return math.floor(keep * (drawn_before + drawn_now) + 1e-9) - math.floor(keep * drawn_before + 1e-9)


def check_strategy(strategy) -> None:
    """Sifting's scoring forwards run on each rank's own schedule: FSDP, whose forward is collective, is refused."""
    from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy

    if isinstance(strategy, (FSDPStrategy, ModelParallelStrategy)):
        raise ValueError(f"smart sifting runs its scoring forwards on each rank's own schedule, which the collective "
                         f"forward of {type(strategy).__name__} cannot follow: train with sifting.enabled=false, or with "
                         "DDP (trainer=ddp)")


class SiftingSettings:
    """`cfg.sifting`, checked: a wrong value names the key and what it may be."""

    def __init__(self, enabled: bool = False, keep: float | None = None, beta: float = 1.0, history: int = 500,
                 warmup_steps: int = 0, selector: str = "loss"):
        if selector not in SELECTORS:
            raise ValueError(f"sifting.selector={selector!r}: choose one of {list(SELECTORS)}")
        if keep is not None and not 0.0 < float(keep) <= 1.0:
            raise ValueError(f"sifting.keep={keep}: a fraction in (0, 1], or null for the probabilistic rule")
        if selector == "uniform" and keep is None:
            raise ValueError("sifting.selector=uniform keeps a fixed fraction at random: set sifting.keep too")
        if float(beta) < 0 or int(history) < 1 or int(warmup_steps) < 0:
            raise ValueError(f"sifting.beta={beta} (>= 0), sifting.history={history} (>= 1), "
                             f"sifting.warmup_steps={warmup_steps} (>= 0)")
        self.enabled, self.selector = bool(enabled), selector
        self.keep = None if keep is None else float(keep)
        self.beta, self.history, self.warmup_steps = float(beta), int(history), int(warmup_steps)

    @classmethod
    def from_config(cls, node: Mapping | None) -> SiftingSettings:
        return cls(**dict(node or {}))


class _Indexed(Dataset):
    """A dataset whose micro-batches carry their sample indices (fetched as torch's DataLoader fetches them: the
    dataset's own `__getitems__` where it has one), so a drawn micro-batch knows its samples."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, indices: list[int]):
        getitems = getattr(self.dataset, "__getitems__", None)
        return list(indices), getitems(indices) if getitems else [self.dataset[i] for i in indices]


class _IndexedCollate:
    def __init__(self, collate: Callable | None):
        self.collate = collate or torch.utils.data.default_collate

    def __call__(self, fetched):
        indices, samples = fetched
        return indices, self.collate(samples)


class Lane:
    """One micro-batch slot's stream: drawn micro-batches, the queue of kept indices, its loss window and RNG."""

    def __init__(self, lane: int, lanes: int, seed: int, history: int):
        self.lane, self.lanes = lane, lanes
        self.drawn_blocks = 0
        self.queue: list[int] = []
        self.window: deque[float] = deque(maxlen=history)
        self.generator = torch.Generator().manual_seed(seed * 1_000_003 + 7919 * lane + 1)
        self.forwarded = self.backpropagated = 0
        self.loader_iter = None

    def state(self) -> dict:
        return {"lane": self.lane, "drawn_blocks": self.drawn_blocks, "queue": list(self.queue),
                "window": list(self.window), "generator": self.generator.get_state(),
                "forwarded": self.forwarded, "backpropagated": self.backpropagated}

    def restore(self, state: Mapping) -> None:
        self.drawn_blocks = int(state["drawn_blocks"])
        self.queue = [int(i) for i in state["queue"]]
        self.window.clear()
        self.window.extend(float(x) for x in state["window"])
        self.generator.set_state(state["generator"])
        self.forwarded, self.backpropagated = int(state["forwarded"]), int(state["backpropagated"])
        self.loader_iter = None  # rebuilt at the restored position


class Sifter:
    """Builds each trained micro-batch from a lane's drawn micro-batches (see the module docstring).

    `datamodule` is a core.data.StreamDataModule after `setup`; `score` maps a collated batch (on the
    device) to one loss per row; `to_device` moves a collated batch to the training device."""

    def __init__(self, settings: SiftingSettings, datamodule, seed: int):
        self.settings, self.datamodule, self.seed = settings, datamodule, seed
        self.lanes: dict[int, Lane] = {}
        self.num_lanes: int | None = None
        self._pending: dict | None = None
        self.step_forwarded = self.step_backpropagated = 0  # this rank's counts in the current optimizer step
        self.score_seconds = 0.0  # this process's time in scoring forwards (data to the device included)
        self.skipped_records = 0  # undecodable samples skipped while drawing (a batch's `skipped_records`)

    # --- lanes ---------------------------------------------------------------------------------
    def setup(self, rank: int, world: int, accumulate: int) -> None:
        """This rank's lanes (`a * world + rank` for each accumulation slot a), restored from a checkpoint if one was loaded."""
        self.num_lanes = world * accumulate
        self.lanes = {a * world + rank: Lane(a * world + rank, self.num_lanes, self.seed, self.settings.history)
                      for a in range(accumulate)}
        if self._pending is not None:
            self._restore(self._pending)
            self._pending = None

    def lane_of(self, consumed_batches: int, rank: int, world: int, accumulate: int) -> Lane:
        return self.lanes[(consumed_batches % accumulate) * world + rank]

    def _draw(self, lane: Lane) -> tuple[list[int], dict]:
        """The lane's next whole micro-batch of the stream: (sample indices, collated batch)."""
        dm = self.datamodule
        if lane.loader_iter is None:
            sampler = dm.stream_sampler(start=lane.drawn_blocks * dm.micro_batch_size, rank=lane.lane,
                                        world_size=lane.lanes)
            # its own generator: starting a lane's loader leaves the global RNG (dropout's) as the unsifted run has it
            seeds = torch.Generator().manual_seed(self.seed * 1_000_003 + 104_729 * lane.lane + lane.drawn_blocks)
            loader = DataLoader(_Indexed(dm.train_dataset), batch_size=dm.micro_batch_size, sampler=sampler,
                                collate_fn=_IndexedCollate(dm.collate_fn), num_workers=dm.num_workers, generator=seeds)
            lane.loader_iter = iter(loader)
        indices, batch = next(lane.loader_iter)
        lane.drawn_blocks += 1
        if isinstance(batch, dict):  # samples skipped as undecodable to make this batch (data.skip_bad): counted once, here
            self.skipped_records += int(batch.pop(SKIPPED, 0))
        return indices, batch

    def _collate(self, indices: list[int]) -> dict:
        dm = self.datamodule
        _, batch = _IndexedCollate(dm.collate_fn)(_Indexed(dm.train_dataset).__getitems__(indices))
        if isinstance(batch, dict):
            batch.pop(SKIPPED, None)  # counted when the sample was drawn
        return batch

    # --- selection -----------------------------------------------------------------------------
    def select(self, lane: Lane, losses: np.ndarray | None, n: int) -> list[int]:
        """Positions (in drawn order) of the drawn micro-batch's samples to keep."""
        s = self.settings
        if s.keep is not None:
            k = fixed_keep_count(lane.forwarded, n, s.keep)
            if s.selector == "uniform":
                chosen = torch.randperm(n, generator=lane.generator)[:k].tolist()
            else:  # the k highest losses; ties keep the earlier sample
                chosen = np.argsort(-losses, kind="stable")[:k].tolist()
            return sorted(chosen)
        lane.window.extend(float(x) for x in losses)
        p = keep_probability(losses, np.asarray(lane.window), s.beta)
        u = torch.rand(n, generator=lane.generator, dtype=torch.float64).numpy()
        return [i for i in range(n) if u[i] < p[i]]

    def next_batch(self, lane: Lane, global_step: int, score: Callable[[dict], torch.Tensor],
                   to_device: Callable[[dict], dict]) -> dict:
        """The next micro-batch this lane trains on (on the device), drawing and sifting as many as it takes."""
        micro, s = self.datamodule.micro_batch_size, self.settings
        sifting = global_step >= s.warmup_steps and s.keep != 1.0
        while len(lane.queue) < micro:
            indices, batch = self._draw(lane)
            n, device_batch = len(indices), None
            if not sifting:
                kept = list(range(n))
            elif s.selector == "uniform":
                kept = self.select(lane, None, n)
            else:
                start = time.perf_counter()
                device_batch = to_device(batch)
                losses = score(device_batch).detach().float().cpu().numpy()
                self.score_seconds += time.perf_counter() - start
                if losses.shape != (n,):
                    raise ValueError(f"sample_losses returned shape {losses.shape} for a micro-batch of {n} samples")
                if not np.isfinite(losses).all():
                    raise FloatingPointError(f"sifting: a sample's loss is not finite (samples {indices}); check the data "
                                             "for non-finite values; lower the learning rate or train in float32")
                kept = self.select(lane, losses, n)
            lane.forwarded += n
            self.step_forwarded += n
            if not lane.queue and len(kept) == n == micro:  # nothing dropped: train on the drawn batch itself
                return self._trained(lane, micro, device_batch if device_batch is not None else to_device(batch))
            lane.queue.extend(indices[i] for i in kept)
        take, lane.queue = lane.queue[:micro], lane.queue[micro:]
        return self._trained(lane, micro, to_device(self._collate(take)))

    def _trained(self, lane: Lane, n: int, batch: dict) -> dict:
        lane.backpropagated += n
        self.step_backpropagated += n
        return batch

    def take_step_counts(self) -> tuple[int, int]:
        """(forwarded, backpropagated) samples of this rank since the last call (one optimizer step)."""
        counts = (self.step_forwarded, self.step_backpropagated)
        self.step_forwarded = self.step_backpropagated = 0
        return counts

    def totals(self) -> tuple[int, int]:
        """(forwarded, backpropagated) samples of this rank's lanes over the phase (resumed parts included)."""
        return (sum(lane.forwarded for lane in self.lanes.values()),
                sum(lane.backpropagated for lane in self.lanes.values()))

    # --- checkpoint ----------------------------------------------------------------------------
    def state(self) -> list[dict]:
        return [lane.state() for lane in self.lanes.values()]

    def load(self, states: list[dict], num_lanes: int) -> None:
        """Restore from the checkpoint's states of every lane (all ranks'); applied at `setup` if lanes are not built yet."""
        pending = {"lanes": states, "num_lanes": num_lanes}
        if self.num_lanes is None:
            self._pending = pending
        else:
            self._restore(pending)

    def _restore(self, pending: dict) -> None:
        if int(pending["num_lanes"]) != self.num_lanes:
            raise ValueError(f"the checkpoint's sifter has {pending['num_lanes']} lanes (devices x gradient accumulation) "
                             f"but this run has {self.num_lanes}: resume with the micro batch size and number of devices "
                             "the run was started with (trainer.micro_batch_size, trainer.devices)")
        by_lane = {int(s["lane"]): s for s in pending["lanes"]}
        for index, lane in self.lanes.items():
            lane.restore(by_lane[index])
