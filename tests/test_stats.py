"""batchrun.publish.stats against values computed independently: by hand, by brute force, or published.

Published: Krippendorff's alpha for the reliability data of K. Krippendorff, "Computing
Krippendorff's Alpha-Reliability" (2011, Annenberg School for Communication, University of
Pennsylvania, https://repository.upenn.edu/asc_papers/43): 4 observers, 12 units, missing
values; the paper gives alpha = 0.743 (nominal) and 0.849 (interval). And the worked example of
Wikipedia's "Krippendorff's alpha" article (3 coders, 15 units): alpha = 0.691 (nominal).
"""

from __future__ import annotations

import itertools
import math
import random

import pytest

from batchrun.publish import agreement, stats, student_t

N = None

# Krippendorff (2011), the reliability data matrix: rows are observers A-D, columns units 1-12.
KRIPPENDORFF_2011 = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, N, N, N],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, N, 3],
    [N, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, N],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, N],
]
WIKIPEDIA = [
    [N, N, N, N, N, 3, 4, 1, 2, 1, 1, 3, 3, N, 3],
    [1, N, 2, 1, 3, 3, 4, 3, N, N, N, N, N, N, N],
    [N, N, 2, 1, 3, 4, 4, N, 2, 1, 1, 3, 3, N, 4],
]


def units(matrix: list[list[float | None]]) -> list[tuple[float | None, ...]]:
    return list(zip(*matrix))


# --- Krippendorff's alpha ---------------------------------------------------------------------------


def test_krippendorff_alpha_matches_the_published_examples() -> None:
    assert round(agreement.krippendorff_alpha(units(KRIPPENDORFF_2011), "interval"), 3) == 0.849
    assert round(agreement.krippendorff_alpha(units(KRIPPENDORFF_2011), "nominal"), 3) == 0.743
    assert round(agreement.krippendorff_alpha(units(WIKIPEDIA), "nominal"), 3) == 0.691


def test_krippendorff_alpha_small_cases_by_hand() -> None:
    assert agreement.krippendorff_alpha([(1, 1), (2, 2), (3, 3)]) == 1.0
    # Two coders, units (0, 1) and (1, 0): D_o = (1/4)(2 + 2) = 1; all four values 0, 0, 1, 1:
    # D_e = 8 / (4 * 3) = 2/3; alpha = 1 - 1 / (2/3) = -0.5.
    assert agreement.krippendorff_alpha([(0, 1), (1, 0)]) == pytest.approx(-0.5)
    assert agreement.krippendorff_alpha([(1, None), (None, 2)]) is None  # nothing pairable
    assert agreement.krippendorff_alpha([(1, 1), (1, 1)]) is None  # no variation: undefined
    with pytest.raises(ValueError):
        agreement.krippendorff_alpha([(1, 2)], "ordinal")


# --- the sign test, Holm, correlations ---------------------------------------------------------------


@pytest.mark.parametrize(("wins", "losses", "p"), [
    (9, 1, 2 * (1 + 10) / 2**10),  # 0.021484375
    (1, 9, 2 * (1 + 10) / 2**10),
    (6, 2, 2 * (1 + 8 + 28) / 2**8),  # 0.2890625
    (10, 0, 2 / 2**10),
    (5, 5, 1.0),
    (0, 0, 1.0),
    (1, 0, 1.0),
    (30, 0, 2 / 2**30),  # exact even where a normal approximation would not be
])
def test_sign_test_exact_binomial_p_values(wins: int, losses: int, p: float) -> None:
    assert stats.sign_test(wins, losses) == pytest.approx(p, rel=1e-12)


def test_sign_test_large_n_is_exact() -> None:
    # 300 wins, 181 losses: the two-sided tail summed with exact integers, checked with lgamma.
    n, k = 481, 181
    tail = sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) - n * math.log(2)) for i in range(k + 1))
    assert stats.sign_test(300, 181) == pytest.approx(2 * tail, rel=1e-9)
    assert 0 < stats.sign_test(300, 181) < 1e-6


