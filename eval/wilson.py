"""95% (or any level) Wilson score intervals of a success proportion, in percent.

The Wilson interval of k successes in n trials is scipy's
`binomtest(k, n).proportion_ci(method="wilson")`: unlike the normal ("Wald") interval it stays inside
[0, 100] and is not degenerate at k = 0 or k = n, which is where rollout success rates often sit.
Used by the behavior rollouts (`behavior/rollout.py`: per task and pooled over tasks) and
`scripts/report.py`; docs/behavior.md ("How many episodes?") gives its half-width for common episode counts.
"""

from __future__ import annotations

from scipy.stats import binomtest


def wilson_interval(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """(low, high) in percent: the Wilson score interval of `successes` out of `trials` at confidence `level`."""
    k, n = int(successes), int(trials)
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"Wilson interval of {successes} successes in {trials} trials: need 0 <= k <= n and n >= 1")
    if not 0 < level < 1:
        raise ValueError(f"confidence level {level} must be in (0, 1)")
    ci = binomtest(k, n).proportion_ci(confidence_level=level, method="wilson")
    return 100.0 * float(ci.low), 100.0 * float(ci.high)


def wilson_half_width(successes: int, trials: int, level: float = 0.95) -> float:
    """Half the width of the Wilson interval, in percentage points."""
    low, high = wilson_interval(successes, trials, level)
    return (high - low) / 2.0
