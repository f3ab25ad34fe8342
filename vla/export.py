"""Export a VLA run as an HF Llava folder that transformers loads and decodes actions with.

`export_run(RUN_DIR, OUT_DIR)` (or `python -m vla.export RUN_DIR OUT_DIR`) writes:
- the VLM as HF Llava, by the project's exporter (vlm/hf_llava.py: weights, config, tokenizer with `<image>`,
  image processor, chat template; it checks itself against the run), whose `generation_config.json` is then made
  the action decoder: greedy, exactly the chunk's number of new tokens (`max_new_tokens` = `min_new_tokens`), and
  every id but the action ids in `suppress_tokens`, so a plain `LlavaForConditionalGeneration.generate` emits the
  tokens `vla.load(RUN_DIR).action_tokens` does;
- `action_tokenizer/` (the run's fitted tokenizer files) and `vla.json` (the run's spec, vla/lightning.py);
- `vla_actions.json`: the prompt template, the task instructions, the first action token id, the chunk shape, and
  for per-dimension bin tokenizers (openvla, uniform, quantile) the decode table `table[d][k]` = the un-normalised
  action value of dimension d for token `first_token_id + k` (computed here with the run's tokenizer and
  normalisation statistics, so decoding needs neither);
- `vla_decode.py` (`DECODE`): `decode(tokens, folder)` → actions (B, H, D) with numpy alone, and
  `predict_action(model, processor, images, instructions, folder)` through transformers.
Other tokenizers (residual_vq, fast) are exported without a table: decode their tokens with refract
(`behavior.tokenizers.load_tokenizer(OUT_DIR/action_tokenizer)`, vla/actions.py's mapping).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

from data.atomic import atomic_directory, write_json
from vla.dataset import PROMPT
from vla.lightning import SPEC, TOKENIZER_DIR

ACTIONS_FILE, DECODE_FILE = "vla_actions.json", "vla_decode.py"

DECODE = '''"""Decode the action tokens of this exported VLA (written by refract's vla/export.py; numpy and transformers only).

    from transformers import AutoProcessor, LlavaForConditionalGeneration
    model = LlavaForConditionalGeneration.from_pretrained(FOLDER)
    processor = AutoProcessor.from_pretrained(FOLDER, backend="pil")   # PIL: the run's exact image transform
    actions = predict_action(model, processor, [frame], ["reach"], FOLDER)   # (1, H, D), the env's action units

The folder's generation_config.json makes `generate` emit exactly one action chunk of action token ids (greedy,
every other id suppressed). Token `first_token_id + k` of position j (j = h * D + d, time-major) is bin k of
action dimension d; `table[d][k]` in vla_actions.json is its un-normalised value.
"""

import json
from pathlib import Path

import numpy as np


def load_actions(folder):
    return json.loads((Path(folder) / "vla_actions.json").read_text())


def decode(tokens, folder="."):
    """Generated ids (B, H * D) -> actions (B, H, D)."""
    spec = load_actions(folder)
    if spec["table"] is None:
        raise ValueError("this tokenizer has no decode table; decode with refract's behavior.tokenizers")
    table = np.asarray(spec["table"], dtype=np.float64)
    h, d = spec["chunk_size"], spec["action_dim"]
    k = np.asarray(tokens, dtype=np.int64).reshape(-1, h, d) - spec["first_token_id"]
    if (k < 0).any() or (k >= table.shape[1]).any():
        raise ValueError("tokens outside the action range")
    return table[np.arange(d), k]


def prompt(instruction, folder="."):
    """The user message for an instruction: a task the run was trained on (e.g. "reach-v3") becomes its instruction
    ("reach"); any other text is used as it is."""
    spec = load_actions(folder)
    if instruction in spec["tasks"]:
        instruction = spec["instructions"][spec["tasks"].index(instruction)]
    return spec["prompt"].format(instruction=instruction)


def predict_action(model, processor, images, instructions, folder="."):
    """Actions (B, H, D) for PIL images and instructions, by the folder's greedy action decoding."""
    import torch

    rows = []
    for image, instruction in zip(images, instructions):
        messages = [{"role": "user", "content": [{"type": "image", "image": image},
                                                 {"type": "text", "text": prompt(instruction, folder)}]}]
        inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                               return_dict=True, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs)
        rows.append(out[0, inputs["input_ids"].shape[1]:].tolist())
    return decode(rows, folder)
