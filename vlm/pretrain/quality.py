"""Quality figures of the pretrained components, as benchmarks (`core.interfaces.Benchmark`).

`python evaluate.py task=encoder_pretrain run=RUN_DIR` (benchmark=encoder_probe, conf/task_eval) and
`python evaluate.py task=lm_pretrain run=RUN_DIR` (benchmark=lm_perplexity); the flavour writer runs them
after training through the usual `eval.benchmarks` mechanism. Both read the run's world from its config.yaml.

- `EncoderProbe`: the exported tower loaded through `vlm.encoders.TimmEncoder` (`local-dir:RUN_DIR/export`),
  mean patch features of the feature layer; logistic-regression probes (scikit-learn) fitted on train scenes
  and scored on the held-out `scenes.json["test"]` scenes: the presence of each attribute category
  (`attribute_acc`, mean over categories, with its majority-class baseline `attribute_majority`) and the
  object count (`count_acc`, `count_majority`). For clip / siglip runs also zero-shot image→caption
  retrieval R@1 over the captions the run held out of training (`retrieval_r1`; a retrieved caption with
  the same text counts as right; `retrieval_chance` is the expected R@1 of a random pick). Per object, the
  features of the patch under its centre probed for its colour, shape and size (`patch_<attr>_acc`, with
  `patch_<attr>_majority`): what a VLM reading one patch can get, which pooled features do not show. Percent.
- `LMPerplexity`: the exported model (transformers, as saved) on the held-out `lm_text_val.txt` lines
  (`<s> line </s>`: `text_ppl`) and on the run's held-out dialogues in its prompt format, answers only
  (`dialogue_ppl`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig

from core.safe_load import load_run_config

from vlm.pretrain.world import caption_records, dialogues, load_image, scene_categories, scenes, text_lines, world_folder


def run_config(run_dir: Path) -> DictConfig:
    """The run's config; its world generator must be one of conf/world's (opening a run runs none of its code)."""
    return load_run_config(run_dir, {"world": "world"})


def export_dir(run_dir: Path) -> Path:
    out = Path(run_dir) / "export"
    if not out.is_dir():
        raise FileNotFoundError(f"{out} is missing: the run has not finished training (the task exports when it ends)")
    return out


def linear_probe(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray) -> float:
    """Test accuracy (percent) of a logistic regression on standardised features; a target constant in the
    training set predicts that constant."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    classes = np.unique(train_y)
    if len(classes) == 1:
        return 100.0 * float(np.mean(test_y == classes[0]))
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    probe.fit(train_x, train_y)
    return 100.0 * float(np.mean(probe.predict(test_x) == test_y))


def majority(train_y: np.ndarray, test_y: np.ndarray) -> float:
    values, counts = np.unique(train_y, return_counts=True)
    return 100.0 * float(np.mean(test_y == values[np.argmax(counts)]))


def probe_scores(train_x, train_scenes: list[dict], test_x, test_scenes: list[dict]) -> dict[str, float]:
    """Attribute-presence and count probes of features (rows) of scenes."""
    categories = sorted(set().union(*(scene_categories(s) for s in train_scenes)))
    present = lambda group: np.array([[c in scene_categories(s) for c in categories] for s in group], dtype=int)  # noqa: E731
    count = lambda group: np.array([len(s["objects"]) for s in group])  # noqa: E731
    ytr, yte = present(train_scenes), present(test_scenes)
    attr = [linear_probe(train_x, ytr[:, k], test_x, yte[:, k]) for k in range(len(categories))]
    base = [majority(ytr[:, k], yte[:, k]) for k in range(len(categories))]
    return {"attribute_acc": float(np.mean(attr)), "attribute_majority": float(np.mean(base)),
            "count_acc": linear_probe(train_x, count(train_scenes), test_x, count(test_scenes)),
            "count_majority": majority(count(train_scenes), count(test_scenes))}


def retrieval_r1(image_emb: torch.Tensor, text_emb: torch.Tensor, captions: list[str]) -> dict[str, float]:
    """Image i's nearest caption (cosine) is right when its text equals caption i; and the chance of that."""
    best = (F.normalize(image_emb, dim=-1) @ F.normalize(text_emb, dim=-1).T).argmax(1).tolist()
    hits = [captions[j] == captions[i] for i, j in enumerate(best)]
    chance = [sum(c == captions[i] for c in captions) / len(captions) for i in range(len(captions))]
    return {"retrieval_r1": 100.0 * float(np.mean(hits)), "retrieval_chance": 100.0 * float(np.mean(chance))}


