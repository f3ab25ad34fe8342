"""Evaluate a trained run: `python evaluate.py run=RUN_DIR benchmark=NAME [limit=N]`.

Behavior runs: `python evaluate.py task=behavior run=RUN_DIR episodes_per_task=N` rolls the policy out.

Writes the metrics into `RUN_DIR/results.json` and prints them as a table.
"""

import sys

import hydra
from omegaconf import DictConfig

import vlm.tiny  # noqa: F401  (registers the ${tiny:NAME} config resolver)
from data.errors import DataError
from eval.scorers import ScoringError
from vlm.hub import ComponentLoadError
from core.cli import exit_on_user_error
from core.run import evaluate


@hydra.main(config_path="conf", config_name="eval", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    with exit_on_user_error(ComponentLoadError, DataError, FileNotFoundError, ScoringError):
        return evaluate(cfg)


def task_arguments(args: list[str]) -> list[str]:
    """`task=NAME` picks the default benchmark of a task (the run's own config says what it is):
    `task=behavior` means rollouts in the run's simulator unless a benchmark is named."""
    tasks = [a.split("=", 1)[1] for a in args if a.startswith("task=")]
    rest = [a for a in args if not a.startswith("task=")]
    if "behavior" in tasks and not any(a.startswith("benchmark=") for a in rest):
        rest.append("benchmark=rollouts")
    return rest


if __name__ == "__main__":
    sys.argv[1:] = task_arguments(sys.argv[1:])
    main()
