"""`train(cfg)` and `evaluate(cfg)`: what the Hydra entry points call.

A run lives in `<run.root>/<run.name>/`: `config.yaml` (the resolved config),
`checkpoints/last.ckpt`, `metrics.csv`, `model.safetensors` (the weights after
the latest finished phase), `progress.json` (finished phases) and
`results.json` (`train`: final training figures and data counts; top level:
the latest evaluation's metrics; `benchmarks`: every evaluation by name) and
`inputs.json` (what the run started from beyond its config, when the task says:
`check_inputs`).
`run.name` defaults to a name made of the main config choices
(`run.name_parts`, set by the task's training config) plus a hash of the whole
resolved config, so the same command finds its own directory again and resumes
from `last.ckpt`, while a different command never reuses another run's
directory. Hashing only resolves the config: it writes nothing.

A recipe (`cfg.stage.phases`) is a list of phases trained one after another,
each with its own trainable parts, optimiser settings and batch size; a phase
starts from the weights the previous one ended with. The core knows nothing of
images or actions: `cfg.task` names a task object (Hydra `_target_`, a
`core.interfaces.Task`) that builds the model, the data module and the
LightningModule of a phase, each from what it is given (the run directory
included).

Several processes (DDP / FSDP, launched by Lightning, srun or torchrun) all run
`train`; only rank 0 writes the run's files, every rank takes part in
checkpoint saves, and a barrier ends each phase (docs/scaling.md). The Trainer
itself is built in core/trainer.py.

Rerunning a command never loses what its run recorded (docs/reliability.md): rank 0 holds the run's lock
(core/run_lock.py; `run.lock_wait`) while it trains and evaluates, `results.json`'s `train` section keeps the
figures of phases finished earlier (also kept per phase in progress.json), the weights are checksummed with the
config they were trained with (core/weights.py), and a run whose checkpoints all fail stops instead of
restarting from step 0 (core/checkpoint.py).

With `sifting.enabled` (core/sifting.py) each phase's module makes its own micro-batches; the phase's
`sift/*` figures go to results.json's `train` section and the run's totals (`sift/forwarded`,
`sift/backpropagated`) to its top level.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from pathlib import Path

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table
from typing_extensions import get_protocol_members

from data.atomic import atomic_file, read_json, write_json
from core.checkpoint import peek, remove_stray_tmp, resume_checkpoint
from core.interfaces import Task
from core.loggers import build_loggers, log_artifacts
from core.run_lock import run_lock
from core.sifting import Sifter, SiftingSettings
from core.strategies import fsdp_wrapped, save_weights
from core.throughput import ThroughputMonitor
from core.trainer import build_trainer, world_size
from core.weights import load_weights, record_config, record_file

console = Console()
# Frozen parts are kept in eval mode on purpose (TrainModule.train); Lightning's notice about it is noise.
warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode")


def run_name(cfg: DictConfig) -> str:
    """`run.name` if set, else `run.name_parts` joined by '-' with the first 8 hex digits of the SHA-1 of the
    resolved config (`run.name`, `run.lock_wait` and the after-training evaluation `eval` left out: adding a benchmark
    to a finished run evaluates it instead of training a new one; `sifting` too while it is off)."""
    if cfg.run.get("name"):
        return str(cfg.run.name)
    body = OmegaConf.to_container(cfg, resolve=True)
    body["run"].pop("name", None)
    body["run"].pop("lock_wait", None)
    body.pop("eval", None)
    if not (body.get("sifting") or {}).get("enabled"):
        body.pop("sifting", None)  # runs without sifting keep the names they had before the block existed
    digest = hashlib.sha1(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:8]
    parts = [str(p) for p in cfg.run.get("name_parts") or []]
    return "-".join([*parts, digest])


INPUTS = "inputs.json"


def check_inputs(task: Task, cfg: DictConfig, run_dir: Path, fresh: bool, main: bool) -> None:
    """What the run starts from beyond its config (`task.input_identities(cfg)`, optional: e.g. the weights behind
    a `tiny:NAME` flavour, which its name does not pin) is recorded in `inputs.json` when the run starts, and every
    later start of the same command compares it: a run that would resume, or be reused as finished, on other inputs
    stops, naming them, instead of mixing two sets of weights. Runs started before the record existed are not checked."""
    identities = getattr(task, "input_identities", None)
    if identities is None:
        return
    current, path = identities(cfg), run_dir / INPUTS
    if not path.exists():
        if fresh and main and current:
            write_json(path, current)
        return
    recorded = read_record(path, default={})
    changed = [f"{key}: {old} then, {current[key]} now" for key, old in sorted(recorded.items())
               if key in current and current[key] != old]
    if changed:
        raise RunDirError(f"{path}: {run_dir} was trained on other inputs than this command now loads ({'; '.join(changed)}); "
                          "a component was rebuilt or moved to a new revision under the same name. Resuming or reusing the run "
                          f"would mix them. Fix: move {run_dir} aside to train the command anew, or set run.name=NEW to train beside it")


def run_dir_of(cfg: DictConfig) -> Path:
    """`<run.root>/<run name>`: where the run of this config keeps its files."""
    return Path(cfg.run.root) / run_name(cfg)


def build_task(cfg: DictConfig) -> Task:
    """The task object `cfg.task._target_` names; a clear error if it is not a `core.interfaces.Task`."""
    task = instantiate(cfg.task, _recursive_=False)
    if not isinstance(task, Task):
        missing = sorted(m for m in get_protocol_members(Task) if not hasattr(task, m))
        raise TypeError(f"task._target_={cfg.task._target_} built a {type(task).__name__}, which is not a "
                        f"core.interfaces.Task: it lacks {missing}; give the class those members")
    return task


class RunDirError(RuntimeError):
    """A record of a run directory that cannot be read; the message names the file and the fix."""


def read_record(path: Path, default: dict) -> dict:
    """A run's JSON record (`default` when absent); a damaged one stops the run, naming the file, instead of being
    overwritten."""
    try:
        return read_json(path, default=default)
    except (ValueError, OSError) as err:
        raise RunDirError(f"{path} cannot be read ({type(err).__name__}: {err}); the run stops rather than overwrite "
                          "it. Fix: restore the file from a copy of the run, or move it aside to start the record over") from None


def update_results(run_dir: Path, new: dict) -> dict:
    """Merge `new` into `run_dir/results.json` (top-level keys replaced) and return the merged results."""
    path = run_dir / "results.json"
    results = read_record(path, default={})
    results.update(new)
    write_json(path, results)
    return results


def phase_steps(cfg: DictConfig, phase: DictConfig, num_samples: int) -> int:
    """trainer.max_steps (a command-line override) wins, then the phase's max_steps, then its epochs."""
    if cfg.trainer.get("max_steps"):
        return int(cfg.trainer.max_steps)
    if phase.get("max_steps"):
        return int(phase.max_steps)
    return max(1, math.ceil(phase.get("epochs", 1) * num_samples / phase.global_batch_size))


