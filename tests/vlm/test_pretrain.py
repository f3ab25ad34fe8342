"""The pretraining tasks (vlm/pretrain/), their quality benchmarks and the pretrained tiny flavours (vlm/tiny/pretrained.py).

The world is the small fixture of tests/vlm/pretrain_world.py (the contract layout of data/mini_world.py),
selected by `world=` overrides; flavours are written in smoke mode (REFRACT_TINY_SMOKE=1, tests/conftest.py).
"""

from __future__ import annotations

import copy
import hashlib

import numpy as np
import pytest
import torch
from safetensors.torch import load_model
from torch.utils.data import default_collate

from core.run import train
from tests.conftest import BASE, compose_cfg, composed
from vlm.pretrain.encoder_task import EncoderPretrainTask
from vlm.pretrain.lm_task import LMPretrainTask, build_lm
from vlm.pretrain.quality import centre_patch, patch_scores, perplexity, probe_scores, retrieval_r1

WORLD = ["world._target_=tests.vlm.pretrain_world.ensure", "world.n_train=40", "world.n_test=12"]


def small_run(tmp_path, *overrides):
    """core.run.train of a few steps on the fixture world; returns (config, run directory)."""
    cfg = compose_cfg(*BASE, *WORLD, f"run.root={tmp_path / 'runs'}", "run.name=run", "trainer.max_steps=3",
                      "stage.phases.pretrain.global_batch_size=8", *overrides)
    train(cfg)
    return cfg, tmp_path / "runs" / "run"


def first_batch(task, cfg, model):
    dm = task.build_datamodule(cfg, cfg.stage.phases.pretrain, model, None, micro_batch_size=8, seed=0)
    dm.setup("fit")
    return (dm.collate_fn or default_collate)([dm.train_dataset[i] for i in range(8)])


