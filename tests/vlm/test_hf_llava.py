"""HF Llava interop, checked against transformers' own Llava.

Export (SigLIP and CLIP encoders, base and chat-template prompt formats, LoRA merged, no spare vocabulary row)
reproduces the run's prompt, pixels, fp32 logits and greedy tokens; other projectors, encoders and image
strategies are refused with the reason. `init_from` an HF Llava folder (llava-1.5-7b-hf weight names) reproduces
its logits, also through `core.run.train`; a mismatching architecture or tokenizer is refused."""

import json
import re
import shutil

import numpy as np
import pytest
import safetensors.torch
import torch
from omegaconf import OmegaConf
from PIL import Image
from transformers import AutoProcessor, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration, SiglipVisionConfig

from core.checkpoint import save_weights_atomic
from scripts.export_hf import main as export_main
from tests.conftest import compose_cfg, randomize
from vlm.hf_llava import HFLlavaError, export
from vlm.inference import load
from vlm.lightning import VLMTask
from vlm.model import build_vlm

QUESTION = "What is the shape of the red object?"
NEW_TOKENS = 6
IMAGE = Image.fromarray(np.random.default_rng(1).integers(0, 256, (80, 96, 3), dtype=np.uint8))  # downscaled to 64 x 64


def save_run(model, cfg, run_dir):
    """A run directory as core.run leaves it: resolved config.yaml + model.safetensors."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    save_weights_atomic(model, run_dir / "model.safetensors")
    return run_dir


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    cfg = compose_cfg()
    return save_run(randomize(build_vlm(cfg)), cfg, tmp_path_factory.mktemp("export") / "run")


def spliced_ids(model, ids, image_id):
    p = model.prompt_format.image_position
    return ids[:p] + [image_id] * model.encoder.num_patches + ids[p:]


def assert_hf_matches(model, out, expected_prompt=None, extra_rows=0):
    """The exported folder, loaded by transformers, reproduces `model`: prompt, pixels, logits, greedy tokens."""
    model.eval()
    hf = LlavaForConditionalGeneration.from_pretrained(out, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(out, backend="pil")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    if expected_prompt is not None:
        assert prompt == expected_prompt
    ids, _ = model.prompt_format.build([("human", QUESTION)], generation=True)
    messages[0]["content"][0]["image"] = IMAGE
    inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt")
    assert inputs["input_ids"][0].tolist() == spliced_ids(model, ids, hf.config.image_token_id)
    # the same from the prompt string (which holds BOS itself, so the tokenizer must not add one)
    again = processor(images=IMAGE, text=prompt, add_special_tokens=False, return_tensors="pt")
    assert torch.equal(again["input_ids"], inputs["input_ids"]) and torch.equal(again["pixel_values"], inputs["pixel_values"])
    pixels = model.encoder.transform(IMAGE)
    torch.testing.assert_close(inputs["pixel_values"][0], pixels, atol=1e-6, rtol=0)

    with torch.no_grad():
        theirs = hf(**inputs).logits[0]
        input_ids = torch.tensor([ids])
        ours = model(input_ids, torch.ones_like(input_ids), pixel_values=pixels[None], image_mask=torch.tensor([True])).logits[0]
    assert theirs.shape[1] == ours.shape[1] + extra_rows  # an <image> row added when the vocabulary had no spare one
    assert (theirs[:, : ours.shape[1]] - ours).abs().max() < 1e-4

    gen = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    hf_tokens = hf.generate(**inputs, **gen)[0, inputs["input_ids"].shape[1]:].tolist()
    embeds, masks = model.prompt_embeddings([IMAGE], [QUESTION])
    tok = model.tokenizer
    our_tokens = model.backbone.model.generate(inputs_embeds=embeds, attention_mask=masks, eos_token_id=model.prompt_format.stop_token_ids,
                                               pad_token_id=tok.pad_token_id, **gen)[0].tolist()
    assert len(hf_tokens) == NEW_TOKENS and len(set(hf_tokens)) > 1 and hf_tokens == our_tokens
    assert model.generate([IMAGE], [QUESTION], **gen)[0] == processor.decode(hf_tokens, skip_special_tokens=True).strip()
    return hf, processor


def test_siglip_run_exports_to_hf_llava_with_same_prompt_logits_and_greedy_tokens(tiny_run, tmp_path):
    out = tmp_path / "llava"
    assert export_main([str(tiny_run), str(out)]) == 0
    model = load(tiny_run)
    hf, _ = assert_hf_matches(model, out, expected_prompt=f"<s><image>In: {QUESTION}\nOut:")  # the base format, by hand
    assert hf.config.vision_config.model_type == "siglip_vision_model" and hf.config.vision_feature_select_strategy == "full"
    # transformers' default (torchvision) processor loads too and builds the same ids; its resize kernel differs slightly
    default = AutoProcessor.from_pretrained(out)
    prompt = default.apply_chat_template([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}],
                                         add_generation_prompt=True)
    inputs = default(images=IMAGE, text=prompt, add_special_tokens=False, return_tensors="pt")
    ids, _ = model.prompt_format.build([("human", QUESTION)], generation=True)
    assert inputs["input_ids"][0].tolist() == spliced_ids(model, ids, hf.config.image_token_id)
    assert (inputs["pixel_values"][0] - model.encoder.transform(IMAGE)).abs().max() < 0.05
    # batched prompts are left-padded (transformers does not save padding_side; the export writes it)
    assert default.tokenizer.padding_side == "left"
    batch = default(images=[IMAGE, IMAGE], text=[prompt, prompt + " longer"], add_special_tokens=False, padding=True,
                    return_tensors="pt")
    assert batch["attention_mask"][0, 0] == 0 and batch["attention_mask"][0, -1] == 1


@pytest.mark.parametrize("strategy", ["resize-naive", "letterbox"])
def test_clip_run_exports_with_class_token_dropped(tmp_path, strategy):
    """letterbox: the export's own check compares HF's pad_to_square with ours on odd size differences."""
    cfg = compose_cfg("encoder=tiny_clip", f"encoder.image_strategy={strategy}")  # timm CLIP: class token, pre-norm, quick_gelu
    run = save_run(randomize(build_vlm(cfg)), cfg, tmp_path / "run")
    assert export_main([str(run), str(tmp_path / "llava")]) == 0
    hf, processor = assert_hf_matches(load(run), tmp_path / "llava")
    assert hf.config.vision_config.model_type == "clip_vision_model" and hf.config.vision_config.hidden_act == "quick_gelu"
    assert hf.config.vision_feature_select_strategy == "default" and processor.num_additional_image_tokens == 1


@pytest.mark.parametrize("backbone, extra_rows", [("tiny_llama3", 0), ("tiny_qwen2", 0), ("tiny_gemma", 1)])
def test_chat_template_backbones_export(backbone, extra_rows, tmp_path):
    """Chat-template formats: with BOS (Llama 3), without (Qwen2: the image goes first), tied and scaled embeddings
    with no spare row (Gemma)."""
    model = randomize(build_vlm(compose_cfg(f"backbone={backbone}")))
    export(model, tmp_path / "llava", "resize-naive")
    assert_hf_matches(model, tmp_path / "llava", extra_rows=extra_rows)


def test_an_image_row_is_added_when_the_vocabulary_has_no_spare_one(tmp_path):
    model = randomize(build_vlm(compose_cfg()))
    model.backbone.model.resize_token_embeddings(len(model.tokenizer))  # every embedding row is a real token
    export(model, tmp_path / "llava", "resize-naive")
    hf, _ = assert_hf_matches(model, tmp_path / "llava", extra_rows=1)
    assert hf.generation_config.suppress_tokens == [len(model.tokenizer)]


def test_lora_adapters_are_merged_on_export(tmp_path):
    peft = pytest.importorskip("peft")
    model = randomize(build_vlm(compose_cfg()))
    plain = model.backbone.model
    ids = torch.tensor([model.prompt_format.build([("human", QUESTION)], generation=True)[0]])
    before = plain(input_ids=ids).logits
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model.backbone.model = peft.get_peft_model(plain, config)
    assert (model.backbone.model(input_ids=ids).logits - before).abs().max() > 1e-3  # the adapters change the output
    export(model, tmp_path / "llava", "resize-naive")
    assert isinstance(model.backbone.model, peft.PeftModel)  # merged into a copy; the run's model keeps its adapters
    assert_hf_matches(model, tmp_path / "llava")


@pytest.mark.parametrize("overrides, shape", [
    (["projector=fused_mlp"], "Linear-GELU-Linear-GELU-Linear"), (["projector=linear"], "Linear"),
    (["+projector.standardize_features=true"], "FeatureStandardizer-Linear-GELU-Linear"),
])
def test_other_projectors_are_refused_with_the_reason(overrides, shape, tmp_path, capsys):
    cfg = compose_cfg(*overrides)
    run = save_run(build_vlm(cfg), cfg, tmp_path / "run")
    assert export_main([str(run), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert f"this run's projector is {shape}" in err and "projector=mlp" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("encoder, reason", [
    ("tiny_open_clip", "OpenClipEncoder"), ("tiny_dinosiglip", "FusedEncoder"),
    ("tiny_dinov2", "neither CLIP (class token + pre-norm) nor SigLIP"),
])
def test_other_encoders_are_refused_with_the_reason(encoder, reason, tmp_path):
    model = build_vlm(compose_cfg(f"encoder={encoder}"))
    with pytest.raises(HFLlavaError, match=re.escape(reason)):
        export(model, tmp_path / "out", "resize-naive")


def test_an_image_strategy_hf_cannot_reproduce_is_refused(tmp_path):
    model = build_vlm(compose_cfg("encoder.image_strategy=resize-crop"))
    with pytest.raises(HFLlavaError, match="cannot reproduce this run's image strategy 'resize-crop'"):
        export(model, tmp_path / "out", "resize-crop")
    assert not (tmp_path / "out").exists()


# --- import ----------------------------------------------------------------------------------------
LEGACY = {"vision_tower.": "vision_tower.vision_model."}  # what transformers 5 saves → the llava-1.5-7b-hf names


@pytest.fixture(scope="module")
def hf_llava(tmp_path_factory):
    """A randomly initialised transformers Llava with the tiny SigLIP + tiny Llama architecture, saved with the
    llava-1.5-7b-hf weight names (language_model.model.*, vision_tower.vision_model.*, ...): (folder, model)."""
    ref = build_vlm(compose_cfg())
    vision = SiglipVisionConfig(hidden_size=128, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4, image_size=64,
                                patch_size=8, hidden_act="gelu", layer_norm_eps=1e-6)
    config = LlavaConfig(vision_config=vision, text_config=LlamaConfig(**ref.backbone.model.config.to_dict()),
                         image_token_index=len(ref.tokenizer), vision_feature_layer=-2, vision_feature_select_strategy="full",
                         projector_hidden_act="gelu")
    torch.manual_seed(3)
    hf = randomize(LlavaForConditionalGeneration(config)).eval()  # wider than the default init: logits far from constant
    out = tmp_path_factory.mktemp("hf_in") / "llava"
    hf.save_pretrained(out)
    ref.tokenizer.save_pretrained(out)
    weights = safetensors.torch.load_file(out / "model.safetensors")
    legacy = {next((old + k[len(new):] for new, old in LEGACY.items() if k.startswith(new)), k): v for k, v in weights.items()}
    assert set(legacy) != set(weights) and any(k.startswith("language_model.model.layers.") for k in legacy)
    safetensors.torch.save_file(legacy, out / "model.safetensors", metadata={"format": "pt"})
    return out, hf


def hf_and_our_logits(hf, model):
    ids, _ = model.prompt_format.build([("human", QUESTION)], generation=True)
    pixels = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        theirs = hf(input_ids=torch.tensor([spliced_ids(model, ids, hf.config.image_token_id)]), pixel_values=pixels).logits[0]
        input_ids = torch.tensor([ids])
        ours = model(input_ids, torch.ones_like(input_ids), pixel_values=pixels, image_mask=torch.tensor([True])).logits[0]
    return theirs, ours


@pytest.mark.parametrize("lora", [False, True])
def test_init_from_hf_llava_reproduces_its_logits(hf_llava, lora):
    path, hf = hf_llava
    torch.manual_seed(5)
    model = build_vlm(compose_cfg(f"lora.enabled={str(lora).lower()}")).eval()
    theirs, ours = hf_and_our_logits(hf, model)
    assert (theirs - ours).abs().max() > 0.1  # different weights before the import
    assert VLMTask().init_from(model, path) is True
    theirs, ours = hf_and_our_logits(hf, model)
    assert (theirs - ours).abs().max() < 1e-4  # (fresh LoRA adapters are a no-op: peft starts B at zero)


def test_train_with_init_from_an_hf_llava_folder_starts_from_its_weights(hf_llava, small_cfg):
    from core.run import run_dir_of, train

    path, hf = hf_llava
    cfg = small_cfg(f"init_from={path}", "trainer.max_steps=1", "stage.phases.scratch.optim.lr=0", "run.name=from_hf")
    train(cfg)
    theirs, ours = hf_and_our_logits(hf, load(run_dir_of(cfg)))
    assert (theirs - ours).abs().max() < 1e-4


def test_an_hf_llava_folder_imports_without_a_run_config(hf_llava):
    """llava-1.5-7b-hf's weight names, a feature layer before the last (-2) and no processor: the model built from
    the folder alone gives transformers' logits."""
    from vlm.inference import from_hf_llava

    path, hf = hf_llava
    model = from_hf_llava(path).eval()
    assert len(model.encoder.model.blocks) == 3 and type(model.prompt_format).__name__ == "VicunaFormat"  # no template
    theirs, ours = hf_and_our_logits(hf, model)
    assert (theirs - ours).abs().max() < 1e-4


