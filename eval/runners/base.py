"""The runner base every benchmark uses: items → model → resumable predictions log → official file → scorer.

A benchmark runner is a Hydra `_target_` (see `conf/benchmark/*.yaml`) that conforms to
`core.interfaces.Benchmark`: `core.run.evaluate` calls it as `runner(run_dir, cfg) -> metrics`:

    python evaluate.py run=RUN_DIR benchmark=NAME benchmark.root=PATH [limit=N] [batch_size=B]

A subclass only says what the benchmark's items are (`items`: id, image path, prompt, and answer
options for the probability-scored benchmarks), how one prediction is written in the benchmark's
official predictions format (`official`), which files score the full benchmark (`scoring_files`)
and how the file named by `subset_of` looks when cut to some items (`subset`). This base does the rest:

- `cfg.limit`: only the first N items are asked and scored: the `subset_of` file is replaced by
  `subset(items)`, written to `RUN_DIR/predictions/<name>.<subset_name>` (a folder of files when
  `subset` returns `Folder`), so questions never asked are not counted as missing;
- batches of `cfg.batch_size`, greedy `VLM.generate` (free answers), and for items with answer options
  `VLM.score` over them (`benchmark.mode: likelihood`) or greedy generation parsed by `parse_generated` as
  the benchmark's official evaluation parses it (`mode: generate`), with a rich progress bar;
- `RUN_DIR/predictions/<name>.jsonl` is the working log: a first line `{"_meta": {...}}` (the
  settings and weights it was made with), then one prediction object per line, appended, flushed and
  fsync'ed after every batch. A later run with the same settings and weights resumes after the
  predictions already there (a trailing partial line left by a crash is dropped and rewritten); with
  other settings or weights it starts over (eval/predlog.py);
- `cfg.devices=N` (core/launch.py): the missing items' batches are dealt round-robin to N processes, each
  appending to its own part of the log; rank 0 merges the parts and scores once (see `predict`). On a GPU the
  language model runs in bfloat16 (`cfg.precision`);
- `RUN_DIR/predictions/<name>.json`: the asked items' predictions in the official format, scored
  by the config's `scorer` (see `eval.scorers.build_scorer`). The metrics dict is returned as the
  scorer returns it (overall accuracy under `accuracy`, percent).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from PIL import Image
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

import vlm
from core.launch import barrier, local_device, rank_world
from data.atomic import atomic_directory, atomic_file
from data.image_decode import decode_image
from eval.predlog import consolidate, read_log, shard_log
from eval.scorers import build_scorer

console = Console()
MODES = ("likelihood", "generate")  # benchmark.mode of benchmarks with answer options (docs/evaluation.md)
PRECISIONS = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # `precision`: the language model's weights


@dataclass
class Item:
    """One question: `id` is unique within the benchmark (the key of the predictions log)."""

    id: str
    image: Path | None
    prompt: str
    options: list[str] | None = None  # None: free generation; else the answers `VLM.score` chooses from
    meta: dict[str, Any] = field(default_factory=dict)  # what `official` needs (original id, split, ...)


class Folder(dict):
    """A subset written as a folder: file name -> content (text as is, anything else as JSON)."""


class Runner:
    """Base runner. Subclasses implement `items` and `scoring_files`, override `official` / `subset` /
    `answer_of` where the default does not fit, and set `subset_of` / `subset_name` when the file cut
    to the asked items is not the annotations (see the module docstring)."""

    subset_of: str = "annotations"        # the `scoring_files` key replaced by `subset(items)` under `limit`
    shardable = True                      # `devices=N` splits the items between N processes (core/launch.py)
    subset_name: str = "annotations.json"  # written as predictions/<name>.<subset_name>

    def __init__(self, name: str, scorer: Any, root: str | None = None, prompt_suffix: str = "",
                 max_new_tokens: int = 16, mode: str = "likelihood", main_metric: str = "accuracy", generator: Any = None,
                 **settings: Any):
        if mode not in MODES:
            raise ValueError(f"benchmark {name}: benchmark.mode={mode!r}; choose one of {list(MODES)}")
        self.name = name
        self.main_metric = main_metric  # the one number reports compare (core/report.py)
        self.root = Path(root) if root else None
        self.generator = generator  # root null: a Hydra node (or its result) making the folder (a generated benchmark)
        self.prompt_suffix = prompt_suffix or ""
        self.max_new_tokens = int(max_new_tokens)
        self.mode = mode  # how items with answer options are answered (free-answer items always generate)
        self.score = build_scorer(scorer, name)
        self.settings = dict(settings)

    # --- what a benchmark defines --------------------------------------------------------------------------
    def items(self, run_dir: Path) -> list[Item]:
        raise NotImplementedError

    def official(self, item: Item, answer: Any) -> dict:
        """One record of the official predictions file (default `{"question_id", "answer"}`)."""
        return {"question_id": item.meta.get("question_id", item.id), "answer": answer}

    def scoring_files(self, run_dir: Path) -> dict:
        """Keyword arguments for the scorer besides the predictions, for the whole benchmark:
        `annotations`, and `questions` / `split` where the scorer takes them."""
        return {"annotations": self.path("annotations")}

    def subset(self, items: list[Item]) -> Any:
        """The `subset_of` file cut to `items`, in its own layout (default: a JSON list of the items' raw records)."""
        return [it.meta["raw"] for it in items]

    def answer_of(self, item: Item, probs: list[float]) -> Any:
        """The answer written for a probability-scored item (default: the most probable option's text)."""
        return item.options[max(range(len(probs)), key=probs.__getitem__)]

    def parse_generated(self, item: Item, text: str) -> Any:
        """The answer written for an item with options answered by generation (`mode: generate`); default: the
        text itself, which the scorer maps officially (POPE: LLaVA's yes/no rule)."""
        return text

    # --- helpers for subclasses ----------------------------------------------------------------------------
    def path(self, key: str) -> Path:
        """The configured file `key` under `root`, which must exist."""
        rel = self.settings.get(key)
        if rel is None:
            raise ValueError(f"benchmark {self.name}: benchmark.{key} is not set")
        if self.root is None and self.generator is not None:  # once, lazily: the generated folder
            self.root = Path(instantiate(self.generator) if isinstance(self.generator, Mapping) else self.generator)
        if self.root is None:
            raise FileNotFoundError(f"benchmark {self.name} needs benchmark.root=PATH (the folder holding "
                                    f"{rel}; see docs/evaluation.md)")
        p = self.root / str(rel)
        if not p.exists():
            raise FileNotFoundError(f"{p} not found: benchmark {self.name} expects benchmark.{key}={rel} under "
                                    f"benchmark.root={self.root} (layout in docs/evaluation.md)")
        return p

    def image_path(self, *parts: str) -> Path:
        return self.path("images") / Path(*parts)

    # --- the run --------------------------------------------------------------------------------------------
    def __call__(self, run_dir: Path, cfg) -> dict:
        run_dir = Path(run_dir)
        pred_dir = run_dir / "predictions"
        pred_dir.mkdir(parents=True, exist_ok=True)
        items = self.items(run_dir)
        limit = cfg.get("limit")
        limited = bool(limit) and int(limit) < len(items)
        if limit:
            items = items[: int(limit)]
        ids = [it.id for it in items]
        if len(set(ids)) != len(ids):
            raise ValueError(f"benchmark {self.name}: duplicated item ids; the runner needs one id per question")
        done = self.predict(run_dir, items, cfg)
        if done is None:  # another rank than 0 of a sharded evaluation: rank 0 merges and scores
            return None
        official = [self.official(it, done[it.id]["answer"]) for it in items]
        out = pred_dir / f"{self.name}.json"
        with atomic_file(out) as tmp:
            tmp.write_text(json.dumps(official, indent=1))
        files = self.scoring_files(run_dir)
        if limited:
            files[self.subset_of] = write_subset(pred_dir / f"{self.name}.{self.subset_name}", self.subset(items))
        return self.score(str(out), str(files["annotations"]),
                          questions=None if files.get("questions") is None else str(files["questions"]),
                          split=files.get("split"))

    def fingerprint(self, run_dir: Path, cfg=None) -> dict:
        weights, config = run_dir / "model.safetensors", run_dir / "config.yaml"
        stat = weights.stat() if weights.exists() else None
        if stat is not None:
            identity = f"{stat.st_size}-{stat.st_mtime_ns}"
        else:  # an imported checkpoint (core/imported.py): its config.yaml names the folder, settings and weight files
            identity = hashlib.sha1(config.read_bytes()).hexdigest()[:12] if config.exists() else None
        settings = {"prompt_suffix": self.prompt_suffix, "max_new_tokens": self.max_new_tokens, "mode": self.mode,
                    "settings": {k: str(v) for k, v in sorted(self.settings.items())}, "root": str(self.root)}
        if precision_of(cfg) != "float32":  # float32 logs (all of them before `precision` existed) stay valid
            settings["precision"] = precision_of(cfg)
        digest = hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
        return {"benchmark": self.name, "settings": digest, "weights": identity}

    def predict(self, run_dir: Path, items: list[Item], cfg) -> dict[str, dict] | None:
        """Predictions for `items` by id, resuming the log; the model is loaded only if some are missing.

        With several processes (core/launch.py) rank 0 first folds every part of the log into it; then the items
        still missing are cut into the batches one process would run, and rank r runs batches r, r+N, r+2N, ...
        appending to its own part of the log (eval/predlog.py), so every batch, and hence every prediction, is
        the one a single process makes. After a barrier rank 0 folds the parts in again and returns everything;
        the other ranks return None."""
        log = run_dir / "predictions" / f"{self.name}.jsonl"
        meta = self.fingerprint(run_dir, cfg)
        rank, world = rank_world()
        done = consolidate(log, meta) if rank == 0 else {}
        if world > 1:
            barrier()
            if rank:
                done = read_log(log, meta)  # already clean: read only
        todo = [it for it in items if it.id not in done]
        batch = max(1, int(cfg.get("batch_size") or 64))
        mine = [todo[s : s + batch] for s in range(0, len(todo), batch)][rank::world]
        if done and todo and rank == 0:
            console.print(f"{self.name}: resuming {log}: {len(items) - len(todo)} of {len(items)} items already answered")
        if mine:
            self.answer(run_dir, mine, log if world == 1 else shard_log(log, rank), meta, cfg, done, batch)
        if world == 1:
            return done
        barrier()
        return consolidate(log, meta) if rank == 0 else None

    def answer(self, run_dir: Path, chunks: list[list[Item]], log: Path, meta: dict, cfg, done: dict, batch: int) -> None:
        """Run the model on `chunks` (batches), appending each batch's predictions to `log` and `done`."""
        if not log.exists():
            read_log(log, meta)  # a new part: its `_meta` line
        device, precision = local_device(cfg), precision_of(cfg)
        model = vlm.load(run_dir, device=device, trust_remote_code=bool(cfg.get("trust_remote_code")))
        if precision != "float32":  # the language model in the GPU's precision; the vision tower stays float32
            model.backbone.to(PRECISIONS[precision])
        rank, world = rank_world()
        label = self.name if world == 1 else f"{self.name} (rank {rank} of {world})"
        total = sum(len(c) for c in chunks)
        columns = (TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with open(log, "a", encoding="utf-8") as f, Progress(*columns, console=console, transient=False,
                                                             disable=rank != 0) as bar:
            task = bar.add_task(label, total=total)
            for chunk in chunks:
                for it, rec in zip(chunk, self.run_batch(model, chunk, batch), strict=True):
                    done[it.id] = rec
                    f.write(json.dumps(rec) + "\n")
                f.flush()
                os.fsync(f.fileno())
                bar.advance(task, len(chunk))

    def run_batch(self, model, chunk: list[Item], batch_size: int) -> list[dict]:
        images = [load_image(it.image) for it in chunk]
        prompts = [it.prompt for it in chunk]
        if chunk[0].options is None:
            answers = model.generate(images, prompts, max_new_tokens=self.max_new_tokens, do_sample=False)
            return [{"id": it.id, "answer": a} for it, a in zip(chunk, answers, strict=True)]
        if self.mode == "generate":  # greedy text, parsed as the benchmark's official evaluation does
            texts = model.generate(images, prompts, max_new_tokens=self.max_new_tokens, do_sample=False)
            return [{"id": it.id, "answer": self.parse_generated(it, t), "text": t} for it, t in zip(chunk, texts, strict=True)]
        probs = model.score(images, prompts, [it.options for it in chunk], batch_size=batch_size)
        return [{"id": it.id, "answer": self.answer_of(it, p), "probs": [round(float(x), 6) for x in p]}
                for it, p in zip(chunk, probs, strict=True)]


def precision_of(cfg) -> str:
    """The language model's precision: `cfg.precision`, or bfloat16 on a GPU and float32 on the CPU."""
    precision = (cfg.get("precision") if cfg is not None else None) or (
        "bfloat16" if cfg is not None and local_device(cfg).startswith("cuda") else "float32")
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}; choose one of {list(PRECISIONS)} (or null: bfloat16 on a GPU)")
    return precision


def write_subset(out: Path, data: Any) -> Path:
    """Write a cut-down scoring file (or, for a `Folder`, a folder of files) at `out`; returns `out`."""
    if not isinstance(data, Folder):
        with atomic_file(out) as tmp:
            tmp.write_text(json.dumps(data))
        return out
    with atomic_directory(out) as tmp:
        for name, content in data.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(content if isinstance(content, str) else json.dumps(content))
    return out


def load_image(path: Path | None) -> Image.Image | None:
    """The item's image as training decodes images (data/image_decode.py); a damaged one names the file."""
    if path is None:
        return None
    if not Path(path).is_file():
        raise FileNotFoundError(f"image {path} not found (image layouts under benchmark.root: docs/evaluation.md)")
    return decode_image(path)
