"""`task=encoder_pretrain`: the tiny image tower pretrained on the world's images on the shared core.

`python train.py task=encoder_pretrain encoder_pretrain.objective=clip|siglip|supervised|mae [encoder_pretrain.img_size=96]
[encoder_pretrain.init=tiny:mini_clip]`

`EncoderPretrainTask` is what conf/task/encoder_pretrain.yaml names; core.run.train drives it like any task
(resumable, sweepable, checkpoints and results.json as usual). The model is the objective module of
vlm/pretrain/objectives.py (one part, `objective`: the tower with its heads). Data: the world's align.json
records (image + caption) except the last `encoder_pretrain.holdout` ones, which the quality benchmark
(vlm/pretrain/quality.py) keeps for zero-shot retrieval; `supervised` reads each image's labels from
scenes.json (label vocabulary: the sorted categories of the train scenes). Images are squashed whole to the
square input (resize-naive) through the tower's own timm data config; captions are open_clip token ids.

`encoder_pretrain.init` (a timm folder or `tiny:NAME`) starts the tower from that checkpoint instead of a fresh
one, loaded by timm at `img_size`, which resamples its position embeddings to the new grid; the objective's heads
(the text tower, the classifier, the MAE decoder) start fresh. This is how CLIP ViT-L/14@336 was made: the
224-px CLIP trained on at 336 px (the mini_clip_96 flavour).

When training ends, rank 0 exports the tower with `timm.models.save_for_hf` to `RUN_DIR/export/`, which
`vlm.encoders.TimmEncoder(model_id="local-dir:RUN_DIR/export")` loads like a hub model.
"""

from __future__ import annotations

from pathlib import Path

import timm
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.utils.data import Dataset

from core.data import StreamDataModule
from core.module import TrainModule
from data.atomic import atomic_directory
from vlm.images import image_transform
from vlm.pretrain.objectives import ContrastiveObjective, build_objective, build_tower, tower_args
from vlm.pretrain.world import caption_records, load_image, scene_categories, scenes, world_folder
from vlm.tiny import fingerprints_in

EXPORT = "export"


def objective_settings(cfg: DictConfig) -> dict:
    """The chosen objective's own settings (`encoder_pretrain.settings.<objective>`, may be absent)."""
    block = cfg.encoder_pretrain
    settings = (block.get("settings") or {}).get(block.objective) or {}
    return OmegaConf.to_container(settings, resolve=True) if isinstance(settings, DictConfig) else dict(settings)


def training_records(cfg: DictConfig, world: Path) -> list[tuple[str, str]]:
    """align.json's (image, caption) records without the last `holdout` (kept for retrieval)."""
    records = caption_records(world)
    holdout = int(cfg.encoder_pretrain.get("holdout", 0) or 0)
    if holdout and len(records) <= holdout:
        raise ValueError(f"{world / 'align.json'} has {len(records)} records, not more than encoder_pretrain.holdout="
                         f"{holdout}; lower the holdout or generate a larger world")
    return records[: len(records) - holdout] if holdout else records


def label_vocabulary(world: Path) -> list[str]:
    """The sorted attribute categories of the train scenes (the supervised head's outputs)."""
    return sorted(set().union(*(scene_categories(s) for s in scenes(world, "train").values())))


def pretrained_tower(init: str, img_size: int) -> nn.Module:
    """The image tower of checkpoint `init` (`tiny:NAME`, `local-dir:PATH` or a folder) at `img_size`, loaded by
    timm (its position embeddings resampled to the new grid); it must be the tower `build_tower` makes."""
    from vlm.hub import resolve_tiny

    source = resolve_tiny(init, "encoder_pretrain.init", folder_scheme="local-dir:")
    if not source.startswith(("local-dir:", "hf-hub:")):
        source = f"local-dir:{Path(source).expanduser()}"
    tower = timm.create_model(source, pretrained=True, num_classes=0, img_size=img_size)
    fresh = build_tower(img_size)
    shapes = {k: tuple(v.shape) for k, v in tower.state_dict().items()}
    expected = {k: tuple(v.shape) for k, v in fresh.state_dict().items()}
    if shapes != expected:
        differing = sorted(set(shapes.items()) ^ set(expected.items()))[:4]
        raise ValueError(f"encoder_pretrain.init={init}: {source} is not the tiny tower vlm/pretrain/objectives.py builds "
                         f"(differing parameters, e.g. {differing}); start from a checkpoint this task exported")
    return tower