def test_paired_summary_counts_and_sign_test() -> None:
    a = [0.9, 0.5, 0.7, None, 0.2, 0.4]
    b = [0.8, 0.5, 0.1, 0.3, 0.6, None]
    s = stats.paired_summary(a, b)
    assert (s.n, s.wins, s.losses, s.ties) == (4, 2, 1, 1)
    assert s.mean_diff == pytest.approx((0.1 + 0 + 0.6 - 0.4) / 4)
    assert s.sign_p == stats.sign_test(2, 1) == 1.0


def test_holm_adjustment_by_hand() -> None:
    # Sorted: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04 -> 0.06 (monotone).
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5, None, 0.4]) == [0.8, None, 0.8]
    assert stats.holm([0.9, 0.8]) == [1.0, 1.0]  # capped at 1
    assert stats.holm([]) == []


def test_ranks_pearson_spearman_mean_abs_diff_by_hand() -> None:
    assert agreement.ranks([10, 20, 20, 30]) == [1, 2.5, 2.5, 4]
    x, y = [1, 2, 3, 4, 5], [2, 4, 5, 4, 5]
    # dx = -2..2, dy = -2, 0, 1, 0, 1: sxy = 6, sxx = 10, syy = 6.
    assert agreement.pearson(x, y) == pytest.approx(6 / math.sqrt(60))
    # ranks of y: 1, 2.5, 4.5, 2.5, 4.5 (mean 3): sxy = 7, syy = 9.
    assert agreement.spearman(x, y) == pytest.approx(7 / math.sqrt(90))
    assert agreement.spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert agreement.pearson([1, 1, 1], [1, 2, 3]) is None and agreement.pearson([1], [2]) is None
    assert agreement.mean_abs_diff([0.5, 1.0], [0.25, 0.5]) == pytest.approx(0.375)


# --- the paired permutation test ------------------------------------------------------------------------


def brute_force_p(diffs: list[float]) -> float:
    obs = abs(sum(diffs))
    hits = sum(1 for signs in itertools.product((1, -1), repeat=len(diffs))
               if abs(sum(s * d for s, d in zip(signs, diffs))) >= obs - 1e-12)
    return hits / 2 ** len(diffs)


def test_exact_permutation_test_by_hand_and_by_brute_force() -> None:
    # +-1 +-2 +-3: sums 6, 4, 2, 0, 0, -2, -4, -6; observed 6: two of eight.
    assert stats.exact_sign_flip_p([1, 2, 3]) == 0.25
    assert stats.exact_sign_flip_p([1, 1, 1, 1, 1]) == stats.sign_test(5, 0) == 0.0625  # equal magnitudes: the sign test
    assert stats.exact_sign_flip_p([1, 0, 2, 0, 3]) == 0.25  # zero differences change nothing
    assert stats.exact_sign_flip_p([0.5, -0.5]) == 1.0
    rng = random.Random(7)
    for n in (1, 2, 7, 12, 13):
        d = [round(rng.uniform(-1, 1), 3) for _ in range(n)]
        assert stats.exact_sign_flip_p(d) == pytest.approx(brute_force_p(d), abs=1e-12), d


def test_permutation_test_exact_up_to_20_then_seeded_monte_carlo() -> None:
    rng = random.Random(11)
    d20 = [rng.uniform(-0.2, 0.6) for _ in range(20)] + [0.0, None]
    t = stats.permutation_test(d20, resamples=1000, seed=1)
    assert t.method == "exact" and t.n_nonzero == 20 and t.resamples is None
    assert t.p == stats.exact_sign_flip_p([x for x in d20 if x])
    # Forced to Monte-Carlo, it agrees with the exact p within its sampling error; seeded.
    mc = stats.permutation_test(d20, resamples=20000, seed=5, exact_max=10)
    assert mc.method == "monte-carlo" and (mc.resamples, mc.seed) == (20000, 5)
    assert mc.p == pytest.approx(t.p, abs=0.01)
    assert stats.permutation_test(d20, resamples=20000, seed=5, exact_max=10) == mc
    d30 = d20[:20] + [rng.uniform(-0.2, 0.6) for _ in range(10)]
    assert stats.permutation_test(d30, resamples=500, seed=2).method == "monte-carlo"
    assert stats.permutation_test([0.0, None], resamples=10, seed=0) == stats.PermutationTest(1.0, "none", 0)
    # p is never 0: the observed assignment counts.
    assert stats.permutation_test([1.0] * 40, resamples=999, seed=3).p == pytest.approx(1 / 1000)


