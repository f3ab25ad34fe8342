"""Evaluate a trained run: `python evaluate.py run=RUN_DIR benchmark=NAME [limit=N]`.

A published checkpoint without training: `python evaluate.py init_from=HF_LLAVA_DIR benchmark=NAME benchmark.root=PATH`
(an HF Llava folder such as llava-hf/llava-1.5-7b-hf; its run directory, runs/imported-<folder>-<hash>/, is printed).

Behavior runs: `python evaluate.py task=behavior run=RUN_DIR benchmark.episodes_per_task=N` rolls the policy out
(the `task` choice selects the task's default benchmark, conf/task_eval/; `benchmark=NAME` overrides it).

Several processes: `python evaluate.py run=RUN_DIR benchmark=NAME devices=N` (or under torchrun) shares the questions out
between N processes (one GPU each, bf16 language model on a GPU) and scores them once, with the predictions and metrics
of one process (core/launch.py, docs/evaluation.md "Several processes").

Writes the metrics into `RUN_DIR/results.json` and prints them as a table.
"""

import hydra
from omegaconf import DictConfig

from data.errors import DataError
from eval.scorers import ScoringError
from vlm.hub import ComponentLoadError
from core.cli import exit_on_user_error
from core.imported import UsageError
from core.launch import ProcessFailed
from vlm.hf_llava import HFLlavaError
from core.run import RunDirError, evaluate
from core.run_lock import RunLockedError
from core.safe_load import UnsafeConfigError
from core.weights import WeightsError


@hydra.main(config_path="conf", config_name="eval", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    with exit_on_user_error(ComponentLoadError, DataError, FileNotFoundError, ScoringError, UsageError, HFLlavaError,
                            ProcessFailed, RunDirError, RunLockedError, UnsafeConfigError, WeightsError):
        return evaluate(cfg)


if __name__ == "__main__":
    main()
