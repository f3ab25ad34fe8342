"""FAST: DCT + BPE round-trip, compression on smooth chunks, malformed sequences."""

import numpy as np
import pytest
from scipy.fft import dct

from behavior.tokenizers import build_tokenizer, load_tokenizer
from behavior.tokenizers.fast import CHAR_BASE

T, D = 50, 7


def _smooth(n, seed):
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 1.0, T)[None, :, None]
    f = rng.uniform(0.2, 1.5, (n, 1, D))
    ph = rng.uniform(0, 2 * np.pi, (n, 1, D))
    amp = rng.uniform(0.2, 0.9, (n, 1, D))
    return amp * np.sin(2 * np.pi * f * t + ph)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("fast").fit(_smooth(300, seed=0))


def test_fitted_state(tok):
    assert (tok.time_horizon, tok.action_dim) == (T, D)
    assert 200 < tok.vocab_size <= 1024
    assert tok.min_token < 0 < tok.max_token


def test_coefficients_frequency_major_and_char_map():
    tok = build_tokenizer("fast", scale=10)
    chunk = np.tile([[0.5, -0.25]], (4, 1))  # constant per dim -> only frequency 0: c0 = x * sqrt(T) = x * 2
    q = tok._coeffs(chunk)
    assert q.tolist() == [10, -5, 0, 0, 0, 0, 0, 0]
    ramp = np.stack([np.arange(4.0), np.zeros(4)], -1)
    expect = np.rint(10 * dct(ramp, axis=0, norm="ortho")).astype(int).reshape(-1)
    assert tok._coeffs(ramp).tolist() == expect.tolist()
    assert expect[0] == 30 and expect[1] == 0 and expect[2] < 0  # dim 0 of freq 1 sits at index 2
    tok.min_token, tok.max_token = -5, 10
    assert tok._to_str(np.array([-5, 0, 10, 99])) == "".join(chr(CHAR_BASE + v) for v in (0, 5, 15, 15))
    assert tok.last_clipped == 1


def test_roundtrip_error_and_compression(tok):
    chunks = _smooth(20, seed=1)
    lens, rms, mx = [], [], []
    for c in chunks:
        ids = tok.encode(c)
        assert ids.dtype == np.int64 and ids.ndim == 1
        assert tok.last_clipped == 0
        rec = tok.decode(ids)
        assert rec.shape == (T, D)
        lens.append(len(ids))
        rms.append(np.sqrt(np.mean((rec - c) ** 2)))
        mx.append(np.abs(rec - c).max())
    # orthonormal DCT: time-domain RMS error == coefficient RMS error <= 0.5 / scale
    assert max(rms) <= 0.05
    assert max(mx) < 0.15
    assert max(lens) < T * D  # every smooth chunk needs fewer tokens than naive binning (350)
    assert np.mean(lens) < 0.25 * T * D
    assert tok.decode_errors == 0


def test_batch_encode_decode(tok):
    chunks = _smooth(3, seed=2)
    ids = tok.encode(chunks)
    assert isinstance(ids, list) and len(ids) == 3
    rec = tok.decode(ids)
    assert rec.shape == (3, T, D)
    np.testing.assert_array_equal(rec[1], tok.decode(ids[1]))


def test_malformed_sequences_counted_not_raised(tok):
    tok.decode_errors = 0
    c = _smooth(1, seed=4)[0]
    ids = tok.encode(c)
    good = tok.decode(ids)
    assert tok.decode_errors == 0
    short = tok.decode(ids[:-3])  # missing trailing (high-frequency) coefficients -> zero-padded
    assert short.shape == (T, D) and np.isfinite(short).all()
    assert tok.decode_errors == 1
    long = tok.decode(np.concatenate([ids, ids]))  # extra coefficients truncated -> same as good
    np.testing.assert_allclose(long, good)
    assert tok.decode_errors == 2
    empty = tok.decode(np.array([], dtype=np.int64))
    np.testing.assert_array_equal(empty, np.zeros((T, D)))
    assert tok.decode_errors == 3
    unknown = tok.decode(np.concatenate([ids, [10**9, -1]]))  # unknown ids skipped
    np.testing.assert_allclose(unknown, good)
    assert tok.decode_errors == 4
    batch = tok.decode([ids, ids[:5]])
    assert batch.shape == (2, T, D) and tok.decode_errors == 5


def test_out_of_range_chunk_clipped(tok):
    big = np.full((T, D), 50.0)
    ids = tok.encode(big)
    assert tok.last_clipped > 0
    rec = tok.decode(ids)
    assert rec.shape == (T, D) and np.isfinite(rec).all()


def test_shape_checks(tok):
    with pytest.raises(ValueError):
        tok.encode(np.zeros((T + 1, D)))
    with pytest.raises(ValueError):
        tok.encode(np.zeros(T))
    with pytest.raises(ValueError):
        build_tokenizer("fast", bpe_vocab_size=64).fit(_smooth(10, seed=0) * 20)  # alphabet larger than vocab


def test_save_load(tok, tmp_path):
    tok.save(str(tmp_path))
    assert (tmp_path / "tokenizer.json").exists()
    back = load_tokenizer(str(tmp_path))
    assert type(back) is type(tok)
    assert back.vocab_size == tok.vocab_size
    assert (back.min_token, back.max_token, back.time_horizon, back.action_dim) == (
        tok.min_token, tok.max_token, T, D)
    for c in _smooth(5, seed=6):
        ids = tok.encode(c)
        np.testing.assert_array_equal(back.encode(c), ids)
        np.testing.assert_array_equal(back.decode(ids), tok.decode(ids))
