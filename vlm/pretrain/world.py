"""What the pretraining tasks and their quality benchmarks read from the synthetic world folder.

The world (data/mini_world.py, `cfg.world`: `hydra.utils.instantiate(cfg.world)` writes it once and returns
its folder) provides, in the contract layout:
- `align.json`: LLaVA caption records (`image` relative to the world folder; the first `gpt` turn is the caption);
- `scenes.json`: `{"train"|"test": {image_rel_path: {"objects": [{"color", "shape", "size", "label"}, ...]}}}`;
- `images/train|test/NNNNNN.jpg`;
- `lm_text.txt` / `lm_text_val.txt`: scene descriptions, one a line (LM pretraining / held-out perplexity);
- `text.json`: LLaVA text-only dialogues (records without `image`).
Each reader names the file and what is wrong with it when a record does not fit.
"""

from __future__ import annotations

from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig
from PIL import Image

from data.atomic import read_json
from data.image_decode import decode_image


def world_folder(cfg: DictConfig) -> Path:
    """The world folder of a run config (`cfg.world`, written on first use)."""
    if cfg.get("world") is None:
        raise ValueError("the config has no `world` node: pretraining tasks read the synthetic world "
                         "(conf/world/mini.yaml; the task YAML's defaults bring it as `/world@world: mini`)")
    return Path(instantiate(cfg.world))


def _read(path: Path):
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the world folder {path.parent} is incomplete; delete it so that "
                                "data/mini_world.py writes it again")
    return read_json(path)


def caption_records(world: Path) -> list[tuple[str, str]]:
    """(image path relative to the world, caption) of every align.json record, in file order."""
    path = world / "align.json"
    out = []
    for k, record in enumerate(_read(path)):
        answers = [t["value"] for t in record.get("conversations", []) if t.get("from") == "gpt"]
        if "image" not in record or not answers:
            raise ValueError(f"{path} record {k} (id {record.get('id')!r}) has no image or no gpt caption turn")
        out.append((str(record["image"]), str(answers[0])))
    return out


def scenes(world: Path, split: str) -> dict[str, dict]:
    """scenes.json[split]: {image path relative to the world: scene}."""
    path = world / "scenes.json"
    data = _read(path)
    if split not in data:
        raise ValueError(f"{path} has no {split!r} split (has {sorted(data)})")
    return data[split]


def scene_categories(scene: dict) -> set[str]:
    """The attribute categories present in a scene: `color:X`, `shape:X`, `size:X` of every object and `word:X`
    of every sign (the supervised objective's labels, the probe's presence targets)."""
    out = set()
    for obj in scene["objects"]:
        out |= {f"color:{obj['color']}", f"shape:{obj['shape']}", f"size:{obj['size']}"}
        if obj.get("label"):
            out.add(f"word:{obj['label']}")
    return out


def load_image(world: Path, rel: str) -> Image.Image:
    """A world image, decoded as training decodes every image (data/image_decode.py)."""
    return decode_image(world / rel)


def dialogues(world: Path) -> list[list[tuple[str, str]]]:
    """text.json's text-only dialogues as [(role, text), ...] with roles `human` / `gpt`."""
    path = world / "text.json"
    out = []
    for k, record in enumerate(_read(path)):
        turns = [(t["from"], t["value"]) for t in record.get("conversations", [])]
        if not turns or turns[-1][0] != "gpt":
            raise ValueError(f"{path} record {k} (id {record.get('id')!r}) does not end with a gpt answer")
        out.append(turns)
    return out


def text_lines(world: Path, name: str) -> list[str]:
    """The non-empty lines of `world/name` (lm_text.txt, lm_text_val.txt)."""
    path = world / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the world folder is incomplete; delete it to have it written again")
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
