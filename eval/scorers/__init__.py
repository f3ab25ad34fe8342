"""Benchmark scorers: ``SCORERS[name](predictions, annotations, questions=None, split=None) -> metrics``.

Each scorer reads the benchmark's own published files, returns a dict of metrics (accuracies in
percent, plus ``n``, ``missing`` and ``empty`` counts) and raises :class:`ScoringError` on malformed
input. See ``docs/evaluation.md``.
"""
from __future__ import annotations

import functools

from .common import ScoringError
from .gqa import score_gqa
from .multiple_choice import score_ai2d, score_scienceqa
from .pope import score_pope
from .refcoco import score_refcoco
from .sort_of_clevr import score_sort_of_clevr
from .tallyqa import score_tallyqa
from .vqa import score_textvqa, score_vizwiz, score_vqav2
from .vsr import score_vsr

def _malformed_records_are_scoring_errors(score):
    """A record missing a field (KeyError) or holding the wrong type becomes a ScoringError naming the files."""

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


SCORERS = {
    "vqav2": score_vqav2,
    "textvqa": score_textvqa,
    "vizwiz": score_vizwiz,
    "gqa": score_gqa,
    "pope": score_pope,
    "ai2d": score_ai2d,
    "scienceqa": score_scienceqa,
    "tallyqa": score_tallyqa,
    "vsr": score_vsr,
    "refcoco": score_refcoco,
    "refcoco+": score_refcoco,
    "refcocog": score_refcoco,
    "sort_of_clevr": score_sort_of_clevr,
}
SCORERS = {name: _malformed_records_are_scoring_errors(fn) for name, fn in SCORERS.items()}

__all__ = ["SCORERS", "ScoringError"]
