"""Every conf/tokenizer/*.yaml (found by glob): builds, fits, round-trips within its bound through the codec,
saves and loads to identical encodings; and what load_tokenizer refuses."""

from __future__ import annotations

import json

import numpy as np
import pytest
from omegaconf import OmegaConf

from behavior.codec import IGNORE, ActionCodec
from behavior.tokenizers import (
    CLUSTER,
    PER_VECTOR,
    SEQUENCE,
    ActionTokenizer,
    build_tokenizer,
    config_names,
    load_tokenizer,
    tokenizer_config,
)
from behavior.tokenizers.base import CONFIG_FILE
from tests.conftest import CONF

NAMES = sorted(p.stem for p in (CONF / "tokenizer").glob("*.yaml"))
D = 4


def _chunks(n: int, horizon: int, seed: int) -> np.ndarray:
    """Smooth normalised action chunks in [-1, 1] (random walks), like demonstrations after normalisation."""
    rng = np.random.default_rng(seed)
    return np.clip(np.cumsum(rng.normal(0, 0.2, (n, horizon, D)), 1), -1, 1)


def _fitted_codec(name: str) -> tuple[ActionCodec, np.ndarray]:
    # the config's chunk, at least 3 actions long so that the layout of a chunk's tokens is exercised
    horizon = max(3, int(OmegaConf.load(CONF / "tokenizer" / f"{name}.yaml").chunk_size))
    chunks = _chunks(400, horizon, seed=0)
    return ActionCodec(build_tokenizer(name), horizon, D).fit(chunks), chunks


def _rows(ids: np.ndarray) -> list[list[int]]:
    return [[int(i) for i in row if i != IGNORE] for row in ids]


def test_the_glob_finds_every_config():
    assert NAMES == config_names() and {"openvla", "residual_vq"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_builds_from_its_yaml(name):
    tok = build_tokenizer(name)
    yaml = OmegaConf.load(CONF / "tokenizer" / f"{name}.yaml")
    assert isinstance(tok, ActionTokenizer) and tok.kind in (PER_VECTOR, CLUSTER, SEQUENCE)
    assert type(tok).target() == yaml._target_ and yaml.name == name
    config = tok.get_config()  # the YAML's constructor arguments reached the instance
    for key, value in yaml.items():
        if key not in ("_target_", "name", "chunk_size"):
            assert config[key] == value, key


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_through_the_codec_within_its_bound(name):
    codec, chunks = _fitted_codec(name)
    tok = codec.tokenizer
    ids, offsets = codec.encode(chunks)
    assert ids.dtype == np.int64 and ids.shape == (len(chunks), codec.max_tokens)
    valid = ids[ids != IGNORE]
    assert valid.min() >= 0 and valid.max() <= codec.eos_id
    if codec.fixed_length:
        assert (ids != IGNORE).all() and valid.max() < codec.eos_id
    else:  # one EOS per row, after the chunk's ids
        assert ((ids == codec.eos_id).sum(1) == 1).all()
    assert (offsets is not None) == (tok.kind == CLUSTER)
    decoded = codec.decode(_rows(ids), offsets)
    assert decoded.shape == chunks.shape
    error = np.abs(decoded - chunks)
    bound = tok.roundtrip_bound()
    if bound is not None:
        assert error.max() <= bound + 1e-9
    # every tokenizer beats predicting the data's mean
    assert np.mean(error ** 2) < np.mean((chunks - chunks.mean((0, 1))) ** 2)


@pytest.mark.parametrize("name", NAMES)
def test_save_and_load_give_identical_encodings(name, tmp_path):
    codec, _ = _fitted_codec(name)
    tok = codec.tokenizer
    tok.save(str(tmp_path))
    assert {p.suffix for p in tmp_path.iterdir()} <= {".json", ".safetensors"}  # nothing pickled
    assert json.loads((tmp_path / CONFIG_FILE).read_text())["_target_"] == type(tok).target()
    back = load_tokenizer(str(tmp_path))
    assert type(back) is type(tok) and back.vocab_size == tok.vocab_size
    other = _chunks(20, codec.chunk_size, seed=1)
    if tok.kind == SEQUENCE:
        a, b = tok.encode(other), back.encode(other)
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
        np.testing.assert_array_equal(back.decode(a), tok.decode(a))
    else:
        flat = other.reshape(-1, D)
        np.testing.assert_array_equal(back.encode(flat), tok.encode(flat))
        np.testing.assert_array_equal(back.decode(tok.encode(flat)), tok.decode(tok.encode(flat)))


def test_unknown_name_and_unknown_argument_name_the_fix():
    with pytest.raises(ValueError, match="choose from"):
        build_tokenizer("nope")
    with pytest.raises(ValueError, match="n_bin.*UniformTokenizer"):
        build_tokenizer("uniform", n_bin=3)


@pytest.mark.parametrize("target", ["os.system", "builtins.dict", "behavior.codec.ActionCodec",
                                    "behavior.tokenizers.base.np", "behavior.tokenizers.base.ActionTokenizer.nope",
                                    "behavior.tokenizersX.evil.Tokenizer"])
def test_load_refuses_anything_but_a_tokenizer_of_the_package(tmp_path, target):
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"_target_": target}))
    with pytest.raises(ValueError, match="_target_"):
        load_tokenizer(str(tmp_path))


def test_load_as_another_class_is_refused(tmp_path):
    build_tokenizer("uniform").save(str(tmp_path))
    openvla = type(build_tokenizer("openvla"))
    with pytest.raises(ValueError, match="UniformTokenizer"):
        openvla.load(str(tmp_path))


@pytest.mark.parametrize("name,config", [("uniform", {"n_bins": 64, "low": -2.0, "high": 3.0}),
                                         ("quantile", {"n_bins": 8, "decode_to": "median"})])
def test_tokenizers_saved_with_a_name_still_load(tmp_path, name, config):
    """config.json of runs saved before `_target_`: {"name": ..., constructor arguments}, arrays alongside."""
    tok = build_tokenizer(name, **config).fit(_chunks(50, 1, seed=2).reshape(-1, D))
    tok.save(str(tmp_path))
    saved = json.loads((tmp_path / CONFIG_FILE).read_text())
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"name": name, **{k: v for k, v in saved.items() if k != "_target_"}}))
    back = load_tokenizer(str(tmp_path))
    assert type(back).target() == tokenizer_config(name)["_target_"] and back.get_config() == tok.get_config()
    x = _chunks(10, 1, seed=3).reshape(-1, D)
    np.testing.assert_array_equal(back.encode(x), tok.encode(x))


def test_the_codec_reads_the_kind_and_refuses_an_unknown_one():
    tok = build_tokenizer("uniform")
    assert ActionCodec(tok, 3, D).max_tokens == 3 * D  # per-vector bins: one id per dimension, no fitting needed
    tok.kind = "per_chunk"
    with pytest.raises(ValueError, match="kind is 'per_chunk'"):
        ActionCodec(tok, 3, D)
