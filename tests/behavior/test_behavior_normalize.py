"""q01/q99 normaliser: fitted stats, clipping, constant dims, masks, save/load."""

import numpy as np
import pytest

from behavior.normalize import ActionNormalizer


def _data():
    # dim0: 0..100 -> q01 = 1, q99 = 99 (linear interpolation, 101 points)
    # dim1: constant 3.0; dim2: binary gripper (left unnormalised by the mask)
    n = 101
    return np.stack([np.linspace(0.0, 100.0, n), np.full(n, 3.0), (np.arange(n) % 2).astype(float)], -1)


def test_fit_stats():
    norm = ActionNormalizer(mask=[True, True, False]).fit(_data())
    np.testing.assert_allclose(norm.q01, [1.0, 3.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(norm.q99, [99.0, 3.0, 1.0], atol=1e-12)
    assert norm.dim == 3


def test_normalize_hand_values_clip_constant_mask():
    norm = ActionNormalizer(mask=[True, True, False]).fit(_data())
    x = np.array(
        [
            [50.0, 3.0, 1.0],  # middle -> 0
            [1.0, 3.0, 0.0],  # q01 -> -1
            [99.0, 7.0, 7.5],  # q99 -> 1; constant dim -> 0 even off-constant; masked passes through
            [0.0, 3.0, -2.0],  # below q01 -> clipped to -1 (raw -1.0204...)
            [200.0, -1.0, 0.25],  # far above -> 1
            [25.5, 3.0, 1.0],  # 2*24.5/98 - 1 = -0.5
        ]
    )
    y = norm.normalize(x)
    expect = np.array(
        [
            [0.0, 0.0, 1.0],
            [-1.0, 0.0, 0.0],
            [1.0, 0.0, 7.5],
            [-1.0, 0.0, -2.0],
            [1.0, 0.0, 0.25],
            [-0.5, 0.0, 1.0],
        ]
    )
    np.testing.assert_allclose(y, expect, atol=1e-12)


def test_unnormalize_and_roundtrip():
    norm = ActionNormalizer(mask=[True, True, False]).fit(_data())
    y = np.array([[-1.0, 0.5, 0.7], [1.0, -1.0, 1.0], [0.0, 0.0, 0.0]])
    x = norm.unnormalize(y)
    np.testing.assert_allclose(x, [[1.0, 3.0, 0.7], [99.0, 3.0, 1.0], [50.0, 3.0, 0.0]], atol=1e-12)
    rng = np.random.default_rng(0)
    inside = np.stack([rng.uniform(1, 99, 50), np.full(50, 3.0), rng.uniform(-5, 5, 50)], -1)
    np.testing.assert_allclose(norm.unnormalize(norm.normalize(inside)), inside, atol=1e-12)


def test_given_stats_and_batch_shapes():
    norm = ActionNormalizer(q01=[-2.0, 0.0], q99=[2.0, 10.0])
    x = np.array([[[1.0, 2.5], [-2.0, 10.0]]])  # (1, 2, 2)
    y = norm.normalize(x)
    assert y.shape == (1, 2, 2)
    np.testing.assert_allclose(y, [[[0.5, -0.5], [-1.0, 1.0]]], atol=1e-12)
    np.testing.assert_allclose(norm.unnormalize(y), x, atol=1e-12)


def test_nan_propagates():
    norm = ActionNormalizer(q01=[0.0, 1.0], q99=[1.0, 1.0])
    y = norm.normalize(np.array([np.nan, np.nan]))
    assert np.isnan(y).all()


def test_eps_matches_openvla_style_denominator():
    norm = ActionNormalizer(q01=[0.0], q99=[1.0], eps=1e-8)
    y = norm.normalize(np.array([0.75]))
    np.testing.assert_allclose(y, [2 * 0.75 / (1 + 1e-8) - 1], rtol=0, atol=1e-15)


def test_save_load(tmp_path):
    norm = ActionNormalizer(mask=[True, True, False]).fit(_data() * 1.37 + 0.1)
    norm.save(str(tmp_path))
    other = ActionNormalizer.load(str(tmp_path))
    np.testing.assert_array_equal(other.q01, norm.q01)
    np.testing.assert_array_equal(other.q99, norm.q99)
    np.testing.assert_array_equal(other.mask, [True, True, False])
    x = np.random.default_rng(1).normal(size=(10, 3)) * 50
    np.testing.assert_array_equal(other.normalize(x), norm.normalize(x))


def test_invalid():
    with pytest.raises(ValueError):
        ActionNormalizer(q01=[1.0], q99=[0.0])
    with pytest.raises(ValueError):
        ActionNormalizer(q01=[0.0, 0.0], q99=[1.0, 1.0], mask=[True])
    with pytest.raises(ValueError):
        ActionNormalizer(q01=[0.0])
    with pytest.raises(RuntimeError):
        ActionNormalizer().normalize(np.zeros(2))
    with pytest.raises(ValueError):
        ActionNormalizer(q01=[0.0, 0.0], q99=[1.0, 1.0]).normalize(np.zeros(3))