def test_init_from_a_run_directory_still_loads_its_weights(tiny_run, small_cfg):
    from core.run import run_dir_of, train

    cfg = small_cfg(f"init_from={tiny_run}", "trainer.max_steps=1", "stage.phases.scratch.optim.lr=0", "run.name=from_run")
    train(cfg)
    source = safetensors.torch.load_file(tiny_run / "model.safetensors")
    trained = safetensors.torch.load_file(run_dir_of(cfg) / "model.safetensors")
    assert source.keys() == trained.keys() and all(torch.equal(source[k], trained[k]) for k in source)


def test_init_from_refuses_a_different_architecture_or_tokenizer(hf_llava, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(hf_llava[0], bad)
    config = json.loads((bad / "config.json").read_text())
    config["vision_config"]["hidden_act"] = "quick_gelu"
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(HFLlavaError, match="activation: HF quick_gelu vs run gelu"):
        VLMTask().init_from(build_vlm(compose_cfg()), bad)

    shutil.rmtree(bad)
    shutil.copytree(hf_llava[0], bad)
    build_vlm(compose_cfg("backbone=tiny_qwen2")).tokenizer.save_pretrained(bad)  # another model's vocabulary
    with pytest.raises(HFLlavaError, match="its tokenizer gives different ids than the run's backbone tokenizer"):
        VLMTask().init_from(build_vlm(compose_cfg()), bad)


# --- evaluate an HF Llava folder without training (evaluate.py init_from=DIR) ----------------------------------------
def make_vqa_fixture(root):
    """A VQAv2 fixture in the official layout: three questions on two random images of different sizes."""
    rng = np.random.default_rng(2)
    questions = [(1, 1, "What color is the car?"), (2, 1, "How many dogs?"), (3, 2, "Is it sunny?")]
    (root / "vqav2/val2014").mkdir(parents=True)
    for image_id, (w, h) in ((1, (90, 60)), (2, (50, 70))):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / f"vqav2/val2014/COCO_val2014_{image_id:012d}.jpg")
    (root / "vqav2/v2_OpenEnded_mscoco_val2014_questions.json").write_text(json.dumps(
        {"questions": [{"image_id": i, "question": q, "question_id": qid} for qid, i, q in questions]}))
    (root / "vqav2/v2_mscoco_val2014_annotations.json").write_text(json.dumps({"annotations": [
        {"question_id": qid, "image_id": i, "answer_type": "other", "question_type": "what",
         "answers": [{"answer": "red", "answer_id": k + 1} for k in range(10)]} for qid, i, _ in questions]}))
    return questions