# --- the document: intervals ------------------------------------------------------------------------------


def cr2_by_the_matrices(values: list[float | None], docs: list[str]) -> tuple[float, float, float]:
    """The mean, its CR2 standard error and Bell-McCaffrey df, by their definitions on full
    matrices (Bell & McCaffrey 2002; Imbens & Kolesar 2016): OLS of y on a constant, residuals
    e, per document the adjustment (I - H_gg)^(-1/2), V = sum_g (1' A_g e_g)^2 / N^2 written as
    the quadratic form eps' M eps, and df = tr(M W)^2 / tr((M W)^2) with W the working
    covariance (correlation rho within a document, rho from one-way ANOVA)."""
    import numpy as np

    kept = [(v, d) for v, d in zip(values, docs) if v is not None]
    y = np.array([v for v, _ in kept])
    g = [d for _, d in kept]
    n = len(y)
    groups = {d: [i for i, x in enumerate(g) if x == d] for d in dict.fromkeys(g)}
    hat = np.full((n, n), 1.0 / n)
    theta = y.mean()
    resid = y - theta
    q_total = np.zeros((n, n))
    var = 0.0
    for ii in groups.values():
        w, vecs = np.linalg.eigh(np.eye(len(ii)) - hat[np.ix_(ii, ii)])
        adjust = vecs @ np.diag(w ** -0.5) @ vecs.T
        var += float(np.ones(len(ii)) @ adjust @ resid[ii]) ** 2 / n**2
        v = np.zeros(n)
        v[ii] = adjust @ np.ones(len(ii))
        q = (np.eye(n) - hat) @ v
        q_total += np.outer(q, q) / n**2
    sizes = np.array([len(ii) for ii in groups.values()])
    means = np.array([y[ii].mean() for ii in groups.values()])
    d = len(groups)
    msw = sum(((y[ii] - y[ii].mean()) ** 2).sum() for ii in groups.values()) / (n - d) if n > d else 0.0
    msb = (sizes * (means - theta) ** 2).sum() / (d - 1)
    n0 = (n - (sizes**2).sum() / n) / (d - 1)
    between = max((msb - msw) / n0, 0.0)
    rho = min(between / (between + msw), 1 - 1e-9) if between + msw > 0 else 0.0
    work = np.eye(n) * (1 - rho)
    for ii in groups.values():
        work[np.ix_(ii, ii)] += rho
    mw = q_total @ work
    return float(theta), math.sqrt(var), float(np.trace(mw) ** 2 / np.trace(mw @ mw))


def test_interval_of_equal_documents_is_the_t_interval_on_document_means() -> None:
    """Documents of equal size: CR2 is D / (D - 1) times the plain cluster-robust variance
    (statsmodels' cluster covariance without its correction), df = D - 1, and the interval is
    Student's t interval on the document means (scipy)."""
    import numpy as np
    from scipy import stats as sp
    from statsmodels.regression.linear_model import OLS  # not statsmodels.api: a second of imports less

    rng = random.Random(3)
    docs = [f"d{i // 4}" for i in range(24)]  # 6 documents of 4 tasks
    values = [round(rng.random(), 2) for _ in docs]
    iv = stats.Documents(docs).interval(values)
    means = [sum(values[i:i + 4]) / 4 for i in range(0, 24, 4)]
    low, high = sp.t.interval(0.95, 5, loc=np.mean(means), scale=sp.sem(means))
    assert (iv.estimate, iv.low, iv.high, iv.df) == pytest.approx((np.mean(means), low, high, 5.0), rel=1e-10)
    assert (iv.n, iv.n_documents) == (24, 6)
    fit = OLS(values, np.ones(24)).fit(cov_type="cluster", cov_kwds={"groups": [int(d[1:]) for d in docs], "use_correction": False})
    assert iv.se == pytest.approx(math.sqrt(6 / 5) * float(fit.bse[0]), rel=1e-10)


