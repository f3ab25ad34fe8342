"""scripts/lookup_probe.py: held-out images kept apart, and a 2-step probe on a small world trains, evaluates
against the per-kind prior and saves a loadable LM, `--boxes` adds RefCOCO's questions, and its greedy decoding
is transformers' own (the object layout: tests/vlm/test_scene_samples.py)."""
import ast

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


def test_lstsq_projector_solves_the_normal_equations_at_the_training_objects(world):
    # --projector-init lstsq: the linear projector is the least-squares map from the frozen patch features of the
    # training images' object patches to the LM's word vectors there, so the squared error's gradient is zero
    import argparse

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from scripts.lookup_probe import projector_and_features
    from vlm.pretrain.scene_samples import object_phrases
    from vlm.tiny import ensure_tiny

    lm = ensure_tiny("mini_llama_base")
    tok, embed = AutoTokenizer.from_pretrained(lm), AutoModelForCausalLM.from_pretrained(lm).get_input_embeddings()
    objects = object_phrases(world)
    words = {w for rows in objects.values() for _, phrase in rows for w in phrase.split()}
    word_ids = {w: tok(" " + w, add_special_tokens=False)["input_ids"] for w in words}
    fit_on = set(list(objects)[:-4])
    args = argparse.Namespace(encoder="tiny:mini_clip", world=world, projector="linear", projector_init="lstsq",
                              feature_norm="none")
    projector, features = projector_and_features(args, objects, fit_on, embed, word_ids)
    assert set(features) == set(objects) and features[next(iter(objects))].shape[0] == 64
    with torch.no_grad():
        x = torch.stack([features[n][p] for n in fit_on for p, _ in objects[n]])
        y = torch.stack([embed(torch.tensor([i for w in ph.split() for i in word_ids[w]])).sum(0)
                         for n in fit_on for _, ph in objects[n]])
        residual = projector(x) - y
        gradient = torch.cat([x, torch.ones(len(x), 1)], 1).T @ residual  # d(squared error)/d(weight, bias) / 2
    assert float(residual.pow(2).sum()) < 0.9 * float((y - y.mean(0)).pow(2).sum())  # it explains the targets
    assert float(gradient.abs().max()) < 1e-3 * float((x.abs().sum(0).max() + len(x)) * y.abs().max())


def test_projector_objects_train_only_the_projector_when_the_lm_is_frozen(world, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    from vlm.tiny import ensure_tiny

    lm = ensure_tiny("mini_llama_base")
    main(["--world", str(world), "--lm", str(lm), "--steps", "2", "--batch", "4", "--every", "2", "--holdout", "4",
          "--test", "8", "--objects", "projector", "--projector", "mlp", "--bos", "--lr", "1e-2", "--lm-lr", "0",
          "--save", str(tmp_path / "lm")])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines if not line.startswith("prior")][-2:] == ["0", "2"]
    frozen = AutoModelForCausalLM.from_pretrained(tmp_path / "lm")
    base = AutoModelForCausalLM.from_pretrained(lm)
    assert all(torch.equal(a, b) for a, b in zip(frozen.state_dict().values(), base.state_dict().values()))
    with pytest.raises(SystemExit, match="leave --background at none"):
        main(["--world", str(world), "--lm", str(lm), "--steps", "0", "--holdout", "4", "--objects", "projector",
              "--background", "const"])


def test_boxes_are_asked_with_their_annotated_box_and_reported_as_a_kind(world, capsys):
    import json

    from vlm.tiny import ensure_tiny

    train, test, _ = samples(world, holdout=4, boxes=True)
    boxes = [(image, a, q) for image, _, a, q in train + test if kind(q) == "box"]
    from vlm.prompting import strip_image_placeholder

    refs = {(str(r["image"]), strip_image_placeholder(t["value"])): a["value"] for r in json.loads((world / "instruct.json").read_text())
            for t, a in zip(r["conversations"][::2], r["conversations"][1::2]) if "bounding box" in t["value"]}
    assert len(boxes) == len(refs) and all(a == " " + refs[image, q] for image, a, q in boxes)
    assert not any(kind(q) == "box" for *_, q in samples(world, holdout=4)[0])  # only with --boxes
    lm = ensure_tiny("mini_llama_base")
    capsys.readouterr()
    main(["--world", str(world), "--lm", str(lm), "--steps", "0", "--holdout", "4", "--test", "40", "--bos", "--boxes",
          "--background", "zeros"])
    prior, first = capsys.readouterr().out.splitlines()[-2:]
    assert "'box'" in prior and "'box'" in first


