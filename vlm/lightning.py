"""Lightning wrappers of the VLM on the shared core: the task, its module and its data.

`VLMTask` is what `conf/task/vlm.yaml` names; `core.run.train` asks it for the
model, then for each phase of the recipe a data module and a module. Parts a
phase may train: `encoder`, `projector`, `backbone`.

Data splits: each phase lists the splits it trains on (`phase.data`, e.g.
`{align: 1}`, or a mapping `{align: 0.5, instruct: 1}` giving how
many times each split's samples appear per pass — fractions take a seeded
random subset); `cfg.data.splits` maps a split name to a LLaVA JSON file under
`cfg.data.image_root`, or to sources with their own image roots (data/sources.py).
Text-only records train as text. `phase.prompt_format` (optional; null = the
backbone's) is the format this phase's data is tokenized with (e.g. `plain` for
LLaVA-1.5's stage 1); generation and evaluation keep the backbone's.
`data.max_turns` splits long conversations into samples
of at most that many question/answer pairs (each keeps the image).
`data.group_by_length` (or a phase's own `group_by_length`) makes each micro-batch hold samples of one image count
and similar spliced length (core.data.GroupedStreamSampler; less padding).
`data.cache` (a folder; null: tokenize in-process at every start): the phase's sources are prepared once with Ray
Data (`data.prepare_workers`, `data.ray_address`; data/prepare.py) and read memory-mapped; rank 0 prepares, the
other ranks wait; the samples and their order are those of the in-process path.

Images (data/image_decode.py): `data.max_image_pixels`, `data.oversize_images` (refuse | downscale) and
`data.allow_images_outside_root` decide which image files validation accepts and how they decode; with
`data.skip_bad`, a sample whose image fails to decode during training is skipped and counted
(`skipped/undecodable image` in results.json, summed over ranks).

LoRA (`lora.enabled`): the backbone carries peft adapters (vlm/lora.py); a
phase that trains `backbone` trains only the adapters.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig
from rich.console import Console

from core.data import StreamDataModule
from core.flops import hf_decoder_flops_per_token
from core.module import TrainModule
from core.sifting import mean_token_loss_per_row
from core.progress import track
from data.image_decode import DEFAULT_IMAGES, ImagePolicy
from data.llava import load_llava
from data.shards import IndexedSamples
from data.sources import DataSource, require_files, resolve
from vlm.dataset import Collator, VLMDataset, prepared_samples, tokenize_records
from vlm.lora import freeze_all_but_adapters, has_lora
from vlm.model import VLM, build_vlm
from vlm.prompting import PromptFormat, build_prompt_format
from vlm.tiny import fingerprints_in

console = Console()


class VLMModule(TrainModule):
    model: VLM

    def parts(self):
        return {"encoder": self.model.encoder, "projector": self.model.projector, "backbone": self.model.backbone}

    def apply_trainable(self) -> None:
        super().apply_trainable()
        if has_lora(self.model.backbone):  # LoRA: training the backbone means training its adapters only
            freeze_all_but_adapters(self.model.backbone)

    def on_train_end(self) -> None:
        """Add the samples skipped at decode on every rank to the data module's skip counts (results.json)."""
        mine = self.skipped_records + (self.sifter.skipped_records if self.sifter is not None else 0)
        total = int(self.trainer.strategy.reduce(torch.tensor(float(mine), device=self.device), reduce_op="sum"))
        datamodule = getattr(self.trainer, "datamodule", None)
        if total and datamodule is not None and hasattr(datamodule, "skipped"):
            datamodule.skipped["undecodable image"] += total

    def compute_loss(self, batch):
        return self.model(**batch).loss

    def sample_losses(self, batch):
        """Each row's mean loss over its supervised tokens (the answers), images spliced in as in training."""
        embeds, mask, labels = self.model.splice(batch["input_ids"], batch["attention_mask"], batch["labels"],
                                                 batch.get("pixel_values"), batch.get("image_mask"),
                                                 batch.get("image_positions"))
        logits = self.model.backbone(inputs_embeds=embeds, attention_mask=mask).logits
        return mean_token_loss_per_row(logits, labels)

    @staticmethod
    def _images(batch) -> tuple[int, int]:
        """(images in the batch, most images in one row)."""
        pixels, positions = batch.get("pixel_values"), batch.get("image_positions")
        if pixels is None:
            return 0, 0
        return pixels.shape[0], int((positions >= 0).sum(1).max()) if positions is not None else 1

    def batch_tokens(self, batch) -> int:
        """Non-padding tokens the language model processes: text tokens plus the spliced image patches."""
        return int(batch["attention_mask"].sum()) + self._images(batch)[0] * self.model.encoder.num_patches

    def batch_flops(self, batch) -> float:
        """6·N + attention FLOPs per token for the language model (at this batch's spliced length) and for
        the ViT (per patch), plus the projector's 6·N per patch."""
        enc, (n_images, per_row) = self.model.encoder, self._images(batch)
        length = batch["input_ids"].shape[1] + enc.num_patches * per_row
        flops = self.batch_tokens(batch) * hf_decoder_flops_per_token(self.model.backbone.model, length)
        vit = enc.flops_per_patch()  # every encoder (timm, open_clip, fused) counts its own blocks
        projector = 6.0 * sum(p.numel() for p in self.model.projector.parameters())
        return flops + n_images * enc.num_patches * (vit + projector)