@torch.no_grad()
def patch_features(encoder, world: Path, images: list[str], batch_size: int = 64) -> np.ndarray:
    """(images, patches, width) features of the encoder's feature layer."""
    encoder.eval()
    out = []
    for start in range(0, len(images), batch_size):
        pixels = torch.stack([encoder.transform(load_image(world, rel)) for rel in images[start:start + batch_size]])
        out.append(encoder(pixels))
    return torch.cat(out).numpy()


def centre_patch(obj: dict, scene: dict, grid: tuple[int, int], strategy: str) -> int:
    """Index of the patch under the object's centre, for the resize-naive or letterbox input of the scene."""
    x, y, w, h = obj["bbox"]
    cx, cy, width, height = x + w / 2, y + h / 2, scene["width"], scene["height"]
    if strategy == "letterbox":
        side = max(width, height)
        cx, cy, width, height = cx + (side - width) // 2, cy + (side - height) // 2, side, side
    elif strategy != "resize-naive":
        raise ValueError(f"encoder_probe: patch probes need image_strategy resize-naive or letterbox, not {strategy!r}")
    rows, cols = grid
    return min(int(cy / height * rows), rows - 1) * cols + min(int(cx / width * cols), cols - 1)


def patch_scores(train_x, train_scenes: list[dict], test_x, test_scenes: list[dict], grid, strategy: str) -> dict:
    """Colour, shape and size of each object probed from the features of the patch under its centre; and, where the
    scenes carry signs of more than one word, the sign's word from the patch under the sign's centre."""
    def objects(features, group):
        rows = [(features[i, centre_patch(o, s, grid, strategy)], o) for i, s in enumerate(group) for o in s["objects"]]
        return np.stack([f for f, _ in rows]), [o for _, o in rows]

    (xtr, otr), (xte, ote) = objects(train_x, train_scenes), objects(test_x, test_scenes)
    metrics = {}
    for attr in ("color", "shape", "size"):
        ytr, yte = np.array([o[attr] for o in otr]), np.array([o[attr] for o in ote])
        name = "colour" if attr == "color" else attr
        metrics[f"patch_{name}_acc"] = linear_probe(xtr, ytr, xte, yte)
        metrics[f"patch_{name}_majority"] = majority(ytr, yte)
    signed = lambda features, group: [(features[i, centre_patch(s["sign"], s, grid, strategy)], s["sign"]["word"])  # noqa: E731
                                      for i, s in enumerate(group) if s.get("sign")]
    train_signs, test_signs = signed(train_x, train_scenes), signed(test_x, test_scenes)
    if len({w for _, w in train_signs}) > 1 and test_signs:  # the reading task's input: the word at its centre patch
        xs, ys = np.stack([f for f, _ in train_signs]), np.array([w for _, w in train_signs])
        xt, yt = np.stack([f for f, _ in test_signs]), np.array([w for _, w in test_signs])
        metrics["patch_sign_acc"], metrics["patch_sign_majority"] = linear_probe(xs, ys, xt, yt), majority(ys, yt)
    return metrics


