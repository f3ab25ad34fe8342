"""`lm_pretrain.data=scenes` (vlm/pretrain/scene_samples.py): the VLM's layout (BOS, 64 patch slots, the text), each
object's words at the patch under its centre (hand-checked against the scene), slot vectors equal to the sum of
the LM's own word embeddings, the loss equal to transformers' own on those embeddings, `slot_background`'s one
random vector per sample in every slot (training only), `sign_slot`'s sign word at the patch under the sign's
centre, `extra_questions` generated for every family, their answers checked against the scenes by hand-written
rules, `kinds` and `vsr_tilt` (VSR statements restated with the scene's truth, checked against the generator), the
VSR curriculum's two flavours, and a 3-step run that trains and exports."""

from __future__ import annotations

import json

import pytest
import torch

from core.run import train
from data.mini_world import ensure
from tests.conftest import BASE, compose_cfg
from vlm.prompting import IGNORE_INDEX, build_prompt_format
from vlm.pretrain.lm_task import LMPretrainTask, build_lm, collate
from vlm.pretrain.quality import centre_patch
from vlm.pretrain.scene_samples import (
    extra_scene_questions,
    object_phrases,
    scene_samples,
    scene_texts,
    slot_embeddings,
)

WORLD_KW = dict(n_train=24, n_test=4, n_per_benchmark=6)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return ensure(tmp_path_factory.mktemp("w"), **WORLD_KW)


@pytest.fixture(scope="module")
def lm():
    from vlm.tiny import ensure_tiny

    return ensure_tiny("mini_llama_base")


def scene_cfg(world, *overrides):
    return compose_cfg(*BASE, "task=lm_pretrain", "lm_pretrain.data=scenes", f"world.cache_dir={world.parent}",
                       *(f"world.{k}={v}" for k, v in WORLD_KW.items()), "lm_pretrain.init=tiny:mini_llama_base",
                       "lm_pretrain.prompt_format=base", "lm_pretrain.holdout=4", *overrides)


def test_each_object_is_named_at_the_patch_under_its_centre(world):
    scenes = json.loads((world / "scenes.json").read_text())["train"]
    objects = object_phrases(world)
    assert list(objects) == list(scenes)
    for image, rows in objects.items():
        scene = scenes[image]
        assert [p for p, _ in rows] == [centre_patch(o, scene, (8, 8), "letterbox") for o in scene["objects"]]
        assert len({p for p, _ in rows}) == len(rows)  # one object a patch (world v3's grid)
        for (_, phrase), obj in zip(rows, scene["objects"]):
            words = phrase.split()
            assert (words[0], words[-2], words[-1]) == (obj["color"], obj["size"], obj["shape"])


def test_samples_have_the_vlm_layout(world, lm):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(lm)
    fmt = build_prompt_format("base", tok)
    texts = scene_texts(world, questions_per_scene=2)
    samples = scene_samples(world, tok, fmt, questions_per_scene=2, holdout=4, max_length=128)
    kept = [t for t in texts if t[0] not in list(object_phrases(world))[-4:]]
    assert len(samples) == len(kept) == 20 * 4  # caption, prose, 2 questions for each of the 20 kept scenes
    assert {p for _, p, _ in texts[:4]} >= {"Describe the image.", "Describe the image in detail."}
    (ids, labels, words), (image, prompt, answer) = samples[0], kept[0]
    start = fmt.image_position
    assert start == 1 and ids[0] == tok.bos_token_id
    assert sorted(words) == list(range(start, start + 64))  # every patch slot, in order
    assert ids[start:start + 64] == [tok.eos_token_id] * 64 and labels[:start + 64] == [IGNORE_INDEX] * (start + 64)
    text_ids, text_labels = fmt.build([("human", prompt), ("gpt", answer)])
    assert ids[start + 64:] == text_ids[start:] and labels[start + 64:] == text_labels[start:]
    for patch, phrase in object_phrases(world)[image]:
        expected = [i for w in phrase.split() for i in tok(" " + w, add_special_tokens=False)["input_ids"]]
        assert words[start + patch] == expected
    assert sum(bool(w) for w in words.values()) == len(object_phrases(world)[image])  # the rest are empty slots


def test_the_sign_slot_names_the_sign_word_at_the_patch_under_its_centre(world):
    scenes = json.loads((world / "scenes.json").read_text())["train"]
    plain, signed = object_phrases(world), object_phrases(world, sign_slot=True)
    with_sign = [image for image, scene in scenes.items() if scene.get("sign")]
    assert with_sign, "the test world has no sign; raise its n_train"
    for image, scene in scenes.items():
        if image not in with_sign:
            assert signed[image] == plain[image]
            continue
        sign = scene["sign"]
        assert signed[image] == plain[image] + [(centre_patch(sign, scene, (8, 8), "letterbox"), f"sign {sign['word']}")]