class VLMDataModule(StreamDataModule):
    def __init__(self, source: DataSource, splits: dict[str, float], model: VLM, micro_batch_size: int, seed: int,
                 skip_bad: bool = False, num_workers: int = 0, max_turns: int | None = None, group_by_length: bool = False,
                 prompt_format: PromptFormat | None = None, cache: str | Path | None = None,
                 prepare_workers: int | None = None, ray_address: str | None = None, images: ImagePolicy = DEFAULT_IMAGES):
        super().__init__(micro_batch_size, seed, num_workers=num_workers)
        self.images = images
        self.cache, self.prepare_workers, self.ray_address = cache, prepare_workers, ray_address
        self.group_by_length = group_by_length
        self.source = source
        self.skip_bad = skip_bad
        self.max_turns = max_turns
        self.splits = dict(splits)
        self.model = model
        self.prompt_format = prompt_format or model.prompt_format
        self.skipped: Counter = Counter()
        self.dropped: Counter = Counter()
        self.num_samples = 0
        self._ready = False

    def setup(self, stage: str | None = None) -> None:
        if self._ready:
            return
        if self.cache:
            return self._setup_prepared()
        samples = []
        for split, weight in self.splits.items():
            if split not in self.source.splits:
                raise ValueError(f"phase data split {split!r} is not in data.splits ({sorted(self.source.splits)})")
            part = []
            for src in self.source.splits[split]:
                records, skipped = load_llava(src.json, src.image_root, skip_bad=self.skip_bad, progress=track, images=self.images)
                self.skipped.update(skipped)
                tokenized, dropped = tokenize_records(
                    records, self.prompt_format, src.image_root, self.model.backbone.max_length,
                    self.model.encoder.num_patches, max_turns=self.max_turns, progress=track,
                )
                self.dropped.update(dropped)
                part += tokenized
            samples += repeat(part, float(weight), self.seed)
        self.train_dataset = VLMDataset(samples, self.model.encoder.transform, self.images, self.skip_bad)
        if self.group_by_length:  # micro-batches of one image count and similar spliced length
            patches = self.model.encoder.num_patches
            self.group_keys = [len(s.images) for s in samples]
            self.lengths = [len(s.input_ids) + patches * len(s.images) for s in samples]
        self._finish(samples)

    def _setup_prepared(self) -> None:
        """The phase's samples from the prepared cache (`data.cache`): memory-mapped shards and index arrays, no
        per-record Python list; the same samples in the same order as the in-process path."""
        rank = self.trainer.global_rank if self.trainer else 0
        parts, indices = [], []
        for split, weight in self.splits.items():
            if split not in self.source.splits:
                raise ValueError(f"phase data split {split!r} is not in data.splits ({sorted(self.source.splits)})")
            shards, skipped, dropped = prepared_samples(
                self.source.splits[split], self.prompt_format, self.model.backbone.max_length,
                self.model.encoder.num_patches, self.max_turns, Path(str(self.cache)).expanduser(), self.skip_bad,
                workers=self.prepare_workers, ray_address=self.ray_address, rank=rank, log=console.print,
                images=self.images)
            self.skipped.update(skipped)
            self.dropped.update(dropped)
            part = IndexedSamples(shards, [np.arange(len(p)) for p in shards])
            parts.append(part)
            indices.append(repeat_indices(len(part), float(weight), self.seed))
        samples = IndexedSamples(parts, indices)
        self.train_dataset = VLMDataset(samples, self.model.encoder.transform, self.images, self.skip_bad)
        if self.group_by_length:
            tokens, images = samples.lengths()
            self.group_keys = images
            self.lengths = tokens + self.model.encoder.num_patches * images
        self._finish(samples)

    def _finish(self, samples) -> None:
        self.collate_fn = Collator(self.model.tokenizer.pad_token_id)
        self.num_samples = len(samples)
        self._ready = True
        console.print(f"data {dict(self.splits)}: {self.num_samples} samples" + (f"; {self.report()}" if self.report() else ""))

    def report(self) -> dict:
        """Records skipped as bad (`skipped/<reason>`) and samples dropped at tokenization (`dropped/<reason>`)."""
        out = {f"skipped/{k}": v for k, v in self.skipped.items()}
        out.update({f"dropped/{k}": v for k, v in self.dropped.items()})
        return out


