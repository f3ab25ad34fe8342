"""Residual VQ tokenizer: hand-computed codes, one level equals k-means, error shrinking with the levels."""

import numpy as np
import pytest

from behavior.tokenizers import build_tokenizer


def _actions(n=600, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, 4))


def test_hand_computed_codes_and_sum_decoding():
    tok = build_tokenizer("residual_vq", n_levels=2, codebook_size=2)
    tok.codebooks = np.array([[[0.0, 0.0], [1.0, 1.0]], [[0.1, 0.0], [-0.1, 0.0]]])
    x = np.array([[1.05, 1.0], [-0.2, 0.1], [0.9, 0.8]])
    # level 0: nearest of (0,0), (1,1); level 1: nearest of (±0.1, 0) to the residual
    ids = tok.encode(x)
    assert ids.dtype == np.int64 and ids.tolist() == [[1, 0], [0, 1], [1, 1]]
    np.testing.assert_allclose(tok.decode(ids), [[1.1, 1.0], [-0.1, 0.0], [0.9, 1.0]])


def test_one_level_is_kmeans_with_the_same_seed():
    a = _actions()
    rvq = build_tokenizer("residual_vq", n_levels=1, codebook_size=16, seed=3).fit(a)
    km = build_tokenizer("kmeans", k=16, seed=3).fit(a)
    np.testing.assert_array_equal(rvq.codebooks[0], km.centers)
    np.testing.assert_array_equal(rvq.encode(a)[:, 0], km.encode(a))


def test_fitted_error_shrinks_with_levels_and_is_deterministic():
    a = _actions()
    mse = []
    for levels in (1, 2, 4):
        tok = build_tokenizer("residual_vq", n_levels=levels, codebook_size=16).fit(a)
        mse.append(np.mean((tok.decode(tok.encode(a)) - a) ** 2))
    again = build_tokenizer("residual_vq", n_levels=4, codebook_size=16).fit(a)
    np.testing.assert_array_equal(again.codebooks, tok.codebooks)
    assert mse[0] < np.mean((a - a.mean(0)) ** 2)
    assert mse[0] > mse[1] > mse[2]
    assert mse[2] < 0.2 * mse[0]  # four levels of 16 codes: far finer than one


def test_shapes_and_errors():
    tok = build_tokenizer("residual_vq", n_levels=3, codebook_size=8).fit(_actions(200))
    x = _actions(30, seed=1).reshape(5, 6, 4)
    ids = tok.encode(x)
    assert ids.shape == (5, 6, 3) and ids.min() >= 0 and ids.max() < 8
    assert tok.decode(ids).shape == (5, 6, 4)
    with pytest.raises(IndexError):
        tok.decode(np.array([[0, 8, 0]]))
    with pytest.raises(ValueError):
        tok.decode(np.array([[0, 1]]))  # one id per level
    with pytest.raises(ValueError):
        tok.encode(np.array([[0.0, np.nan, 0.0, 0.0]]))
    with pytest.raises(RuntimeError):
        build_tokenizer("residual_vq").encode(np.zeros((1, 4)))
