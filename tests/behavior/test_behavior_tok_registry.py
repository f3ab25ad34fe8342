"""build_tokenizer / load_tokenizer contract."""

import numpy as np
import pytest

from behavior.tokenizers import TOKENIZERS, ActionTokenizer, build_tokenizer


def test_registry_names():
    assert set(TOKENIZERS) == {"openvla", "uniform", "quantile", "kmeans", "fast"}
    for name in TOKENIZERS:
        assert isinstance(build_tokenizer(name), ActionTokenizer)


def test_unknown_name():
    with pytest.raises(ValueError):
        build_tokenizer("nope")


def test_load_wrong_class(tmp_path):
    build_tokenizer("uniform").save(str(tmp_path))
    with pytest.raises(ValueError):
        TOKENIZERS["openvla"].load(str(tmp_path))


def test_no_pickle_files(tmp_path):
    a = np.random.default_rng(0).uniform(-1, 1, (200, 4))
    for name in ("openvla", "uniform", "quantile", "kmeans"):
        d = tmp_path / name
        tok = build_tokenizer(name, **({"k": 4} if name == "kmeans" else {})).fit(a)
        tok.save(str(d))
        assert {p.suffix for p in d.iterdir()} <= {".json", ".safetensors"}
