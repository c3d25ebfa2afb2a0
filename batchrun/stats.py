"""Statistics for a publishable leaderboard: pure functions on plain Python data.

Every function takes lists of floats (None for "no value") and returns floats or frozen
dataclasses, so each can be checked against values computed by hand or published (tests/
test_stats.py). numpy is imported only inside the resampling functions (the document bootstrap
and the Monte-Carlo permutation test), where one matrix product replaces thousands of Python
loops: 30 routes x 481 tasks x 2,000 resamples, plus every pair of routes, in well under a
second. `batchrun --help` never imports it.

Conventions:
- Scores are fractions 0-1 here; human formats multiply by 100.
- Intervals are 95% percentile intervals (numpy's default linear interpolation).
- Tests are two-sided.
"""

from __future__ import annotations

import math
import os
from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

# numpy's wheels multiply matrices with OpenBLAS, which starts a thread per core when numpy is
# imported. The products here are small (2,000-10,000 resamples x 481 tasks x a few hundred
# columns); on a 2-core machine with other work running, two BLAS threads spinning for each
# other made `report`'s statistics up to 2-3 times slower, and the import slower, than one
# (issue 15, docs/performance.md). Threads split a product into blocks, and a block's sums can
# differ in the last bit or two from the whole product's: with one thread the unrounded
# intervals no longer depend on the machine's number of cores. (At 32 routes x 100k results,
# 11 of 240 unrounded pairwise bounds moved by 1-2 ulps between 1 and 2 threads; every printed
# digit, rounded to 6 places, stayed the same: md, json, csv, html and the fixture are
# byte-identical.) Set before numpy is first imported (only this module's and analysis.py's
# functions import it); a value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

CONFIDENCE = 0.95
ALPHA = 0.05
# The report's defaults (report/compare --resamples, --seed).
DEFAULT_RESAMPLES = 2000
DEFAULT_PERMUTATIONS = 10000
DEFAULT_SEED = 20261130
# A paired permutation test enumerates all 2^n sign flips up to this many non-zero differences
# (2^20 = 1,048,576 sums, counted by meet-in-the-middle from two lists of 1,024); beyond it,
# Monte-Carlo with a seed.
EXACT_PERMUTATION_MAX = 20


def _round(x: float | None, digits: int = 6) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), digits)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap interval and standard error (None: not estimable)."""

    estimate: float | None
    low: float | None
    high: float | None
    se: float | None
    n: int  # tasks counted in the estimate

    def as_json(self) -> dict[str, Any]:
        return {"estimate": _round(self.estimate), "low": _round(self.low), "high": _round(self.high),
                "se": _round(self.se), "n": self.n}


@dataclass(frozen=True)
class PermutationTest:
    """A paired sign-flip permutation test of the mean difference."""

    p: float
    method: str  # "exact" (every sign flip enumerated), "monte-carlo", or "none" (no non-zero difference)
    n_nonzero: int
    resamples: int | None = None  # Monte-Carlo only
    seed: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {"p": _round(self.p, 8), "method": self.method, "n_nonzero": self.n_nonzero,
                "resamples": self.resamples, "seed": self.seed}


@dataclass(frozen=True)
class PairedSummary:
    """Wins, losses and ties of a against b on paired values, with the exact sign test."""

    n: int
    mean_diff: float | None
    wins: int
    losses: int
    ties: int
    sign_p: float


# --- small exact statistics -------------------------------------------------------------------------


def mean(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test (binomial, p = 1/2) on the non-tied pairs.

    p = min(1, 2 * P(X <= min(wins, losses))) with X ~ Binomial(wins + losses, 1/2), computed in
    exact rational arithmetic (math.comb), so it is exact at any n, however small the p."""
    n = wins + losses
    if n == 0:
        return 1.0
    from fractions import Fraction  # here: it loads decimal, and every command's --help loads this module

    k = min(wins, losses)
    # sum_{i <= k} C(n, i), each term from the one before (C(n, i) = C(n, i - 1) (n - i + 1) / i,
    # exact in integers): one comb() per term cost ~0.1 s over a report's 240 tests at n = 481.
    term = tail = 1
    for i in range(1, k + 1):
        term = term * (n - i + 1) // i
        tail += term
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


