"""Uniform and quantile binning: hand values, half-bin error bounds, save/load."""

import numpy as np
import pytest

from behavior.tokenizers import build_tokenizer, load_tokenizer


def test_uniform_hand_values():
    tok = build_tokenizer("uniform", n_bins=4)  # edges -1, -0.5, 0, 0.5, 1
    x = np.array([-1.0, -0.5, 0.0, 0.999, 1.0, 2.0, -3.0, -0.6])
    ids = tok.encode(x)
    assert ids.dtype == np.int64
    assert ids.tolist() == [0, 1, 2, 3, 3, 3, 0, 0]
    np.testing.assert_allclose(tok.decode([0, 1, 2, 3, -1, 9]), [-0.75, -0.25, 0.25, 0.75, -0.75, 0.75])
    assert tok.vocab_size == 4


def test_uniform_roundtrip_half_bin():
    tok = build_tokenizer("uniform")
    assert tok.vocab_size == 256
    x = np.random.default_rng(0).uniform(-1, 1, (1000, 7))
    ids = tok.encode(x)
    assert ids.shape == (1000, 7) and ids.min() >= 0 and ids.max() <= 255
    err = np.abs(tok.decode(ids) - x)
    assert err.max() <= 1 / 256 + 1e-12  # half of the bin width 2/256
    assert err.max() > 0.9 / 256  # and the bound is tight, not vacuous


def test_uniform_nan_raises():
    with pytest.raises(ValueError):
        build_tokenizer("uniform").encode(np.array([0.0, np.nan]))


def _skewed(n=4000, seed=0):
    rng = np.random.default_rng(seed)
    return np.stack([rng.normal(size=n), rng.exponential(2.0, n), rng.uniform(-1, 1, n) ** 3], -1)


def test_quantile_hand_values():
    a = np.arange(100.0)[:, None]  # edges at quantiles 0, .25, .5, .75, 1 -> 0, 24.75, 49.5, 74.25, 99
    tok = build_tokenizer("quantile", n_bins=4, decode_to="midpoint").fit(a)
    np.testing.assert_allclose(tok.edges[0], [0, 24.75, 49.5, 74.25, 99])
    ids = tok.encode(np.array([[10.0], [24.75], [50.0], [99.0], [150.0], [-5.0]]))
    assert ids[:, 0].tolist() == [0, 1, 2, 3, 3, 0]
    np.testing.assert_allclose(tok.decode(np.array([[0], [1], [2], [3]]))[:, 0], [12.375, 37.125, 61.875, 86.625])
    # medians of the fitted samples per bin: 0..24 -> 12, 25..49 -> 37, 50..74 -> 62, 75..99 -> 87
    med = build_tokenizer("quantile", n_bins=4, decode_to="median").fit(a)
    np.testing.assert_allclose(med.decode(np.array([[0], [1], [2], [3]]))[:, 0], [12, 37, 62, 87])


def test_quantile_equal_mass_and_half_bin_bound():
    a = _skewed()
    tok = build_tokenizer("quantile", n_bins=16, decode_to="midpoint").fit(a)
    ids = tok.encode(a)
    for d in range(3):
        counts = np.bincount(ids[:, d], minlength=16)
        assert counts.min() >= 240 and counts.max() <= 260  # 4000 / 16 = 250
    width = np.take_along_axis(np.diff(tok.edges, axis=1).T, ids, axis=0)  # (N, D) width of each sample's bin
    err = np.abs(tok.decode(ids) - a)
    assert np.all(err <= 0.5 * width + 1e-12)
    # median decoding: bounded by the full bin width, lower mean error on this data
    med = build_tokenizer("quantile", n_bins=16, decode_to="median").fit(a)
    err_med = np.abs(med.decode(ids) - a)
    assert np.all(err_med <= width + 1e-12)
    assert err_med.mean() < err.mean()


def test_quantile_shapes_and_unfitted():
    with pytest.raises(RuntimeError):
        build_tokenizer("quantile").encode(np.zeros((2, 3)))
    tok = build_tokenizer("quantile", n_bins=8).fit(_skewed(500))
    x = _skewed(24, seed=3).reshape(2, 4, 3, 3)
    ids = tok.encode(x)
    assert ids.shape == (2, 4, 3, 3) and ids.dtype == np.int64
    assert tok.decode(ids).shape == (2, 4, 3, 3)
    with pytest.raises(ValueError):
        tok.encode(np.zeros((2, 4)))


def test_quantile_tied_data():
    # half the samples are exactly 0: several edges coincide, encode stays in range
    a = np.concatenate([np.zeros(500), np.linspace(0, 1, 500)])[:, None]
    tok = build_tokenizer("quantile", n_bins=8, decode_to="midpoint").fit(a)
    ids = tok.encode(a)
    assert ids.min() >= 0 and ids.max() <= 7
    np.testing.assert_array_equal(tok.edges[0, :5], 0.0)  # quantiles 0 .. 0.5 all hit the zeros
    assert tok.edges[0, 5] > 0
    assert ids[0, 0] == 4  # 0 equals edges 0..4 -> highest bin starting at 0 is [edges[4], edges[5])
    assert np.abs(tok.decode(ids) - a).max() <= 0.5 * np.diff(tok.edges[0]).max() + 1e-12


@pytest.mark.parametrize("name,kwargs", [("uniform", {"n_bins": 64, "low": -2.0, "high": 3.0}), ("quantile", {"n_bins": 32, "decode_to": "median"})])
def test_save_load(tmp_path, name, kwargs):
    a = _skewed(1000)
    tok = build_tokenizer(name, **kwargs).fit(a)
    tok.save(str(tmp_path))
    back = load_tokenizer(str(tmp_path))
    assert type(back) is type(tok) and back.vocab_size == tok.vocab_size
    x = _skewed(200, seed=5)
    np.testing.assert_array_equal(back.encode(x), tok.encode(x))
    np.testing.assert_array_equal(back.decode(tok.encode(x)), tok.decode(tok.encode(x)))
    assert back.get_config() == {**tok.get_config(), **kwargs}