def test_extra_questions_come_from_every_family_and_answer_as_the_scene_does(world):
    scenes = json.loads((world / "scenes.json").read_text())["train"]
    asked = extra_scene_questions(world, 12)
    assert list(asked) == list(scenes) and all(len(pairs) == 12 for pairs in asked.values())
    assert asked == extra_scene_questions(world, 12)  # seeded
    prompts = [q for pairs in asked.values() for q, _ in pairs]
    for start in ("What color is", "What shape is", "What size is", "How many", "Is the following statement",
                  "Is there", "What does the sign say", "What word is written"):
        assert any(q.startswith(start) for q in prompts), start
    checked = 0
    for image, pairs in asked.items():
        objects = scenes[image]["objects"]
        for question, answer in pairs:
            text = question.split("\n")[0]
            if text.startswith("What color is the ") and " to the " not in text:  # VQAv2's: a unique referent
                words = text[len("What color is the "):-1].split()
                hits = [o["color"] for o in objects if o["shape"] == words[-1] and (len(words) == 1 or o["size"] == words[0])]
                assert hits == [answer], (image, question)
                checked += 1
            elif text.startswith("Is there") and text.endswith(" in the image?"):  # POPE's, present or absent
                color, shape = text.split()[-5:-3]
                assert answer == ("yes" if any((o["color"], o["shape"]) == (color, shape) for o in objects) else "no")
                checked += 1
            elif text.startswith(("What does the sign say", "What word is written")):
                assert answer == scenes[image]["sign"]["word"]
                checked += 1
    assert checked >= 24
    pope = [a for pairs in asked.values() for q, a in pairs if q.split("\n")[0].endswith(" in the image?")]
    assert "yes" in pope and "no" in pope


def test_box_questions_answer_with_the_referred_objects_box(world):
    scenes = json.loads((world / "scenes.json").read_text())["train"]
    plain = extra_scene_questions(world, 12)
    asked = extra_scene_questions(world, 12, boxes=True)
    assert not any("bounding box" in q for pairs in plain.values() for q, _ in pairs)
    checked = 0
    for image, pairs in asked.items():
        scene = scenes[image]
        for question, answer in pairs:
            if not question.startswith("Please provide the bounding box coordinate of the region this sentence "
                                       "describes: the "):
                continue
            words = question.split(": the ")[1].split()
            if len(words) > 3:  # a relation to another object: the referent is the scene generator's to say
                continue
            wanted = {"shape": words[-1], **({"size": words[0]} if words[0] in ("small", "large") else {}),
                      **({"color": words[-2]} if len(words) > 1 and words[-2] not in ("small", "large") else {})}
            (o,) = [o for o in scene["objects"] if all(o[k] == v for k, v in wanted.items())]  # the one referent
            x, y, w, h = o["bbox"]
            W, H = scene["width"], scene["height"]  # the box as fractions of the canvas, 2 decimals (LLaVA-1.5)
            assert answer == f"[{x / W:.2f}, {y / H:.2f}, {(x + w) / W:.2f}, {(y + h) / H:.2f}]", (image, question)
            checked += 1
    assert checked >= 10


def test_box_questions_without_generated_questions_are_refused(world, lm):
    from transformers import AutoTokenizer

    from vlm.pretrain.lm_task import scenes_of

    cfg = scene_cfg(world, "lm_pretrain.box_questions=true")
    with pytest.raises(ValueError, match="lm_pretrain.extra_questions"):
        scenes_of(cfg.lm_pretrain, world, AutoTokenizer.from_pretrained(lm))


def test_samples_carry_the_extra_questions_and_the_sign_word(world, lm):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(lm)
    fmt = build_prompt_format("base", tok)
    samples = scene_samples(world, tok, fmt, questions_per_scene=2, holdout=4, max_length=128, extra_questions=3,
                            sign_slot=True)
    assert len(samples) == 20 * (4 + 3)  # caption, prose, 2 + 3 questions for each of the 20 kept scenes
    start, phrases = fmt.image_position, object_phrases(world, sign_slot=True)
    for (ids, _, words), image in zip(samples[::7], list(phrases)[:20]):
        expected: dict[int, list[int]] = {}
        for patch, phrase in phrases[image]:  # a sign over an object's patch shares its slot
            expected.setdefault(start + patch, []).extend(
                i for w in phrase.split() for i in tok(" " + w, add_special_tokens=False)["input_ids"])
        assert {pos: ids_ for pos, ids_ in words.items() if ids_} == expected


