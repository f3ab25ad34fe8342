"""Image encoders: every tiny flavour against its library's own full forward, the fused encoder, and open_clip's
preprocessing strategies. (Training steps of every encoder with every projector: test_design_space.py.)"""

import copy

import open_clip
import pytest
import safetensors.torch
import timm
import torch
from hydra.errors import InstantiationException
from omegaconf import OmegaConf
from PIL import Image
from torch.utils.flop_counter import FlopCounterMode

from tests.conftest import compose_cfg
from vlm.encoders import FusedEncoder
from vlm.hub import resolve_tiny
from vlm.images import open_clip_transform
from vlm.model import build_component

TIMM_TINY = ["tiny_siglip", "tiny_clip", "tiny_dinov2"]
TINY = [*TIMM_TINY, "tiny_open_clip", "tiny_open_clip_convnext", "tiny_dinosiglip"]
PREFIX_TOKENS = {"tiny_siglip": 0, "tiny_clip": 1, "tiny_dinov2": 5}  # none; class; class + 4 registers


def encoder_node(name, *overrides):
    return compose_cfg(f"encoder={name}", *overrides).encoder


def folder(model_id):
    """The `local-dir:` folder a tiny flavour's `tiny:NAME` id loads from."""
    return resolve_tiny(model_id, "encoder", folder_scheme="local-dir:")


@pytest.fixture(scope="module")
def encoders(tiny_component):
    return {name: copy.deepcopy(tiny_component("encoder", name)).eval() for name in TINY}


def pixels(seed=0, batch=2, size=64):
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def hooked_blocks(blocks, run):
    """Outputs of the last two blocks during `run()` (the library's own full forward)."""
    outs = {}
    hooks = [blocks[i].register_forward_hook(lambda m, a, o, i=i: outs.__setitem__(i, o)) for i in (-2, -1)]
    with torch.no_grad():
        run()
    for h in hooks:
        h.remove()
    return outs[-2], outs[-1]


@pytest.mark.parametrize("name", TIMM_TINY)
def test_timm_tiny_features_are_the_second_to_last_block_without_prefix_tokens(encoders, name):
    enc, node = encoders[name], encoder_node(name)
    kwargs = OmegaConf.to_container(node.model_kwargs) if "model_kwargs" in node else {}
    ref = timm.create_model(folder(node.model_id), pretrained=True, num_classes=0, **kwargs).eval()  # fresh, unpruned
    assert ref.num_prefix_tokens == PREFIX_TOKENS[name]
    x = pixels()
    second_last, last = hooked_blocks(ref.blocks, lambda: ref.forward_features(x))
    with torch.no_grad():
        got = enc(x)
    n = ref.num_prefix_tokens
    assert got.shape == (2, enc.num_patches, enc.embed_dim) == (2, 64, ref.embed_dim)
    torch.testing.assert_close(got, second_last[:, n:])
    assert not torch.allclose(got, last[:, n:], atol=1e-3)  # the last block is not what we return
    assert len(enc.model.blocks) == len(ref.blocks) - 1  # the unused last block is pruned
    # the weights are the checkpoint's (not a fresh random init)
    saved = safetensors.torch.load_file(f"{folder(node.model_id).removeprefix('local-dir:')}/model.safetensors")
    torch.testing.assert_close(enc.model.patch_embed.proj.weight, saved["patch_embed.proj.weight"])


def test_tiny_open_clip_features_are_the_second_to_last_block_without_class_token(encoders):
    enc, node = encoders["tiny_open_clip"], encoder_node("tiny_open_clip")
    assert node.model_name == "tiny:tiny_open_clip"  # loaded by open_clip's own folder loader, like hf-hub: names
    ref = open_clip.create_model(folder(node.model_name)).eval()
    x = pixels(1)
    second_last, last = hooked_blocks(ref.visual.transformer.resblocks, lambda: ref.encode_image(x))
    assert second_last.shape == (2, 1 + 64, 96)
    with torch.no_grad():
        got = enc(x)
    assert got.shape == (2, enc.num_patches, enc.embed_dim) == (2, 64, 96)
    torch.testing.assert_close(got, second_last[:, 1:])
    assert not torch.allclose(got, last[:, 1:], atol=1e-3)
    assert not hasattr(enc.model, "text") and enc.model.proj is None  # image tower only, head pruned
    saved = safetensors.torch.load_file(f"{folder(node.model_name).removeprefix('local-dir:')}/open_clip_model.safetensors")
    torch.testing.assert_close(enc.model.conv1.weight, saved["visual.conv1.weight"])


