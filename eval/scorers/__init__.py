"""Benchmark scorers: ``SCORERS[name](predictions, annotations, questions=None, split=None) -> metrics``.

Each scorer reads the benchmark's own published files, returns a dict of metrics (accuracies in
percent, plus ``n``, ``missing`` and ``empty`` counts) and raises :class:`ScoringError` on malformed
input. See ``docs/evaluation.md``.
"""
from __future__ import annotations

from .common import ScoringError
from .gqa import score_gqa
from .multiple_choice import score_ai2d, score_scienceqa
from .pope import score_pope
from .refcoco import score_refcoco
from .sort_of_clevr import score_sort_of_clevr
from .tallyqa import score_tallyqa
from .vqa import score_textvqa, score_vizwiz, score_vqav2
from .vsr import score_vsr

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

__all__ = ["SCORERS", "ScoringError"]
