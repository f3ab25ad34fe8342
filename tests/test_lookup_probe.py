"""scripts/lookup_probe.py: held-out images kept apart, and a 2-step probe on a small world trains, evaluates
against the per-kind prior and saves a loadable LM (the object layout: tests/vlm/test_scene_samples.py)."""
import pytest
import torch

from data.mini_world import ensure
from scripts.lookup_probe import kind, main, samples


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return ensure(tmp_path_factory.mktemp("w"), n_train=24, n_test=4, n_per_benchmark=6)


def test_held_out_images_are_not_trained_on(world):
    train, test, describe = samples(world, holdout=4)
    held = {s[0] for s in test}
    assert held and not held & {s[0] for s in train} and not held & {s[0] for s in describe}
    assert {kind(q) for *_, q in train} >= {"count", "exists"}


@pytest.mark.parametrize("background", ["zeros", "const"])
def test_two_steps_train_evaluate_and_save(world, tmp_path, capsys, background):
    from transformers import AutoModelForCausalLM

    from vlm.tiny import ensure_tiny

    lm = ensure_tiny("mini_llama_base")
    capsys.readouterr()  # what building the smoke flavour printed
    main(["--world", str(world), "--lm", str(lm), "--steps", "2", "--batch", "4", "--every", "1", "--holdout", "4",
          "--test", "8", "--prose", "--background", background, "--objects", "fresh", "--bos",
          "--save", str(tmp_path / "lm")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("prior ") and [line.split()[0] for line in lines[1:]] == ["0", "1", "2"]
    trained = AutoModelForCausalLM.from_pretrained(tmp_path / "lm")
    base = AutoModelForCausalLM.from_pretrained(lm)
    assert (trained.lm_head.weight - base.lm_head.weight).abs().max() > 0  # it trained


def test_lm_lr_zero_trains_only_the_new_vectors(world, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    from vlm.tiny import ensure_tiny

    lm = ensure_tiny("mini_llama_base")
    main(["--world", str(world), "--lm", str(lm), "--steps", "2", "--batch", "4", "--every", "2", "--holdout", "4",
          "--test", "8", "--background", "const", "--objects", "fresh", "--bos", "--lr", "1e-2", "--lm-lr", "0",
          "--save", str(tmp_path / "lm")])
    frozen = AutoModelForCausalLM.from_pretrained(tmp_path / "lm")
    base = AutoModelForCausalLM.from_pretrained(lm)
    assert all(torch.equal(a, b) for a, b in zip(frozen.state_dict().values(), base.state_dict().values()))