def test_slot_vectors_sum_the_words_and_the_loss_is_transformers_own(world):
    cfg = scene_cfg(world)
    torch.manual_seed(0)
    model = build_lm(cfg)
    dm = LMPretrainTask().build_datamodule(cfg, cfg.stage.phases.pretrain, model, None, micro_batch_size=4, seed=0)
    dm.setup("fit")
    samples = [dm.train_dataset[i] for i in range(4)]
    batch = collate(samples, model.tokenizer.eos_token_id)
    embed = model.lm.get_input_embeddings()
    got = slot_embeddings(embed, batch["input_ids"], batch["slot_mask"], batch["slot_words"])
    for b, (ids, _, words) in enumerate(samples):
        expected = embed(torch.tensor(ids)).clone()
        for pos, token_ids in words.items():
            expected[pos] = embed(torch.tensor(token_ids)).sum(0) if token_ids else 0.0
        assert torch.allclose(got[b, :len(ids)], expected, atol=1e-6)
    reference = model.lm(inputs_embeds=got, attention_mask=batch["attention_mask"], labels=batch["labels"]).loss
    assert torch.allclose(model.loss(batch), reference)
    without_slots = model.lm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             labels=batch["labels"]).loss
    assert not torch.allclose(model.loss(batch), without_slots)  # the slots reach the LM


def test_slot_background_adds_one_vector_per_sample_to_every_slot_in_training_only(world):
    cfg = scene_cfg(world, "lm_pretrain.slot_background=6.0")
    torch.manual_seed(0)
    model = build_lm(cfg)
    dm = LMPretrainTask().build_datamodule(cfg, cfg.stage.phases.pretrain, model, None, micro_batch_size=4, seed=0)
    dm.setup("fit")
    batch = collate([dm.train_dataset[i] for i in range(4)], model.tokenizer.eos_token_id)
    embed = model.lm.get_input_embeddings()
    plain = slot_embeddings(embed, batch["input_ids"], batch["slot_mask"], batch["slot_words"])
    model.eval()
    assert torch.equal(model.inputs(batch)["inputs_embeds"], plain)  # evaluation sees the slots as they are
    model.train()
    added = model.inputs(batch)["inputs_embeds"] - plain
    slots, text = batch["slot_mask"], ~batch["slot_mask"]
    assert torch.count_nonzero(added[text]) == 0
    for b in range(4):
        rows = added[b][slots[b]]
        assert len(rows) == 64 and torch.allclose(rows, rows[0].expand_as(rows), atol=1e-6)  # the same in every slot
        assert 0 < float(rows[0].norm()) <= 6.0
    assert len({round(float(added[b][slots[b]][0].norm()), 4) for b in range(4)}) == 4  # its own norm per sample


def test_scene_pretraining_runs_and_exports(world, tmp_path):
    cfg = scene_cfg(world, f"run.root={tmp_path}", "run.name=run", "trainer.max_steps=3",
                    "stage.phases.pretrain.global_batch_size=4")
    train(cfg)
    export = tmp_path / "run" / "export"
    assert (export / "model.safetensors").is_file() and (export / "tokenizer.json").is_file()


