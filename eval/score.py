"""Score a predictions file against a benchmark's official files and print the metrics as one JSON object.

    python -m eval.score BENCHMARK --predictions P --annotations A [--questions Q] [--split S]

Exit status 0 on success, 2 with a one-line message on malformed input (ScoringError) or an unknown
benchmark (the message lists the choices).
"""
from __future__ import annotations

import argparse
import json
import sys

from eval.scorers import SCORERS, ScoringError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.score", description=__doc__.splitlines()[0])
    parser.add_argument("benchmark", help=f"one of: {', '.join(SCORERS)}")
    parser.add_argument("--predictions", required=True, help="model predictions (JSON list, or .jsonl)")
    parser.add_argument("--annotations", required=True, help="the benchmark's official annotation file/folder")
    parser.add_argument("--questions", default=None, help="optional companion file (questions / split list / instances)")
    parser.add_argument("--split", default=None, help="split to score, for benchmarks with several in one file")
    args = parser.parse_args(argv)
    if args.benchmark not in SCORERS:
        print(f"error: unknown benchmark {args.benchmark!r}; choose from: {', '.join(SCORERS)}", file=sys.stderr)
        return 2
    try:
        metrics = SCORERS[args.benchmark](args.predictions, args.annotations, questions=args.questions, split=args.split)
    except ScoringError as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    print(json.dumps(metrics, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
