"""batchrun.stats against values computed independently: by hand, by brute force, or published.

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

from batchrun import stats

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
    assert round(stats.krippendorff_alpha(units(KRIPPENDORFF_2011), "interval"), 3) == 0.849
    assert round(stats.krippendorff_alpha(units(KRIPPENDORFF_2011), "nominal"), 3) == 0.743
    assert round(stats.krippendorff_alpha(units(WIKIPEDIA), "nominal"), 3) == 0.691


def test_krippendorff_alpha_small_cases_by_hand() -> None:
    assert stats.krippendorff_alpha([(1, 1), (2, 2), (3, 3)]) == 1.0
    # Two coders, units (0, 1) and (1, 0): D_o = (1/4)(2 + 2) = 1; all four values 0, 0, 1, 1:
    # D_e = 8 / (4 * 3) = 2/3; alpha = 1 - 1 / (2/3) = -0.5.
    assert stats.krippendorff_alpha([(0, 1), (1, 0)]) == pytest.approx(-0.5)
    assert stats.krippendorff_alpha([(1, None), (None, 2)]) is None  # nothing pairable
    assert stats.krippendorff_alpha([(1, 1), (1, 1)]) is None  # no variation: undefined
    with pytest.raises(ValueError):
        stats.krippendorff_alpha([(1, 2)], "ordinal")


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
    assert stats.ranks([10, 20, 20, 30]) == [1, 2.5, 2.5, 4]
    x, y = [1, 2, 3, 4, 5], [2, 4, 5, 4, 5]
    # dx = -2..2, dy = -2, 0, 1, 0, 1: sxy = 6, sxx = 10, syy = 6.
    assert stats.pearson(x, y) == pytest.approx(6 / math.sqrt(60))
    # ranks of y: 1, 2.5, 4.5, 2.5, 4.5 (mean 3): sxy = 7, syy = 9.
    assert stats.spearman(x, y) == pytest.approx(7 / math.sqrt(90))
    assert stats.spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert stats.pearson([1, 1, 1], [1, 2, 3]) is None and stats.pearson([1], [2]) is None
    assert stats.mean_abs_diff([0.5, 1.0], [0.25, 0.5]) == pytest.approx(0.375)


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


# --- the document bootstrap ----------------------------------------------------------------------------


def test_bootstrap_resamples_documents_not_tasks() -> None:
    values = [1.0] * 4 + [0.0] * 4
    # Two documents of four tasks each: a resample holds document A twice, A and B, or B twice,
    # so the mean is 1, 0.5 or 0 (probabilities 1/4, 1/2, 1/4): the 95% interval is [0, 1].
    clustered = stats.DocumentBootstrap(["A"] * 4 + ["B"] * 4, resamples=4000, seed=1).interval(values)
    assert (clustered.estimate, clustered.low, clustered.high, clustered.n) == (0.5, 0.0, 1.0, 8)
    assert clustered.se == pytest.approx(math.sqrt(1 / 8), abs=0.01)  # sd of {1, .5, .5, 0}
    # Each task its own document: means k/8 with P(k <= 1) = P(k >= 7) = 9/256 (3.5%) and
    # P(k = 0) = P(k = 8) = 1/256 (0.4%): the 2.5% and 97.5% points are 1/8 and 7/8.
    independent = stats.DocumentBootstrap(list("ABCDEFGH"), resamples=4000, seed=1).interval(values)
    assert (independent.low, independent.high) == (0.125, 0.875)
    assert independent.se == pytest.approx(math.sqrt(0.25 / 8), abs=0.01)  # sqrt(p(1-p)/n) with p = 1/2


def test_bootstrap_ratio_of_unequal_documents_by_hand() -> None:
    # Document A holds two tasks scored 1, document B one task scored 0. Resample means:
    # AA -> 1 (1/4), AB -> 2/3 (1/2), BB -> 0 (1/4): mean 7/12, variance 1/4 + 2/9 - 49/144.
    b = stats.DocumentBootstrap(["A", "A", "B"], resamples=20000, seed=3)
    iv = b.interval([1.0, 1.0, 0.0])
    assert iv.estimate == pytest.approx(2 / 3) and (iv.low, iv.high) == (0.0, 1.0)
    assert iv.se == pytest.approx(math.sqrt(1 / 4 + 2 / 9 - 49 / 144), abs=0.01)


def test_bootstrap_is_seeded_handles_missing_values_and_constant_columns() -> None:
    clusters = [f"d{i // 3}" for i in range(30)]
    rng = random.Random(5)
    col = [rng.random() for _ in range(30)]
    a = stats.DocumentBootstrap(clusters, resamples=500, seed=9)
    b = stats.DocumentBootstrap(clusters, resamples=500, seed=9)
    c = stats.DocumentBootstrap(clusters, resamples=500, seed=10)
    assert a.interval(col) == b.interval(col) != c.interval(col)
    assert a.describe() == {"resamples": 500, "seed": 9, "unit": "document", "n_documents": 10, "n_tasks": 30,
                            "confidence": 0.95, "method": "percentile", "rng": "numpy PCG64 (default_rng), multinomial document weights"}
    const = a.interval([0.4] * 30)
    assert const.estimate == pytest.approx(0.4) and const.low == pytest.approx(0.4) and const.high == pytest.approx(0.4)
    assert const.se == pytest.approx(0.0, abs=1e-12)
    missing = a.interval([None] * 30)
    assert missing == stats.Interval(None, None, None, None, 0)
    partial = a.interval([None if i % 2 else v for i, v in enumerate(col)])
    assert partial.n == 15 and partial.estimate == pytest.approx(sum(col[::2]) / 15)
    assert partial.low <= partial.estimate <= partial.high
    several = a.intervals([col, [0.4] * 30])
    one = a.interval(col)
    assert [several[0].estimate, several[0].low, several[0].high, several[0].se] == pytest.approx([one.estimate, one.low, one.high, one.se])
    with pytest.raises(ValueError):
        a.interval([0.1, 0.2])


def test_indistinguishable_groups_chain_adjacent_ranks_not_told_apart() -> None:
    assert stats.indistinguishable_groups(["a", "b", "c", "d"], [False, True, False]) == [["a", "b"], ["c", "d"]]
    assert stats.indistinguishable_groups(["a", "b"], [True]) == [["a"], ["b"]]
    assert stats.indistinguishable_groups(["a", "b", "c"], [False, False]) == [["a", "b", "c"]]
    assert stats.indistinguishable_groups(["a"], []) == [["a"]]
    assert stats.indistinguishable_groups([], []) == []
