"""Opening a run directory someone else wrote (issue 15, classes 1 and 6, on a tiny trained VLM run).

Class 1: a crafted `config.yaml` (a `_target_` that runs a command or writes a file, at the top of a component,
nested in its arguments, behind an interpolation, or one of the project's own functions in the wrong place) is
refused by `vlm.load`, `scripts/chat.py`, `scripts/export_hf.py` and `evaluate.py run=...`, naming the key, and the
command never runs; a run's data generator (the Sort-of-CLEVR benchmark), a pretraining run's world and a behavior
run's policy spec are held to the same allow-list; `trust_remote_code` in a run's config is refused unless the
caller opts in. Class 6: a truncated, corrupted or non-finite `model.safetensors` fails naming the file and tensor;
a hand-edited config (prompt format, projector) fails naming the key, while a relocated component still loads.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from hydra.errors import InstantiationException
from omegaconf import OmegaConf
from safetensors.torch import load_file, save_file

import vlm
from behavior.inference import build_policy
from core.conf import group_option
from core.run import evaluate, train
from core.safe_load import UnsafeConfigError, load_run_config
from core.weights import CHECKSUMS, WeightsError, record_file
from scripts.chat import main as chat_main
from scripts.export_hf import main as export_main
from tests.conftest import CONF, SCRATCH_SMALL, SMALL, compose_cfg
from vlm.hub import resolve_tiny


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    cfg = compose_cfg(*SMALL, *SCRATCH_SMALL, f"run.root={tmp_path_factory.mktemp('runs')}", "run.name=tiny",
                      "trainer.max_steps=1")
    return Path(train(cfg)["run_dir"])


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A copy of the trained run, for one test to damage."""
    return Path(shutil.copytree(trained, tmp_path / "run"))


def edit_config(run_dir: Path, **changes) -> None:
    """Set dotted keys of the run's config.yaml (a node replaced whole; None deletes), as a hand edit would."""
    cfg = OmegaConf.load(run_dir / "config.yaml")
    for key, value in changes.items():
        if value is None:
            parent, _, leaf = key.rpartition(".")
            OmegaConf.select(cfg, parent).pop(leaf)
        else:
            OmegaConf.update(cfg, key, value, merge=False, force_add=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg))


def test_a_run_loads_and_a_relocated_component_still_loads(run):
    assert isinstance(vlm.load(run), torch.nn.Module)
    edit_config(run, **{"backbone.model_id": resolve_tiny("tiny:tiny_llama", "backbone.model_id")})  # a local copy
    vlm.load(run)


# --- class 1: opening a run must not execute it ----------------------------------------------------------
def crafted(sentinel: Path) -> dict[str, dict]:
    """Config edits that write `sentinel` when built: a file copy (which Hydra's own blocklist lets through, unlike
    os.system), or the project's own file writer where a component belongs; or that carry an environment variable
    into a model id. The run's checksums.json is removed too, as an attacker would, so the allow-list alone stands
    in the way."""
    copy = {"_target_": "shutil.copyfile", "_args_": ["/etc/hostname", str(sentinel)]}
    return {
        "component target": {"encoder": copy},
        "projector": {"projector": copy},
        "nested argument": {"backbone.load_kwargs": {"quantization_config": copy}},
        "interpolation": {"evil": "shutil.copyfile", "encoder": {"_target_": "${evil}", "_args_": copy["_args_"]}},
        "environment variable": {"backbone.model_id": "hf-org/${oc.env:HOME}"},  # sent to a hub as a model id
        "fused tower": {"encoder": {"_target_": "vlm.encoders.FusedEncoder", "encoders": {"a": copy, "b": copy}}},
        "project function in the wrong place": {"encoder": {"_target_": "data.atomic.write_json",
                                                            "_args_": [str(sentinel), "pwned"]}},
        "list element": {"encoder.model_kwargs": {"hooks": [copy]}},
    }


def craft(run_dir: Path, sentinel: Path, case: str) -> None:
    edit_config(run_dir, **crafted(sentinel)[case])
    (run_dir / CHECKSUMS).unlink()


@pytest.mark.parametrize("case", list(crafted(Path("x"))))
def test_a_crafted_config_is_refused_by_vlm_load_and_runs_nothing(run, tmp_path, case):
    sentinel = tmp_path / "pwned"
    craft(run, sentinel, case)
    key = {"projector": "projector", "nested argument": "backbone.load_kwargs", "fused tower": "encoder.encoders",
           "list element": r"encoder\.model_kwargs\.hooks\[0\]"}.get(case, "encoder")
    interpolated = case in ("interpolation", "environment variable")
    where = r"backbone\.model_id" if case == "environment variable" else rf"{key}[\w.]*\._target_"
    why = "is an interpolation, which a run's config" if interpolated else "is not one of the project's"
    with pytest.raises(UnsafeConfigError, match=rf"{run / 'config.yaml'}: {where}=.* {why}"):
        vlm.load(run)
    assert not sentinel.exists()


def test_chat_export_and_evaluate_refuse_a_crafted_run(run, tmp_path, capsys):
    sentinel = tmp_path / "pwned"
    craft(run, sentinel, "component target")
    with pytest.raises(SystemExit, match=r"chat: .*encoder\._target_='shutil\.copyfile'"):
        chat_main([str(run)])
    assert export_main([str(run), str(tmp_path / "hf")]) == 1
    assert "encoder._target_='shutil.copyfile' is not one of" in capsys.readouterr().err
    with pytest.raises(UnsafeConfigError, match=r"encoder\._target_='shutil\.copyfile'"):
        evaluate(compose_cfg(f"run={run}", "benchmark=sort_of_clevr", "limit=2", config="eval"))
    assert not sentinel.exists() and not (tmp_path / "hf").exists()