def loss_drops(model, batch, steps: int = 8) -> tuple[float, float]:
    """(loss before, loss after `steps` AdamW steps on `batch`), each computed with the same random state."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def loss():
        torch.manual_seed(0)  # MAE: the same mask each time
        return model.loss(batch)

    before = float(loss().detach())
    for _ in range(steps):
        opt.zero_grad()
        loss().backward()
        opt.step()
    return before, float(loss().detach())


@pytest.mark.parametrize("objective", ["clip", "siglip", "supervised", "mae"])
def test_encoder_objective_trains_and_exports(tmp_path, objective):
    from vlm.encoders import TimmEncoder

    cfg, run_dir = small_run(tmp_path, "task=encoder_pretrain", f"encoder_pretrain.objective={objective}",
                             "encoder_pretrain.holdout=8")
    task = EncoderPretrainTask()
    trained = task.build_model(cfg, run_dir)
    load_model(trained, str(run_dir / "model.safetensors"))  # the trained module's weights: the reference
    encoder = TimmEncoder(model_id=f"local-dir:{run_dir / 'export'}", feature_layer=-2).eval()
    pixels = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        (expected,) = trained.eval().tower.forward_intermediates(pixels, indices=[2], norm=False, output_fmt="NLC",
                                                                 intermediates_only=True)
        assert torch.allclose(encoder(pixels), expected, atol=1e-5)

    torch.manual_seed(0)
    fresh = task.build_model(cfg, run_dir)
    before, after = loss_drops(fresh, first_batch(task, cfg, fresh))
    assert np.isfinite(before) and after < before


def test_encoder_init_starts_the_tower_from_a_checkpoint_at_another_resolution(tmp_path):
    """`encoder_pretrain.init` loads an exported tower at a new `img_size`: the blocks are the checkpoint's, the
    position embeddings its 8x8 grid resampled bicubically to 12x12 (timm's own resampler), the heads fresh; a
    folder holding another tower is refused by name."""
    import timm
    from safetensors.torch import load_file
    from timm.layers import resample_abs_pos_embed

    cfg, run_dir = small_run(tmp_path, "task=encoder_pretrain", "encoder_pretrain.objective=clip", "encoder_pretrain.holdout=8")
    source = load_file(str(run_dir / "export" / "model.safetensors"))
    task = EncoderPretrainTask()
    started = compose_cfg(*BASE, *WORLD, "task=encoder_pretrain", "encoder_pretrain.objective=clip", "encoder_pretrain.img_size=96",
                          f"encoder_pretrain.init={run_dir / 'export'}")
    tower = task.build_model(started, run_dir).tower.state_dict()
    assert tower["pos_embed"].shape == (1, 144, source["pos_embed"].shape[-1]) and source["pos_embed"].shape[1] == 64
    expected = resample_abs_pos_embed(source["pos_embed"], (12, 12), old_size=(8, 8), num_prefix_tokens=0)
    assert torch.allclose(tower["pos_embed"], expected, atol=1e-6)
    for key in ("patch_embed.proj.weight", "blocks.0.attn.qkv.weight", "attn_pool.latent"):
        assert torch.equal(tower[key], source[key])
    fresh = task.build_model(compose_cfg(*BASE, *WORLD, "task=encoder_pretrain", "encoder_pretrain.objective=clip",
                                         "encoder_pretrain.img_size=96"), run_dir).tower.state_dict()
    assert not torch.equal(fresh["blocks.0.attn.qkv.weight"], source["blocks.0.attn.qkv.weight"])

    other = tmp_path / "other_tower"
    timm.models.save_for_hf(timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, img_size=64), other,
                            model_args={"img_size": 64}, safe_serialization=True)
    with pytest.raises(ValueError, match="not the tiny tower"):
        task.build_model(compose_cfg(*BASE, *WORLD, "task=encoder_pretrain", f"encoder_pretrain.init={other}"), run_dir)


def test_siglip_scale_and_bias_inits_reach_open_clips_loss():
    """`init_logit_scale` / `init_logit_bias` set SigLIP's learned scale and bias, and the batch loss open_clip's
    SigLipLoss computes is the hand-written sum of every pair's -log sigmoid(sign * (scale * cos + bias)) over rows."""
    import torch.nn.functional as F

    from vlm.pretrain.objectives import build_objective

    torch.manual_seed(0)
    model = build_objective("siglip", 64, settings={"init_logit_scale": 30.0, "init_logit_bias": -2.0})
    assert model.logit_scale.exp().item() == pytest.approx(30.0) and model.logit_bias.item() == -2.0
    assert build_objective("siglip", 64).logit_scale.exp().item() == pytest.approx(10.0)  # SigLIP's own init
    assert build_objective("clip", 64).logit_scale.exp().item() == pytest.approx(1 / 0.07)
    batch = {"pixel_values": torch.randn(4, 3, 64, 64), "text": torch.randint(1, 400, (4, model.context_length))}
    with torch.no_grad():
        image, text = model.encode_image(batch["pixel_values"]), model.encode_text(batch["text"])
        logits = 30.0 * image @ text.T - 2.0
        by_hand = sum(-F.logsigmoid(torch.tensor(1.0 if i == j else -1.0) * logits[i, j])
                      for i in range(4) for j in range(4)) / 4
        assert model.loss(batch).item() == pytest.approx(by_hand.item(), rel=1e-5)


def test_lm_pretrain_base_and_instruct(tmp_path):
    from vlm.backbones import HFBackbone

    cfg, run_dir = small_run(tmp_path / "base", "task=lm_pretrain", "lm_pretrain.block_size=32", "lm_pretrain.holdout=8")
    trained = build_lm(cfg)
    load_model(trained, str(run_dir / "model.safetensors"))
    backbone = HFBackbone(model_id=str(run_dir / "export"))  # the backbone loader, as for a hub model
    ids = torch.tensor([trained.tokenizer("a small red circle")["input_ids"]])
    with torch.no_grad():
        expected = trained.lm.eval()(input_ids=ids).logits
        got = backbone.model.eval()(input_ids=ids).logits[..., : expected.shape[-1]]
    assert torch.allclose(got, expected, atol=1e-5)

    torch.manual_seed(0)
    fresh = build_lm(cfg)
    task = LMPretrainTask()
    before, after = loss_drops(fresh, first_batch(task, cfg, fresh))
    assert np.isfinite(before) and after < before

    # instruct: starts from the base export, trains on the dialogues' answers only
    icfg = compose_cfg(*BASE, *WORLD, "task=lm_pretrain", "lm_pretrain.data=dialogues", "lm_pretrain.holdout=8",
                       f"lm_pretrain.init={run_dir / 'export'}")
    instruct = build_lm(icfg)
    assert torch.equal(instruct.lm.model.embed_tokens.weight, trained.lm.model.embed_tokens.weight)
    batch = first_batch(task, icfg, instruct)
    answers = batch["labels"] != -100
    assert 0 < int(answers.sum()) < int(batch["attention_mask"].sum())  # questions and template are not trained
    before, after = loss_drops(instruct, batch)
    assert after < before


def test_probe_reads_features_that_encode_the_labels():
    colours, shapes = ["red", "blue"], ["circle", "square"]
    rng = np.random.default_rng(0)
    scenes = [{"objects": [{"color": colours[rng.integers(2)], "shape": shapes[rng.integers(2)], "size": "small",
                            "label": None} for _ in range(rng.integers(1, 4))]} for _ in range(80)]
    # hand-made features: the presence of each colour and shape, and the count, one column each
    feats = np.array([[any(o["color"] == c for o in s["objects"]) for c in colours]
                      + [any(o["shape"] == h for o in s["objects"]) for h in shapes] + [len(s["objects"])] for s in scenes], float)
    scores = probe_scores(feats[:60], scenes[:60], feats[60:], scenes[60:])
    assert scores["attribute_acc"] == 100.0 and scores["count_acc"] == 100.0
    noise = probe_scores(rng.normal(size=(60, 5)), scenes[:60], rng.normal(size=(20, 5)), scenes[60:])
    assert noise["attribute_acc"] < 100.0


def test_centre_patch_of_a_non_square_scene_by_hand():
    scene = {"width": 96, "height": 64}
    obj = {"bbox": [80, 10, 10, 10]}  # centre (85, 15)
    # resize-naive: (85/96, 15/64) of an 8x8 grid -> column 7, row 1; letterbox (pad 16 rows on top): (85/96, 31/96)
    assert centre_patch(obj, scene, (8, 8), "resize-naive") == 1 * 8 + 7
    assert centre_patch(obj, scene, (8, 8), "letterbox") == 2 * 8 + 7
    with pytest.raises(ValueError, match="resize-crop"):
        centre_patch(obj, scene, (8, 8), "resize-crop")


def test_patch_probe_reads_the_patch_under_each_object():
    rng = np.random.default_rng(0)
    colours, shapes, sizes = ["red", "blue", "green"], ["circle", "square"], ["small", "large"]
    scenes, feats = [], np.zeros((60, 4, 3))
    for i in range(60):  # 2x2 grid on a 64x64 scene; each object alone in its quadrant, its attributes in its patch
        objects = []
        for q in rng.choice(4, size=2, replace=False):
            o = {"color": rng.choice(colours), "shape": rng.choice(shapes), "size": rng.choice(sizes),
                 "bbox": [32 * (q % 2) + 8, 32 * (q // 2) + 8, 10, 10]}
            feats[i, q] = [colours.index(o["color"]), shapes.index(o["shape"]), sizes.index(o["size"])]
            objects.append(o)
        scenes.append({"width": 64, "height": 64, "objects": objects})
    scores = patch_scores(feats[:40], scenes[:40], feats[40:], scenes[40:], (2, 2), "resize-naive")
    assert (scores["patch_colour_acc"], scores["patch_shape_acc"], scores["patch_size_acc"]) == (100.0, 100.0, 100.0)
    blank = patch_scores(np.zeros_like(feats[:40]), scenes[:40], np.zeros_like(feats[40:]), scenes[40:], (2, 2), "resize-naive")
    assert blank["patch_colour_acc"] < 100.0  # no information in the patches: the probe falls to a constant
    assert "patch_sign_acc" not in scores  # no scene has a sign


def test_patch_probe_reads_the_sign_word_at_the_patch_under_the_sign():
    rng = np.random.default_rng(0)
    words = ["cat", "sun", "box"]
    scenes, feats = [], rng.normal(size=(90, 4, 3))
    for i in range(90):  # 2x2 grid; the sign alone in a random quadrant, its word one-hot in that patch
        q, word = int(rng.integers(4)), words[i % 3]
        feats[i, q] = 10 * np.eye(3)[words.index(word)]
        sign = {"word": word, "bbox": [32 * (q % 2) + 4, 32 * (q // 2) + 10, 24, 12], "on": None}
        other = (q + 2) % 4  # one object elsewhere, for the attribute probes
        obj = {"color": ["red", "blue"][i % 2], "shape": ["circle", "square"][i % 2], "size": ["small", "large"][i % 2],
               "bbox": [32 * (other % 2) + 8, 32 * (other // 2) + 8, 10, 10]}
        scenes.append({"width": 64, "height": 64, "objects": [obj], "sign": sign})
    scores = patch_scores(feats[:60], scenes[:60], feats[60:], scenes[60:], (2, 2), "resize-naive")
    assert scores["patch_sign_acc"] == 100.0 and round(scores["patch_sign_majority"], 1) == 33.3
    moved = [{**s, "sign": {**s["sign"], "bbox": [(s["sign"]["bbox"][0] + 32) % 64, *s["sign"]["bbox"][1:]]}}
             for s in scenes]  # read one quadrant over: the noise of another patch
    assert patch_scores(feats[:60], moved[:60], feats[60:], moved[60:], (2, 2), "resize-naive")["patch_sign_acc"] < 70


def test_retrieval_counts_identical_captions_as_right():
    emb = torch.eye(4)
    captions = ["a", "b", "b", "c"]
    assert retrieval_r1(emb, emb, captions) == {"retrieval_r1": 100.0, "retrieval_chance": 37.5}  # (1+2+2+1)/4/4
    # images 1 and 2 retrieve each other's caption (same text "b": right); images 0 and 3 swap "a" and "c" (wrong)
    text = emb[[3, 2, 1, 0]]
    assert retrieval_r1(emb, text, captions)["retrieval_r1"] == 50.0


def test_perplexity_of_uniform_logits_is_the_vocabulary_size():
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    torch.nn.init.zeros_(model.lm_head.weight)  # every logit 0: uniform next-token distribution
    samples = [([1, 5, 7, 9, 2], [1, 5, 7, 9, 2]), ([1, 3, 2], [-100, -100, 2])]
    assert perplexity(model, samples) == pytest.approx(50.0, rel=1e-6)


def folder_digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_pretrained_flavours_load_like_hub_models_and_rewrite_identically(tmp_path):
    from vlm.model import build_component
    from vlm.tiny import VERSION, ensure_tiny, fingerprint

    first = ensure_tiny("mini_mae", root=tmp_path / "a")
    second = ensure_tiny("mini_mae", root=tmp_path / "b")
    assert first.name.endswith("-smoke")  # a real cache never holds smoke weights
    assert folder_digest(first) == folder_digest(second)
    assert fingerprint("mini_mae", root=tmp_path / "a") == fingerprint("mini_mae", root=tmp_path / "b")
    weights = bytearray((second / "model.safetensors").read_bytes())
    weights[-1] ^= 1  # one bit of the last tensor: other weights, another fingerprint
    (second / "model.safetensors").write_bytes(bytes(weights))
    assert fingerprint("mini_mae", root=tmp_path / "a") != fingerprint("mini_mae", root=tmp_path / "b")
    assert {"config.json", "model.safetensors", "pretraining.json"} <= set(folder_digest(first))
    torch.manual_seed(0)
    node = copy.deepcopy(composed("encoder=mini_mae")["encoder"])
    encoder = build_component(node)  # through tiny:mini_mae, like a hub id
    assert encoder.model_id.endswith(f"mini_mae-v{VERSION}-smoke") and encoder.grid_size == (8, 8)

    instruct = ensure_tiny("mini_llama_instruct", root=tmp_path / "c")
    base = ensure_tiny("mini_llama_base")
    assert (instruct / "tokenizer.json").read_bytes() == (base / "tokenizer.json").read_bytes()
    backbone = build_component(copy.deepcopy(composed("backbone=mini_llama_instruct")["backbone"]))
    from transformers import AutoModelForCausalLM

    base_lm = AutoModelForCausalLM.from_pretrained(base)
    with torch.no_grad():
        step = (backbone.model.model.layers[0].mlp.up_proj.weight - base_lm.model.layers[0].mlp.up_proj.weight).abs().max()
    assert 0 < float(step) < 0.01  # a few smoke steps away from the base weights, not a fresh init (std ~0.07)


def test_a_flavour_revision_moves_only_that_flavours_folder(tmp_path):
    from core.conf import group_option
    from data.atomic import read_json
    from vlm.tiny import VERSION, ensure_tiny

    assert group_option("tiny", "mini_siglip").revision == 2 and "revision" not in group_option("tiny", "mini_mae")
    siglip = ensure_tiny("mini_siglip", root=tmp_path)  # `revision` is the cache's, not a writer argument
    assert siglip.name == f"mini_siglip-v{VERSION}-r2-smoke"
    assert ensure_tiny("mini_mae", root=tmp_path).name == f"mini_mae-v{VERSION}-smoke"  # revision 1: the plain name
    assert read_json(siglip / "done.json") == {"name": "mini_siglip", "version": VERSION, "revision": 2}
    pretraining = read_json(siglip / "pretraining.json")
    assert "stage.phases.pretrain.optim.lr=3.0e-4" in pretraining["overrides"]
    assert pretraining["overrides"][-1] == "encoder_pretrain.holdout=8"  # smoke overrides appended (trainer.max_steps=2 caps the 3,200)


def test_a_flavour_started_from_another_is_at_least_at_its_revision():
    """A flavour whose recipe starts from another (`tiny:NAME` in its overrides) must move its own folder when that
    one's revision moves, or a cache keeps it trained on the old weights: its revision is never below its source's
    (e.g. mini_llama_base revision 2 on mini_llama_scenes revision 2)."""
    import re

    from core.conf import group_option
    from vlm.tiny import flavours

    revision = {name: int(group_option("tiny", name).get("revision", 1)) for name in flavours()}
    started = {name: re.findall(r"tiny:(\w+)", " ".join(map(str, group_option("tiny", name).get("overrides", []))))
               for name in flavours()}
    assert started["mini_llama_base"] == ["mini_llama_scenes"]  # the overrides are read
    behind = {(name, source) for name, sources in started.items() for source in sources if revision[name] < revision[source]}
    assert not behind, f"flavours below the revision of the flavour they start from (raise theirs): {sorted(behind)}"