def test_a_caption_that_misses_an_object_is_named(world, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(world, broken)
    records = json.loads((broken / "align.json").read_text())
    first = records[0]["conversations"][1]["value"]
    records[0]["conversations"][1]["value"] = first.split(",")[0].split(" and ")[0] + "."  # only the first object
    (broken / "align.json").write_text(json.dumps(records))
    if len(json.loads((broken / "scenes.json").read_text())["train"][records[0]["image"]]["objects"]) < 2:
        pytest.skip("the first scene has one object")
    with pytest.raises(ValueError, match=r"align\.json.*does not name each object"):
        object_phrases(broken)


def test_scene_mix_puts_that_share_of_scene_samples_beside_the_dialogues(world):
    cfg = scene_cfg(world, "lm_pretrain.data=dialogues", "lm_pretrain.scene_mix=0.25", "lm_pretrain.sign_slot=true",
                    "lm_pretrain.extra_questions=2")
    model = build_lm(cfg)
    dm = LMPretrainTask().build_datamodule(cfg, cfg.stage.phases.pretrain, model, None, micro_batch_size=4, seed=0)
    dm.setup("fit")
    rows = [dm.train_dataset[i] for i in range(len(dm.train_dataset))]
    dialogue = [r for r in rows if not r[2]]
    scenes = [r for r in rows if r[2]]
    assert len(dialogue) == 24 - 4 and len(scenes) == round(len(dialogue) * 0.25 / 0.75)  # 20 dialogues, 7 scenes
    assert all(len(words) == 64 for _, _, words in scenes)
    batch = collate([dialogue[0], scenes[0]], model.tokenizer.eos_token_id)  # both kinds in one micro-batch
    assert not batch["slot_mask"][0].any() and int(batch["slot_mask"][1].sum()) == 64
    embeds = model.inputs(batch)["inputs_embeds"]
    plain = model.lm.get_input_embeddings()(batch["input_ids"][0])
    assert torch.equal(embeds[0], plain)  # a dialogue's embeddings are its tokens'
    with pytest.raises(ValueError, match="scene_mix=1.0"):
        LMPretrainTask().build_datamodule(scene_cfg(world, "lm_pretrain.data=dialogues", "lm_pretrain.scene_mix=1.0"),
                                          cfg.stage.phases.pretrain, model, None, micro_batch_size=4, seed=0)


def test_kinds_keep_only_those_questions_and_the_tilt_restates_vsr_with_the_scenes_truth(world):
    import numpy as np

    from data.mini_world_questions import ask_vsr, question_kind, stated_first
    from vlm.prompting import strip_image_placeholder

    scenes = json.loads((world / "scenes.json").read_text())["train"]
    asked = lambda rows: [(im, strip_image_placeholder(q), a) for im, q, a in rows  # noqa: E731
                          if not q.endswith(("Describe the image.", "Describe the image in detail."))]
    every = asked(scene_texts(world, 100))
    kept = asked(scene_texts(world, 100, kinds=("vsr", "relation")))
    assert kept == [r for r in every if question_kind(r[1]) in ("vsr", "relation")]
    assert {question_kind(q) for _, q, _ in kept} == {"vsr", "relation"} and len(kept) < len(every)
    assert len(scene_texts(world, 100, kinds=("vsr",))) == 2 * len(scenes) + sum(question_kind(q) == "vsr" for _, q, _ in every)
    for share in (1.0, 0.0):
        tilted = [r for r in asked(scene_texts(world, 100, vsr_tilt=share)) if question_kind(r[1]) == "vsr"]
        assert len(tilted) == sum(question_kind(q) == "vsr" for _, q, _ in every)
        for image, prompt, answer in tilted:
            statement = prompt.split("true? ")[1].split("\n")[0]
            truth = {q["question"]: q["answer"] for q in ask_vsr(scenes[image], np.random.default_rng(0))}
            assert stated_first(statement) == (share == 1.0) and truth[statement] == answer
    half = [r for r in asked(scene_texts(world, 100, vsr_tilt=0.5)) if question_kind(r[1]) == "vsr"]
    assert 0 < sum(stated_first(q) for _, q, _ in half) < len(half)
    assert scene_texts(world, 100, vsr_tilt=0.5) == scene_texts(world, 100, vsr_tilt=0.5)  # seeded
    with pytest.raises(ValueError, match=r"lm_pretrain.kinds=\['vsr', 'colours'\]: \['colours'\] is no question kind"):
        scene_texts(world, 100, kinds=("vsr", "colours"))
    with pytest.raises(ValueError, match=r"lm_pretrain.vsr_tilt=1.5: give the share"):
        scene_texts(world, 100, vsr_tilt=1.5)


def test_restating_a_statement_that_is_no_vsr_statement_is_refused():
    from data.mini_world_questions import restate_vsr

    assert restate_vsr("The red circle is below the blue square.", " yes", True) == (
        "The red circle is above the blue square.", " no")
    assert restate_vsr("The red circle is above the blue square.", "no", True) == (
        "The red circle is above the blue square.", "no")
    with pytest.raises(ValueError, match="is not a VSR statement"):
        restate_vsr("What color is the circle?", "red", True)
    with pytest.raises(ValueError, match="answered yes or no"):
        restate_vsr("The red circle is below the blue square.", "maybe", True)


def test_the_vsr_curriculum_flavours_train_on_tilted_then_balanced_statements():
    from vlm.tiny import ensure_tiny

    balanced = ensure_tiny("mini_llama_vsr")  # writes mini_llama_vsr_tilted first, from mini_llama_text
    tilted = ensure_tiny("mini_llama_vsr_tilted")
    recorded = [json.loads((folder / "pretraining.json").read_text())["overrides"] for folder in (tilted, balanced)]
    assert "lm_pretrain.vsr_tilt=1.0" in recorded[0] and not any(o.startswith("lm_pretrain.vsr_tilt") for o in recorded[1])
    assert all("lm_pretrain.kinds=[vsr,relation]" in o for o in recorded)
    assert "lm_pretrain.init=tiny:mini_llama_vsr_tilted" in recorded[1]