def repeat_indices(size: int, weight: float, seed: int) -> np.ndarray:
    """The indices `repeat` takes from `size` samples, as an array."""
    whole, frac = divmod(weight, 1.0)
    extra = np.zeros(0, dtype=np.int64)
    if frac:
        order = torch.randperm(size, generator=torch.Generator().manual_seed(seed))
        extra = order[: round(frac * size)].numpy().astype(np.int64)
    return np.concatenate([np.tile(np.arange(size, dtype=np.int64), int(whole)), extra])


def repeat(samples: list, weight: float, seed: int) -> list:
    """`weight` copies of `samples`: whole copies, then a seeded random subset for the fraction."""
    whole, frac = divmod(weight, 1.0)
    extra = []
    if frac:
        order = torch.randperm(len(samples), generator=torch.Generator().manual_seed(seed))
        extra = [samples[i] for i in order[: round(frac * len(samples))].tolist()]
    return samples * int(whole) + extra


class VLMTask:
    """The VLM as a `core.interfaces.Task` (`task=vlm`, conf/task/vlm.yaml): builds the model from the
    encoder/backbone/projector groups, and per phase the data module of its splits and the module."""

    def __init__(self, name: str = "vlm"):
        self.name = name

    def build_model(self, cfg: DictConfig, run_dir: Path) -> VLM:
        """The VLM, once every data file the recipe's phases read is known to exist (a missing one stops the run
        in seconds, naming the file and the command that prepares it, before any weights load)."""
        require_files(cfg.data, sorted({split for phase in cfg.stage.phases.values() for split in phase.data}))
        return build_vlm(cfg)

    def input_identities(self, cfg: DictConfig) -> dict[str, str]:
        return fingerprints_in(cfg.encoder, cfg.backbone)  # the tiny flavours' weights (core.run.check_inputs)

    def build_datamodule(self, cfg: DictConfig, phase: DictConfig, model: VLM, run_dir: Path,
                         micro_batch_size: int, seed: int) -> VLMDataModule:
        """The phase's splits (with their weights), tokenized with `phase.prompt_format` (null: the backbone's);
        `phase.group_by_length` (null: `data.group_by_length`) groups micro-batches by modality and length."""
        splits = dict(phase.data) if isinstance(phase.data, DictConfig) else {name: 1.0 for name in phase.data}
        name = phase.get("prompt_format")
        fmt = build_prompt_format(name, model.tokenizer) if name else None
        group_by_length = phase.get("group_by_length")  # a phase may set it (LLaVA-1.5: stage 2 only); else the data's
        if group_by_length is None:
            group_by_length = cfg.data.get("group_by_length", False)
        return VLMDataModule(resolve(cfg.data), splits, model, micro_batch_size, seed,
                             skip_bad=bool(cfg.data.get("skip_bad", False)), num_workers=int(cfg.data.get("num_workers", 0)),
                             max_turns=cfg.data.get("max_turns"), group_by_length=bool(group_by_length),
                             prompt_format=fmt, cache=cfg.data.get("cache"), prepare_workers=cfg.data.get("prepare_workers"),
                             ray_address=cfg.data.get("ray_address"), images=ImagePolicy.from_config(cfg.data))

    def build_module(self, cfg: DictConfig, phase: DictConfig, model: VLM, total_steps: int) -> VLMModule:
        return VLMModule(model, phase, total_steps)

    def init_from(self, model: VLM, source: Path) -> bool:
        """Load an HF Llava folder (config.json with model_type llava) into `model` (vlm/hf_llava.py); False for
        anything else, which `core.run` then loads as a refract run directory — except a run trained without LoRA
        into a model with adapters, loaded here under the adapters' base layers."""
        from vlm.hf_llava import is_hf_llava, load_hf_llava

        if not is_hf_llava(source):
            return self._init_lora_from_plain_run(model, source)
        load_hf_llava(model, source)
        return True

    @staticmethod
    def _init_lora_from_plain_run(model: VLM, path: Path) -> bool:
        """A LoRA model starting from a run trained without LoRA: its weights under the adapters' base layers."""
        from safetensors.torch import load_file

        from core.weights import check_file, verify_file
        from vlm.lora import is_adapter, load_plain_weights

        weights = Path(path) / "model.safetensors"
        if not has_lora(model) or not weights.exists():
            return False
        verify_file(Path(path), weights)  # damaged weights fail naming the file (core/weights.py)
        check_file(weights)
        state = load_file(str(weights))
        if any(is_adapter(k) for k in state):
            return False  # a LoRA run: core.run loads it as it is
        load_plain_weights(model, state, where=str(weights))
        return True