def test_greedy_continuations_are_transformers_greedy_generation():
    from transformers import AutoModelForCausalLM

    from scripts.lookup_probe import greedy_continuations
    from vlm.tiny import ensure_tiny

    model = AutoModelForCausalLM.from_pretrained(ensure_tiny("mini_llama_base")).eval()
    torch.manual_seed(0)
    x, lengths = torch.randn(3, 9, model.config.hidden_size), torch.tensor([9, 4, 6])
    got = greedy_continuations(model, x, lengths, max_new=5, eos_id=model.config.eos_token_id)
    for row, k, ids in zip(x, lengths.tolist(), got):
        reference = model.generate(inputs_embeds=row[None, :k], max_new_tokens=5, do_sample=False, min_new_tokens=0,
                                   eos_token_id=model.config.eos_token_id, pad_token_id=model.config.eos_token_id)
        assert ids == reference[0].tolist()[:len(ids)] and len(ids) == min(5, len(reference[0]))


def test_a_tilted_statement_is_the_generator_s_own_statement_with_its_answer(world):
    import json

    import numpy as np

    from data.mini_world_questions import FIRST_RELATIONS, ask_vsr
    from scripts.lookup_probe import tilt_statement, tilt_share

    scenes = json.loads((world / "scenes.json").read_text())["train"]
    train, _, _ = samples(world, holdout=4)
    vsr = [s for s in train if kind(s[3]) == "vsr"]
    assert vsr
    for sample in vsr:
        truth = {q["question"]: q["answer"] for q in ask_vsr(scenes[sample[0]], np.random.default_rng(0))}
        for first in (True, False):
            image, prompt, answer, question = tilt_statement(sample, first)
            statement = question.split("true? ")[1].split("\n")[0]
            assert any(f" is {r} the " in statement for r in FIRST_RELATIONS) == first
            assert truth[statement] == answer.strip() and statement in prompt and image == sample[0]
    other = next(s for s in train if kind(s[3]) != "vsr")
    assert tilt_statement(other, True) is other
    assert [tilt_share(s, 0.9, 100) for s in (0, 50, 100, 500)] == [0.9, 0.7, 0.5, 0.5]
    assert [tilt_share(s, 0.9, 100, hold=60) for s in (0, 59, 60, 80, 100)] == pytest.approx([0.9, 0.9, 0.9, 0.7, 0.5])
    assert [tilt_share(s, 1.0, 0) for s in (0, 10**6)] == [1.0, 1.0]  # steps 0: never annealed


def test_split_kinds_name_the_stated_relation_and_the_pairwise_choice():
    from scripts.lookup_probe import split_kind

    vsr = "Is the following statement about the image true? The red circle is {} the blue square.\nAnswer yes or no."
    assert [split_kind(vsr.format(r)) for r in ("left of", "above", "right of", "below")] == [
        "vsr:first", "vsr:first", "vsr:other", "vsr:other"]
    assert split_kind("Is the red circle to the left or to the right of the blue square?") == "relation:pair"
    assert split_kind("Is the red circle on the left or on the right?") == "relation:side"
    assert split_kind("What color is the circle?") is None


def test_kinds_trains_and_tests_on_those_kinds_only(world, capsys):
    from vlm.tiny import ensure_tiny

    lm = ensure_tiny("mini_llama_base")
    capsys.readouterr()
    main(["--world", str(world), "--lm", str(lm), "--steps", "0", "--holdout", "4", "--kinds", "vsr", "relation"])
    prior_line = capsys.readouterr().out.splitlines()[0]
    items = ast.literal_eval(prior_line.split("items ")[1])  # the per-kind item counts
    assert set(items) <= {"vsr", "relation"} and items
    with pytest.raises(SystemExit, match="no such question kind"):
        main(["--world", str(world), "--lm", str(lm), "--steps", "0", "--holdout", "4", "--kinds", "colour", "vsrr"])
