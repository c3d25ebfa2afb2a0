"""Student's t quantile, for the intervals of `stats.Documents`: by hand, not scipy.

The report needs one thing of the t distribution -- the 97.5% quantile at real (not integer)
degrees of freedom, the Bell-McCaffrey df of each interval -- and scipy would be a ~100 MB
runtime dependency for it. These functions compute it from the regularized incomplete beta
function (its continued fraction, Numerical Recipes §6.4) and agree with scipy.stats.t.ppf to
1e-12 (tests/test_stats.py). numpy is imported inside the functions (`batchrun --help` never
loads it).
"""

from __future__ import annotations

import math
from typing import Any


def _betacf(a: Any, b: Any, x: Any) -> Any:
    """The continued fraction of the regularized incomplete beta function (modified Lentz,
    Numerical Recipes 2nd ed. §6.4, betacf), elementwise on numpy arrays; converges fast where
    x < (a + 1) / (a + b + 2), which the caller arranges."""
    import numpy as np

    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = np.ones_like(x)
    d = 1.0 - qab * x / qap
    d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
    h = d.copy()
    for m in range(1, 1001):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
            c = 1.0 + aa / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            step = d * c
            h = h * step
        if np.all(np.abs(step - 1.0) < eps):
            break
    return h


def _t_upper_tail(t: Any, df: Any, lbeta: Any) -> Any:
    """P(T > t) for t >= 0: 1/2 I_x(df/2, 1/2) with x = df / (df + t^2); `lbeta` = log B(df/2, 1/2)."""
    import numpy as np

    a, b = df / 2.0, 0.5
    x, y = df / (df + t * t), t * t / (df + t * t)  # y = 1 - x without the cancellation
    front = np.exp(a * np.log(x) + b * np.log(y) - lbeta)
    swap = x > (a + 1.0) / (a + b + 2.0)  # then I_x(a, b) = 1 - I_{1-x}(b, a)
    aa, bb, xx = np.where(swap, b, a), np.where(swap, a, b), np.where(swap, y, x)
    part = front * _betacf(aa, bb, xx) / aa
    return 0.5 * np.where(swap, 1.0 - part, part)


def _log_beta_half(a: float) -> float:
    """log B(a, 1/2) = lgamma(a) + lgamma(1/2) - lgamma(a + 1/2)."""
    return math.lgamma(a) + math.lgamma(0.5) - math.lgamma(a + 0.5)


def t_quantile(p: float, df: Any) -> Any:
    """The p quantile (1/2 < p < 1) of Student's t with df >= 1 degrees of freedom (real numbers;
    a numpy array in, one out).

    From the Cornish-Fisher expansion in 1/df (Abramowitz & Stegun 26.7.5, four terms: within
    1e-13 of it from df = 1000 on, where it is the answer), Newton's method on the exact upper
    tail, kept by bisection inside [the normal quantile, the Cauchy quantile] (for df >= 1 the
    t quantile lies between them). Equal to scipy's stats.t.ppf to 1e-12 (tests/test_stats.py).
    Hand code, not scipy: these lines are all the report needs of it."""
    import numpy as np
    from statistics import NormalDist

    if not 0.5 < p < 1:
        raise ValueError(f"t_quantile: p must be between 1/2 and 1, not {p!r}")
    shape = np.shape(df)
    df = np.asarray(df, dtype=np.float64).ravel()
    if df.size and not (np.isfinite(df).all() and (df >= 1).all()):
        raise ValueError("t_quantile: every df must be a finite number >= 1")
    tail = 1.0 - p
    z = NormalDist().inv_cdf(p)
    lo, hi = np.full(df.shape, z), np.full(df.shape, math.tan(math.pi * (p - 0.5)))
    expansion = (z + (z**3 + z) / 4 / df + (5 * z**5 + 16 * z**3 + 3 * z) / 96 / df**2
                 + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384 / df**3
                 + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160 / df**4)
    small = df < 1000
    if not small.any():
        return expansion.reshape(shape)
    nu = df[small]
    t, lo, hi = np.clip(expansion[small], lo[small], hi[small]), lo[small], hi[small]
    lbeta = np.array([_log_beta_half(v / 2) for v in nu])
    log_norm = -lbeta - 0.5 * np.log(nu)  # log of the density's constant 1 / (sqrt(df) B(df/2, 1/2))
    for _ in range(100):
        excess = _t_upper_tail(t, nu, lbeta) - tail  # > 0: t is below the quantile
        step = excess / np.exp(log_norm - (nu + 1) / 2 * np.log1p(t * t / nu))  # Newton: excess / density
        if np.all(np.abs(step) <= 1e-12 * t):
            out = expansion.copy()
            out[small] = t + step
            return out.reshape(shape)
        lo, hi = np.where(excess > 0, t, lo), np.where(excess > 0, hi, t)
        t = np.where((t + step < lo) | (t + step > hi), (lo + hi) / 2, t + step)
    raise ArithmeticError("t_quantile did not converge")  # not seen for 1 <= df < 1000 (tests)