@pytest.mark.parametrize("encoder", ["tiny_siglip", "tiny_clip"])  # resize-naive / letterbox, no class token / class token
def test_evaluate_init_from_an_hf_llava_folder_gives_transformers_generate_answers(encoder, tmp_path, monkeypatch):
    import vlm
    from core.imported import UsageError
    from core.run import evaluate

    cfg = compose_cfg(f"encoder={encoder}")
    out = export(randomize(build_vlm(cfg)), tmp_path / "llava", cfg.encoder.image_strategy)
    questions = make_vqa_fixture(tmp_path / "bench")
    suffix = "\nAnswer the question using a single word or phrase."
    args = [f"init_from={out}", "benchmark=vqav2", f"benchmark.root={tmp_path / 'bench'}", f"imported.root={tmp_path / 'runs'}",
            f"benchmark.max_new_tokens={NEW_TOKENS}"]
    metrics = evaluate(compose_cfg(*args, config="eval"))
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert re.fullmatch(r"imported-llava-[0-9a-f]{8}", run_dir.name) and metrics["n"] == 3
    assert OmegaConf.load(run_dir / "config.yaml").imported.source == str(out.resolve())
    ours = {r["id"]: r["answer"] for r in map(json.loads, (run_dir / "predictions/vqav2.jsonl").read_text().splitlines()[1:])}

    # transformers' own Llava on the same folder: greedy, same prompt (its chat template) and image, one item at a time
    hf = LlavaForConditionalGeneration.from_pretrained(out, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(out, backend="pil")
    for qid, image_id, question in questions:
        image = Image.open(tmp_path / f"bench/vqav2/val2014/COCO_val2014_{image_id:012d}.jpg").convert("RGB")
        messages = [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": question + suffix}]}]
        inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt")
        tokens = hf.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)[0, inputs["input_ids"].shape[1]:]
        assert ours[str(qid)] == processor.decode(tokens, skip_special_tokens=True).strip(), question
    assert len(set(ours.values())) > 1  # the random model does not answer everything alike

    # the same command finds its directory and predictions again: nothing is loaded
    monkeypatch.setattr(vlm, "load", lambda *a, **k: pytest.fail("the model was loaded again"))
    assert evaluate(compose_cfg(*args, config="eval")) == metrics and len(list((tmp_path / "runs").iterdir())) == 1
    with pytest.raises(UsageError, match="exclusive"):
        evaluate(compose_cfg(*args, f"run={run_dir}", config="eval"))
    with pytest.raises(UsageError, match="init_from=HF_LLAVA_DIR"):
        evaluate(compose_cfg("benchmark=vqav2", config="eval"))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        evaluate(compose_cfg(*args[1:], f"init_from={tmp_path / 'bench'}", config="eval"))
    monkeypatch.undo()
    (tmp_path / "not_llava").mkdir()
    (tmp_path / "not_llava/config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(HFLlavaError, match="not an HF Llava folder"):
        evaluate(compose_cfg(*args[1:], f"init_from={tmp_path / 'not_llava'}", config="eval"))