def test_a_runs_data_generator_and_world_are_held_to_the_allow_list(run, tmp_path):
    from hydra.utils import instantiate

    from vlm.pretrain.quality import run_config

    sentinel = tmp_path / "pwned"
    copy = {"_target_": "shutil.copyfile", "_args_": ["/etc/hostname", str(sentinel)]}
    edit_config(run, **{"data.generator": copy})
    runner = instantiate(compose_cfg(f"run={run}", "benchmark=sort_of_clevr", config="eval").benchmark, _recursive_=False)
    with pytest.raises(UnsafeConfigError, match=r"data\.generator\._target_='shutil\.copyfile'"):
        runner.test_file(run)
    edit_config(run, **{"world": copy})
    with pytest.raises(UnsafeConfigError, match=r"world\._target_='shutil\.copyfile' .*conf/world/"):
        run_config(run)
    assert not sentinel.exists()


@pytest.mark.parametrize("nested", [False, True])
def test_a_behavior_runs_policy_spec_cannot_name_code(tmp_path, nested):
    sentinel = tmp_path / "pwned"
    copy = {"_target_": "shutil.copyfile", "_args_": ["/etc/hostname", str(sentinel)]}
    kwargs = {"hidden": copy} if nested else copy  # policy.json's kwargs are merged into the policy's arguments
    with pytest.raises(UnsafeConfigError, match=r"run/config\.yaml \+ policy\.json: policy[\w.]*\._target_='shutil\.copyfile'"):
        build_policy(group_option("policy", "mlp_bc"), kwargs, {"action_dim": 4, "chunk_size": 1}, None,
                     source="run/config.yaml + policy.json")
    assert not sentinel.exists()


@pytest.mark.parametrize("text", ["encoder: [unclosed\n", "encoder: !!python/object/apply:shutil.copyfile [/etc/hostname, SENTINEL]\n"])
def test_an_unreadable_or_python_tagged_config_is_refused_naming_it(run, tmp_path, text):
    sentinel = tmp_path / "pwned"
    (run / "config.yaml").write_text(text.replace("SENTINEL", str(sentinel)))
    with pytest.raises(UnsafeConfigError, match=rf"{run / 'config.yaml'} cannot be read as a run config"):
        vlm.load(run)
    assert not sentinel.exists()


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_a_prompt_format_cannot_name_a_file_outside_conf(run, tmp_path, where):
    sentinel = tmp_path / "pwned"
    (run / "payload.yaml").write_text(f"_target_: builtins.dict\npayload: {{_target_: shutil.copyfile, _args_: [/etc/hostname, {sentinel}]}}\n")
    name = str(run / "payload") if where == "absolute" else "../" * len(CONF.parts) + str(run / "payload")
    edit_config(run, **{"backbone.prompt_format": name})
    (run / CHECKSUMS).unlink()
    with pytest.raises(InstantiationException, match=r"unknown prompt_format .*payload.*choose from \['base'"):
        vlm.load(run)
    assert not sentinel.exists()


@pytest.mark.parametrize("key", ["backbone.trust_remote_code", "backbone.load_kwargs.trust_remote_code"])
def test_trust_remote_code_in_a_run_needs_the_callers_opt_in(run, key):
    edit_config(run, **{key: True})
    with pytest.raises(UnsafeConfigError, match=rf"{key} asks to run code shipped with the model.*trust_remote_code=True"):
        vlm.load(run)
    if key == "backbone.trust_remote_code":  # the caller trusts the run: its (local, code-free) model loads
        vlm.load(run, trust_remote_code=True)


# --- class 6: damaged weights and hand-edited configs -----------------------------------------------------
def test_truncated_weights_fail_naming_the_file_with_or_without_checksums(run):
    weights = run / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(WeightsError, match=rf"{weights} has \d+ bytes, the run recorded \d+"):
        vlm.load(run)
    (run / CHECKSUMS).unlink()  # a run written before checksums: safetensors' own check, the file named
    with pytest.raises(WeightsError, match=rf"{weights} is not a readable safetensors file"):
        vlm.load(run)
    assert export_main([str(run), str(run.parent / "hf")]) == 1


def test_weights_with_a_nan_fail_naming_the_tensor(run):
    weights = run / "model.safetensors"
    state = load_file(str(weights))
    name = next(k for k in state if k.startswith("projector."))
    state[name].view(-1)[0] = float("nan")
    save_file(state, str(weights))
    with pytest.raises(WeightsError, match="does not match the SHA-256"):  # a replaced file
        vlm.load(run)
    record_file(run, weights)  # even when whoever replaced it recorded its checksum
    with pytest.raises(WeightsError, match=rf"tensor {name} holds 1 NaN or infinite"):
        vlm.load(run)


def test_a_hand_edited_prompt_format_fails_naming_the_key(run):
    edit_config(run, **{"backbone.prompt_format": "plain"})
    with pytest.raises(WeightsError, match=r"config\.yaml: backbone\.prompt_format differs from the config the weights"):
        vlm.load(run)
    with pytest.raises(SystemExit, match=r"backbone\.prompt_format"):
        chat_main([str(run)])


def test_a_hand_edited_projector_fails_naming_the_key(run):
    edit_config(run, **{"projector._target_": "vlm.projectors.linear", "projector.name": "linear"})
    with pytest.raises(WeightsError, match=r"projector\._target_, projector\.name differ from the config the weights"):
        vlm.load(run)
    (run / CHECKSUMS).unlink()  # no record: the tensors themselves do not fit
    with pytest.raises(WeightsError, match=r"config\.yaml's `projector`"):
        vlm.load(run)
