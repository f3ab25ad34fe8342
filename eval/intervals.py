"""Per-item scores of an evaluated run, and two-level bootstrap intervals of a benchmark's main metric.

Per-item scores come from the benchmark's own scorer: each scorer module the study uses has, next to
`score_<name>`, a `score_<name>_items` function that `score_<name>` itself calls and that also returns every
item's score by id (in [0, 1]; POPE: the item's mapped yes/no answer, label and split, from which F1 is
recomputed). `benchmark_item_scores` finds that function from the benchmark config's `scorer._target_` and
runs it on the predictions a run's evaluation wrote (`RUN_DIR/predictions/<name>.json`), so the items are
scored exactly as the reported metric was.

Intervals (`bootstrap_interval`, `paired_difference`): a replicate draws the seeds with replacement, then,
within each drawn seed, its items with replacement (stratified by POPE split, so every split stays present),
computes the metric for each drawn seed and averages over the drawn seeds; the interval is the percentile
interval of the replicates. The point estimate is the metric averaged over the seeds (the mean of the
reported numbers). The paired difference of two cells draws the same seeds and the same items for both.
Values are in percent.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from hydra.utils import get_method, instantiate

from eval.scorers import malformed_records_are_scoring_errors

POPE_METRICS = ("accuracy", "precision", "recall", "f1", "yes_ratio")


def items_function(benchmark_cfg: Mapping) -> Any:
    """The `score_<name>_items` function next to the benchmark config's scorer (`scorer._target_` + `_items`)."""
    target = str((benchmark_cfg.get("scorer") or {}).get("_target_") or "")
    try:
        return malformed_records_are_scoring_errors(get_method(f"{target}_items"))
    except Exception as err:
        raise ValueError(f"benchmark {benchmark_cfg.get('name')}: its scorer {target or '(none)'} has no per-item "
                         f"function {target}_items; add one that {target.rsplit('.', 1)[-1]} itself uses "
                         "(eval/scorers/vqa.py shows how)") from err


def benchmark_item_scores(benchmark_cfg: Mapping, run_dir: Path, limit: int | None = None) -> tuple[dict, dict]:
    """(metrics, per-item scores) of the benchmark on the evaluated run in `run_dir`, from the predictions its
    evaluation wrote and the scoring files its runner names (the subset file when the run used `limit`)."""
    run_dir = Path(run_dir)
    runner = instantiate(benchmark_cfg, _recursive_=False)
    predictions = run_dir / "predictions" / f"{runner.name}.json"
    if not predictions.is_file():
        raise FileNotFoundError(f"{predictions} not found: evaluate the run on {runner.name} first "
                                f"(python evaluate.py run={run_dir} benchmark={runner.name})")
    files = runner.scoring_files(run_dir)
    if limit and int(limit) < len(runner.items(run_dir)):
        files[runner.subset_of] = run_dir / "predictions" / f"{runner.name}.{runner.subset_name}"
    questions = files.get("questions")
    return items_function(benchmark_cfg)(str(predictions), str(files["annotations"]),
                                         questions=None if questions is None else str(questions),
                                         split=files.get("split"))


# ----------------------------------------------------------------------------------------- bootstrap
def _table(per_seed: list[Mapping[str, Any]], ids: list[str]) -> dict[str, np.ndarray]:
    """Arrays (seeds x items) of the items `ids` of every seed: `score`, or POPE's `pred`/`label`/`group`."""
    first = per_seed[0][ids[0]]
    if isinstance(first, Mapping):  # POPE outcomes
        splits = sorted({str(per_seed[0][i]["split"]) for i in ids})
        return {"pred": np.array([[s[i]["pred"] == "yes" for i in ids] for s in per_seed]),
                "label": np.array([[s[i]["label"] == "yes" for i in ids] for s in per_seed]),
                "group": np.array([splits.index(str(per_seed[0][i]["split"])) for i in ids])}
    return {"score": np.array([[float(s[i]) for i in ids] for s in per_seed]), "group": np.zeros(len(ids), dtype=int)}