class EncoderProbe:
    """Linear-probe accuracy (and zero-shot retrieval for contrastive runs) of an encoder pretraining run."""

    def __init__(self, name: str = "encoder_probe", probe_train: int = 1000, image_strategy: str = "resize-naive",
                 feature_layer: int = -2, main_metric: str = "attribute_acc", **_):
        self.name, self.probe_train, self.image_strategy = name, int(probe_train), image_strategy
        self.feature_layer, self.main_metric = int(feature_layer), main_metric

    def __call__(self, run_dir: Path, cfg: DictConfig) -> dict:
        from vlm.encoders import TimmEncoder

        run_dir = Path(run_dir)
        rcfg = run_config(run_dir)
        world = world_folder(rcfg)
        encoder = TimmEncoder(model_id=f"local-dir:{export_dir(run_dir)}", image_strategy=self.image_strategy,
                              feature_layer=self.feature_layer)
        train, test = scenes(world, "train"), scenes(world, "test")
        train_rel = list(train)[: self.probe_train]
        test_rel = list(test)[: cfg.get("limit") or None]
        train_x, test_x = patch_features(encoder, world, train_rel), patch_features(encoder, world, test_rel)
        train_s, test_s = [train[r] for r in train_rel], [test[r] for r in test_rel]
        metrics = probe_scores(train_x.mean(1), train_s, test_x.mean(1), test_s)
        metrics.update(patch_scores(train_x, train_s, test_x, test_s, encoder.grid_size, self.image_strategy))
        metrics["probe_train"], metrics["probe_test"] = len(train_rel), len(test_rel)
        if rcfg.encoder_pretrain.objective in ("clip", "siglip") and int(rcfg.encoder_pretrain.get("holdout") or 0):
            metrics.update(self.retrieval(rcfg, run_dir, world))
        return metrics

    @torch.no_grad()
    def retrieval(self, rcfg: DictConfig, run_dir: Path, world: Path) -> dict[str, float]:
        """R@1 of the run's own image and text towers (model.safetensors) on the captions it held out."""
        from open_clip.tokenizer import SimpleTokenizer

        from core.weights import load_weights
        from vlm.pretrain.encoder_task import EncoderPretrainTask, tower_transform

        model = EncoderPretrainTask().build_model(rcfg, run_dir)
        load_weights(model, run_dir / "model.safetensors", run_dir)
        model.eval()
        held = caption_records(world)[-int(rcfg.encoder_pretrain.holdout):]
        transform = tower_transform(model.tower)
        pixels = torch.stack([transform(load_image(world, rel)) for rel, _ in held])
        captions = [c for _, c in held]
        text = SimpleTokenizer(context_length=model.context_length)(captions)
        return retrieval_r1(model.encode_image(pixels), model.encode_text(text), captions)


@torch.no_grad()
def perplexity(model, samples: list[tuple[list[int], list[int]]], batch_size: int = 16) -> float:
    """exp(mean next-token NLL over the label tokens (labels != -100; each predicted from the tokens before it))."""
    from vlm.pretrain.lm_task import collate

    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(samples), batch_size):
        batch = collate(samples[start:start + batch_size], pad_id=0)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
        labels = batch["labels"][:, 1:]
        nll = F.cross_entropy(logits[:, :-1].transpose(1, 2), labels, ignore_index=-100, reduction="sum")
        total, count = total + float(nll), count + int((labels != -100).sum())
    if count == 0:
        raise ValueError("no tokens to score: the held-out text is empty")
    return math.exp(total / count)


class LMPerplexity:
    """Held-out perplexity of an LM pretraining run's exported model."""

    def __init__(self, name: str = "lm_perplexity", max_length: int = 512, main_metric: str = "text_ppl", **_):
        self.name, self.max_length, self.main_metric = name, int(max_length), main_metric

    def __call__(self, run_dir: Path, cfg: DictConfig) -> dict:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from vlm.pretrain.lm_task import dialogue_samples, heldout_split
        from vlm.prompting import build_prompt_format

        run_dir = Path(run_dir)
        rcfg = run_config(run_dir)
        world = world_folder(rcfg)
        source = export_dir(run_dir)
        model, tok = AutoModelForCausalLM.from_pretrained(source), AutoTokenizer.from_pretrained(source)
        limit = cfg.get("limit") or None
        lines = text_lines(world, "lm_text_val.txt")[:limit]
        text = [([tok.bos_token_id, *tok(line, add_special_tokens=False)["input_ids"], tok.eos_token_id][: self.max_length],) * 2
                for line in lines]
        metrics = {"text_ppl": perplexity(model, text), "text_lines": len(text)}
        holdout = int(rcfg.lm_pretrain.get("holdout") or 0)
        if holdout:
            _, held = heldout_split(dialogues(world), holdout, str(world / "text.json"))
            fmt = build_prompt_format(str(rcfg.lm_pretrain.prompt_format), tok)
            metrics["dialogue_ppl"] = perplexity(model, dialogue_samples(held[:limit], fmt, self.max_length))
            metrics["dialogues"] = len(held[:limit])
        return metrics
