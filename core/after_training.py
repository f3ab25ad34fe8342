"""Evaluation right after training: the `eval` block of conf/train.yaml, for a run and every job of a sweep.

    python train.py eval.benchmarks=[sort_of_clevr] eval.limit=200
    python train.py -m projector=linear,mlp eval.benchmarks=[vqav2,gqa] \\
        'eval.overrides={vqav2:["benchmark.root=/data/vqav2"],gqa:["benchmark.root=/data/gqa"]}'

Keys (conf/train.yaml):
- `eval.benchmarks`: benchmark names (conf/benchmark/NAME.yaml); empty (the default): no evaluation;
- `eval.limit`: evaluate only the first N questions of each benchmark (null: all of them);
- `eval.overrides`: per benchmark, a list of `evaluate.py` overrides (`benchmark.root=...`, `batch_size=...`),
  applied after `eval.limit`.

Each benchmark is evaluated exactly as `python evaluate.py run=RUN_DIR benchmark=NAME [limit=N] [overrides]`
would: conf/eval.yaml is composed with Hydra's compose API (inside a running Hydra app, such as train.py, with
the app's own config search path; elsewhere, tests included, from this repository's conf/) and handed to
`core.run.evaluate`, which writes the metrics into the run's `results.json` under `benchmarks`. The core does
not import eval/: the benchmark's `_target_` does. A benchmark that fails is reported with the command that
evaluates the kept run later, the others still run, and the first error is raised at the end.
`check_eval_settings` (run by the `EvalSettingsCheck` Hydra callback when a job starts) finds unknown
benchmarks, missing required values (e.g. `benchmark.root`) and stray `eval.overrides` keys before any training.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from core.conf import CONF_DIR as CONF
from core.conf import compose_config


def eval_settings(cfg: DictConfig) -> tuple[list[str], dict[str, list[str]]]:
    """(benchmark names, {benchmark: evaluate.py overrides}) of a training config's `eval` block."""
    block = cfg.get("eval") or {}
    benchmarks = [str(b) for b in block.get("benchmarks") or []]
    limit = block.get("limit")
    extra = block.get("overrides") or {}
    overrides = {}
    for name in benchmarks:
        task = (cfg.get("task") or {}).get("name")
        args = [f"task={task}"] if task and (CONF / "task" / f"{task}.yaml").exists() else []
        args += [f"benchmark={name}", *([f"limit={int(limit)}"] if limit is not None else [])]
        overrides[name] = args + [str(o) for o in extra.get(name) or []]
    return benchmarks, overrides


def compose_eval(overrides: list[str]) -> DictConfig:
    """conf/eval.yaml with `overrides`, composed in the running Hydra app if there is one."""
    return compose_config("eval", overrides)


def check_eval_settings(cfg: DictConfig) -> None:
    """Raise ValueError, naming the key and the fix, if an `eval` benchmark cannot be evaluated as configured."""
    benchmarks, overrides = eval_settings(cfg)
    stray = sorted(set((cfg.get("eval") or {}).get("overrides") or {}) - set(benchmarks))
    if stray:
        raise ValueError(f"eval.overrides has entries for {stray}, which eval.benchmarks={benchmarks} does not list: "
                         "add them to eval.benchmarks or remove the overrides")
    for name in benchmarks:
        try:
            ecfg = compose_eval(overrides[name])
        except Exception as err:
            known = sorted(q.stem for q in (CONF / "benchmark").glob("*.yaml") if not q.name.startswith("_"))
            raise ValueError(f"eval.benchmarks: {name} cannot be composed with {overrides[name]}: "
                             f"{str(err).splitlines()[0]} (benchmarks: {', '.join(known)})") from err
        missing = [k for k in _missing(OmegaConf.to_container(ecfg, resolve=False)) if k != "run"]
        if missing:
            raise ValueError(f"eval.benchmarks: {name} needs {missing}; give them with "
                             f"'eval.overrides={{{name}:[\"{missing[0]}=...\"]}}'")


def _missing(node: Any, prefix: str = "") -> list[str]:
    """Dotted keys of the `???` values of a config container (interpolations left unresolved)."""
    if isinstance(node, dict):
        return [k for key, value in node.items() for k in _missing(value, f"{prefix}{key}.")]
    return [prefix[:-1]] if node == "???" else []


def evaluate_after_training(cfg: DictConfig, run_dir: Path) -> dict[str, dict]:
    """Evaluate the trained run in `run_dir` on each of `cfg.eval.benchmarks`; {benchmark: metrics}."""
    from core.run import evaluate  # core.run calls this function at the end of `train`

    benchmarks, overrides = eval_settings(cfg)
    results, errors = {}, []
    for name in benchmarks:
        ecfg = compose_eval(overrides[name])
        ecfg.run = str(run_dir)
        if cfg.get("cache_dir"):
            ecfg.cache_dir = str(cfg.cache_dir)
        try:
            results[name] = evaluate(ecfg)
        except Exception as err:  # the trained run stays; say how to evaluate it later
            later = " ".join(["python evaluate.py", f"run={run_dir}", *overrides[name]])
            print(f"evaluation after training: {name} failed ({type(err).__name__}: {err}); the trained run is kept, "
                  f"evaluate it later with: {later}", file=sys.stderr)
            errors.append(err)
    if errors:
        raise errors[0]
    return results


class EvalSettingsCheck(Callback):
    """Hydra callback (conf/train.yaml): checks the `eval` block when a job starts, before anything trains.
    Hydra turns a callback's exception into a warning, so a bad block ends the process here (`error: ...`,
    exit status 1, as train.py ends on a user error)."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        block = config.get("eval") or {}
        if not (block.get("benchmarks") or block.get("overrides")):
            return
        try:
            check_eval_settings(config)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(1)