def test_interval_cr2_and_bell_mccaffrey_df_match_the_matrices() -> None:
    rng = random.Random(8)
    for _ in range(12):
        d = rng.choice([3, 4, 7, 12])
        docs = [f"d{rng.randrange(d)}" for _ in range(rng.randrange(10, 60))]
        values = [None if rng.random() < 0.2 else round(rng.random(), 3) for _ in docs]
        if len({x for x, v in zip(docs, values) if v is not None}) < 3:
            continue
        iv = stats.Documents(docs).interval(values)
        theta, se, df = cr2_by_the_matrices(values, docs)
        assert (iv.estimate, iv.se, iv.df) == pytest.approx((theta, se, df), rel=1e-9)
        q = float(student_t.t_quantile(0.975, df))
        assert (iv.low, iv.high) == pytest.approx((max(theta - q * se, -math.inf), theta + q * se), rel=1e-9)
        assert 1 <= iv.df <= iv.n_documents - 1


def test_interval_needs_min_documents_handles_missing_constant_and_bounds() -> None:
    docs = ["A"] * 3 + ["B"] * 3 + ["C"] * 2
    d = stats.Documents(docs)
    assert d.describe()["min_documents"] == stats.MIN_DOCUMENTS == 3 and d.describe()["unit"] == "document"
    # One document, three different scores: an estimate, no interval (the bootstrap gave 63.3-63.3 here).
    one = d.interval([0.6, 0.7, 0.6, None, None, None, None, None])
    assert (one.estimate, one.low, one.high, one.se, one.df, one.n, one.n_documents) == (pytest.approx(19 / 30), None, None, None, None, 3, 1)
    two = d.interval([0.6, 0.7, 0.6, 0.1, 0.2, 0.3, None, None])
    assert two.low is None and two.n_documents == 2
    assert d.interval([None] * 8) == stats.Interval(None, None, None, None, 0, 0)
    const = d.interval([0.4] * 8)
    assert (const.low, const.high, const.se) == pytest.approx((0.4, 0.4, 0.0))
    wide = d.interval([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0], bounds=(0.0, 1.0))
    assert wide.low == 0.0 and wide.high == 1.0  # clipped to the score range
    unclipped = d.interval([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    assert unclipped.low < 0 and unclipped.high > 1
    import numpy as np

    cols = [[0.1, 0.5, 0.2, 0.9, 0.4, None, 0.3, 0.8], [0.4] * 8]
    matrix = np.array([[np.nan if v is None else v for v in col] for col in cols]).T
    assert d.intervals(cols) == d.intervals(matrix)
    assert d.interval([0.1, 0.5, 0.2, 0.9, 0.4, None, 0.3, 0.8]).as_json()["n_documents"] == 3
    with pytest.raises(ValueError, match="8 tasks"):
        d.interval([0.1, 0.2])
    with pytest.raises(ValueError, match="at least 2 documents"):
        stats.Documents(docs, min_documents=1)


def test_intervals_and_tests_hold_on_degenerate_small_columns() -> None:
    """1-6 documents, constant, binary, sparse and near-zero values: every interval holds its
    estimate with 1 <= df <= D - 1, and every p-value is in (0, 1]."""
    rng = random.Random(12)
    makers = {"random": lambda: rng.random(), "constant": lambda: 0.5, "binary": lambda: float(rng.random() < 0.5),
              "sparse": lambda: None if rng.random() < 0.7 else rng.random(), "tiny": lambda: rng.choice([0.0, 1e-12, -1e-12])}
    estimable = 0
    for _ in range(600):
        d = rng.choice([1, 2, 3, 4, 6])
        docs = [f"d{rng.randrange(d)}" for _ in range(rng.randrange(1, 15))]
        make = makers[rng.choice(list(makers))]
        values = [make() for _ in docs]
        iv = stats.Documents(docs).interval(values, bounds=(-1.0, 1.0))
        if iv.low is not None:
            estimable += 1
            assert iv.low <= iv.estimate + 1e-12 and iv.estimate <= iv.high + 1e-12 and 1 <= iv.df <= iv.n_documents - 1
        (t,) = stats.Documents(docs).paired_tests([values], resamples=200, seed=1)
        assert 0 < t.sign_p <= 1 and 0 < t.permutation.p <= 1 and t.wins + t.losses + t.ties == t.n_documents
    assert estimable > 100


@pytest.mark.parametrize("p", [0.6, 0.9, 0.95, 0.975, 0.995, 0.9999])
def test_t_quantile_matches_scipy(p: float) -> None:
    import numpy as np
    from scipy import stats as sp

    df = np.array([1, 1.0001, 1.3, 2, 2.5, 3.7, 5, 9.99, 23.7, 59, 100, 213, 999, 1000, 5000, 1e6])
    assert student_t.t_quantile(p, df) == pytest.approx(sp.t.ppf(p, df), rel=1e-12)
    many = np.random.default_rng(1).uniform(1, 400, 500)
    assert student_t.t_quantile(p, many) == pytest.approx(sp.t.ppf(p, many), rel=1e-12)
    assert float(student_t.t_quantile(p, 4.0)) == pytest.approx(sp.t.ppf(p, 4.0), rel=1e-12)
    with pytest.raises(ValueError):
        student_t.t_quantile(p, [0.5])
    with pytest.raises(ValueError):
        student_t.t_quantile(1.0, [3.0])


# --- the document: paired tests ------------------------------------------------------------------------


def test_paired_tests_count_documents_and_flip_whole_documents() -> None:
    from scipy import stats as sp

    # Documents A (3 tasks), B (2), C (1), D (2). Differences a - b per task:
    diffs = [0.2, -0.1, 0.3, -0.4, 0.1, 0.5, 0.25, -0.25]
    docs = ["A", "A", "A", "B", "B", "C", "D", "D"]
    (t,) = stats.Documents(docs).paired_tests([diffs], resamples=1000, seed=1)
    # Document sums: A +0.4 (win), B -0.3 (loss), C +0.5 (win), D 0 (a tie: it cancels).
    assert (t.n_documents, t.wins, t.losses, t.ties) == (4, 2, 1, 1)
    assert t.sign_p == stats.sign_test(2, 1) == sp.binomtest(2, 3).pvalue
    assert t.permutation.method == "exact" and t.permutation.n_nonzero == 3
    assert t.permutation.p == pytest.approx(brute_force_p([0.4, -0.3, 0.5]))  # 2 of 8 sign flips reach |0.6|
    # Missing values drop out of their document; a document with none left is not compared.
    (u,) = stats.Documents(docs).paired_tests([[None, None, None, -0.4, 0.1, 0.5, 0.25, None]], resamples=1000, seed=1)
    assert (u.n_documents, u.wins, u.losses, u.ties) == (3, 2, 1, 0)
    # More documents than exact_max: seeded Monte-Carlo over document sums, near the exact p.
    rng = random.Random(2)
    many = [f"d{i // 3}" for i in range(75)]
    col = [rng.uniform(-0.3, 0.5) for _ in many]
    exact = stats.Documents(many).paired_tests([col], resamples=20000, seed=4, exact_max=30)[0]
    mc = stats.Documents(many).paired_tests([col], resamples=20000, seed=4, exact_max=10)[0]
    assert exact.permutation.method == "exact" and mc.permutation.method == "monte-carlo" and mc.permutation.n_nonzero == 25
    assert mc.permutation.p == pytest.approx(exact.permutation.p, abs=0.01)
    assert stats.Documents(many).paired_tests([col], resamples=20000, seed=4, exact_max=10)[0] == mc


def test_min_documents_to_reject() -> None:
    # The smallest two-sided exact p on n documents is 2 / 2^n.
    assert stats.min_documents_to_reject(0.05) == 6  # 2/2^5 = 0.0625, 2/2^6 = 0.03125
    assert stats.min_documents_to_reject(0.05, 3) == 7  # x3: 0.094, 0.047
    assert stats.min_documents_to_reject(0.05, 10) == 9
    assert stats.min_documents_to_reject(0.05, 435) == 15
    for m in (1, 3, 10, 435):
        n = stats.min_documents_to_reject(0.05, m)
        assert stats.sign_test(n, 0) * m < 0.05 <= stats.sign_test(n - 1, 0) * m


# --- p-values and bad values -----------------------------------------------------------------------------


@pytest.mark.parametrize(("wins", "losses"), [(9, 1), (6, 2), (30, 0), (300, 181), (240, 241), (0, 7), (1, 0)])
def test_sign_test_matches_scipy_binomtest(wins: int, losses: int) -> None:
    from scipy import stats as sp

    assert stats.sign_test(wins, losses) == pytest.approx(sp.binomtest(wins, wins + losses).pvalue, rel=1e-9)


def test_holm_matches_statsmodels(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from statsmodels.stats.multitest import multipletests

    # statsmodels' Holm branch ends with gc.collect() (to free big arrays early): a full collection
    # of this worker's heap, 0.1-0.3 s a call after a few hundred tests, 6-9 s for the 20 cases
    # below. It changes no result: a no-op here.
    monkeypatch.setattr(gc, "collect", lambda generation=2: 0)
    rng = random.Random(6)
    for _ in range(20):
        ps = [rng.random() ** 3 for _ in range(rng.randrange(1, 30))]
        assert stats.holm(ps) == pytest.approx(list(multipletests(ps, method="holm")[1]), rel=1e-12)


def test_p_values_keep_three_significant_digits_and_are_never_zero() -> None:
    import json

    tiny = stats.sign_test(481, 0)  # 2 / 2^481: every one of 481 tasks won
    assert tiny == pytest.approx(3.2033e-145, rel=1e-4) and stats.round_p(tiny) == 3.2e-145
    assert json.dumps({"p": stats.round_p(tiny)}) == '{"p": 3.2e-145}'  # was 0.0, rounded to 10 decimals
    assert stats.format_p(tiny) == "3.20e-145"
    assert [stats.format_p(p) for p in (1.0, 0.25, 0.021484375, 0.000123456, 1.5e-5, None)] == [
        "1.00", "0.250", "0.0215", "0.000123", "1.50e-05", "—"]
    assert stats.round_p(0.021484375) == 0.0215 and stats.round_p(None) is None
    assert stats.sign_test(2000, 0) > 0  # below the smallest float: the smallest float, never 0
    assert stats.PermutationTest(1 / 10001, "monte-carlo", 40, 10000, 1).as_json()["p"] == 0.0001


def test_pure_functions_refuse_nan_and_infinities() -> None:
    nan, inf = float("nan"), float("inf")
    with pytest.raises(ValueError, match="value 1 is nan"):
        stats.permutation_test([0.1, nan, 0.3], resamples=100, seed=1)  # p was 2.0
    with pytest.raises(ValueError, match="value 0 is inf"):
        stats.exact_sign_flip_p([inf, 0.2])
    for call in (lambda: stats.mean([0.1, nan]), lambda: agreement.pearson([1, 2, nan], [1, 2, 3]),
                 lambda: agreement.spearman([1, 2, 3], [1, nan, 3]), lambda: agreement.mean_abs_diff([nan], [1]),
                 lambda: stats.paired_summary([0.1, nan], [0.2, 0.3]), lambda: agreement.krippendorff_alpha([(1, nan)]),
                 lambda: stats.Documents(["A", "B", "C"]).interval([0.1, nan, 0.2]),
                 lambda: stats.Documents(["A", "B", "C"]).paired_tests([[0.1, 0.2, nan]], resamples=100, seed=1)):
        with pytest.raises(ValueError, match="nan.*None"):
            call()
    import numpy as np

    with pytest.raises(ValueError, match="infinite"):
        stats.Documents(["A", "B", "C"]).intervals(np.array([[0.1], [np.inf], [0.2]]))
    for bad in ([nan], [1.5], [-0.1]):
        with pytest.raises(ValueError, match="between 0 and 1"):
            stats.holm(bad)
    for wins, losses in ((-1, 2), (1.5, 2), (True, 0)):
        with pytest.raises(ValueError, match="count"):
            stats.sign_test(wins, losses)  # type: ignore[arg-type]
    # None is the missing value, as before.
    assert stats.mean([0.2, None, 0.4]) == pytest.approx(0.3)


def test_indistinguishable_groups_chain_adjacent_ranks_not_told_apart() -> None:
    assert stats.indistinguishable_groups(["a", "b", "c", "d"], [False, True, False]) == [["a", "b"], ["c", "d"]]
    assert stats.indistinguishable_groups(["a", "b"], [True]) == [["a"], ["b"]]
    assert stats.indistinguishable_groups(["a", "b", "c"], [False, False]) == [["a", "b", "c"]]
    assert stats.indistinguishable_groups(["a"], []) == [["a"]]
    assert stats.indistinguishable_groups([], []) == []