def test_tiny_open_clip_convnext_features_are_the_last_stage_map_as_tokens(encoders):
    enc = encoders["tiny_open_clip_convnext"]
    ref = open_clip.create_model(folder(encoder_node("tiny_open_clip_convnext").model_name)).eval()
    x = torch.randn(2, 3, 128, 128, generator=torch.Generator().manual_seed(3))
    stages = {}
    hook = ref.visual.trunk.stages[-1].register_forward_hook(lambda m, a, o: stages.__setitem__("last", o))
    with torch.no_grad():
        ref.encode_image(x)  # open_clip's own full forward (pooling and projection head included)
        got = enc(x)
    hook.remove()
    fmap = stages["last"]  # (B, C, h, w): stride 32
    assert fmap.shape == (2, 320, 4, 4) and enc.grid_size == (4, 4) and enc.image_size == (128, 128)
    assert got.shape == (2, 16, 320)
    torch.testing.assert_close(got[:, 5], fmap[:, :, 1, 1])  # token 5 = row 1, column 1 (row-major)
    torch.testing.assert_close(got, fmap.permute(0, 2, 3, 1).reshape(2, 16, 320))
    assert not hasattr(enc.model, "head") or not any(p.numel() for p in enc.model.head.parameters())  # head pruned
    with torch.no_grad(), FlopCounterMode(display=False) as counter:  # training = 3x one image's forward, per patch
        ref.visual.trunk.forward_features(x[:1])
    assert enc.flops_per_patch() == pytest.approx(3 * counter.get_total_flops() / 16)


def test_tiny_clip_runs_with_quick_gelu_like_the_openai_weights(encoders):
    assert timm.create_model(folder(encoder_node("tiny_clip").model_id)).blocks[0].mlp.act.__class__.__name__ == "GELU"  # the saved config
    assert isinstance(encoders["tiny_clip"].model.blocks[0].mlp.act, timm.layers.QuickGELU)  # the encoder config's choice


def test_tiny_dinov2_runs_at_the_overridden_size_with_its_own_normalisation(encoders):
    enc = encoders["tiny_dinov2"]
    assert enc.grid_size == (8, 8) and enc.image_size == (64, 64)  # written at 96 px (12x12), run at 64 px
    mean_colour = Image.new("RGB", (80, 50), tuple(round(255 * m) for m in (0.485, 0.456, 0.406)))
    out = enc.transform(mean_colour)
    assert out.shape == (3, 64, 64) and out.abs().max() < 0.01  # ImageNet mean/std, the input size of the grid


def test_fused_encoder_stacks_each_encoders_preprocessing_and_concatenates_features(encoders):
    fused, dino, siglip = encoders["tiny_dinosiglip"], encoders["tiny_dinov2"], encoders["tiny_siglip"]
    assert list(fused.encoders) == ["dino", "siglip"]
    assert fused.embed_dim == dino.embed_dim + siglip.embed_dim and fused.num_patches == 64
    image = Image.new("RGB", (90, 60), (30, 160, 220))
    stacked = fused.transform(image)
    assert stacked.shape == (2, 3, 64, 64)
    torch.testing.assert_close(stacked[0], dino.transform(image))
    torch.testing.assert_close(stacked[1], siglip.transform(image))
    assert not torch.allclose(stacked[0], stacked[1])  # different normalisations
    x = torch.stack([stacked, fused.transform(Image.new("RGB", (40, 70), (250, 20, 20)))])
    with torch.no_grad():
        torch.testing.assert_close(fused(x), torch.cat([dino(x[:, 0]), siglip(x[:, 1])], -1))
    with pytest.raises(ValueError, match=r"expects \(B, 2, 3, H, W\)"):
        fused(x[:, 0])