'''


def decode_table(spec) -> list[list[float]] | None:
    """table[d][k]: the un-normalised value of dimension d for action token first + k, when the tokenizer decodes
    each dimension on its own (checked on every id and on random id vectors); else None."""
    vocab, codec = spec.vocabulary, spec.codec
    dim, ids = codec.action_dim, np.arange(vocab.low, vocab.low + vocab.size)
    if codec.kind != "per_vector" or codec.ids_per_action() != dim:
        return None
    try:
        normalised = codec.tokenizer.decode(np.repeat(ids[:, None], dim, 1))          # (size, D)
        table = spec.normalizer.unnormalize(normalised).T                           # (D, size)
        probe = np.random.default_rng(0).integers(vocab.low, vocab.low + vocab.size, (64, dim))
        lookup = table[np.arange(dim), probe - vocab.low]
        if not np.allclose(lookup, spec.normalizer.unnormalize(codec.tokenizer.decode(probe)), rtol=0, atol=1e-9):
            return None
    except Exception:
        return None
    return table.tolist()


def export(policy, run_dir: Path, out_dir: str | Path, image_strategy: str) -> Path:
    """Write the VLA `policy` (vla.inference.VLAPolicy) of `run_dir` to `out_dir` (staged, moved into place)."""
    from transformers import GenerationConfig

    from vlm.hf_llava import export as export_llava

    spec, out = policy.spec, Path(out_dir)
    with atomic_directory(out) as stage:
        export_llava(policy.model, stage, image_strategy)
        config = json.loads((stage / "config.json").read_text())
        rows = int(config["text_config"]["vocab_size"])
        keep = set(spec.vocabulary.allowed)
        gen = GenerationConfig.from_pretrained(stage)
        n = spec.vocabulary.num_tokens
        gen.update(do_sample=False, max_new_tokens=n, suppress_tokens=[i for i in range(rows) if i not in keep])
        if spec.vocabulary.fixed_length:
            gen.update(min_new_tokens=n)
        gen.save_pretrained(stage)
        shutil.copytree(run_dir / TOKENIZER_DIR, stage / TOKENIZER_DIR)
        shutil.copy(run_dir / SPEC, stage / SPEC)
        write_json(stage / ACTIONS_FILE, {"prompt": PROMPT, "tasks": spec.tasks, "instructions": spec.instructions,
                                          "first_token_id": spec.vocabulary.first, "chunk_size": spec.codec.chunk_size,
                                          "action_dim": spec.codec.action_dim, "tokens_per_chunk": n,
                                          "camera": spec.camera, "image_size": spec.image_size,
                                          "table": decode_table(spec)})
        (stage / DECODE_FILE).write_text(DECODE)
    return out


def export_run(run_dir: str | Path, out_dir: str | Path, trust_remote_code: bool = False) -> Path:
    """Export the VLA run in `run_dir` (loaded by vla.load, which runs none of the run's code)."""
    from core.safe_load import load_run_config
    from vla.inference import load
    from vlm.inference import COMPONENTS

    run_dir = Path(run_dir)
    policy = load(run_dir, trust_remote_code=trust_remote_code)
    strategy = load_run_config(run_dir, COMPONENTS).encoder.get("image_strategy", "resize-naive")
    return export(policy, run_dir, out_dir, strategy)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m vla.export RUN_DIR OUT_DIR")
    print(export_run(sys.argv[1], sys.argv[2]))
