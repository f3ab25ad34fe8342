"""Evaluation of trained runs: benchmark runners (`eval.runners`), scorers on the benchmarks' official
files (`eval.scorers`) and the scoring command `python -m eval.score` (see docs/evaluation.md)."""
