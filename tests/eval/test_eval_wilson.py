"""`eval.wilson`: the Wilson score interval (scipy) against the closed form computed here independently."""
import math

import pytest

from eval.wilson import wilson_half_width, wilson_interval

Z = 1.959963984540054  # the 97.5% standard normal quantile


def closed_form(k: int, n: int, z: float = Z) -> tuple[float, float]:
    """(p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n), in percent."""
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return 100 * (centre - spread) / (1 + z * z / n), 100 * (centre + spread) / (1 + z * z / n)


@pytest.mark.parametrize("k,n", [(7, 10), (0, 10), (10, 10), (1, 1), (45, 50), (450, 500), (199, 200)])
def test_wilson_matches_the_closed_form(k, n):
    low, high = wilson_interval(k, n)
    want = closed_form(k, n)
    assert low == pytest.approx(want[0], abs=1e-9) and high == pytest.approx(want[1], abs=1e-9)
    assert 0.0 <= low <= 100 * k / n <= high <= 100.0


def test_wilson_hand_values_and_edges():
    low, high = wilson_interval(7, 10)
    assert (round(low, 2), round(high, 2)) == (39.68, 89.22)
    assert wilson_interval(0, 10)[0] == pytest.approx(0.0, abs=1e-12)   # k = 0: the interval starts at 0 ...
    assert wilson_interval(0, 10)[1] == pytest.approx(100 * Z * Z / (10 + Z * Z))  # ... and is not degenerate
    assert wilson_interval(10, 10)[1] == pytest.approx(100.0, abs=1e-12)
    assert wilson_interval(10, 10)[0] == pytest.approx(100 * 10 / (10 + Z * Z))
    assert wilson_half_width(7, 10) == pytest.approx((high - low) / 2)
    assert wilson_interval(7, 10, level=0.5)[1] - wilson_interval(7, 10, level=0.5)[0] < high - low


@pytest.mark.parametrize("k,n", [(0, 0), (3, 2), (-1, 5)])
def test_wilson_refuses_impossible_counts(k, n):
    with pytest.raises(ValueError, match="Wilson"):
        wilson_interval(k, n)


def test_episodes_needed_two_proportion_power():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from episodes_needed import episodes_per_policy, tables

    assert episodes_per_policy(0.5, 0.6) == 388  # the textbook value (pooled null variance, no continuity correction)
    assert episodes_per_policy(0.9, 0.8) == 199
    za, zb = 1.959963984540054, 0.8416212335729143
    by_hand = (za * math.sqrt(2 * 0.875 * 0.125) + zb * math.sqrt(0.9 * 0.1 + 0.85 * 0.15)) ** 2 / 0.05 ** 2
    assert episodes_per_policy(0.9, 0.85) == math.ceil(by_hand)
    assert episodes_per_policy(0.9, 0.88) > episodes_per_policy(0.9, 0.85) > episodes_per_policy(0.9, 0.7)
    text = tables()
    assert "| 10 | 90% vs 80% | 199 |" in text and "| 100 | ±9.6 | ±6.0 | ±1.8 |" in text
