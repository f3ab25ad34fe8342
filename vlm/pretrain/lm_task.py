"""`task=lm_pretrain`: the tiny Llama pretrained on the world's text on the shared core.

`python train.py task=lm_pretrain` (base) or `task=lm_pretrain lm_pretrain.data=dialogues lm_pretrain.init=tiny:mini_llama_base` (instruct).

`LMPretrainTask` is what conf/task/lm_pretrain.yaml names. The model (`CausalLM`, one part `lm`) is a
transformers `LlamaForCausalLM` with tiny_llama's widths (vlm/tiny/text.py `LLAMA_ARGS`, initializer_range
~1/sqrt(width)) and tiny_llama's tokenizer code (`llama_tokenizer`) trained on the world's `lm_text.txt`,
or, with `lm_pretrain.init` (a folder or `tiny:NAME`), the model and tokenizer of that checkpoint.
Data (`lm_pretrain.data`):
- `text`: next-token training on `lm_text.txt`, each line `<s> line </s>`, packed into blocks of `block_size` tokens;
- `dialogues`: `text.json`'s dialogues except the last `lm_pretrain.holdout` (held out for perplexity),
  formatted with `lm_pretrain.prompt_format` (vlm/prompting.py), loss on the answers only; with
  `lm_pretrain.scene_mix` > 0, mixed with scene samples (below) in the same format making up that share, so that
  instruction tuning keeps the lookup the base LM learned, in the instruct LM's own prompt format. A micro-batch whose
  answers are all cut off by `block_size` has no target token: its loss is 0 with zero gradients (what the
  0/0 NaN of transformers' mean loss trained with), and a warning says so once; the core stops a run on a
  NaN loss, so the 0 keeps such runs going while any real divergence still stops them;
- `scenes`: the world's captions, prose lines and `lm_pretrain.questions_per_scene` one-word questions per
  training scene (and `lm_pretrain.extra_questions` generated ones of every family but RefCOCO, with
  `lm_pretrain.box_questions` RefCOCO's boxes too), each after the
  scene's objects given as one vector per patch slot (with `lm_pretrain.sign_slot`, the sign's word too;
  vlm/pretrain/scene_samples.py; the last `lm_pretrain.holdout` scenes held out), in `lm_pretrain.prompt_format`,
  loss on the answers; with `lm_pretrain.slot_background` > 0, a random vector per sample is added to every slot
  in training; `lm_pretrain.kinds` keeps only some kinds of question and `lm_pretrain.vsr_tilt` restates VSR's
  statements to mostly say left of / above (VSR's curriculum: conf/tiny/mini_llama_vsr_tilted.yaml).
When training ends, rank 0 writes `save_pretrained` + the tokenizer files to `RUN_DIR/export/`, which
vlm/backbones.py (`HFBackbone(model_id=RUN_DIR/export)`) loads like a hub model.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from omegaconf import DictConfig
from torch import nn
from torch.utils.data import Dataset
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from core.data import StreamDataModule
from core.module import TrainModule
from core.sifting import mean_token_loss_per_row
from data.atomic import atomic_directory
from vlm.prompting import IGNORE_INDEX, build_prompt_format
from vlm.pretrain.encoder_task import EXPORT
from vlm.pretrain.scene_samples import random_backgrounds, scene_samples, slot_embeddings, slot_tensors
from vlm.pretrain.world import dialogues, text_lines, world_folder
from vlm.tiny import fingerprints_in


class CausalLM(nn.Module):
    """A transformers causal LM with its tokenizer (an attribute, not a module)."""

    def __init__(self, lm: nn.Module, tokenizer, slot_background: float = 0.0):
        super().__init__()
        self.lm = lm
        self.tokenizer = tokenizer
        self.slot_background = float(slot_background)  # scenes: the largest random background norm in training

    warned_no_targets = False

    def inputs(self, batch: dict) -> dict:
        """The LM's inputs: token ids, or (scene samples) embeddings with the patch slots filled."""
        if "slot_mask" not in batch:
            return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        embed, ids = self.lm.get_input_embeddings(), batch["input_ids"]
        background = (random_backgrounds(len(ids), embed.embedding_dim, self.slot_background, ids.device)
                      if self.training and self.slot_background > 0 else None)
        embeds = slot_embeddings(embed, ids, batch["slot_mask"], batch["slot_words"], background)
        return {"inputs_embeds": embeds, "attention_mask": batch["attention_mask"]}

    def loss(self, batch: dict) -> torch.Tensor:
        out = self.lm(**self.inputs(batch), labels=batch["labels"], use_cache=False)
        if (batch["labels"][:, 1:] != IGNORE_INDEX).any():
            return out.loss
        if not self.warned_no_targets:
            warnings.warn("lm_pretrain: a micro-batch has no target tokens (every answer is cut off by "
                          "lm_pretrain.block_size); it trains with a zero loss", stacklevel=2)
            self.warned_no_targets = True
        return out.logits.sum() * 0.0 + 0.0  # zero loss (not -0.0), zero gradients


