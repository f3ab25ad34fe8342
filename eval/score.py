"""Score a predictions file against a benchmark's official files and print the metrics as one JSON object.

    python -m eval.score BENCHMARK --predictions P --annotations A [--questions Q] [--split S]

BENCHMARK is a config name in conf/benchmark/ (e.g. `refcoco_plus`) or the `name` it sets (`refcoco+`);
its scorer is the one that config names (composed with Hydra, as `evaluate.py` does). Exit status 0 on
success, 2 with a one-line message on malformed input (ScoringError) or an unknown benchmark (the
message lists the choices).
"""
from __future__ import annotations

import argparse
import json
import sys

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from core.conf import CONF_DIR as CONF
from eval.scorers import Scorer, ScoringError, build_scorer



def compose_benchmarks(names: list[str]) -> dict[str, DictConfig]:
    """`{config name: composed benchmark node}` for those of `names` that name a scorer."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        nodes = {n: compose(config_name="eval", overrides=[f"benchmark={n}", "run=unused"]).benchmark for n in names}
    return {n: node for n, node in nodes.items() if "scorer" in node}


def scored_benchmarks() -> dict[str, DictConfig]:
    """Every conf/benchmark/*.yaml that names a scorer, composed (about a second: used to list the choices)."""
    return compose_benchmarks(sorted(p.stem for p in (CONF / "benchmark").glob("*.yaml")))


def scorer_of(name: str) -> Scorer | None:
    """The scorer of the benchmark config called NAME, else of the one whose `name` is NAME (`refcoco+`);
    None if there is none."""
    files = sorted((CONF / "benchmark").glob("*.yaml"))
    config = name if name in {p.stem for p in files} else next(
        (p.stem for p in files if OmegaConf.load(p).get("name") == name), None)
    node = None if config is None else compose_benchmarks([config]).get(config)
    return None if node is None else build_scorer(node.scorer, name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.score", description=__doc__.splitlines()[0])
    parser.add_argument("benchmark", help="a config name in conf/benchmark/, e.g. vqav2")
    parser.add_argument("--predictions", required=True, help="model predictions (JSON list, or .jsonl)")
    parser.add_argument("--annotations", required=True, help="the benchmark's official annotation file/folder")
    parser.add_argument("--questions", default=None, help="optional companion file (questions / split list / instances)")
    parser.add_argument("--split", default=None, help="split to score, for benchmarks with several in one file")
    args = parser.parse_args(argv)
    score = scorer_of(args.benchmark)
    if score is None:
        print(f"error: unknown benchmark {args.benchmark!r}; choose from: {', '.join(scored_benchmarks())}",
              file=sys.stderr)
        return 2
    try:
        metrics = score(args.predictions, args.annotations, questions=args.questions, split=args.split)
    except ScoringError as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    print(json.dumps(metrics, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
