"""The behavior demo (`make demo-behavior`): Meta-World MT10 demonstrations → token policy → rollouts.

Equivalent to typing
    python train.py task=behavior                      # collects 50 expert demos per task on first use
    python evaluate.py benchmark=rollouts run=runs/<name> benchmark.episodes_per_task=20
and prints the success rates and the run directory. Running it again resumes
(or reuses) the same run. Extra arguments are passed to train.py as overrides,
e.g. `python scripts/demo_behavior.py policy=mlp_bc`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.run import evaluate, run_dir_of, train


def main(overrides: list[str]) -> None:
    start = time.time()
    overrides = ["task=behavior", *overrides]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
        run_dir = run_dir_of(cfg)
        print(f"$ python train.py {' '.join(overrides)}")
        train(cfg)
        trained = time.time()
        evaluation = ["benchmark=rollouts", f"run={run_dir}", "benchmark.episodes_per_task=20"]
        print(f"$ python evaluate.py {' '.join(evaluation)}")
        metrics = evaluate(compose(config_name="eval", overrides=evaluation))
    print(
        f"\nMeta-World {cfg.env.name}: mean success {metrics['success_rate']:.1f}% over {metrics['episodes']} held-out "
        f"episodes (mean length {metrics['mean_episode_length']:.0f} steps)\nrun directory: {run_dir}\n"
        f"time: data + training {trained - start:.0f} s, rollouts {time.time() - trained:.0f} s"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
