"""Agreement between the judges of the panel: Pearson's r, Spearman's rho and the mean absolute
difference of two judges' scores, and Krippendorff's alpha of the whole panel (the report's
judge health, analysis.judge_health). Pure functions on plain Python data, checked against
scipy and published examples in tests/test_stats.py; like stats.py, a NaN or an infinity is
refused (`check_values`), a missing value is None."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .stats import check_values


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties given the average of the ranks they span (as Spearman's rho needs)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r; None when fewer than 2 pairs or either side is constant."""
    check_values(x, "pearson x")
    check_values(y, "pearson y")
    n = len(x)
    if n != len(y) or n < 2:
        return None
    mx, my = sum(x) / n, sum(y) / n
    # Lists, not generators: the same terms added in the same order, faster (12,000 pairs a report).
    sxy = sum([(a - mx) * (b - my) for a, b in zip(x, y)])
    sxx = sum([(a - mx) ** 2 for a in x])
    syy = sum([(b - my) ** 2 for b in y])
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho: Pearson's r on average ranks."""
    check_values(x, "spearman x")
    check_values(y, "spearman y")
    return pearson(ranks(x), ranks(y)) if len(x) == len(y) else None


def mean_abs_diff(x: Sequence[float], y: Sequence[float]) -> float | None:
    check_values(x, "mean_abs_diff x")
    check_values(y, "mean_abs_diff y")
    return sum([abs(a - b) for a, b in zip(x, y)]) / len(x) if x and len(x) == len(y) else None


def krippendorff_alpha(units: Sequence[Sequence[float | None]], metric: str = "interval") -> float | None:
    """Krippendorff's alpha for units x coders (None = the coder gave no value).

    alpha = 1 - D_o / D_e over the pairable values (units with at least two values), with
    delta^2 = (a - b)^2 (interval) or [a != b] (nominal): D_o = (1/n) sum_u (1/(m_u - 1))
    sum_{i != j in u} delta^2, D_e = (1/(n(n - 1))) sum_{i != j over all n values} delta^2
    (Krippendorff, "Computing Krippendorff's Alpha-Reliability", 2011). None when there is
    nothing to compare or no variation at all."""
    if metric not in ("interval", "nominal"):
        raise ValueError(f"unknown metric {metric!r}")
    for u in units:
        check_values(u, "krippendorff_alpha unit")
    pairable = [[v for v in u if v is not None] for u in units]
    pairable = [u for u in pairable if len(u) >= 2]
    n = sum(len(u) for u in pairable)
    if n < 2:
        return None

    def pair_sum(values: list[float]) -> float:
        # sum over ordered pairs i != j of delta^2, in O(len(values))
        m = len(values)
        if metric == "interval":
            s, s2 = sum(values), sum([v * v for v in values])
            return 2 * (m * s2 - s * s)
        counts: dict[Any, int] = {}
        for v in values:
            counts[v] = counts.get(v, 0) + 1
        return m * m - sum(c * c for c in counts.values())

    d_o = sum([pair_sum(u) / (len(u) - 1) for u in pairable]) / n
    d_e = pair_sum([v for u in pairable for v in u]) / (n * (n - 1))
    if d_e <= 0:
        return None
    return 1 - d_o / d_e
