"""Action tokenizers behind one interface (`ActionTokenizer`), built from their configs in conf/tokenizer/.

    from behavior.tokenizers import build_tokenizer, load_tokenizer
    tok = build_tokenizer("openvla", vocab_size=32000)   # conf/tokenizer/openvla.yaml + overrides; no fitting
    ids = tok.encode(normalised_actions)                 # (..., D) -> int64 (..., D)
    acts = tok.decode(ids)

The registry is Hydra's ``_target_``: conf/tokenizer/NAME.yaml names the class, and its
other keys are constructor arguments, except the settings every tokenizer config carries
for the policy (`CONFIG_SETTINGS`: ``name``, ``chunk_size``). A class says itself how its
ids are laid out (``kind``), so a config cannot contradict it. ``load_tokenizer(dir)``
restores a saved tokenizer from the class path in its config.json; only classes of this
package that implement `ActionTokenizer` are accepted, so a saved file cannot pick
arbitrary code. Tokenizers saved before ``_target_`` existed (config.json with ``name``)
load through conf/tokenizer/NAME.yaml.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from core.conf import group_option, group_options
from data.atomic import read_json

from .base import CLUSTER, CONFIG_FILE, KINDS, PER_VECTOR, SEQUENCE, ActionTokenizer
from .fast import FASTTokenizer
from .kmeans import KMeansTokenizer
from .openvla import OpenVLATokenizer
from .quantile import QuantileTokenizer
from .residual_vq import ResidualVQTokenizer
from .uniform import UniformTokenizer

#: keys of a conf/tokenizer YAML that configure the run, not the tokenizer class
CONFIG_SETTINGS = ("name", "chunk_size")
PACKAGE = __name__


def config_names() -> list[str]:
    """The tokenizer configs available, i.e. the stems of conf/tokenizer/*.yaml."""
    return group_options("tokenizer")


def tokenizer_config(name: str, **overrides) -> dict:
    """conf/tokenizer/NAME.yaml as a dict, with `overrides` merged in."""
    node = OmegaConf.merge(group_option("tokenizer", name), overrides)
    return OmegaConf.to_container(node, resolve=True)


def tokenizer_from_config(node: Mapping[str, Any]) -> ActionTokenizer:
    """Instantiate a tokenizer config node (a conf/tokenizer YAML, e.g. `cfg.tokenizer`): its `_target_` called with
    every key except `_target_` and the run settings (`CONFIG_SETTINGS`)."""
    node = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(node)
    if "_target_" not in node:
        raise ValueError(f"tokenizer config {node} has no _target_: name the class (see conf/tokenizer/*.yaml)")
    source = f"tokenizer config {node.get('name', node)}"
    cls = tokenizer_class(node["_target_"], source)
    args = {k: v for k, v in node.items() if k != "_target_" and k not in CONFIG_SETTINGS}
    accepted = list(inspect.signature(cls).parameters)
    unknown = sorted(set(args) - set(accepted))
    if unknown:
        raise ValueError(f"{source}: {unknown} are not arguments of {cls.__name__} (it takes {accepted}; "
                         f"the run settings are {list(CONFIG_SETTINGS)}); fix the key in conf/tokenizer or the override")
    return cls(**args)


def build_tokenizer(name: str, **overrides) -> ActionTokenizer:
    """The tokenizer of conf/tokenizer/NAME.yaml, with constructor arguments overridden by `overrides`."""
    return tokenizer_from_config(tokenizer_config(name, **overrides))


def tokenizer_class(target: str, source: str) -> type[ActionTokenizer]:
    """The class at import path `target`, refused unless it is an `ActionTokenizer` defined in this package."""
    module, _, attr = str(target).rpartition(".")
    if not (module == PACKAGE or module.startswith(PACKAGE + ".")):
        raise ValueError(f"{source}: _target_ {target!r} is not in {PACKAGE}; only its tokenizers can be loaded")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{source}: _target_ {target!r} does not exist ({err})") from None
    if not (isinstance(cls, type) and issubclass(cls, ActionTokenizer)) or getattr(cls, "kind", None) not in KINDS:
        raise ValueError(f"{source}: _target_ {target!r} is not an ActionTokenizer of {PACKAGE}")
    return cls


def saved_class(cfg: dict, directory) -> type[ActionTokenizer]:
    """The class of a saved tokenizer's config.json: its `_target_`, or (files saved before `_target_` existed)
    the `_target_` of conf/tokenizer/<its "name">.yaml."""
    source = f"{Path(directory) / CONFIG_FILE}"
    if "_target_" in cfg:
        return tokenizer_class(cfg["_target_"], source)
    if "name" in cfg:
        return tokenizer_class(tokenizer_config(cfg["name"])["_target_"], source)
    raise ValueError(f"{source} names no tokenizer (no _target_ and no name): is it a saved tokenizer?")


def load_tokenizer(directory: str) -> ActionTokenizer:
    """Restore a tokenizer saved with `ActionTokenizer.save(directory)`."""
    path = Path(directory) / CONFIG_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: {directory} is not a saved tokenizer")
    return saved_class(read_json(path), directory).load(directory)


__all__ = [
    "CLUSTER",
    "PER_VECTOR",
    "SEQUENCE",
    "ActionTokenizer",
    "FASTTokenizer",
    "KMeansTokenizer",
    "OpenVLATokenizer",
    "QuantileTokenizer",
    "ResidualVQTokenizer",
    "UniformTokenizer",
    "build_tokenizer",
    "config_names",
    "load_tokenizer",
    "tokenizer_config",
    "tokenizer_from_config",
]