def _metric(table: dict[str, np.ndarray], seeds: np.ndarray, items: np.ndarray, metric: str) -> np.ndarray:
    """The metric (percent) of each drawn seed's drawn items: `seeds` (..., S) and `items` (..., S, N) -> (..., S)."""
    if "score" in table:
        return 100.0 * table["score"][seeds[..., None], items].mean(-1)
    if metric not in POPE_METRICS:
        raise ValueError(f"POPE metric {metric!r}: choose one of {list(POPE_METRICS)}")
    pred, label = table["pred"][seeds[..., None], items], table["label"][seeds[..., None], items]
    group = table["group"][items]
    values = []
    for g in range(int(table["group"].max()) + 1):  # per split, then the mean over splits (as the scorer does)
        m = group == g
        tp, fp = (pred & label & m).sum(-1), (pred & ~label & m).sum(-1)
        fn, tn = (~pred & label & m).sum(-1), (~pred & ~label & m).sum(-1)
        n = np.maximum(m.sum(-1), 1)
        ratio = lambda a, b: np.divide(a, b, out=np.zeros(np.broadcast(a, b).shape), where=b > 0)
        values.append({"accuracy": (tp + tn) / n, "precision": ratio(tp, tp + fp), "recall": ratio(tp, tp + fn),
                       "f1": ratio(2 * tp, 2 * tp + fp + fn), "yes_ratio": (tp + fp) / n}[metric])
    return 100.0 * np.mean(values, axis=0)


def _draws(rng: np.random.Generator, n: int, seeds: int, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`n` replicates: seeds drawn with replacement (n, S) and each drawn seed's items, stratified by group (n, S, N)."""
    seed_draw = rng.integers(0, seeds, size=(n, seeds))
    parts = []
    for g in np.unique(group):
        members = np.flatnonzero(group == g)
        parts.append(members[rng.integers(0, len(members), size=(n, seeds, len(members)))])
    return seed_draw, np.concatenate(parts, axis=-1)


def _common_ids(*per_seeds: list[Mapping[str, Any]]) -> list[str]:
    """The item ids every seed scores; a clear error unless every seed (and cell) scores the same items."""
    sets = [set(s) for ps in per_seeds for s in ps]
    ids = sorted(set.union(*sets))
    differ = [k for k, s in enumerate(sets) if len(s) != len(ids)]
    if differ or not ids:
        raise ValueError(f"seed #{differ[0] if differ else 0} scores {len(sets[differ[0]]) if differ else 0} of the "
                         f"{len(ids)} items: every seed must be evaluated on the same benchmark items (same world, "
                         "same eval.limit)")
    return ids


def _interval(stat, tables: list[dict], replicates: int, level: float, seed: int, chunk: int = 200):
    """(point, low, high) of `stat(tables, seed_draw, item_draw)` over two-level bootstrap replicates."""
    if replicates < 1 or not 0 < level < 1:
        raise ValueError(f"replicates={replicates}, level={level}: need replicates >= 1 and 0 < level < 1")
    n_seeds, n_items = tables[0]["score" if "score" in tables[0] else "pred"].shape
    identity = np.arange(n_seeds), np.broadcast_to(np.arange(n_items), (n_seeds, n_items))
    point = float(stat(tables, *identity))
    rng, values = np.random.default_rng(seed), []
    for start in range(0, replicates, chunk):
        seed_draw, item_draw = _draws(rng, min(chunk, replicates - start), n_seeds, tables[0]["group"])
        values.append(stat(tables, seed_draw, item_draw))
    low, high = np.percentile(np.concatenate(values), [50 * (1 - level), 50 * (1 + level)])
    return point, float(low), float(high)


def bootstrap_interval(per_seed: list[Mapping[str, Any]], metric: str = "accuracy", replicates: int = 2000,
                       level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(mean over seeds, low, high) of a benchmark's `metric` (percent) from each seed's per-item scores."""
    if not per_seed:
        raise ValueError("no seeds to bootstrap")
    table = _table(list(per_seed), _common_ids(per_seed))
    return _interval(lambda t, s, i: _metric(t[0], s, i, metric).mean(-1), [table], replicates, level, seed)


def paired_difference(cell: list[Mapping[str, Any]], base: list[Mapping[str, Any]], metric: str = "accuracy",
                      replicates: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(cell - base, low, high): the difference of the seed-averaged metric, the same seeds (paired by position:
    pass both lists in the same seed order) and the same items drawn for both cells in every replicate."""
    if len(cell) != len(base) or not cell:
        raise ValueError(f"paired difference needs the same seeds for both cells (got {len(cell)} and {len(base)})")
    ids = _common_ids(cell, base)
    tables = [_table(list(cell), ids), _table(list(base), ids)]
    if "group" in tables[0] and not np.array_equal(tables[0]["group"], tables[1]["group"]):
        raise ValueError("the two cells' POPE items fall in different splits: not the same benchmark items")
    return _interval(lambda t, s, i: (_metric(t[0], s, i, metric) - _metric(t[1], s, i, metric)).mean(-1),
                     tables, replicates, level, seed)
