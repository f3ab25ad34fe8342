"""Benchmark scorers: `score_<benchmark>(predictions, annotations, questions=None, split=None) -> metrics`.

Each scorer reads the benchmark's own published files, returns a dict of metrics (accuracies in
percent, plus `n`, `missing` and `empty` counts) and raises `ScoringError` on malformed input. A
benchmark config names its scorer with a Hydra `_target_` (`conf/benchmark/<name>.yaml`, key
`scorer`); `build_scorer` turns that node into the callable the runners and `python -m eval.score`
use, with the one guarantee every scorer shares: a record missing a field or holding the wrong type
is a `ScoringError`, never a bare `KeyError`. See docs/evaluation.md.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from hydra.utils import instantiate

from .common import Scorer, ScoringError


def malformed_records_are_scoring_errors(score: Scorer) -> Scorer:
    """`score` with a record missing a field (KeyError) or holding the wrong type turned into a
    ScoringError naming the files."""

    @functools.wraps(score)
    def checked(predictions, annotations, questions=None, split=None):
        try:
            return score(predictions, annotations, questions=questions, split=split)
        except (KeyError, TypeError, AttributeError, IndexError) as err:
            raise ScoringError(
                f"{annotations} (with {predictions}): a record lacks a field or has the wrong type "
                f"({type(err).__name__}: {err}). Fix: pass the benchmark's official, unmodified files."
            ) from err

    return checked


def build_scorer(node: Mapping | Callable[..., Any], benchmark: str) -> Scorer:
    """The scorer a benchmark config's `scorer` node names (`{_target_: eval.scorers.x.score_x,
    _partial_: true}`, or the callable Hydra already built from it), checked for malformed records."""
    if node is None:
        raise ValueError(f"benchmark {benchmark}: no `scorer` in its config. Fix: add "
                         "`scorer: {_target_: eval.scorers.<module>.score_<name>, _partial_: true}` to "
                         f"conf/benchmark/{benchmark}.yaml")
    score = node if callable(node) else instantiate(node)
    if not callable(score):
        raise TypeError(f"benchmark {benchmark}: its `scorer` {node} does not build a callable. Fix: set "
                         "`_partial_: true` next to the scorer's `_target_`")
    return malformed_records_are_scoring_errors(score)


__all__ = ["Scorer", "ScoringError", "build_scorer", "malformed_records_are_scoring_errors"]
