"""Recipes: LoRA adapters on the backbone (which parameters train, merge, save/load) and gradient checkpointing."""

import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image
from torch import nn

from core.checkpoint import save_weights_atomic
from core.module import optimizer_groups
from tests.conftest import compose_cfg
from vlm.dataset import Collator
from vlm.lightning import VLMModule
from vlm.lora import has_lora, merged
from vlm.model import build_component, build_vlm

RANK = 4
CONVS = [
    [("human", "<image>\nWhat is the shape of the red object?"), ("gpt", "circle")],
    [("human", "How many objects are there?"), ("gpt", "3")],
]


def batch_of(model):
    rows = []
    for conv, color in zip(CONVS, [(200, 30, 30), None]):
        ids, labels = model.prompt_format.build(conv)
        pixels = model.encoder.transform(Image.new("RGB", (64, 64), color)) if color else None
        rows.append({"input_ids": ids, "labels": labels, "pixel_values": pixels})
    return Collator(model.tokenizer.pad_token_id)(rows)


def lora_cfg(*overrides):
    return compose_cfg("stage=full_finetune", "lora.enabled=true", f"lora.rank={RANK}", *overrides)


def perturb_adapters(model, seed=0):
    """LoRA B starts at zero (the adapter is a no-op); give every adapter weight a random value."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)


@pytest.fixture(scope="module")
def lora_vlm():
    torch.manual_seed(0)
    model = build_vlm(lora_cfg())
    perturb_adapters(model)
    return model


def test_adapters_sit_on_every_linear_layer_of_the_llm_but_the_head(lora_vlm):
    assert has_lora(lora_vlm) and not has_lora(lora_vlm.encoder) and not has_lora(lora_vlm.projector)
    plain = build_component(compose_cfg().backbone).model  # the same LLM without adapters
    linears = {n: m for n, m in plain.named_modules() if isinstance(m, nn.Linear) and n != "lm_head"}
    assert len(linears) == 7 * plain.config.num_hidden_layers  # q, k, v, o, gate, up, down
    n_adapter = sum(p.numel() for n, p in lora_vlm.backbone.named_parameters() if "lora_" in n)
    assert n_adapter == sum(RANK * (m.in_features + m.out_features) for m in linears.values())  # A: r x in, B: out x r


@pytest.mark.parametrize("stage, parts", [("align", {"projector"}), ("finetune", {"projector", "adapters"}),
                                          ("full_finetune", {"encoder", "projector", "adapters"})])
def test_lora_phase_trains_only_adapters_and_the_parts_the_phase_names(lora_vlm, stage, parts):
    (phase,) = compose_cfg(f"stage={stage}").stage.phases.values()
    module = VLMModule(lora_vlm, OmegaConf.to_container(phase), total_steps=10)

    def part_of(name):
        return "adapters" if "lora_" in name else name.split(".")[0]

    lora_vlm.zero_grad(set_to_none=True)
    module.compute_loss(batch_of(lora_vlm)).backward()
    got = {n for n, p in lora_vlm.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert {part_of(n) for n in got} == parts
    trainable = {n for n, p in lora_vlm.named_parameters() if p.requires_grad}
    assert trainable == {n for n, _ in lora_vlm.named_parameters() if part_of(n) in parts} and got == trainable
    in_optimizer = {id(p) for g in optimizer_groups(module.parts(), module.trainable, module.optim) for p in g["params"]}
    assert in_optimizer == {id(p) for n, p in lora_vlm.named_parameters() if n in trainable}
    lora_vlm.zero_grad(set_to_none=True)


def test_merged_copy_has_the_same_logits_and_is_a_plain_model(lora_vlm):
    model = lora_vlm.eval()
    batch = batch_of(model)
    plain = build_vlm(compose_cfg("stage=full_finetune")).eval()
    with torch.no_grad():
        logits = model(**batch).logits
        before_merge = plain(**batch).logits
        copy = merged(model)
        assert copy is not model and not has_lora(copy) and has_lora(model)  # the original keeps its adapters
        plain.load_state_dict(copy.state_dict())  # strict: exactly the keys of a model built without LoRA
        torch.testing.assert_close(copy(**batch).logits, logits, atol=1e-4, rtol=0)
        torch.testing.assert_close(plain(**batch).logits, logits, atol=1e-4, rtol=0)
        torch.testing.assert_close(model(**batch).logits, logits)  # unchanged by merging the copy
    assert (before_merge - logits).abs().max() > 1e-2  # the adapters do change the outputs
    assert merged(plain) is plain


def test_lora_run_weights_load_back_identically(lora_vlm, tmp_path):
    from vlm.inference import load

    cfg = lora_cfg()
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    save_weights_atomic(lora_vlm, tmp_path / "model.safetensors")  # what core.run saves after a phase
    loaded = load(tmp_path)
    assert has_lora(loaded)
    want, got = lora_vlm.state_dict(), loaded.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    batch = batch_of(lora_vlm)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, lora_vlm.eval()(**batch).logits, atol=0, rtol=0)


@pytest.mark.parametrize("lora", [False, True])
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(lora):
    overrides = ["stage=finetune", f"lora.enabled={lora}", f"lora.rank={RANK}"]
    torch.manual_seed(0)
    plain = build_vlm(compose_cfg(*overrides))
    checkpointed = build_vlm(compose_cfg(*overrides, "backbone.gradient_checkpointing=true"))
    if lora:
        perturb_adapters(plain)
    checkpointed.load_state_dict(plain.state_dict())
    (phase,) = compose_cfg("stage=finetune").stage.phases.values()
    results = []
    for model in (plain, checkpointed):
        module = VLMModule(model, OmegaConf.to_container(phase), total_steps=10)  # puts the backbone in train mode
        calls = []
        hook = model.backbone.model.get_decoder().layers[0].mlp.register_forward_pre_hook(lambda *a: calls.append(1))
        loss = module.compute_loss(batch_of(model))
        loss.backward()
        hook.remove()
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        results.append((loss.detach(), grads, len(calls)))
    (loss0, grads0, calls0), (loss1, grads1, calls1) = results
    assert (calls0, calls1) == (1, 2)  # the checkpointed layer ran again in backward
    torch.testing.assert_close(loss1, loss0)
    assert grads0.keys() == grads1.keys() and any("lora_" in n for n in grads0) == lora
    for name in grads0:
        torch.testing.assert_close(grads1[name], grads0[name], atol=1e-6, rtol=1e-5)


def test_two_stage_lora_run_trains_adapters_and_projector_only(small_cfg):
    """A whole recipe with LoRA, gradient checkpointing and length-grouped batches; `vlm.load` gets the adapters back."""
    from pathlib import Path

    from core.run import train
    from vlm.inference import load

    cfg = small_cfg("stage=two_stage", "stage.phases.align.global_batch_size=4", "stage.phases.finetune.global_batch_size=4",
                    "trainer.max_steps=2", "run.name=lora", "lora.enabled=true", f"lora.rank={RANK}",
                    "backbone.gradient_checkpointing=true", "data.group_by_length=true")
    train(cfg)
    trained = load(Path(cfg.run.root) / "lora")
    fresh = build_vlm(cfg)  # the starting point: the same checkpoints (adapters start random A, zero B)
    assert has_lora(trained)
    start, end = dict(fresh.named_parameters()), dict(trained.named_parameters())
    changed = {n for n in start if not torch.equal(start[n], end[n])}
    resized = ("embed_tokens", "lm_head")  # rows added for the pad token are randomly initialised at build time
    assert not {n for n in changed if n.startswith("backbone") and "lora_" not in n and not any(r in n for r in resized)}
    lora_b = [p for n, p in end.items() if "lora_B" in n]
    assert len(lora_b) == 21 and all(p.abs().sum() > 0 for p in lora_b)  # every adapter trained (B starts at zero)
    assert any(n.startswith("projector") for n in changed) and not any(n.startswith("encoder") for n in changed)


def test_lora_finetune_can_start_from_a_run_trained_without_lora(lora_vlm, tmp_path):
    from vlm.lightning import VLMTask

    plain = build_vlm(compose_cfg("stage=full_finetune")).eval()
    with torch.no_grad():
        plain.projector[0].weight.mul_(2)  # weights that differ from a fresh build
    save_weights_atomic(plain, tmp_path / "model.safetensors")
    torch.manual_seed(1)
    model = build_vlm(lora_cfg()).eval()
    assert VLMTask().init_from(model, tmp_path)  # adapters start as no-ops: the model is the plain run's
    batch = batch_of(model)
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, plain(**batch).logits)
    save_weights_atomic(lora_vlm, tmp_path / "model.safetensors")
    assert not VLMTask().init_from(model, tmp_path)  # a LoRA run's weights load as they are (core.run)
