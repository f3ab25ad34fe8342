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
  other settings or weights it starts over;
- `RUN_DIR/predictions/<name>.json`: the asked items' predictions in the official format, scored
  by the config's `scorer` (see `eval.scorers.build_scorer`). The metrics dict is returned as the
  scorer returns it (overall accuracy under `accuracy`, percent).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

import vlm
from data.atomic import atomic_directory, atomic_file
from eval.scorers import build_scorer

console = Console()
MODES = ("likelihood", "generate")  # benchmark.mode of benchmarks with answer options (docs/evaluation.md)


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
    subset_name: str = "annotations.json"  # written as predictions/<name>.<subset_name>

    def __init__(self, name: str, scorer: Any, root: str | None = None, prompt_suffix: str = "",
                 max_new_tokens: int = 16, mode: str = "likelihood", **settings: Any):
        if mode not in MODES:
            raise ValueError(f"benchmark {name}: benchmark.mode={mode!r}; choose one of {list(MODES)}")
        self.name = name
        self.root = Path(root) if root else None
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

    def fingerprint(self, run_dir: Path) -> dict:
        weights, config = run_dir / "model.safetensors", run_dir / "config.yaml"
        stat = weights.stat() if weights.exists() else None
        if stat is not None:
            identity = f"{stat.st_size}-{stat.st_mtime_ns}"
        else:  # an imported checkpoint (core/imported.py): its config.yaml names the folder, settings and weight files
            identity = hashlib.sha1(config.read_bytes()).hexdigest()[:12] if config.exists() else None
        settings = {"prompt_suffix": self.prompt_suffix, "max_new_tokens": self.max_new_tokens, "mode": self.mode,
                    "settings": {k: str(v) for k, v in sorted(self.settings.items())}, "root": str(self.root)}
        digest = hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
        return {"benchmark": self.name, "settings": digest, "weights": identity}

    def predict(self, run_dir: Path, items: list[Item], cfg) -> dict[str, dict]:
        """Predictions for `items` by id, resuming the log; the model is loaded only if some are missing."""
        log = run_dir / "predictions" / f"{self.name}.jsonl"
        meta = self.fingerprint(run_dir)
        done = read_log(log, meta)
        todo = [it for it in items if it.id not in done]
        if not todo:
            return done
        if done:
            console.print(f"{self.name}: resuming {log}: {len(items) - len(todo)} of {len(items)} items already answered")
        device = cfg.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
        model = vlm.load(run_dir, device=device)
        batch = max(1, int(cfg.get("batch_size") or 64))
        columns = (TextColumn(f"[bold]{self.name}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with open(log, "a", encoding="utf-8") as f, Progress(*columns, console=console, transient=False) as bar:
            task = bar.add_task(self.name, total=len(items), completed=len(items) - len(todo))
            for start in range(0, len(todo), batch):
                chunk = todo[start : start + batch]
                for it, rec in zip(chunk, self.run_batch(model, chunk, batch), strict=True):
                    done[it.id] = rec
                    f.write(json.dumps(rec) + "\n")
                f.flush()
                os.fsync(f.fileno())
                bar.advance(task, len(chunk))
        return done

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
    if path is None:
        return None
    if not Path(path).is_file():
        raise FileNotFoundError(f"image {path} not found (image layouts under benchmark.root: docs/evaluation.md)")
    with Image.open(path) as im:
        return im.convert("RGB")


def read_log(log: Path, meta: dict) -> dict[str, dict]:
    """The predictions already in `log` (by id), after making the file a clean prefix: a trailing partial
    line is cut off; a file made with other settings or weights is started over (its `_meta` line differs).
    Always leaves the file starting with the current `_meta` line."""
    header = json.dumps({"_meta": meta}) + "\n"
    done: dict[str, dict] = {}
    if log.exists():
        raw = log.read_bytes()
        lines = raw.split(b"\n")
        keep, stale = [], False
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                if i == len(lines) - 1:  # a trailing partial line, left by a crash mid-write
                    console.print(f"{log}: dropping a partial last line; it will be rewritten")
                    break
                raise ValueError(f"{log} line {i + 1} is not valid JSON (only the last line can be partial). "
                                 f"Fix: delete the file to start this benchmark over") from None
            if "_meta" in rec:
                if rec["_meta"] != meta:
                    console.print(f"{log} was made with other settings or weights; starting over")
                    stale = True
                    break
                continue
            if isinstance(rec, dict) and "id" in rec and "answer" in rec and str(rec["id"]) not in done:
                rec["id"] = str(rec["id"])
                done[rec["id"]] = rec
                keep.append(rec)
        if stale:
            done, keep = {}, []
        body = header + "".join(json.dumps(r) + "\n" for r in keep)
        if raw.decode("utf-8", errors="replace") != body:
            with atomic_file(log) as tmp:
                tmp.write_text(body, encoding="utf-8")
    else:
        log.write_text(header, encoding="utf-8")
    return done
