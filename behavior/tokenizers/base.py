"""Common interface for action tokenizers, plus small (non-pickle) IO helpers.

Every tokenizer implements ``fit(actions) -> self``, ``encode``, ``decode``,
``save(dir)``, ``load(dir)`` (classmethod) and the ``vocab_size`` property.
``save`` always writes ``config.json`` holding ``{"name": <registry name>, ...}``
so :func:`behavior.tokenizers.load_tokenizer` can dispatch on it; arrays go to
``arrays.safetensors`` and FAST's BPE to ``tokenizer.json``. Nothing is pickled.

Inputs are treated as float64 internally; decoded values are float64.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from typing import Dict

import numpy as np

CONFIG_FILE = "config.json"
ARRAYS_FILE = "arrays.safetensors"


class ActionTokenizer(ABC):
    #: registry name, written into config.json
    name: str = ""

    @abstractmethod
    def fit(self, actions: np.ndarray) -> "ActionTokenizer":
        """Fit on data (no-op for data-independent tokenizers); returns self."""

    @abstractmethod
    def encode(self, actions: np.ndarray):
        """Continuous actions -> int64 token ids."""

    @abstractmethod
    def decode(self, ids):
        """Token ids -> float64 actions (inverse of encode up to quantisation)."""

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Size of the id space the tokenizer emits into."""

    @abstractmethod
    def get_config(self) -> dict:
        """JSON-serialisable constructor kwargs (plus fitted scalars)."""

    def get_arrays(self) -> Dict[str, np.ndarray]:
        """Fitted arrays to store in safetensors (empty if none)."""
        return {}

    def set_arrays(self, arrays: Dict[str, np.ndarray]) -> None:
        """Restore fitted arrays after construction from config."""

    def save(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        write_json(os.path.join(directory, CONFIG_FILE), {"name": self.name, **self.get_config()})
        arrays = self.get_arrays()
        if arrays:
            save_arrays(os.path.join(directory, ARRAYS_FILE), arrays)

    @classmethod
    def load(cls, directory: str) -> "ActionTokenizer":
        cfg = read_json(os.path.join(directory, CONFIG_FILE))
        name = cfg.pop("name", cls.name)
        if cls.name and name != cls.name:
            raise ValueError(f"{directory} holds a {name!r} tokenizer, not {cls.name!r}")
        tok = cls(**cfg)
        path = os.path.join(directory, ARRAYS_FILE)
        if os.path.exists(path):
            tok.set_arrays(load_arrays(path))
        return tok


def write_json(path: str, obj) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)


def read_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def save_arrays(path: str, arrays: Dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, path)


def load_arrays(path: str) -> Dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(path)


def as_float(actions, check_finite: bool = True) -> np.ndarray:
    x = np.asarray(actions, dtype=np.float64)
    if check_finite and np.isnan(x).any():
        raise ValueError("NaN in actions")
    return x


def require_fitted(ok: bool, name: str) -> None:
    if not ok:
        raise RuntimeError(f"{name} tokenizer is not fitted: call fit(actions) or load(dir)")
