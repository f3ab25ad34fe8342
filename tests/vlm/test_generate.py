"""Inference: stop strings, sampling parameters and seeds in `VLM.generate`, and the `scripts/chat.py` prompt."""

import copy
import importlib.util
import io

import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image

from core.checkpoint import save_weights_atomic
from tests.conftest import ROOT, compose_cfg

IMAGE = Image.new("RGB", (64, 64), (255, 0, 0))
PROMPTS = ["What is the shape of the red object?", "Hi"]


@pytest.fixture(scope="module")
def model(tiny_vlm):
    model = copy.deepcopy(tiny_vlm).eval()
    torch.manual_seed(1)
    with torch.no_grad():  # make the untrained model's outputs less degenerate
        model.backbone.model.lm_head.weight.normal_(0, 0.5)
    return model


def greedy_ids(model, image, prompt, steps):
    embeds, mask = model.prompt_embeddings([image], [prompt])
    tok = model.tokenizer
    return model.backbone.model.generate(inputs_embeds=embeds, attention_mask=mask, max_new_tokens=steps, do_sample=False,
                                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)[0].tolist()


def test_stop_string_cuts_the_answer_and_ends_generation(model):
    tok = model.tokenizer
    ids = greedy_ids(model, None, PROMPTS[1], 12)
    assert len(ids) == 12 and tok.eos_token_id not in ids
    text = lambda part: tok.decode(part, skip_special_tokens=True)  # noqa: E731
    # a stop string that is first complete at token k (not in the text before it)
    k = next(k for k in range(3, 12) if text(ids[k : k + 1]).strip() and text(ids[k : k + 1]) not in text(ids[:k]))
    stop = text(ids[k : k + 1])
    calls = []
    hook = model.backbone.model.lm_head.register_forward_hook(lambda *a: calls.append(1))
    (cut,) = model.generate([None], [PROMPTS[1]], max_new_tokens=12, stop=[stop])
    hook.remove()
    assert cut == text(ids[:k]).strip()
    assert len(calls) == k + 1  # generation stopped at the token that completed the stop string
    full = model.generate([IMAGE, None], PROMPTS, max_new_tokens=12)
    both = model.generate([IMAGE, None], PROMPTS, max_new_tokens=12, stop=["no such text", stop])
    assert both[1] == cut and both[0] == (full[0][: full[0].find(stop)] if stop in full[0] else full[0]).strip()


def test_sampling_is_reproducible_under_a_seed(model):
    greedy = model.generate([IMAGE, None], PROMPTS, max_new_tokens=10)
    state = torch.get_rng_state()
    a = model.generate([IMAGE, None], PROMPTS, max_new_tokens=10, do_sample=True, temperature=1.5, seed=7)
    assert torch.equal(torch.get_rng_state(), state)  # `seed` leaves the global RNG alone
    assert model.generate([IMAGE, None], PROMPTS, max_new_tokens=10, do_sample=True, temperature=1.5, seed=7) == a
    assert model.generate([IMAGE, None], PROMPTS, max_new_tokens=10, do_sample=True, temperature=1.5, seed=8) != a
    assert a != greedy
    torch.manual_seed(3)  # without `seed`, the global RNG decides
    b = model.generate([IMAGE, None], PROMPTS, max_new_tokens=10, do_sample=True)
    torch.manual_seed(3)
    assert model.generate([IMAGE, None], PROMPTS, max_new_tokens=10, do_sample=True) == b


@pytest.mark.parametrize("params", [dict(top_k=1, temperature=3.0), dict(top_p=1e-6), dict(temperature=1e-4)])
def test_sampling_parameters_reach_hf_generate(model, params):
    """Each of these truncates sampling to the most likely token, so sampling equals greedy decoding."""
    greedy = model.generate([IMAGE, None], PROMPTS, max_new_tokens=10)
    assert model.generate([IMAGE, None], PROMPTS, max_new_tokens=10, do_sample=True, seed=0, **params) == greedy
    with pytest.raises(ValueError, match="do_sample=True"):
        model.generate([IMAGE], PROMPTS[:1], **params)


def load_script(name):
    spec = importlib.util.spec_from_file_location(f"scripts_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_chat_script_answers_each_line_and_switches_images(model, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(OmegaConf.to_yaml(compose_cfg(), resolve=True))
    save_weights_atomic(model, run / "model.safetensors")
    blue = tmp_path / "blue.png"
    IMAGE.save(tmp_path / "red.png")
    Image.new("RGB", (64, 64), (0, 0, 255)).save(blue)
    lines = ["What is the shape of the red object?", f"/image {blue}", "And here?", "/image", "Hi", "/image nope.png", "Hi"]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    load_script("chat").main([str(run), "--image", str(tmp_path / "red.png"), "--max-new-tokens", "6"])
    out = capsys.readouterr()
    expected = [model.generate([im], [q], max_new_tokens=6)[0]
                for im, q in [(IMAGE, lines[0]), (Image.open(blue).convert("RGB"), lines[2]), (None, "Hi"), (None, "Hi")]]
    assert out.out == "".join(a + "\n" for a in expected)
    assert "nope.png" in out.err and expected[0] != expected[1]
