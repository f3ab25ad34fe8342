"""OpenVLA bins: hand-computed ids/values, including edges, out-of-range and NaN.

edges k = -1 + 2k/255 (k = 0..255), centres i = -1 + (2i + 1)/255 (i = 0..254).
"""

import numpy as np
import pytest

from behavior.tokenizers import build_tokenizer, load_tokenizer

V = 32000


@pytest.fixture
def tok():
    return build_tokenizer("openvla", vocab_size=V)


def _reference(x, vocab):
    """The arithmetic as specified (clip, digitize, vocab - d; clip(vocab - id - 1))."""
    bins = np.linspace(-1, 1, 256)
    centres = (bins[:-1] + bins[1:]) / 2.0
    ids = vocab - np.digitize(np.clip(x, -1.0, 1.0), bins)
    return ids, centres[np.clip(vocab - ids - 1, 0, 254)]


def test_no_fit_needed_and_vocab(tok):
    assert tok.vocab_size == 32000
    assert tok.min_token_id == 31744
    assert tok.bins.shape == (256,) and tok.bin_centers.shape == (255,)


def test_hand_computed(tok):
    edge100 = np.linspace(-1, 1, 256)[100]  # exactly on an interior edge
    x = np.array([-1.0, 1.0, 0.0, -7.0, 5.0, edge100, np.nextafter(edge100, -2.0), 1.0 / 255 + 1e-9])
    ids = tok.encode(x)
    assert ids.dtype == np.int64
    # -1 -> d=1; 1 -> d=256; 0 -> d=128 (between edges 127 and 128);
    # on edge 100 -> d=101 (bin above); just below it -> d=100; just above edge 128 -> d=129
    assert ids.tolist() == [31999, 31744, 31872, 31999, 31744, 31899, 31900, 31871]
    vals = tok.decode(ids)
    expect = np.array([-254, 254, 0, -254, 254, -54, -56, 2]) / 255.0
    np.testing.assert_allclose(vals, expect, atol=1e-12)


def test_top_two_digitize_results_share_a_value(tok):
    # d = 255 (just below 1) and d = 256 (exactly 1) decode to the same last centre
    ids = tok.encode(np.array([np.nextafter(1.0, 0.0), 1.0]))
    assert ids.tolist() == [31745, 31744]
    np.testing.assert_array_equal(tok.decode(ids), [254 / 255, 254 / 255])


def test_nan_behaviour(tok):
    # NaN survives np.clip; np.digitize puts it after every edge (d=256): lowest id, value 254/255
    ids = tok.encode(np.array([np.nan, 0.0]))
    assert ids.tolist() == [31744, 31872]
    np.testing.assert_allclose(tok.decode(ids), [254 / 255, 0.0], atol=1e-12)


def test_decode_out_of_range_ids_clip(tok):
    vals = tok.decode(np.array([32000, 40000, 31743, 0, -5]))
    np.testing.assert_allclose(vals, np.array([-254, -254, 254, 254, 254]) / 255.0, atol=1e-12)


def test_id_range_and_shape(tok):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-1.2, 1.2, 20000), np.linspace(-1, 1, 256), [1.0]])
    ids = tok.encode(x)
    assert ids.min() == 31744 and ids.max() == 31999
    assert len(np.unique(ids)) == 256
    batch = rng.uniform(-1, 1, (2, 3, 7)).astype(np.float32)
    out = tok.encode(batch)
    assert out.shape == (2, 3, 7) and out.dtype == np.int64
    assert tok.decode(out).shape == (2, 3, 7)


def test_matches_reference_everywhere(tok):
    rng = np.random.default_rng(1)
    edges = np.linspace(-1, 1, 256)
    x = np.concatenate(
        [
            rng.uniform(-3, 3, 5000),
            edges,
            np.nextafter(edges, -np.inf),
            np.nextafter(edges, np.inf),
            [np.inf, -np.inf, np.nan, 0.0, -0.0],
        ]
    )
    for arr in (x, x.astype(np.float32)):
        ids, vals = _reference(arr, V)
        np.testing.assert_array_equal(tok.encode(arr), ids)
        np.testing.assert_array_equal(tok.decode(tok.encode(arr)), vals)
    # round-trip error within the range is at most one bin width (2/255)
    inside = rng.uniform(-1, 1, 5000)
    assert np.abs(tok.decode(tok.encode(inside)) - inside).max() <= 2 / 255 + 1e-12


def test_default_vocab_and_save_load(tmp_path):
    tok = build_tokenizer("openvla")
    assert tok.encode(np.array([-1.0, 1.0])).tolist() == [255, 0]
    big = build_tokenizer("openvla", vocab_size=V)
    big.save(str(tmp_path))
    back = load_tokenizer(str(tmp_path))
    assert back.vocab_size == V
    x = np.linspace(-1.1, 1.1, 301)
    np.testing.assert_array_equal(back.encode(x), big.encode(x))