def micro_batch(cfg: DictConfig, phase: DictConfig, world_size: int) -> tuple[int, int]:
    """(micro batch size, gradient accumulation) that make up the phase's global batch."""
    micro = cfg.trainer.get("micro_batch_size") or max(1, phase.global_batch_size // world_size)
    micro = min(micro, phase.global_batch_size)
    accumulate, rest = divmod(phase.global_batch_size, micro * world_size)
    if rest or accumulate < 1:
        raise ValueError(
            f"global batch {phase.global_batch_size} is not a multiple of micro batch {micro} x {world_size} devices; "
            "set trainer.micro_batch_size to a divisor"
        )
    return micro, accumulate


class RecipeError(ValueError):
    """A recipe that does not fit the components it was given; the message says what to choose instead."""


def print_recipe(cfg: DictConfig) -> None:
    """What the run resolved to, before anything loads: the recipe's phases and the data."""
    phases = ", ".join(f"{p.name} (trains {'+'.join(p.trainable)}, lr {p.optim.lr:g}, batch {p.global_batch_size}, "
                       f"{p.get('max_steps') or str(p.get('epochs', 1)) + ' epoch(s)'})" for p in cfg.stage.phases.values())
    data = cfg.get("data")
    console.print(f"[bold]recipe[/] {cfg.stage.name}: {phases}" + (f"; [bold]data[/] {data.name}" if data else ""))


def refuse_oversized_parts(model: torch.nn.Module, stage: DictConfig) -> None:
    """A phase may cap the size of each part it trains (`max_part_params`: the demo recipe is meant for the tiny
    flavours); a larger part stops the run before training, unless `stage.allow_large=true`."""
    if stage.get("allow_large"):
        return
    for phase in stage.phases.values():
        cap = phase.get("max_part_params")
        for part in phase.trainable if cap else ():
            size = sum(p.numel() for p in getattr(model, part).parameters())
            if size > cap:
                raise RecipeError(
                    f"stage={stage.name} trains the {part} ({size / 1e6:.0f}M parameters) at lr {phase.optim.lr:g} in phase "
                    f"{phase.name}: it is the CPU demo's recipe, meant for the tiny flavours (at most {cap / 1e6:.0f}M "
                    "parameters per part), which a tiny encoder or backbone in the command selects. Use real components "
                    "for both, or name a paper recipe (stage=single_stage, experiment=llava_v15_7b: docs/recipes.md); "
                    "to run it anyway, add stage.allow_large=true")


def convert_fp8(model: torch.nn.Module, trainer_cfg: DictConfig, report: bool) -> None:
    """With `trainer.fp8`, torchao float8 linear layers (core/fp8.py); nothing otherwise."""
    if trainer_cfg.get("fp8", False):
        from core.fp8 import apply_fp8

        converted = apply_fp8(model, int(trainer_cfg.get("fp8_min_features", 1024)))
        if report:
            console.print(f"fp8: {len(converted)} linear layers converted")


def train(cfg: DictConfig) -> dict:
    """Train every phase of the recipe (resuming where a previous run of the same command stopped), holding the
    run's lock on rank 0 (the ranks of one run are one writer)."""
    task = build_task(cfg)
    run_dir = run_dir_of(cfg)
    if rank_zero_only.rank != 0:
        return _train(cfg, task, run_dir)
    with run_lock(run_dir, wait=float(cfg.run.get("lock_wait") or 0), key="run.lock_wait"):
        return _train(cfg, task, run_dir)


def _train(cfg: DictConfig, task: Task, run_dir: Path) -> dict:
    if cfg.trainer.get("threads"):
        torch.set_num_threads(int(cfg.trainer.threads))
    name = run_dir.name
    main = rank_zero_only.rank == 0  # with several processes only rank 0 writes the run's files
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    progress_path = run_dir / "progress.json"
    progress = read_record(progress_path, default={"completed": {}})
    previous_train = read_record(run_dir / "results.json", default={}).get("train", {}) if main else {}
    if main:
        with atomic_file(run_dir / "config.yaml") as tmp:
            tmp.write_text(OmegaConf.to_yaml(cfg, resolve=True))
        remove_stray_tmp(run_dir / "checkpoints")
    last_ckpt = run_dir / "checkpoints" / "last.ckpt"
    weights = run_dir / "model.safetensors"
    check_inputs(task, cfg, run_dir, fresh=not progress["completed"] and not last_ckpt.exists(), main=main)

    if main:
        print_recipe(cfg)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    model = task.build_model(cfg, run_dir)
    refuse_oversized_parts(model, cfg.stage)
    convert_fp8(model, cfg.trainer, report=main)
    if cfg.get("init_from") and not progress["completed"] and not last_ckpt.exists():
        # start from another run's weights, or from a checkpoint the task itself recognises (VLM: an HF Llava folder)
        if not task.init_from(model, Path(cfg.init_from)):
            load_weights(model, Path(cfg.init_from) / "model.safetensors")
    results: dict = {"run_dir": str(run_dir)}
    step_offset = 0
    loggers: list = []
    for index, phase in enumerate(cfg.stage.phases.values()):
        if phase.name in progress["completed"]:
            step_offset += progress["completed"][phase.name]
            continue
        ckpt = resume_checkpoint(run_dir / "checkpoints")
        ckpt_info = peek(ckpt) if ckpt is not None else {}
        resume = ckpt_info.get("phase") == phase.name
        if fsdp_wrapped(model):  # FSDP wrapped the previous phase's model in place: this phase wraps a fresh one
            model = task.build_model(cfg, run_dir)
            convert_fp8(model, cfg.trainer, report=False)
        if not resume and weights.exists():
            load_weights(model, weights)  # the previous phase's final weights
        elif not resume and progress["completed"]:  # never start a later phase from fresh weights
            raise RunDirError(f"{progress_path} records finished phases {list(progress['completed'])}, but {weights}, the "
                              f"weights phase {phase.name} starts from, is missing. Fix: restore it from a copy of the run, "
                              f"or delete {run_dir} to train the run again")
        world = world_size(cfg.trainer)
        micro, accumulate = micro_batch(cfg, phase, world)
        datamodule = task.build_datamodule(cfg, phase, model, run_dir, micro_batch_size=micro, seed=cfg.seed + index)
        datamodule.setup("fit")
        steps = phase_steps(cfg, phase, datamodule.num_samples)
        module = task.build_module(cfg, phase, model, total_steps=steps)
        sifting = SiftingSettings.from_config(cfg.get("sifting"))
        if sifting.enabled:  # the module draws and sifts its micro-batches; the loop only counts them
            module.sifter, datamodule.sifting = Sifter(sifting, datamodule, seed=cfg.seed + index), True
        resume_step = ckpt_info["global_step"] if resume else 0
        loggers = build_loggers(cfg, run_dir, step_offset, resume_step, name,
                                last_row=ckpt_info.get("last_step_metrics") if resume else None)
        trainer = build_trainer(cfg, phase, run_dir, steps, accumulate, loggers, step_offset=step_offset)
        if main:
            console.print(f"[bold]phase {phase.name}[/]: {steps} steps, global batch {phase.global_batch_size} "
                          f"({micro} x {accumulate} accumulation), trainable {list(phase.trainable)}"
                          + (f", resuming at step {resume_step}" if resume else ""))
        trainer.fit(module, datamodule=datamodule, ckpt_path=str(ckpt) if resume else None, weights_only=True)
        stale = trainer.global_rank == 0 and not _is_current(last_ckpt, trainer.global_step, phase.name)
        if trainer.strategy.broadcast(stale, src=0):
            trainer.save_checkpoint(last_ckpt, weights_only=False)  # every rank takes part in a save
        save_weights(trainer.strategy, model, weights)  # rank 0 writes; under FSDP every rank gathers
        figures = {f"{phase.name}/train_loss": float(trainer.callback_metrics.get("train/loss", float("nan")))}
        figures.update({f"{phase.name}/{k}": v for k, v in datamodule.report().items()})
        if module.sifter is not None:
            figures.update({f"{phase.name}/{k}": v for k, v in module.sifting_totals().items()})
        for monitor in (c for c in trainer.callbacks if isinstance(c, ThroughputMonitor) and c.total_flops is not None):
            figures[f"{phase.name}/train_flops"] = monitor.total_flops  # the core's counter, all ranks
        if trainer.global_rank == 0:
            record_file(run_dir, weights)
            record_config(run_dir, cfg)
            progress["completed"][phase.name] = steps
            progress.setdefault("figures", {})[phase.name] = figures  # a later rerun keeps them
            write_json(progress_path, progress)
        trainer.strategy.barrier("phase-end")  # the next phase reads what rank 0 wrote
        step_offset += steps
        results.update(figures)
        for logger in loggers:
            logger.finalize("success")
    if main:
        # phases finished by an earlier process keep their figures (results.json, else progress.json)
        earlier = {k: v for figures in progress.get("figures", {}).values() for k, v in figures.items()}
        results = {"run_dir": results["run_dir"], **previous_train, **earlier,
                   **{k: v for k, v in results.items() if k != "run_dir"}}
        train_figures = {k: v for k, v in results.items() if k != "run_dir"}
        update_results(run_dir, {"train": train_figures, **sifting_totals(train_figures)})
        log_artifacts(loggers, [run_dir / "config.yaml", run_dir / "results.json"])
        print_report(results, title=f"run {name}")
        from core.after_training import evaluate_after_training  # cfg.eval.benchmarks (conf/train.yaml)
        evaluate_after_training(cfg, run_dir)
    return results


def sifting_totals(train_figures: dict) -> dict:
    """The run's `sift/forwarded` and `sift/backpropagated` samples over its phases (none when no phase sifted)."""
    totals = {}
    for key in ("sift/forwarded", "sift/backpropagated"):
        values = [v for k, v in train_figures.items() if k.endswith("/" + key)]
        if values:
            totals[key] = int(sum(values))
    return totals


def _is_current(ckpt: Path, step: int, phase: str) -> bool:
    """Whether `ckpt` is readable and was saved at `step` of `phase` (then the end of the phase needs no new save)."""
    try:
        info = peek(ckpt)
    except Exception:  # missing or unreadable
        return False
    return info["global_step"] == step and info["phase"] == phase


def evaluate(cfg: DictConfig) -> dict | None:
    """Run `cfg.benchmark` (a Hydra `_target_` callable: (run_dir, cfg) -> metrics) on a trained run (`run=DIR`) or
    on a published checkpoint without training (`init_from=DIR`: its run directory is made by core/imported.py).

    `devices=N` (or a torchrun / srun launch) evaluates in N processes (core/launch.py): every rank calls the
    benchmark, which shares the items out (a benchmark with `shardable = True`); rank 0 gets the metrics, writes
    results.json and returns them, the other ranks return None."""
    from core.imported import UsageError, imported_run_dir
    from core.launch import rank_world

    if cfg.get("run") and cfg.get("init_from"):
        raise UsageError(f"run={cfg.run} and init_from={cfg.init_from} are exclusive: run= evaluates a trained run, "
                         "init_from= an HF Llava folder without training; pass one of them")
    first = rank_world()[0] == 0
    if cfg.get("init_from"):
        run_dir = imported_run_dir(cfg)
        if first:
            console.print(f"evaluating {cfg.init_from} without training; predictions and results in [bold]{run_dir}[/]")
    elif not cfg.get("run"):
        raise UsageError("nothing to evaluate: pass run=RUN_DIR (a trained run) or init_from=HF_LLAVA_DIR (a published checkpoint)")
    else:
        run_dir = Path(cfg.run)
    if not (run_dir / "config.yaml").exists():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.yaml); pass run=runs/NAME")
    if first:  # the ranks of one evaluation are one writer; the training that evaluates its run holds the lock already
        with run_lock(run_dir, wait=float(cfg.get("lock_wait") or 0), key="lock_wait"):
            return _evaluate(cfg, run_dir)
    return _evaluate(cfg, run_dir)


