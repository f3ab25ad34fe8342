"""Opening a run directory without executing it: the run's config is data, never code.

A run's `config.yaml` (or any config read from a shared folder) names components by Hydra `_target_`, and
Hydra imports and calls whatever a `_target_` names. A loader therefore reads the config with
`load_run_config(run_dir, components)`, which resolves it and checks, before anything is built, that every
`_target_` under each component key it will instantiate is one the project itself configures: a
`_target_` of a file in the matching conf/ group (`conf/encoder/*.yaml` for the key `encoder`, nested
targets such as a fused encoder's towers included). Anything else is refused with `UnsafeConfigError`,
naming the file, the key and the target.

A run's config is written resolved, so an interpolation in it (`${oc.env:SECRET}`, `${other.key}`) was added by
hand: it is refused too (it could carry an environment variable into a model id that is then requested from a hub).

`trust_remote_code` (code a model folder ships, run by transformers) is honoured only when the caller passes
`trust_remote_code=True` at load time: `check_remote_code` refuses a config that asks for it without that
opt-in, naming the key and how to opt in.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from core.conf import CONF_DIR


class UnsafeConfigError(ValueError):
    """A config read from a run or dataset asks for code the project does not ship (or for remote code)."""


@cache
def allowed_targets(group: str) -> frozenset[str]:
    """Every `_target_` a file of conf/GROUP names (at any depth, shared bases included)."""
    return frozenset(target for path in sorted((CONF_DIR / group).rglob("*.yaml"))
                     for _, target in targets_in(OmegaConf.to_container(OmegaConf.load(path), resolve=False), ""))


def targets_in(node: Any, prefix: str) -> list[tuple[str, str]]:
    """(dotted key, target) of every `_target_` in a plain container (dicts and lists), nested ones included."""
    out: list[tuple[str, str]] = []
    if isinstance(node, Mapping):
        for key, value in node.items():
            where = f"{prefix}.{key}" if prefix else str(key)
            if key == "_target_":
                out.append((where, str(value)))
            else:
                out += targets_in(value, where)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += targets_in(value, f"{prefix}[{i}]")
    return out


def interpolations_in(node: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted key, value) of every string holding an interpolation (`${...}`) in a plain container."""
    if isinstance(node, Mapping):
        return [hit for key, value in node.items() for hit in interpolations_in(value, f"{prefix}{key}.")]
    if isinstance(node, list):
        return [hit for i, value in enumerate(node) for hit in interpolations_in(value, f"{prefix[:-1]}[{i}].")]
    return [(prefix[:-1], node)] if isinstance(node, str) and "${" in node else []


def check_targets(node: Any, key: str, groups: str | tuple[str, ...], source: str | Path) -> None:
    """Refuse (UnsafeConfigError) any `_target_` under `node` (the config's `key`) that no file of conf/GROUP (one
    of `groups`) names."""
    groups = (groups,) if isinstance(groups, str) else tuple(groups)
    container = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    allowed = frozenset().union(*(allowed_targets(g) for g in groups))
    where_from = " or ".join(f"conf/{g}/" for g in groups)
    for where, target in targets_in(container, key):
        if target not in allowed:
            raise UnsafeConfigError(
                f"{source}: {where}={target!r} is not one of the project's components ({where_from}), so it is not "
                f"built: opening a run must not run code it names. Fix: set {where} to one of {sorted(allowed)}, "
                f"or, if you wrote this component yourself, add a {groups[0]} file for it under conf/")


def load_run_config(run_dir: str | Path, components: Mapping[str, str | tuple[str, ...]],
                    name: str = "config.yaml") -> DictConfig:
    """The resolved config of a run, every `_target_` under each key of `components` ({config key: conf group(s)})
    checked against that group's allow-list. The returned config holds plain values (no interpolations left), so
    what was checked is what gets built."""
    path = Path(run_dir) / name
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no {name}); pass run=runs/NAME")
    try:
        raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception as err:
        raise UnsafeConfigError(f"{path} cannot be read as a run config ({type(err).__name__}: "
                                f"{str(err).splitlines()[0] if str(err) else ''}); restore it from the run's source "
                                "or train the run again") from None
    hand_made = interpolations_in(raw)
    if hand_made:
        where, value = hand_made[0]
        raise UnsafeConfigError(f"{path}: {where}={value!r} is an interpolation, which a run's config (written resolved) "
                                "never holds: it was added by hand and could read other values (environment variables) "
                                "into the run. Fix: write the value itself")
    cfg = OmegaConf.create(raw)
    for key, group in components.items():
        if cfg.get(key) is not None:
            check_targets(cfg[key], key, group, path)
    return cfg


def check_remote_code(cfg: DictConfig, key: str, trust_remote_code: bool, source: str | Path, how: str) -> None:
    """Refuse a config whose `key` (e.g. `backbone`) asks for `trust_remote_code` (or passes it through
    `load_kwargs`) unless the caller opted in; `how` says how the caller opts in."""
    node = cfg.get(key) or {}
    asks = [f"{key}.trust_remote_code"] if node.get("trust_remote_code") else []
    asks += [f"{key}.load_kwargs.{k}" for k, v in (node.get("load_kwargs") or {}).items() if k == "trust_remote_code" and v]
    if asks and not trust_remote_code:
        raise UnsafeConfigError(
            f"{source}: {', '.join(asks)} asks to run code shipped with the model, which a file alone cannot "
            f"allow. If you trust this run and its model's source, opt in with {how}")
