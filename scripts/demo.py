"""The embedded demo (`make demo`): train the default tiny VLM on generated Sort-of-CLEVR, evaluate it.

Equivalent to typing
    python train.py                                  # generates the data on first use
    python evaluate.py run=runs/<name> benchmark=sort_of_clevr
and prints the held-out accuracies and the run directory. Running it again
resumes (or reuses) the same run. Extra arguments are passed to train.py as
overrides, e.g. `python scripts/demo.py trainer.max_steps=100`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.run import evaluate, run_dir_of, train  # noqa: E402


def main(overrides: list[str]) -> None:
    start = time.time()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
        run_dir = run_dir_of(cfg)
        print(f"$ python train.py {' '.join(overrides)}".rstrip())
        train(cfg)
        trained = time.time()
        print(f"$ python evaluate.py run={run_dir} benchmark=sort_of_clevr")
        metrics = evaluate(compose(config_name="eval", overrides=[f"run={run_dir}"]))
    print(
        f"\nSort-of-CLEVR held-out accuracy: non-relational {metrics['accuracy_non_relational']:.1f}%, "
        f"relational {metrics['accuracy_relational']:.1f}%, overall {metrics['accuracy']:.1f}% "
        f"({metrics['n']} questions)\nrun directory: {run_dir}\n"
        f"time: training {trained - start:.0f} s, evaluation {time.time() - trained:.0f} s"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
