"""Action tokenizers behind one interface (:class:`ActionTokenizer`).

    from behavior.tokenizers import build_tokenizer, load_tokenizer
    tok = build_tokenizer("openvla", vocab_size=32000)   # no fitting needed
    ids = tok.encode(normalised_actions)                 # (..., D) -> int64 (..., D)
    acts = tok.decode(ids)

Names: openvla, uniform, quantile, kmeans (one id per action vector: (..., D)
-> (...,)), fast (chunk (T, D) -> variable-length 1-D ids). ``quantile``,
``kmeans`` and ``fast`` need ``fit(actions)`` first. ``load_tokenizer(dir)``
restores any saved tokenizer from the name in its config.json.
"""

from __future__ import annotations

import os

from .base import CONFIG_FILE, ActionTokenizer, read_json
from .fast import FASTTokenizer
from .kmeans import KMeansTokenizer
from .openvla import OpenVLATokenizer
from .quantile import QuantileTokenizer
from .uniform import UniformTokenizer

TOKENIZERS = {
    cls.name: cls
    for cls in (OpenVLATokenizer, UniformTokenizer, QuantileTokenizer, KMeansTokenizer, FASTTokenizer)
}


def build_tokenizer(name: str, **kwargs) -> ActionTokenizer:
    try:
        cls = TOKENIZERS[name]
    except KeyError:
        raise ValueError(f"unknown tokenizer {name!r}; choose from {sorted(TOKENIZERS)}") from None
    return cls(**kwargs)


def load_tokenizer(directory: str) -> ActionTokenizer:
    name = read_json(os.path.join(directory, CONFIG_FILE))["name"]
    return TOKENIZERS[name].load(directory)


__all__ = [
    "ActionTokenizer",
    "FASTTokenizer",
    "KMeansTokenizer",
    "OpenVLATokenizer",
    "QuantileTokenizer",
    "UniformTokenizer",
    "TOKENIZERS",
    "build_tokenizer",
    "load_tokenizer",
]
