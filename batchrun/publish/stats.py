"""Statistics for a publishable leaderboard: pure functions on plain Python data.

Every function takes lists of floats (None for "no value") and returns floats or frozen
dataclasses, so each can be checked against values computed by hand, by reference libraries
(scipy, statsmodels: tests/test_stats.py) or published. A NaN or an infinity is refused with a
ValueError that names the value: a missing value is None, never NaN. numpy is imported only
inside the functions that use it (`Documents`, the permutation tests, the t quantile), where one
matrix product replaces thousands of Python loops. `batchrun --help` never imports it.

The document is the unit (ARCHITECTURE.md: tasks sharing a document are not independent). A
report's intervals and paired tests come from one `Documents` (the tasks' documents):
- Intervals are 95% cluster-robust t intervals of a mean over tasks: the CR2 standard error
  with the questions of one document as one cluster, and Bell-McCaffrey degrees of freedom
  (a random-intercept working model, as Imbens & Kolesar 2016 advise). An interval needs
  MIN_DOCUMENTS documents; below that it is not estimable (None).
- Paired tests compare two routes document by document: the exact sign test on the documents
  one route wins, and the sign-flip permutation test that flips all of a document's tasks
  together.
Both choices were measured, not named: bench/coverage.py and docs/statistics.md.

Conventions:
- Scores are fractions 0-1 here; human formats multiply by 100.
- Tests are two-sided. p-values are kept to 3 significant digits (`round_p`), never rounded to 0.
"""

from __future__ import annotations

import math
import os
from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from .student_t import t_quantile

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
# The report's defaults (report/compare --resamples, --seed): the Monte-Carlo sign-flip draws of
# the document permutation test, used when more than EXACT_PERMUTATION_MAX documents differ.
DEFAULT_RESAMPLES = 10000
DEFAULT_SEED = 20261130
# Fewer documents than this and an interval is not estimable (printed "—"). Chosen by
# measurement (bench/coverage.py, docs/statistics.md): the smallest number of documents at which
# the interval below covered at least 90% in every scenario measured (93% or more from 3 on;
# with 2, 87% when a quarter of the documents score 0). With 1 there is no spread between
# documents to measure at all.
MIN_DOCUMENTS = 3
P_DIGITS = 3  # significant digits kept of a p-value
# A paired permutation test enumerates all 2^n sign flips up to this many non-zero differences
# (2^20 = 1,048,576 sums, counted by meet-in-the-middle from two lists of 1,024); beyond it,
# Monte-Carlo with a seed.
EXACT_PERMUTATION_MAX = 20


def _round(x: float | None, digits: int = 6) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), digits)


def round_p(p: float | None) -> float | None:
    """A p-value kept to P_DIGITS significant digits: 3.2e-145 stays 3.2e-145 (rounding to a
    number of decimal places would make it 0, which no exact test can give)."""
    if p is None:
        return None
    _check_p(p)
    return float(f"{p:.{P_DIGITS}g}")


def format_p(p: float | None) -> str:
    """A p-value for people, to P_DIGITS significant digits: 1.00, 0.250, 0.0215, 0.000123,
    3.20e-145 (Python's general format: scientific notation below 0.0001). "—" for None."""
    return "—" if p is None else f"{p:#.{P_DIGITS}g}"


def _check_p(p: float) -> None:
    if isinstance(p, bool) or not (isinstance(p, (int, float)) and 0 <= p <= 1):
        raise ValueError(f"p-value {p!r} is not a number between 0 and 1")


def check_values(values: Sequence[float | None], what: str) -> None:
    """Refuse NaN and infinities (a missing value is None). One sum finds them in the usual case
    (NaN or an infinity anywhere makes it non-finite); only then are the values walked, to name one."""
    try:
        if math.isfinite(math.fsum(v for v in values if v is not None)):
            return
    except OverflowError:  # finite values whose sum overflows: walk them below
        pass
    except TypeError:
        raise ValueError(f"{what}: values must be numbers or None") from None
    for i, v in enumerate(values):
        if v is not None and not math.isfinite(v):
            raise ValueError(f"{what}: value {i} is {v!r}; a missing value is None, every other value must be a finite number")


def _finite_matrix(values: Any, what: str) -> None:
    """numpy data: NaN means "not counted" (documented by each caller); infinities are refused."""
    import numpy as np

    if np.isinf(values).any():
        i = np.argwhere(np.isinf(values))[0].tolist()
        raise ValueError(f"{what}: value at {i} is infinite; every value must be a finite number (NaN: not counted)")


