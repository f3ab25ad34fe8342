"""Lightning wrappers of the VLM on the shared core: the task, its module and its data.

`VLMTask` is what `conf/task/vlm.yaml` names; `core.run.train` asks it for the
model, then for each phase of the recipe a data module and a module. Parts a
phase may train: `encoder`, `projector`, `backbone`.

Data splits: each phase lists the splits it trains on (`phase.data`, e.g.
`{align: 1}`, or a mapping `{align: 0.5, instruct: 1}` giving how
many times each split's samples appear per pass — fractions take a seeded
random subset); `cfg.data.splits` maps a split name to a LLaVA JSON file under
`cfg.data.image_root`. `data.max_turns` splits long conversations into samples
of at most that many question/answer pairs (each keeps the image).
"""

from __future__ import annotations

from collections import Counter
import torch
from omegaconf import DictConfig
from rich.console import Console

from core.data import StreamDataModule
from core.flops import decoder_flops_per_token, hf_decoder_flops_per_token, non_embedding_params
from core.module import TrainModule
from data.llava import load_llava
from data.sources import DataSource, resolve
from vlm.dataset import Collator, VLMDataset, tokenize_records
from vlm.model import VLM, build_vlm

console = Console()


class VLMModule(TrainModule):
    model: VLM

    def parts(self):
        return {"encoder": self.model.encoder, "projector": self.model.projector, "backbone": self.model.backbone}

    def compute_loss(self, batch):
        return self.model(**batch).loss

    def batch_tokens(self, batch) -> int:
        """Non-padding tokens the language model processes: text tokens plus the spliced image patches."""
        return int(batch["attention_mask"].sum()) + int(batch["image_mask"].sum()) * self.model.encoder.num_patches

    def batch_flops(self, batch) -> float:
        """6·N + attention FLOPs per token for the language model (at this batch's spliced length) and for
        the ViT (per patch), plus the projector's 6·N per patch."""
        enc, n_images = self.model.encoder, int(batch["image_mask"].sum())
        length = batch["input_ids"].shape[1] + (enc.num_patches if n_images else 0)
        flops = self.batch_tokens(batch) * hf_decoder_flops_per_token(self.model.backbone.model, length)
        vit = decoder_flops_per_token(non_embedding_params(enc), len(enc.model.blocks), enc.embed_dim, enc.num_patches)
        projector = 6.0 * sum(p.numel() for p in self.model.projector.parameters())
        return flops + n_images * enc.num_patches * (vit + projector)


class VLMDataModule(StreamDataModule):
    def __init__(self, source: DataSource, splits: dict[str, float], model: VLM, micro_batch_size: int, seed: int,
                 skip_bad: bool = False, num_workers: int = 0, max_turns: int | None = None):
        super().__init__(micro_batch_size, seed, num_workers=num_workers)
        self.source = source
        self.skip_bad = skip_bad
        self.max_turns = max_turns
        self.splits = dict(splits)
        self.model = model
        self.skipped: Counter = Counter()
        self.dropped: Counter = Counter()
        self.num_samples = 0
        self._ready = False

    def setup(self, stage: str | None = None) -> None:
        if self._ready:
            return
        root = self.source.image_root
        samples = []
        for split, weight in self.splits.items():
            if split not in self.source.splits:
                raise ValueError(f"phase data split {split!r} is not in data.splits ({sorted(self.source.splits)})")
            records, skipped = load_llava(self.source.splits[split], root, skip_bad=self.skip_bad)
            self.skipped.update(skipped)
            part, dropped = tokenize_records(
                records, self.model.prompt_format, root, self.model.backbone.max_length, self.model.encoder.num_patches,
                max_turns=self.max_turns,
            )
            self.dropped.update(dropped)
            samples += repeat(part, float(weight), self.seed)
        self.train_dataset = VLMDataset(samples, self.model.encoder.transform)
        self.collate_fn = Collator(self.model.tokenizer.pad_token_id)
        self.num_samples = len(samples)
        self._ready = True
        console.print(f"data {dict(self.splits)}: {self.num_samples} samples" + (f"; {self.report()}" if self.report() else ""))

    def report(self) -> dict:
        """Records skipped as bad (`skipped/<reason>`) and samples dropped at tokenization (`dropped/<reason>`)."""
        out = {f"skipped/{k}": v for k, v in self.skipped.items()}
        out.update({f"dropped/{k}": v for k, v in self.dropped.items()})
        return out


def repeat(samples: list, weight: float, seed: int) -> list:
    """`weight` copies of `samples`: whole copies, then a seeded random subset for the fraction."""
    whole, frac = divmod(weight, 1.0)
    extra = []
    if frac:
        order = torch.randperm(len(samples), generator=torch.Generator().manual_seed(seed))
        extra = [samples[i] for i in order[: round(frac * len(samples))].tolist()]
    return samples * int(whole) + extra


class VLMTask:
    """Builds the VLM pieces for `core.run.train` (named by `conf/task/vlm.yaml`)."""

    def __init__(self, name: str = "vlm", run_name_parts: list | None = None):
        self.name = name

    def build_model(self, cfg) -> VLM:
        return build_vlm(cfg)

    def build_datamodule(self, cfg, phase, model: VLM, micro_batch_size: int, seed: int) -> VLMDataModule:
        splits = dict(phase.data) if isinstance(phase.data, DictConfig) else {name: 1.0 for name in phase.data}
        return VLMDataModule(resolve(cfg.data), splits, model, micro_batch_size, seed,
                             skip_bad=bool(cfg.data.get("skip_bad", False)), num_workers=int(cfg.data.get("num_workers", 0)),
                             max_turns=cfg.data.get("max_turns"))

    def build_module(self, cfg, phase, model: VLM, total_steps: int) -> VLMModule:
        return VLMModule(model, phase, total_steps)