def tower_transform(tower: nn.Module):
    """PIL image → the tower's input: resize-naive to its square size with its own timm normalisation."""
    config = timm.data.resolve_data_config({}, model=tower)
    config["input_size"] = (3, *tower.patch_embed.img_size)
    return image_transform(config, "resize-naive")


class PretrainImages(Dataset):
    """Images of the world (decoded on access) with caption token ids and/or label vectors."""

    def __init__(self, world: Path, images: list[str], transform, text: torch.Tensor | None, labels: torch.Tensor | None):
        self.world, self.images, self.transform, self.text, self.labels = world, images, transform, text, labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict:
        item = {"pixel_values": self.transform(load_image(self.world, self.images[i]))}
        if self.text is not None:
            item["text"] = self.text[i]
        if self.labels is not None:
            item["labels"] = self.labels[i]
        return item


class EncoderPretrainDataModule(StreamDataModule):
    def __init__(self, dataset: PretrainImages, micro_batch_size: int, seed: int):
        super().__init__(micro_batch_size, seed)
        self.dataset = dataset
        self.num_samples = len(dataset)

    def setup(self, stage: str | None = None) -> None:
        self.train_dataset = self.dataset

    def report(self) -> dict:
        return {"samples": self.num_samples}


class EncoderPretrainModule(TrainModule):
    def parts(self):
        return {"objective": self.model}

    def compute_loss(self, batch):
        return self.model.loss(batch)

    def sample_losses(self, batch):
        return self.model.sample_losses(batch)

    def on_train_end(self) -> None:
        if self.trainer.global_rank == 0:
            export_tower(self.model, Path(self.trainer.default_root_dir) / EXPORT)


def export_tower(model: nn.Module, out: Path) -> None:
    """The objective's tower as a timm hub folder (config.json + model.safetensors), written atomically."""
    tower = model.tower
    args = tower_args(tower.patch_embed.img_size[0])
    with atomic_directory(out) as tmp:
        timm.models.save_for_hf(tower, tmp, model_args=args, safe_serialization=True)


class EncoderPretrainTask:
    """The encoder pretraining objectives as a `core.interfaces.Task` (conf/task/encoder_pretrain.yaml)."""

    def __init__(self, name: str = "encoder_pretrain"):
        self.name = name

    def build_model(self, cfg: DictConfig, run_dir: Path) -> nn.Module:
        block = cfg.encoder_pretrain
        world = world_folder(cfg)
        num_labels = len(label_vocabulary(world)) if block.objective == "supervised" else 0
        tower = pretrained_tower(str(block.init), int(block.img_size)) if block.get("init") else None
        return build_objective(str(block.objective), int(block.img_size), num_labels, objective_settings(cfg), tower)

    def input_identities(self, cfg: DictConfig) -> dict[str, str]:
        return fingerprints_in(cfg.encoder_pretrain)  # the tiny flavours' weights (core.run.check_inputs)

    def build_datamodule(self, cfg: DictConfig, phase: DictConfig, model: nn.Module, run_dir: Path,
                         micro_batch_size: int, seed: int) -> EncoderPretrainDataModule:
        world = world_folder(cfg)
        records = training_records(cfg, world)
        images = [image for image, _ in records]
        text = labels = None
        if isinstance(model, ContrastiveObjective):
            from open_clip.tokenizer import SimpleTokenizer

            text = SimpleTokenizer(context_length=model.context_length)([caption for _, caption in records])
        if hasattr(model, "head"):
            vocab = {name: k for k, name in enumerate(label_vocabulary(world))}
            train_scenes = scenes(world, "train")
            labels = torch.zeros(len(images), len(vocab), dtype=torch.uint8)
            for i, image in enumerate(images):
                if image not in train_scenes:
                    raise ValueError(f"{world / 'align.json'} names image {image}, which scenes.json['train'] lacks")
                for name in scene_categories(train_scenes[image]):
                    labels[i, vocab[name]] = 1
        dataset = PretrainImages(world, images, tower_transform(model.tower), text, labels)
        return EncoderPretrainDataModule(dataset, micro_batch_size, seed)

    def build_module(self, cfg: DictConfig, phase: DictConfig, model: nn.Module, total_steps: int) -> EncoderPretrainModule:
        return EncoderPretrainModule(model, phase, total_steps)

    def init_from(self, model: nn.Module, source: Path) -> bool:
        """No other format: the core loads `source/model.safetensors`."""
        return False