@dataclass(frozen=True)
class Interval:
    """A point estimate with its 95% interval, standard error and degrees of freedom (None: not
    estimable, e.g. fewer than MIN_DOCUMENTS documents)."""

    estimate: float | None
    low: float | None
    high: float | None
    se: float | None
    n: int  # tasks counted in the estimate
    n_documents: int = 0  # documents with at least one counted task
    df: float | None = None  # degrees of freedom of the t quantile

    def as_json(self) -> dict[str, Any]:
        return {"estimate": _round(self.estimate), "low": _round(self.low), "high": _round(self.high),
                "se": _round(self.se), "n": self.n, "n_documents": self.n_documents, "df": _round(self.df, 3)}


@dataclass(frozen=True)
class PermutationTest:
    """A paired sign-flip permutation test of the mean difference."""

    p: float
    method: str  # "exact" (every sign flip enumerated), "monte-carlo", or "none" (no non-zero difference)
    n_nonzero: int  # units (tasks, or documents for Documents.paired_tests) with a non-zero difference
    resamples: int | None = None  # Monte-Carlo only
    seed: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {"p": round_p(self.p), "method": self.method, "n_nonzero": self.n_nonzero,
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
    check_values(values, "mean")
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test (binomial, p = 1/2) on the non-tied pairs.

    p = min(1, 2 * P(X <= min(wins, losses))) with X ~ Binomial(wins + losses, 1/2), computed in
    exact rational arithmetic (math.comb), so it is exact at any n, however small the p. Beyond
    1,074 unanimous pairs the exact p is below the smallest float; the smallest float (5e-324,
    an upper bound) is returned then, never 0."""
    for name, k in (("wins", wins), ("losses", losses)):
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"sign_test: {name} must be a count (an integer >= 0), not {k!r}")
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
    return max(float(min(Fraction(1), Fraction(2 * tail, 2**n))), math.ulp(0.0))


def paired_summary(a: Sequence[float | None], b: Sequence[float | None]) -> PairedSummary:
    """Pairs where both values exist; a tie is an exact equality (scores are means of judge
    fractions, so equal answers get equal scores)."""
    check_values(a, "paired_summary a")
    check_values(b, "paired_summary b")
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    wins = sum(1 for x, y in pairs if x > y)
    losses = sum(1 for x, y in pairs if x < y)
    ties = len(pairs) - wins - losses
    diff = sum(x - y for x, y in pairs) / len(pairs) if pairs else None
    return PairedSummary(len(pairs), diff, wins, losses, ties, sign_test(wins, losses))


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment (family-wise error), in the input order; None stays None.

    Sorted ascending, p_(i) becomes max over j <= i of min(1, (m - j + 1) p_(j))."""
    for p in pvalues:
        if p is not None:
            _check_p(p)
    present = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    m = len(present)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(present):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


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
    check_values(diffs, "exact_sign_flip_p")
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
    for "not counted". The rows are the units whose signs are flipped: tasks, or documents
    (Documents.paired_tests hands it each document's summed difference)."""
    import numpy as np

    if isinstance(columns, np.ndarray):
        _finite_matrix(columns, "permutation_tests")
        diffs_all = np.nan_to_num(columns.astype(np.float64, copy=False), nan=0.0)
    else:
        if not columns:
            return []
        for col in columns:
            check_values(col, "permutation_tests")
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


# --- the document: intervals and paired tests ---------------------------------------------------------


@dataclass(frozen=True)
class DocumentTest:
    """Two routes' paired differences compared document by document: each document counts once,
    by the sign of its summed difference (a win, a loss, or a tie when it sums to 0)."""

    n_documents: int  # documents with at least one counted difference
    wins: int
    losses: int
    ties: int
    sign_p: float  # exact sign test on the documents won and lost
    permutation: PermutationTest  # sign flips of whole documents; n_nonzero counts documents


class Documents:
    """The tasks' documents, shared by every interval and paired test of one report.

    Questions on one document are not independent (one hard document sinks all its questions;
    a route can be better on one document's questions than on another's), so the document is
    the unit: an interval's standard error and degrees of freedom come from the spread between
    documents, and a paired test flips or counts whole documents.

    The interval of a mean over tasks theta = sum_g S_g / sum_g N_g (S_g, N_g: sum and count of
    document g's counted values) is theta +- t_{0.975, df} * SE, clipped to `bounds`:
    - SE^2 = sum_g (S_g - theta N_g)^2 / (1 - N_g / N) / N^2: the CR2 ("bias-reduced
      linearization", Bell & McCaffrey 2002) cluster-robust variance of a mean; with equal
      documents it is the usual D / (D - 1) correction.
    - df: the Bell-McCaffrey Satterthwaite degrees of freedom of that variance under a working
      model where tasks of one document correlate by rho (estimated by one-way ANOVA, clipped
      to [0, 1)) -- Imbens & Kolesar (2016), "Robust standard errors in small samples". With
      documents of unequal size df falls well below D - 1, which is what a t interval with
      D - 1 degrees of freedom and the percentile bootstrap miss (simulated at 10 documents:
      90.9% and 88.2%, this interval 96.0%; at 60: 94.0%, 93.6% and 94.9%; docs/statistics.md).
    Below `min_documents` documents the interval is not estimable (None)."""

    def __init__(self, clusters: Sequence[Hashable], *, min_documents: int = MIN_DOCUMENTS):
        import numpy as np

        if min_documents < 2:
            raise ValueError("an interval needs at least 2 documents")
        self.min_documents = min_documents
        self.n_tasks = len(clusters)
        index: dict[Hashable, int] = {}
        self.cluster_of = [index.setdefault(c, len(index)) for c in clusters]
        self.n_documents = len(index)
        one_hot = np.zeros((max(self.n_documents, 1), max(self.n_tasks, 1)))
        one_hot[self.cluster_of, range(self.n_tasks)] = 1.0
        self._one_hot = one_hot

    def _values(self, columns: Any, what: str) -> Any:
        """tasks x columns, NaN for "not counted"; from a list of columns (None: not counted)
        or a 2-D array (NaN: not counted)."""
        import numpy as np

        if isinstance(columns, np.ndarray):
            _finite_matrix(columns, what)
            values = columns.astype(np.float64, copy=False)
        else:
            for col in columns:
                check_values(col, what)
            if not columns:
                return np.empty((self.n_tasks, 0))
            values = np.array([[np.nan if v is None else v for v in col] for col in columns], dtype=np.float64).T
        if values.shape[0] != self.n_tasks:
            raise ValueError(f"{what}: a column has {values.shape[0]} values for {self.n_tasks} tasks")
        return values

    def intervals(self, columns: Any, *, bounds: tuple[float, float] | None = None,
                  confidence: float = CONFIDENCE) -> list[Interval]:
        """The mean of each column (one value per task, None = not counted) with its interval.

        `columns` is a list of columns, or (for callers that already hold numpy data) a 2-D
        array of tasks x columns with NaN for "not counted". `bounds`: the range the mean can
        take (scores (0, 1), differences (-1, 1)); the interval is clipped to it."""
        import numpy as np

        values = self._values(columns, "intervals")
        if values.shape[1] == 0:
            return []
        counted = ~np.isnan(values)
        y = np.where(counted, values, 0.0)
        s_g = self._one_hot @ y  # documents x columns
        n_g = self._one_hot @ counted.astype(np.float64)
        n = n_g.sum(axis=0)
        docs = (n_g > 0).sum(axis=0)
        ok = (n > 0) & (docs >= self.min_documents)
        with np.errstate(invalid="ignore", divide="ignore"):
            theta = np.where(n > 0, s_g.sum(axis=0) / np.maximum(n, 1), np.nan)
            resid = s_g - theta * n_g  # 0 for a document with nothing counted
            h = n_g / np.maximum(n, 1)
            c = np.where(n_g > 0, 1.0 / np.where(n_g > 0, 1.0 - h, 1.0), 0.0)
            se = np.sqrt((c * resid**2).sum(axis=0)) / np.maximum(n, 1)
            # rho by one-way ANOVA: between- and within-document mean squares.
            within = np.maximum((y * y).sum(axis=0) - (np.where(n_g > 0, s_g**2 / np.where(n_g > 0, n_g, 1), 0)).sum(axis=0), 0.0)
            between = np.maximum((np.where(n_g > 0, s_g**2 / np.where(n_g > 0, n_g, 1), 0)).sum(axis=0) - n * theta**2, 0.0)
            msw = np.where(n > docs, within / np.maximum(n - docs, 1), 0.0)
            msb = between / np.maximum(docs - 1, 1)
            n0 = (n - (n_g**2).sum(axis=0) / np.maximum(n, 1)) / np.maximum(docs - 1, 1)
            var_doc = np.maximum((msb - msw) / np.where(n0 > 0, n0, 1.0), 0.0)
            rho = np.where(var_doc + msw > 0, var_doc / (var_doc + msw), 0.0)
            rho = np.clip(rho, 0.0, 1.0 - 1e-9)
            # Satterthwaite df = tr(A W)^2 / tr((A W)^2) with A the CR2 variance's quadratic form
            # and W the working covariance: B = (I - H) W (I - H) between document indicators is
            # diag(a) - a h' - h a' + s h h' (a_g = N_g ((1 - rho) + rho N_g), s = sum a), so
            # both traces are sums over documents (tests check them against the matrices).
            a = n_g * ((1.0 - rho) + rho * n_g)
            s = a.sum(axis=0)
            caa, chh, cah = (c * a * a).sum(axis=0), (c * h * h).sum(axis=0), (c * a * h).sum(axis=0)
            trace = (c * (a - 2 * a * h + h * h * s)).sum(axis=0)
            square = ((c * c * (a * a + 2 * a * (s * h * h - 2 * a * h))).sum(axis=0)
                      + 2 * caa * chh + s * s * chh * chh + 2 * cah * cah - 4 * s * cah * chh)
            df = np.where(square > 0, trace**2 / np.where(square > 0, square, 1.0), np.nan)
            df = np.clip(np.where(np.isfinite(df), df, docs - 1), 1.0, np.maximum(docs - 1, 1))
        q = np.full(values.shape[1], np.nan)
        if ok.any():
            q[ok] = t_quantile(0.5 + confidence / 2, df[ok])
        low, high = theta - q * se, theta + q * se
        if bounds is not None:
            low, high = np.clip(low, *bounds), np.clip(high, *bounds)
        out = []
        for j in range(values.shape[1]):
            nj, dj = int(n[j]), int(docs[j])
            if nj == 0:
                out.append(Interval(None, None, None, None, 0, 0))
            elif not ok[j]:
                out.append(Interval(float(theta[j]), None, None, None, nj, dj))
            else:
                out.append(Interval(float(theta[j]), float(low[j]), float(high[j]), float(se[j]), nj, dj, float(df[j])))
        return out

    def interval(self, values: Sequence[float | None], *, bounds: tuple[float, float] | None = None,
                 confidence: float = CONFIDENCE) -> Interval:
        return self.intervals([values], bounds=bounds, confidence=confidence)[0]

    def paired_tests(self, diffs: Any, *, resamples: int, seed: int, exact_max: int = EXACT_PERMUTATION_MAX) -> list[DocumentTest]:
        """Per column of paired differences a - b (one per task, None = not counted): the
        documents won, lost and tied, the exact sign test on them, and the sign-flip permutation
        test of the mean difference that flips all of a document's tasks together (the sum of
        the flipped document sums is the flipped mean difference times the tasks counted).

        Both are exact under the null that within each document the two routes are exchangeable
        -- whatever the correlation between that document's questions, which is what makes a
        test over tasks reject too often (bench/coverage.py)."""
        import numpy as np

        values = self._values(diffs, "paired_tests")
        if values.shape[1] == 0:
            return []
        counted = ~np.isnan(values)
        y = np.where(counted, values, 0.0)
        sums = self._one_hot @ y
        # A document whose differences cancel is a tie: sums of the same terms in another order
        # may differ in the last bits, so |sum| within 1e-9 of its terms' size counts as 0.
        size = self._one_hot @ np.abs(y)
        sums = np.where(np.abs(sums) <= 1e-9 * np.maximum(1.0, size), 0.0, sums)
        present = (self._one_hot @ counted.astype(np.float64)) > 0
        wins, losses = (sums > 0).sum(axis=0), (sums < 0).sum(axis=0)
        ties = present.sum(axis=0) - wins - losses
        perms = permutation_tests(sums, resamples=resamples, seed=seed, exact_max=exact_max)
        return [DocumentTest(int(present[:, k].sum()), int(wins[k]), int(losses[k]), int(ties[k]),
                             sign_test(int(wins[k]), int(losses[k])), perms[k]) for k in range(values.shape[1])]

    def describe(self) -> dict[str, Any]:
        return {"unit": "document", "n_documents": self.n_documents, "n_tasks": self.n_tasks, "confidence": CONFIDENCE,
                "method": "t interval: CR2 cluster-robust standard error (documents as clusters), Bell-McCaffrey "
                          "degrees of freedom (random-intercept working model)",
                "min_documents": self.min_documents}


def min_documents_to_reject(alpha: float, m: int = 1) -> int:
    """The fewest documents that must differ before the exact two-sided sign test (or the exact
    permutation test) can give p < alpha / m: the smallest p with n documents is 2 / 2^n, so
    n > 1 + log2(m / alpha). A comparison resting on fewer can never be told apart."""
    n = 1
    while 2.0 ** (1 - n) * m >= alpha:
        n += 1
    return n


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