def paired_summary(a: Sequence[float | None], b: Sequence[float | None]) -> PairedSummary:
    """Pairs where both values exist; a tie is an exact equality (scores are means of judge
    fractions, so equal answers get equal scores)."""
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    wins = sum(1 for x, y in pairs if x > y)
    losses = sum(1 for x, y in pairs if x < y)
    ties = len(pairs) - wins - losses
    diff = sum(x - y for x, y in pairs) / len(pairs) if pairs else None
    return PairedSummary(len(pairs), diff, wins, losses, ties, sign_test(wins, losses))


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment (family-wise error), in the input order; None stays None.

    Sorted ascending, p_(i) becomes max over j <= i of min(1, (m - j + 1) p_(j))."""
    present = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    m = len(present)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


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
    return pearson(ranks(x), ranks(y)) if len(x) == len(y) else None


def mean_abs_diff(x: Sequence[float], y: Sequence[float]) -> float | None:
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


# --- the paired permutation test --------------------------------------------------------------------


def _signed_sums(values: Sequence[float]) -> list[float]:
    sums = [0.0]
    for v in values:
        sums = [s + v for s in sums] + [s - v for s in sums]
    return sums


def _tolerance(diffs: Sequence[float]) -> float:
    # Sums of the same magnitudes in another order may differ in the last bits.
    return 1e-9 * max(1.0, sum(abs(d) for d in diffs))


def exact_sign_flip_p(diffs: Sequence[float]) -> float:
    """Exact two-sided p of the paired sign-flip test: the share of the 2^n sign assignments
    whose |sum| is at least the observed |sum| (zero differences change nothing and are left
    out). Counted by meet-in-the-middle: the signed sums of each half, one half sorted."""
    d = [x for x in diffs if x != 0]
    if not d:
        return 1.0
    tol = _tolerance(d)
    obs = abs(sum(d))
    if obs <= tol:
        return 1.0
    half = len(d) // 2
    left, right = _signed_sums(d[:half]), sorted(_signed_sums(d[half:]))
    count = 0
    for a in left:
        count += len(right) - bisect_left(right, obs - tol - a)  # a + b >= obs
        count += bisect_right(right, -obs + tol - a)  # a + b <= -obs
    return count / 2 ** len(d)


# The last sign draws made: a report tests both variants of every pair on the same draws (same
# seed, same shape), and drawing them costs ~50 ms each time at 10,000 x 481.
_last_draws: list[tuple[tuple[int, int, int], Any]] = []


def _sign_draws(resamples: int, n: int, seed: int) -> Any:
    """resamples x n random signs (+1.0 / -1.0) from numpy's PCG64 seeded with `seed`. Shared:
    callers must not modify it."""
    import numpy as np

    key = (resamples, n, seed)
    if _last_draws and _last_draws[0][0] == key:
        return _last_draws[0][1]
    signs = np.random.default_rng(seed).integers(0, 2, size=(resamples, n), dtype=np.int8).astype(np.float64)
    signs *= 2  # in place: 0/1 -> -1/+1, exactly as `* 2 - 1` on new arrays
    signs -= 1
    signs.flags.writeable = False
    _last_draws[:] = [(key, signs)]
    return signs


def permutation_tests(columns: Any, *, resamples: int, seed: int, exact_max: int = EXACT_PERMUTATION_MAX) -> list[PermutationTest]:
    """A paired sign-flip permutation test per column of differences (None = pair not counted).

    Exact enumeration when a column has at most `exact_max` non-zero differences; otherwise
    Monte-Carlo with `resamples` sign draws from numpy's PCG64 seeded with `seed`, p = (1 + #{|S*|
    >= |S|}) / (1 + resamples). The draws are shared by every column (one matrix product); each
    column's test is valid on its own. `columns` may also be a 2-D array, rows x columns, NaN
    for "not counted"."""
    import numpy as np

    if isinstance(columns, np.ndarray):
        diffs_all = np.nan_to_num(columns.astype(np.float64, copy=False), nan=0.0)
    else:
        if not columns:
            return []
        diffs_all = np.array([[0.0 if x is None else x for x in col] for col in columns], dtype=np.float64).T
    n_nonzero = (diffs_all != 0).sum(axis=0)
    out: list[PermutationTest | None] = [None] * diffs_all.shape[1]
    mc: list[int] = []
    for k in range(diffs_all.shape[1]):
        if n_nonzero[k] == 0:
            out[k] = PermutationTest(1.0, "none", 0)
        elif n_nonzero[k] <= exact_max:
            col = diffs_all[:, k]
            out[k] = PermutationTest(exact_sign_flip_p([float(x) for x in col[col != 0]]), "exact", int(n_nonzero[k]))
        else:
            mc.append(k)
    if mc:
        signs = _sign_draws(resamples, diffs_all.shape[0], seed)
        for start in range(0, len(mc), 128):  # bounded memory: resamples x 128 sums at a time
            block = mc[start:start + 128]
            diffs = diffs_all[:, block]
            observed = np.abs(diffs.sum(axis=0))
            tol = 1e-9 * np.maximum(1.0, np.abs(diffs).sum(axis=0))
            hits = (np.abs(signs @ diffs) >= observed - tol).sum(axis=0)
            for j, k in enumerate(block):
                out[k] = PermutationTest(float((1 + hits[j]) / (1 + resamples)), "monte-carlo", int(n_nonzero[k]), resamples, seed)
    return [t for t in out if t is not None]


def permutation_test(diffs: Sequence[float | None], *, resamples: int, seed: int,
                     exact_max: int = EXACT_PERMUTATION_MAX) -> PermutationTest:
    return permutation_tests([diffs], resamples=resamples, seed=seed, exact_max=exact_max)[0]


# --- the document (cluster) bootstrap ------------------------------------------------------------------


class DocumentBootstrap:
    """Bootstrap resamples of documents, shared by every statistic of one report.

    Questions on the same document are not independent (one hard document sinks all its
    questions), so a resample draws *documents* with replacement, as many as there are, and
    takes every task of each drawn document (a cluster bootstrap). A statistic is then the
    mean over the resampled tasks: sum_d w_d S_d / sum_d w_d N_d, where w_d is how many times
    document d was drawn and S_d, N_d are the sum and count of its tasks' values. All columns
    use the same draws, so paired and per-route intervals agree with each other.

    The draws are numpy's PCG64 seeded with `seed`: resample weights are one multinomial draw
    of D documents with equal probabilities per resample (the same distribution as drawing D
    documents with replacement).
    """

    BLOCK = 256  # columns resampled at a time

    def __init__(self, clusters: Sequence[Hashable], *, resamples: int, seed: int):
        import numpy as np

        if resamples < 1:
            raise ValueError("resamples must be at least 1")
        self.resamples = resamples
        self.seed = seed
        self.n_tasks = len(clusters)
        index: dict[Hashable, int] = {}
        self.cluster_of = [index.setdefault(c, len(index)) for c in clusters]
        self.n_clusters = len(index)
        rng = np.random.default_rng(seed)
        d = max(self.n_clusters, 1)
        self._weights = rng.multinomial(d, np.full(d, 1.0 / d), size=resamples).astype(np.float64)
        one_hot = np.zeros((d, max(self.n_tasks, 1)))
        one_hot[self.cluster_of, range(self.n_tasks)] = 1.0
        self._one_hot = one_hot

    def intervals(self, columns: Any, *, confidence: float = CONFIDENCE) -> list[Interval]:
        """The mean of each column (one value per task, None = not counted) with its interval.

        `columns` is a list of columns, or (for callers that already hold numpy data) a 2-D
        array of tasks x columns with NaN for "not counted"."""
        import numpy as np

        if isinstance(columns, np.ndarray):
            values = columns.astype(np.float64, copy=False)
        else:
            if not columns:
                return []
            values = np.array([[np.nan if v is None else v for v in col] for col in columns], dtype=np.float64).T
        if values.shape[0] != self.n_tasks:
            raise ValueError(f"a column has {values.shape[0]} values for {self.n_tasks} tasks")
        if values.shape[1] == 0:
            return []
        if values.shape[1] > self.BLOCK:  # bounded memory: resamples x BLOCK statistics at a time
            return [iv for start in range(0, values.shape[1], self.BLOCK)
                    for iv in self.intervals(values[:, start:start + self.BLOCK], confidence=confidence)]
        counted = ~np.isnan(values)
        n = counted.sum(axis=0)
        sums = self._one_hot @ np.where(counted, values, 0.0)  # clusters x columns
        counts = self._one_hot @ counted.astype(np.float64)
        num, den = self._weights @ sums, self._weights @ counts  # resamples x columns
        with np.errstate(invalid="ignore", divide="ignore"):
            stats = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
            estimate = np.where(n > 0, np.where(counted, values, 0.0).sum(axis=0) / np.maximum(n, 1), np.nan)
        defined = (~np.isnan(stats)).sum(axis=0)
        tail = (1 - confidence) / 2 * 100
        low = np.full(values.shape[1], np.nan)
        high = np.full(values.shape[1], np.nan)
        se = np.full(values.shape[1], np.nan)
        # Columns whose every resample is defined (the usual case) in one vectorised call; the
        # others (a subset absent from some resamples) dropping their undefined resamples.
        full = np.flatnonzero((defined == self.resamples) & (n > 0))
        if full.size:
            low[full], high[full] = np.percentile(stats[:, full], [tail, 100 - tail], axis=0)
            se[full] = stats[:, full].std(axis=0, ddof=1) if self.resamples > 1 else 0.0
        for k in np.flatnonzero((defined < self.resamples) & (defined > 0) & (n > 0)):
            col = stats[:, k][~np.isnan(stats[:, k])]
            low[k], high[k] = np.percentile(col, [tail, 100 - tail])
            se[k] = col.std(ddof=1) if col.size > 1 else 0.0
        out = []
        for j in range(values.shape[1]):
            if n[j] == 0 or np.isnan(low[j]):
                out.append(Interval(None, None, None, None, int(n[j])))
            else:
                out.append(Interval(float(estimate[j]), float(low[j]), float(high[j]), float(se[j]), int(n[j])))
        return out

    def interval(self, values: Sequence[float | None], *, confidence: float = CONFIDENCE) -> Interval:
        return self.intervals([values], confidence=confidence)[0]

    def describe(self) -> dict[str, Any]:
        return {"resamples": self.resamples, "seed": self.seed, "unit": "document", "n_documents": self.n_clusters,
                "n_tasks": self.n_tasks, "confidence": CONFIDENCE, "method": "percentile",
                "rng": "numpy PCG64 (default_rng), multinomial document weights"}


def indistinguishable_groups(ranked: Sequence[str], distinct: Sequence[bool]) -> list[list[str]]:
    """Group ranked items: each joins the group of the one ranked just above it unless the two
    are `distinct` (distinct[i] compares ranked[i] with ranked[i + 1])."""
    groups: list[list[str]] = []
    for i, name in enumerate(ranked):
        if i > 0 and not distinct[i - 1]:
            groups[-1].append(name)
        else:
            groups.append([name])
    return groups