def build_lm(cfg: DictConfig) -> CausalLM:
    """A fresh tiny Llama with a tokenizer trained on the world's text, or the checkpoint `lm_pretrain.init`."""
    block = cfg.lm_pretrain
    if block.get("init"):
        from vlm.hub import resolve_tiny

        source = resolve_tiny(str(block.init), "lm_pretrain.init")
        return CausalLM(LlamaForCausalLM.from_pretrained(source), AutoTokenizer.from_pretrained(source),
                        block.get("slot_background", 0.0))
    from vlm.tiny.text import LLAMA_ARGS, llama_tokenizer

    world = world_folder(cfg)
    tokenizer = llama_tokenizer(text_lines(world, "lm_text.txt"), vocab_size=int(block.vocab_size))
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, **{**LLAMA_ARGS, **dict(block.get("model") or {})})
    return CausalLM(LlamaForCausalLM(config), tokenizer, block.get("slot_background", 0.0))


def packed_blocks(lines: list[str], tokenizer, block_size: int) -> torch.Tensor:
    """Each line as `<s> ids </s>`, concatenated and cut into (n, block_size) blocks (the remainder dropped)."""
    ids = []
    for line in lines:
        ids += [tokenizer.bos_token_id, *tokenizer(line, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
    n = len(ids) // block_size
    if n == 0:
        raise ValueError(f"the world's lm_text.txt gives {len(ids)} tokens, less than one block of "
                         f"lm_pretrain.block_size={block_size}; lower the block size or generate a larger world")
    return torch.tensor(ids[: n * block_size]).view(n, block_size)


def dialogue_samples(turns_list: list[list[tuple[str, str]]], fmt, max_length: int) -> list[tuple[list[int], list[int]]]:
    """(input_ids, labels) of each dialogue in `fmt` (labels only on the answers), cut to `max_length`."""
    return [tuple(x[:max_length] for x in fmt.build(turns)) for turns in turns_list]


def heldout_split(items: list, holdout: int, what: str) -> tuple[list, list]:
    """(trained, held out): the last `holdout` items are held out."""
    if holdout and len(items) <= holdout:
        raise ValueError(f"{what} has {len(items)} records, not more than holdout={holdout}")
    return (items[: len(items) - holdout], items[len(items) - holdout:]) if holdout else (items, [])


def scenes_of(block: DictConfig, world: Path, tokenizer) -> list:
    """The scene samples `lm_pretrain` describes (vlm/pretrain/scene_samples.py), in its prompt format."""
    if block.get("box_questions", False) and not int(block.get("extra_questions", 0)):
        raise ValueError("lm_pretrain.box_questions=true adds RefCOCO to the generated questions, and none are "
                         "generated: set lm_pretrain.extra_questions (e.g. 8) too")
    return scene_samples(world, tokenizer, build_prompt_format(str(block.prompt_format), tokenizer),
                         int(block.questions_per_scene), int(block.holdout), int(block.block_size),
                         extra_questions=int(block.get("extra_questions", 0)),
                         sign_slot=bool(block.get("sign_slot", False)),
                         box_questions=bool(block.get("box_questions", False)),
                         kinds=None if block.get("kinds") is None else tuple(block.kinds),
                         vsr_tilt=None if block.get("vsr_tilt") is None else float(block.vsr_tilt))


def with_scene_samples(dialogue: list, scenes: list, share: float, seed: int) -> list:
    """The dialogue samples and a seeded random subset of the scene samples making up `share` (0 < share < 1) of
    the mixture, the dialogues given empty slot tables so that one collate takes both."""
    if not 0 < share < 1:
        raise ValueError(f"lm_pretrain.scene_mix={share}: give the scene samples' share of the mixture, in (0, 1)")
    wanted = round(len(dialogue) * share / (1 - share))
    if wanted > len(scenes):
        raise ValueError(f"lm_pretrain.scene_mix={share} needs {wanted} scene samples, the world gives {len(scenes)}; "
                         "lower it or raise lm_pretrain.extra_questions")
    picked = torch.randperm(len(scenes), generator=torch.Generator().manual_seed(seed))[:wanted].tolist()
    return [(ids, labels, {}) for ids, labels in dialogue] + [scenes[i] for i in sorted(picked)]


class TokenSamples(Dataset):
    def __init__(self, samples: list[tuple[list[int], list[int]]]):
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        return self.samples[i]


def collate(samples, pad_id: int) -> dict:
    """Right-padded `input_ids` (pad: `pad_id`), `attention_mask`, `labels` (-100 on padding); scene samples
    (a third element) add `slot_mask` and `slot_words` (vlm/pretrain/scene_samples.py)."""
    width = max(len(sample[0]) for sample in samples)
    input_ids = torch.full((len(samples), width), pad_id)
    labels = torch.full((len(samples), width), IGNORE_INDEX)
    mask = torch.zeros((len(samples), width), dtype=torch.long)
    for i, (ids, lab, *_) in enumerate(samples):
        input_ids[i, : len(ids)], labels[i, : len(lab)], mask[i, : len(ids)] = torch.tensor(ids), torch.tensor(lab), 1
    batch = {"input_ids": input_ids, "attention_mask": mask, "labels": labels}
    if len(samples[0]) == 3:
        batch["slot_mask"], batch["slot_words"] = slot_tensors(samples, width)
    return batch


class LMDataModule(StreamDataModule):
    def __init__(self, samples: list, pad_id: int, micro_batch_size: int, seed: int):
        super().__init__(micro_batch_size, seed)
        self.samples, self.pad_id = samples, pad_id
        self.num_samples = len(samples)

    def setup(self, stage: str | None = None) -> None:
        self.train_dataset = TokenSamples(self.samples)
        self.collate_fn = self._collate

    def _collate(self, samples):
        return collate(samples, self.pad_id)

    def report(self) -> dict:
        return {"samples": self.num_samples}


class LMPretrainModule(TrainModule):
    def parts(self):
        return {"lm": self.model.lm}

    def compute_loss(self, batch):
        return self.model.loss(batch)

    def sample_losses(self, batch):
        out = self.model.lm(**self.model.inputs(batch), use_cache=False)
        return mean_token_loss_per_row(out.logits, batch["labels"])

    def on_train_end(self) -> None:
        if self.trainer.global_rank == 0:
            with atomic_directory(Path(self.trainer.default_root_dir) / EXPORT) as tmp:
                self.model.lm.save_pretrained(tmp)
                self.model.tokenizer.save_pretrained(tmp)


class LMPretrainTask:
    """Language-model pretraining / instruction tuning as a `core.interfaces.Task` (conf/task/lm_pretrain.yaml)."""

    def __init__(self, name: str = "lm_pretrain"):
        self.name = name

    def build_model(self, cfg: DictConfig, run_dir: Path) -> CausalLM:
        return build_lm(cfg)

    def input_identities(self, cfg: DictConfig) -> dict[str, str]:
        return fingerprints_in(cfg.lm_pretrain)  # the tiny flavours' weights (core.run.check_inputs)

    def build_datamodule(self, cfg: DictConfig, phase: DictConfig, model: CausalLM, run_dir: Path,
                         micro_batch_size: int, seed: int) -> LMDataModule:
        block, world, tok = cfg.lm_pretrain, world_folder(cfg), model.tokenizer
        if block.data == "text":
            blocks = packed_blocks(text_lines(world, "lm_text.txt"), tok, int(block.block_size))
            samples = [(ids, ids) for ids in blocks.tolist()]
        elif block.data == "dialogues":
            trained, _ = heldout_split(dialogues(world), int(block.holdout), str(world / "text.json"))
            samples = dialogue_samples(trained, build_prompt_format(str(block.prompt_format), tok), int(block.block_size))
            if float(block.get("scene_mix", 0.0)) > 0:
                samples = with_scene_samples(samples, scenes_of(block, world, tok), float(block.scene_mix), seed)
        elif block.data == "scenes":
            samples = scenes_of(block, world, tok)
        else:
            raise ValueError(f"lm_pretrain.data={block.data!r}: choose text, dialogues or scenes")
        return LMDataModule(samples, tok.eos_token_id, micro_batch_size, seed)

    def build_module(self, cfg: DictConfig, phase: DictConfig, model: CausalLM, total_steps: int) -> LMPretrainModule:
        return LMPretrainModule(model, phase, total_steps)

    def init_from(self, model: nn.Module, source: Path) -> bool:
        return False
