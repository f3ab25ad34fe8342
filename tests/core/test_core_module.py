"""TrainModule optimisation: weight-decay groups, per-part learning rates, warmup + cosine schedule."""

import math

import pytest
from torch import nn

from core.module import TrainModule, optimizer_groups


class TwoParts(TrainModule):
    def parts(self):
        return {"a": self.model[0], "b": self.model[1]}

    def compute_loss(self, batch):
        return self.model(batch).pow(2).mean()


def make(trainable=("a", "b"), **optim):
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.LayerNorm(4), nn.Linear(4, 2)))
    phase = {"name": "p", "trainable": list(trainable), "optim": {"lr": 1.0, "weight_decay": 0.1, **optim}}
    return TwoParts(model, phase, total_steps=100)


def test_no_decay_on_biases_and_norms_and_lr_scale_per_part():
    module = make(lr_scale={"b": 0.1})
    groups = {g["name"]: g for g in optimizer_groups(module.parts(), module.trainable, module.optim)}
    assert {id(p) for p in groups["a/decay"]["params"]} == {id(module.model[0].weight)}
    assert {id(p) for p in groups["a/no_decay"]["params"]} == {id(module.model[0].bias)}
    norm, lin = module.model[1]
    assert {id(p) for p in groups["b/no_decay"]["params"]} == {id(norm.weight), id(norm.bias), id(lin.bias)}
    assert groups["a/decay"]["weight_decay"] == 0.1 and groups["b/no_decay"]["weight_decay"] == 0.0
    assert groups["a/decay"]["lr"] == 1.0 and groups["b/decay"]["lr"] == pytest.approx(0.1)


def test_frozen_part_has_no_grad_and_is_not_optimised():
    module = make(trainable=("b",))
    assert not any(p.requires_grad for p in module.model[0].parameters())
    assert not module.model[0].training and module.model[1].training
    names = [g["name"] for g in optimizer_groups(module.parts(), module.trainable, module.optim)]
    assert names == ["b/decay", "b/no_decay"]


def test_unknown_trainable_part_is_an_error():
    with pytest.raises(ValueError, match="not parts of this model"):
        make(trainable=("a", "vision"))


def scheduled_lrs(module, steps=100):
    """The learning rate of each of `steps` optimizer steps under the module's schedule."""
    conf = module.configure_optimizers()
    opt, sched = conf["optimizer"], conf["lr_scheduler"]["scheduler"]
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def test_linear_warmup_then_cosine():
    lrs = scheduled_lrs(make(warmup_ratio=0.1))
    assert lrs[0] == 0.0 and lrs[5] == pytest.approx(0.5) and lrs[10] == pytest.approx(1.0)
    progress = (55 - 10) / 90
    assert lrs[55] == pytest.approx(0.5 * (1 + math.cos(math.pi * progress)))
    assert lrs[99] < 0.01


def test_constant_schedule_after_warmup():
    lrs = scheduled_lrs(make(warmup_ratio=0.1, scheduler="constant_with_warmup"))
    assert lrs[5] == pytest.approx(0.5) and lrs[10] == lrs[99] == pytest.approx(1.0)


def test_parameters_a_timm_vit_declares_get_no_decay():
    import timm

    vit = timm.create_model("vit_base_patch16_siglip_224", pretrained=False, num_classes=0, img_size=32, patch_size=8,
                            embed_dim=32, depth=1, num_heads=2)
    assert "pos_embed" in vit.no_weight_decay()
    phase = {"name": "p", "trainable": ["encoder"], "optim": {"lr": 1.0, "weight_decay": 0.1}}
    groups = {g["name"]: g for g in optimizer_groups({"encoder": nn.Sequential(vit)}, phase["trainable"], phase["optim"])}
    assert any(p is vit.pos_embed for p in groups["encoder/no_decay"]["params"])  # 3-D, yet excluded as timm declares
    assert any(p is vit.patch_embed.proj.weight for p in groups["encoder/decay"]["params"])


class FirstPartOnly(TwoParts):
    """A loss through part `a` alone: what text-only samples are to a phase that trains only the projector."""

    def compute_loss(self, batch):
        return self.model[0](batch).pow(2).mean()


def test_a_loss_that_no_trainable_part_takes_part_in_is_a_clear_error():
    import torch

    from core.module import NoGradientError

    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.LayerNorm(4), nn.Linear(4, 2)))
    module = FirstPartOnly(model, {"name": "align", "trainable": ["b"], "optim": {"lr": 1.0}}, total_steps=10)
    with pytest.raises(NoGradientError, match=r"phase align: micro-batch 0 .*\['b'\].*drop those splits"):
        module.training_step(torch.randn(3, 4), 0)
    trains_a = FirstPartOnly(model, {"name": "align", "trainable": ["a"], "optim": {"lr": 1.0}}, total_steps=10)
    assert trains_a.compute_loss(torch.randn(3, 4)).requires_grad  # the same loss reaches a trainable part: no error
