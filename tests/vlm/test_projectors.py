"""The projectors' feature standardisation (`standardize_features`): MAE's non-affine BatchNorm, checked by hand."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.conftest import compose_cfg
from vlm.model import build_vlm
from vlm.projectors import FeatureStandardizer, fused_mlp, linear, mlp


def hand_standardized(features: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, eps: float = 1e-5):
    return (features - mean) / torch.sqrt(var + eps)


@pytest.mark.parametrize("factory", [linear, mlp, fused_mlp])
def test_standardized_projector_is_the_plain_one_on_features_standardized_over_the_batch_patches(factory):
    torch.manual_seed(0)
    features = torch.randn(3, 16, 8) * torch.linspace(0.1, 5.0, 8) + 40.0  # (images, patches, channels)
    plain, standardized = factory(8, 12), factory(8, 12, standardize_features=True)
    assert isinstance(standardized[0], FeatureStandardizer)
    layers = list(plain) if isinstance(plain, nn.Sequential) else [plain]
    nn.Sequential(*list(standardized)[1:]).load_state_dict(nn.Sequential(*layers).state_dict())  # the same weights
    flat = features.reshape(-1, 8)
    expected = plain(hand_standardized(features, flat.mean(0), flat.var(0, unbiased=False)))
    torch.testing.assert_close(standardized(features), expected, rtol=1e-4, atol=1e-4)


def test_a_vector_common_to_every_patch_does_not_reach_the_language_model_in_training():
    torch.manual_seed(0)
    features = torch.randn(2, 16, 8)
    projector = mlp(8, 12, standardize_features=True)
    common = 100.0 * torch.randn(8)  # MAE's patches: 98% of their energy in one vector (docs/reproduction.md)
    torch.testing.assert_close(projector(features + common), projector(features), rtol=1e-3, atol=1e-3)


def test_evaluation_uses_the_running_statistics_of_training():
    torch.manual_seed(0)
    first, second = torch.randn(2, 16, 8) + 3.0, torch.randn(1, 16, 8) * 2.0 - 1.0
    norm = FeatureStandardizer(8)
    norm(first)  # train mode: running = 0.9 * (0, 1) + 0.1 * batch (unbiased variance, torch's convention)
    flat = first.reshape(-1, 8)
    mean, var = 0.1 * flat.mean(0), 0.9 + 0.1 * flat.var(0, unbiased=True)
    torch.testing.assert_close(norm.running_mean, mean)
    norm.eval()
    torch.testing.assert_close(norm(second), hand_standardized(second, mean, var), rtol=1e-4, atol=1e-5)


def test_the_config_key_builds_it_and_its_statistics_are_part_of_the_weights():
    model = build_vlm(compose_cfg("+projector.standardize_features=true"))
    assert isinstance(model.projector[0], FeatureStandardizer)
    assert {"projector.0.running_mean", "projector.0.running_var"} <= set(model.state_dict())
    plain = build_vlm(compose_cfg())
    assert not any(isinstance(m, FeatureStandardizer) for m in plain.projector.modules())
