"""k-means (BeT) tokenizer: one id per vector, exact reconstruction with offsets."""

import numpy as np
import pytest

from behavior.tokenizers import build_tokenizer, load_tokenizer

MEANS = np.array([[-2.0, 0.0, 1.0], [2.0, 2.0, -1.0], [0.0, -3.0, 0.0]])


def _blobs(n_per=200, seed=0):
    rng = np.random.default_rng(seed)
    return np.concatenate([m + 0.1 * rng.normal(size=(n_per, 3)) for m in MEANS])


def test_defaults():
    tok = build_tokenizer("kmeans")
    assert tok.vocab_size == 64


def test_recovers_blob_centres_and_is_deterministic():
    a = _blobs()
    tok = build_tokenizer("kmeans", k=3, seed=0).fit(a)
    found = tok.centers[np.argsort(tok.centers[:, 0])]
    np.testing.assert_allclose(found, MEANS[np.argsort(MEANS[:, 0])], atol=0.03)
    again = build_tokenizer("kmeans", k=3, seed=0).fit(a)
    np.testing.assert_array_equal(again.centers, tok.centers)
    ids = tok.encode(a)
    assert len(np.unique(ids[:200])) == 1 and len(np.unique(ids)) == 3


def test_encode_is_nearest_centre_and_drops_last_axis():
    a = np.random.default_rng(1).uniform(-1, 1, (600, 4))
    tok = build_tokenizer("kmeans", k=16).fit(a)
    x = np.random.default_rng(2).uniform(-1.5, 1.5, (5, 6, 4))
    ids = tok.encode(x)
    assert ids.shape == (5, 6) and ids.dtype == np.int64
    brute = ((x[..., None, :] - tok.centers) ** 2).sum(-1).argmin(-1)
    np.testing.assert_array_equal(ids, brute)
    np.testing.assert_array_equal(tok.decode(ids), tok.centers[ids])


def test_reconstruction_with_offsets_exact():
    a = np.random.default_rng(3).uniform(-1, 1, (800, 7))
    tok = build_tokenizer("kmeans", k=64).fit(a)
    x = np.random.default_rng(4).uniform(-1, 1, (10, 20, 7))
    ids, off = tok.encode_with_offsets(x)
    assert ids.shape == (10, 20) and off.shape == (10, 20, 7)
    rec = tok.decode(ids, offsets=off)
    assert np.abs(rec - x).max() <= 4 * np.finfo(float).eps  # one rounding of (x - c) + c
    # without offsets the error is the (non-zero) quantisation error
    assert np.abs(tok.decode(ids) - x).max() > 0.05


def test_errors():
    with pytest.raises(ValueError):
        build_tokenizer("kmeans", k=10).fit(np.zeros((5, 2)))
    tok = build_tokenizer("kmeans", k=2).fit(_blobs(20))
    with pytest.raises(IndexError):
        tok.decode(np.array([2]))
    with pytest.raises(ValueError):
        tok.encode(np.zeros((3, 2)))


def test_save_load(tmp_path):
    tok = build_tokenizer("kmeans", k=8, seed=7).fit(_blobs(50))
    tok.save(str(tmp_path))
    assert (tmp_path / "arrays.safetensors").exists()
    back = load_tokenizer(str(tmp_path))
    assert type(back) is type(tok) and back.k == 8 and back.seed == 7
    np.testing.assert_array_equal(back.centers, tok.centers)
    x = _blobs(5, seed=9)
    np.testing.assert_array_equal(back.encode(x), tok.encode(x))