def _evaluate(cfg: DictConfig, run_dir: Path) -> dict | None:
    from core.imported import UsageError
    from core.launch import processes

    benchmark = instantiate(cfg.benchmark, _recursive_=False)
    devices = int(cfg.get("devices") or 1)
    if devices < 1:
        raise UsageError(f"devices={devices}: pass the number of evaluation processes (1 or more)")
    if devices > 1 and not getattr(benchmark, "shardable", False):
        raise UsageError(f"benchmark {cfg.benchmark.name} runs in one process; drop devices={devices}")
    with processes(devices, evaluate, cfg) as (rank, _):
        metrics = benchmark(run_dir, cfg)
    if rank != 0:
        return None
    previous = read_record(run_dir / "results.json", default={})
    # top level: the latest evaluation's metrics (flat); `benchmarks`: every benchmark evaluated so far
    update_results(run_dir, {**metrics, "benchmark": cfg.benchmark.name,
                             "benchmarks": {**previous.get("benchmarks", {}), cfg.benchmark.name: metrics}})
    print_report(metrics, title=f"{cfg.benchmark.name} on {run_dir}")
    return metrics


def print_report(metrics: dict, title: str) -> None:
    """The flat metrics as a two-column table on the console."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in metrics.items():
        if not isinstance(v, dict):  # nested tables (e.g. per-task rates) are printed by their benchmark
            table.add_row(k, f"{v:.2f}" if isinstance(v, float) else str(v))
    console.print(table)
