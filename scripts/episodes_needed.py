"""How many rollout episodes a success-rate claim needs (docs/behavior.md, "How many episodes?").

    python scripts/episodes_needed.py [--base 90] [--power 0.8] [--alpha 0.05]

Two tables: (1) for a claimed difference of N points between two policies (base% vs base-N%), the episodes per
policy of a two-sided two-proportion z-test at level alpha to detect it with the given power (normal
approximation, pooled variance under the null:
n = (z_{1-a/2}·sqrt(2·pbar·(1-pbar)) + z_{power}·sqrt(p1(1-p1) + p2(1-p2)))² / (p1-p2)², rounded up);
(2) the half-width of the 95% Wilson interval (`eval.wilson`) at 20/50/100/500 episodes.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scipy.stats import norm  # noqa: E402

from eval.wilson import wilson_half_width  # noqa: E402


def episodes_per_policy(p1: float, p2: float, power: float = 0.8, alpha: float = 0.05) -> int:
    """Episodes per policy for a two-sided two-proportion z-test to detect p1 vs p2 (proportions in [0, 1])."""
    if p1 == p2:
        raise ValueError("p1 == p2: no difference to detect")
    za, zb = norm.ppf(1 - alpha / 2), norm.ppf(power)
    pbar = (p1 + p2) / 2
    n = (za * math.sqrt(2 * pbar * (1 - pbar)) + zb * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))) ** 2 / (p1 - p2) ** 2
    return math.ceil(n - 1e-9)


def tables(base: float = 90.0, power: float = 0.8, alpha: float = 0.05,
           differences=(2, 5, 10, 20), episodes=(20, 50, 100, 500), rates=(50, 90, 100)) -> str:
    lines = [f"| difference (points) | policies | episodes per policy ({power:.0%} power, alpha {alpha}) |", "|---:|---|---:|"]
    for d in differences:
        lines.append(f"| {d} | {base:g}% vs {base - d:g}% | {episodes_per_policy(base / 100, (base - d) / 100, power, alpha):,} |")
    lines += ["", "| episodes | " + " | ".join(f"half-width at {r}% success" for r in rates) + " |",
              "|---:|" + "---:|" * len(rates)]
    for n in episodes:
        lines.append(f"| {n} | " + " | ".join(f"±{wilson_half_width(round(n * r / 100), n):.1f}" for r in rates) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=float, default=90.0, help="success (percent) of the better policy")
    parser.add_argument("--power", type=float, default=0.8)
    parser.add_argument("--alpha", type=float, default=0.05)
    args = parser.parse_args(argv)
    print(tables(args.base, args.power, args.alpha), end="")


if __name__ == "__main__":
    main()
