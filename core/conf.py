"""The project's Hydra config directory, a config composed from it, and one option of a config group read by name.

Some components are named by a string inside another config (a backbone's `prompt_format: vicuna`,
`build_tokenizer("openvla")`): `group_option("prompt_format", "vicuna")` reads
conf/prompt_format/vicuna.yaml, whose `_target_` names the class, so such a component is registered
like every other one, by its YAML file.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def group_options(group: str) -> list[str]:
    """The options of conf/GROUP (file stems; `_*.yaml` are shared bases, not options)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml") if not p.stem.startswith("_"))


def group_option(group: str, name: str) -> DictConfig:
    """conf/GROUP/NAME.yaml as a config node; a clear error listing the choices when there is none. A name that
    leaves conf/GROUP (`../`, an absolute path: a run's config naming a file of its own) is no option."""
    folder = (CONF_DIR / group).resolve()
    path = CONF_DIR / group / f"{name}.yaml"
    if not path.is_file() or not path.resolve().is_relative_to(folder):
        raise ValueError(f"unknown {group} {name!r}: no {path}; choose from {group_options(group)}")
    return OmegaConf.load(path)


def compose_config(config_name: str, overrides: list[str]) -> DictConfig:
    """conf/CONFIG_NAME.yaml (`train`, `eval`) with `overrides`, as the entry points compose it; inside a running
    Hydra app (a job composing another config) through that app."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    overrides = [str(o) for o in overrides]
    if GlobalHydra.instance().is_initialized():
        return compose(config_name=config_name, overrides=overrides)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides)