def test_fused_image_strategy_applies_to_every_encoder():
    node = encoder_node("tiny_dinosiglip", "encoder.image_strategy=letterbox")
    assert {node.encoders.dino.image_strategy, node.encoders.siglip.image_strategy} == {"letterbox"}
    fused = build_component(node)
    image = Image.new("RGB", (96, 48), (255, 255, 255))
    letterboxed = build_component(encoder_node("tiny_siglip", "encoder.image_strategy=letterbox")).transform(image)
    torch.testing.assert_close(fused.transform(image)[1], letterboxed)
    assert fused.transform(image)[1, :, 0].abs().max() < 0.02  # the padding is the mean colour


def test_fused_encoder_rejects_mismatched_patch_grids():
    node = encoder_node("tiny_dinosiglip", "encoder.encoders.dino.model_kwargs.img_size=48")
    with pytest.raises(InstantiationException, match=r"equal patch grids; got dino 6x6, siglip 8x8"):
        build_component(node)
    siglip = build_component(encoder_node("tiny_siglip"))
    small = build_component(encoder_node("tiny_clip", "+encoder.model_kwargs.img_size=48"))
    with pytest.raises(ValueError, match=r"got clip 6x6, siglip 8x8"):
        FusedEncoder({"clip": small, "siglip": siglip})


def test_open_clip_preprocessing_follows_the_image_strategy(encoders):
    cfg = encoders["tiny_open_clip"].preprocess_cfg
    image = Image.new("RGB", (128, 64), (128, 128, 128))
    image.paste((0, 255, 0), (0, 0, 32, 64))  # a green band on the left quarter
    green = lambda t: t[1] > t[0] + 1  # (H, W): where green dominates  # noqa: E731
    naive, crop, box = (open_clip_transform(cfg, s)(image) for s in ("resize-naive", "resize-crop", "letterbox"))
    assert naive.shape == crop.shape == box.shape == (3, 64, 64)
    assert green(naive)[:, :14].all() and not green(naive)[:, 18:].any()  # squashed: a quarter of the width
    assert not green(crop).any()  # the centre crop cuts the band away
    assert box[:, :14].abs().max() < 0.03 and box[:, 50:].abs().max() < 0.03  # mean-colour padding above and below
    assert green(box)[20:44, :14].all()
    with pytest.raises(ValueError, match="unknown image strategy"):
        open_clip_transform(cfg, "stretch")


def test_open_clip_config_names_build_through_the_same_class():
    enc = build_component({"_target_": "vlm.encoders.OpenClipEncoder", "model_name": "ViT-S-16", "pretrained": None,
                           "model_kwargs": {"force_image_size": 64}})  # random init: no weights asked for
    assert (enc.embed_dim, enc.grid_size, enc.num_patches) == (384, (4, 4), 16) and len(enc.model.transformer.resblocks) == 11
    with torch.no_grad():
        assert enc(pixels(2, batch=1)).shape == (1, 16, 384)


def test_fused_encoder_trains_end_to_end_through_the_data_path(small_cfg, tmp_path):
    """Dataset transform → collator → VLM → loss, with the throughput callback counting FLOPs, for two steps."""
    import csv

    from core.run import train

    train(small_cfg("encoder=tiny_dinosiglip", "projector=fused_mlp", "trainer.max_steps=2", "run.name=fused"))
    with open(tmp_path / "runs" / "fused" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    assert [int(r["step"]) for r in rows] == [0, 1]
    assert all(torch.isfinite(torch.tensor(float(r["train/loss"]))) and float(r["perf/tokens_per_sec_per_device"]) > 0 for r in rows)


def test_writing_a_tiny_checkpoint_leaves_the_callers_random_state_alone(tmp_path):
    """A run's initialisation must not depend on whether the tiny cache existed (writers seed torch themselves)."""
    from vlm.tiny import ensure_tiny

    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    ensure_tiny("tiny_siglip", root=tmp_path)  # a first write
    assert torch.equal(torch.rand(4), expected)
