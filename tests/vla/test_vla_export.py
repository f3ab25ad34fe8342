"""VLA export (vla/export.py): transformers' LlavaForConditionalGeneration.generate on the exported folder, with the
folder's own generation config, gives the action tokens `vla.load(RUN).action_tokens` gives, and the folder's
numpy decode function gives `predict_action`'s actions."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoProcessor, LlavaForConditionalGeneration

from tests.vla.conftest import TASKS
from tests.conftest import randomize
from tests.vla.test_vla_decode import frames
from vla.export import export, export_run
from vla.inference import load


def test_hf_greedy_decoding_of_the_export_gives_our_action_tokens(tiny_run, tmp_path):
    policy = load(tiny_run)
    randomize(policy.model)  # diverse tokens: a few training steps decode nearly one token
    out = export(policy, Path(tiny_run), tmp_path / "hf", "resize-naive")
    hf = LlavaForConditionalGeneration.from_pretrained(out, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(out, backend="pil")
    decode_file = importlib.util.spec_from_file_location("vla_decode", out / "vla_decode.py")
    decoder = importlib.util.module_from_spec(decode_file)
    decode_file.loader.exec_module(decoder)

    images = [Image.fromarray(f) for f in frames(4, seed=3)]
    instructions = [TASKS[0], TASKS[1], TASKS[0], "reach"]
    ours = policy.action_tokens(images, instructions)
    theirs = []
    for image, instruction in zip(images, instructions):
        messages = [{"role": "user", "content": [{"type": "image", "image": image},
                                                 {"type": "text", "text": decoder.prompt(instruction, out)}]}]
        inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                               return_tensors="pt")
        with torch.no_grad():
            generated = hf.generate(**inputs)  # the folder's generation_config: greedy, one chunk, action ids only
        theirs.append(generated[0, inputs["input_ids"].shape[1]:].tolist())
    assert theirs == ours and len({t for row in ours for t in row}) > 2
    # the folder's decode table (numpy only) gives predict_action's actions
    np.testing.assert_allclose(decoder.decode(theirs, out), policy.predict_action(images, instructions), rtol=0, atol=1e-6)
    actions = json.loads((out / "vla_actions.json").read_text())
    assert actions["first_token_id"] == policy.vocabulary.first and (out / "action_tokenizer" / "config.json").exists()
    np.testing.assert_allclose(decoder.predict_action(hf, processor, images[:2], ["push the red block left"] * 2, out),
                               policy.predict_action(images[:2], [TASKS[0]] * 2), rtol=0, atol=1e-6)


def test_a_trained_run_exports_from_its_directory(tiny_run, tmp_path):
    """`export_run` (python -m vla.export RUN_DIR OUT_DIR): the run's own weights, the same greedy tokens."""
    out = export_run(tiny_run, tmp_path / "hf")
    hf = LlavaForConditionalGeneration.from_pretrained(out, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(out, backend="pil")
    image = Image.fromarray(frames(1, seed=5)[0])
    messages = [{"role": "user", "content": [{"type": "image", "image": image},
                                             {"type": "text", "text": f"What action should the robot take to {TASKS[1]}?"}]}]
    inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           return_tensors="pt")
    with torch.no_grad():
        generated = hf.generate(**inputs)[0, inputs["input_ids"].shape[1]:].tolist()
    assert generated == load(tiny_run).action_tokens([image], [TASKS[1]])[0]


@pytest.mark.parametrize("backbone", ["tiny_qwen2", "tiny_gemma"])  # chat templates: no BOS (image first) / BOS
def test_chat_template_backbones_decode_with_the_cache_and_export_alike(tmp_path, lerobot_dir, backbone):
    from core.run import train
    from tests.vla.conftest import vla_cfg
    from tests.vla.test_vla_decode import recompute

    run = train(vla_cfg(tmp_path, lerobot_dir, f"backbone={backbone}", "stage.phases.vla.max_steps=2"))["run_dir"]
    policy = load(run)
    randomize(policy.model)
    images = [Image.fromarray(f) for f in frames(3, seed=4)]
    instructions = [TASKS[0], TASKS[1], "a much longer instruction that pads the others"]
    ours = policy.action_tokens(images, instructions)
    assert ours == recompute(policy, images, instructions)
    out = export(policy, Path(run), tmp_path / "hf", "resize-naive")
    hf = LlavaForConditionalGeneration.from_pretrained(out, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(out, backend="pil")
    theirs = []
    for image, instruction in zip(images, instructions):
        messages = [{"role": "user", "content": [{"type": "image", "image": image},
                                                 {"type": "text", "text": f"What action should the robot take to {instruction}?"}]}]
        inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                               return_tensors="pt")
        with torch.no_grad():
            theirs.append(hf.generate(**inputs)[0, inputs["input_ids"].shape[1]:].tolist())
    assert theirs == ours
