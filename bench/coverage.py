"""Benchmark: do batchrun's intervals cover and its tests keep their level? Known truth, simulated.

    python bench/coverage.py [--quick] [--reps N] [--seed S] [--methods]

Every figure comes from batchrun's own functions on simulated data whose truth is known:
`analysis.route_statistics` (each route's All-tasks interval), `analysis.compare_pairs` (what
`batchrun compare` prints), `analysis.pairwise` (the tie-group rule over all pairs) and
`stats.Documents` -- built on real `analysis.Cells`, as the report builds them from state.db.

The model. Route r's score on task i of document g is logistic(mu + a_g + c_rg + b_gi + e_rgi):
a_g the document's difficulty and b_gi the task's (shared by every route), e_rgi the route's own
noise, c_rg a route x document interaction (the route is better on some documents than on
others; zero in the "no interaction" scenario). Latent variances: a + c = rho_L, b + e =
1 - rho_L, with rho_L set so that the intra-document correlation of the observed scores (two
tasks of one document, one route) is 0.30 -- computed exactly by Gauss-Hermite quadrature and
printed. With the interaction, c takes INTERACTION_SHARE of rho_L. The truth (a route's expected
score) is E logistic(mu + N(0, 1)), also by quadrature. 481 tasks fall in D documents of unequal
size (each document at least one task, the rest multinomial with Gamma(2) weights: sizes vary
by ~70%), D = 5, 10, 20 and 60; every replication draws new effects, every batch new sizes.

Measured, each with its Monte-Carlo standard error (over replications):
1. coverage of the headline interval (All-tasks, 95%) of a route's true mean;
2. type-I error of compare's tests (two routes with the same true scores): the sign test and the
   permutation test over documents at p < 0.05, and the interval of the difference excluding 0;
   for reference, the task-level sign test (the secondary figure) -- what compare printed before;
3. type-I error of the tie-group rule: five routes with the same true scores, the share of
   replications in which the report splits them into more than one group;
4. the minimum number of documents for an interval (stats.MIN_DOCUMENTS): coverage at 2, 3, 5
   and 10 documents, also under harsher conditions (very unequal documents, out-of-context
   documents scored 0, breakdown-sized groups of 30 tasks);
5. with --methods: the interval methods compared on the same data (the choice of CR2 with
   Bell-McCaffrey df was made on these figures): the percentile document bootstrap batchrun
   used before, a t interval with D - 1 df on the CR1 standard error, a studentized (bootstrap-t)
   document bootstrap, and batchrun's.

Targets (issue 27): coverage >= 0.94 at 60 documents and >= 0.90 at 10; every type-I error <=
0.05 + 2 standard errors. The last line: `coverage60=<..> coverage10=<..> type1=<worst over
scenarios of compare's two tests and the tie-group rule>`. --quick (~2 minutes on 2 idle cores)
runs fewer replications. The load average is printed: the machine is shared.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_line, note, print_table  # noqa: E402

from batchrun.publish import analysis, stats, student_t  # noqa: E402

N_TASKS = 481
DOCUMENTS = (5, 10, 20, 60)
ICC = 0.30  # intra-document correlation of one route's observed scores
MU = -0.3  # latent mean: a true score of 0.44
TASK_SHARE = 0.5  # of the within-document latent variance: shared task difficulty (the rest: each route's own noise)
INTERACTION_SHARE = 0.4  # of the between-document latent variance, in the interaction scenario
SIZE_SHAPE = 2.0  # Gamma shape of the document size weights (coefficient of variation 0.71)
ALPHA = 0.05
GROUP_ROUTES = 5  # routes in a tie-group replication (10 pairs, Holm over them)

_NODES, _WEIGHTS = np.polynomial.hermite.hermgauss(120)


def logistic(z: Any) -> Any:
    return 1.0 / (1.0 + np.exp(-z))


def expected(mu: Any, var: float) -> Any:
    """E logistic(mu + N(0, var)) by Gauss-Hermite quadrature (exact to ~1e-12 here)."""
    z = np.add.outer(np.asarray(mu, dtype=float), math.sqrt(2 * var) * _NODES)
    return (logistic(z) * _WEIGHTS).sum(axis=-1) / math.sqrt(math.pi)


def observed_icc(rho_latent: float) -> float:
    """Correlation of two tasks' scores on one document: Var_a E[f | a] / Var f, by quadrature."""
    doc = MU + math.sqrt(2 * rho_latent) * _NODES
    given_doc = expected(doc, 1 - rho_latent)
    mean = float((given_doc * _WEIGHTS).sum() / math.sqrt(math.pi))
    between = float((((given_doc - mean) ** 2) * _WEIGHTS).sum() / math.sqrt(math.pi))
    total = float((logistic(MU + math.sqrt(2.0) * _NODES) ** 2 * _WEIGHTS).sum() / math.sqrt(math.pi)) - mean**2
    return between / total


def calibrate() -> float:
    lo, hi = 0.0, 0.99
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if observed_icc(mid) < ICC else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Scenario:
    name: str
    docs: int
    interaction: bool
    size_shape: float = SIZE_SHAPE
    zero_docs: float = 0.0  # share of (route, document) scored 0 (out of context)
    n_tasks: int = N_TASKS


class Model:
    def __init__(self) -> None:
        self.rho = calibrate()
        self.truth = float(expected(MU, 1.0))

    def variances(self, interaction: bool) -> tuple[float, float, float, float]:
        """(document, interaction, task, route noise) latent variances."""
        c = INTERACTION_SHARE * self.rho if interaction else 0.0
        return self.rho - c, c, TASK_SHARE * (1 - self.rho), (1 - TASK_SHARE) * (1 - self.rho)

    def simulate(self, rng: np.random.Generator, sc: Scenario, reps: int, routes: int,
                 shifts: tuple[float, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
        """Documents of the tasks (n_tasks,) and scores (n_tasks, reps * routes): column
        rep * routes + k is route k of replication rep; routes of one replication share the
        document and task effects, replications share nothing but the document sizes. Route k's
        latent mean is MU + shifts[k] (MU where not given)."""
        weights = rng.gamma(sc.size_shape, size=sc.docs)
        sizes = 1 + rng.multinomial(sc.n_tasks - sc.docs, weights / weights.sum())
        doc = np.repeat(np.arange(sc.docs), sizes)
        v_doc, v_int, v_task, v_noise = self.variances(sc.interaction)
        rep_of = np.repeat(np.arange(reps), routes)
        mu = MU + np.tile(np.array([shifts[k] if k < len(shifts) else 0.0 for k in range(routes)]), reps)
        z = (mu + rng.normal(0, math.sqrt(v_doc), (sc.docs, reps))[doc][:, rep_of]
             + rng.normal(0, math.sqrt(v_task), (sc.n_tasks, reps))[:, rep_of]
             + rng.normal(0, math.sqrt(v_noise), (sc.n_tasks, reps * routes)))
        if v_int:
            z += rng.normal(0, math.sqrt(v_int), (sc.docs, reps * routes))[doc]
        y = logistic(z)
        if sc.zero_docs:
            y = np.where((rng.random((sc.docs, reps * routes)) < sc.zero_docs)[doc], 0.0, y)
        return doc, y

    def truth_of(self, sc: Scenario) -> float:
        return (1 - sc.zero_docs) * self.truth


def make_cells(doc: np.ndarray, scores: np.ndarray, names: list[str]) -> analysis.Cells:
    """The analysis.Cells the report would read from state.db: every cell scored."""
    ids = [f"t{i:03d}" for i in range(len(doc))]
    tasks = tuple(analysis.Task(t, i, f"doc{d:03d}", f"doc{d:03d}.txt", "", {}, None, None) for i, (t, d) in enumerate(zip(ids, doc)))
    status = {r: dict.fromkeys(ids, "ok") for r in names}
    score = {r: dict(zip(ids, scores[:, j].tolist())) for j, r in enumerate(names)}
    n = len(ids)
    board = sorted(({"route": r, "complete": True, "all_tasks_overall": float(scores[:, j].mean()), "n_tasks": n, "scored_n": n,
                     "out_of_context_n": 0, "failed_n": 0, "pending_n": 0, "waiting_n": 0, "blocked_n": 0, "accepted_n": 0}
                    for j, r in enumerate(names)), key=lambda row: -row["all_tasks_overall"])
    return analysis.Cells(tasks, status, score, tuple(board))


class Rate:
    """A proportion over replications, each contributing the mean of its trials. Its Monte-Carlo
    standard error treats each batch (replications sharing one draw of document sizes) as a
    cluster: coverage depends on the sizes, and trials within a replication correlate."""

    def __init__(self) -> None:
        self.per_rep: list[float] = []
        self.batch: list[int] = []

    def add(self, hits: Any, batch: int = -1) -> None:
        self.per_rep.append(float(np.mean(hits)))
        self.batch.append(batch if batch >= 0 else len(self.batch))

    @property
    def value(self) -> float:
        return float(np.mean(self.per_rep)) if self.per_rep else float("nan")

    @property
    def se(self) -> float:
        x, b = np.array(self.per_rep), np.array(self.batch)
        groups = np.unique(b)
        if len(groups) < 2:
            return float("nan")
        sums = np.array([(x[b == g] - x.mean()).sum() for g in groups])
        return float(math.sqrt(len(groups) / (len(groups) - 1) * (sums**2).sum()) / len(x))

    def text(self) -> str:
        return f"{self.value:.3f} ± {self.se:.3f}"


# --- 1 and 2: the headline interval and compare's tests -------------------------------------------------


def headline_and_compare(model: Model, sc: Scenario, reps: int, batch: int, rng: np.random.Generator,
                         settings: analysis.Settings, shift: float = 0.0) -> dict[str, Rate]:
    """With `shift`, route a's latent mean is that much higher than b's (power, not type-I error)."""
    out = {k: Rate() for k in ("coverage", "sign", "permutation", "diff_interval", "task_sign", "distinct")}
    truth = model.truth_of(sc)
    done = nbatch = 0
    while done < reps:
        k = min(batch, reps - done)
        nbatch += 1
        doc, y = model.simulate(rng, sc, k, 2, (shift,))
        names = [f"r{j:04d}" for j in range(2 * k)]
        cells = make_cells(doc, y, names)
        docs = stats.Documents([t.doc for t in cells.tasks])
        routes = analysis.route_statistics(cells, docs)
        table = analysis.compare_pairs(cells, [(names[2 * i], names[2 * i + 1]) for i in range(k)], docs, settings)
        for i, pair in enumerate(table):
            ivs = [routes[names[2 * i + j]]["all_tasks"] for j in ((0, 1) if not shift else (1,))]  # b keeps the base truth
            out["coverage"].add([iv["low"] <= truth <= iv["high"] for iv in ivs], nbatch)
            v = pair["all_tasks"]
            out["sign"].add(v["sign_p"] < ALPHA, nbatch)
            out["permutation"].add(v["permutation"]["p"] < ALPHA, nbatch)
            out["diff_interval"].add(not (v["low"] <= 0 <= v["high"]), nbatch)
            out["task_sign"].add(v["tasks"]["sign_p"] < ALPHA, nbatch)
            # The rule for this one pair (sign_p_holm is adjusted across the batch's pairs here).
            out["distinct"].add(analysis.distinct(v | {"sign_p_holm": v["sign_p"]}, ALPHA), nbatch)
        done += k
    return out


# --- 3: the tie-group rule ------------------------------------------------------------------------------


def tie_groups(model: Model, sc: Scenario, reps: int, rng: np.random.Generator, settings: analysis.Settings) -> tuple[Rate, Rate]:
    """The rule's type-I error, and for reference that of Holm alone over the task-level sign
    tests (any of the pairs rejected): the argument the README made before."""
    split, tasks_holm = Rate(), Rate()
    names = [f"r{j}" for j in range(GROUP_ROUTES)]
    for _ in range(reps):
        doc, y = model.simulate(rng, sc, 1, GROUP_ROUTES)
        cells = make_cells(doc, y, names)
        pw = analysis.pairwise(cells, stats.Documents([t.doc for t in cells.tasks]), settings)
        split.add(len(pw["groups"]["groups"]) > 1)
        adjusted = stats.holm([p["all_tasks"]["tasks"]["sign_p"] for p in pw["pairs"]])
        tasks_holm.add(min(a for a in adjusted if a is not None) < ALPHA)
    return split, tasks_holm


# --- 4: the minimum number of documents -------------------------------------------------------------------


def coverage_at(model: Model, sc: Scenario, reps: int, batch: int, rng: np.random.Generator) -> Rate:
    """Coverage of the interval route_statistics computes (stats.Documents.intervals clipped to the
    score range), below MIN_DOCUMENTS too."""
    rate = Rate()
    truth = model.truth_of(sc)
    done = 0
    while done < reps:
        k = min(batch, reps - done)
        doc, y = model.simulate(rng, sc, k, 1)
        ivs = stats.Documents(doc.tolist(), min_documents=2).intervals(y, bounds=analysis.SCORE_BOUNDS)
        for iv in ivs:
            rate.add(iv.low is not None and iv.low <= truth <= iv.high, done)
        done += k
    return rate


STRESS = {
    "as above": {},
    "very unequal documents (Gamma(0.7) weights)": {"size_shape": 0.7},
    "10% of documents scored 0 (out of context)": {"zero_docs": 0.1},
    "25% of documents scored 0": {"zero_docs": 0.25},
    "a breakdown group: 30 tasks": {"n_tasks": 30},
}


# --- 5: interval methods compared -------------------------------------------------------------------------


def methods_compared(doc: np.ndarray, y: np.ndarray, rng: np.random.Generator, resamples: int = 2000) -> dict[str, tuple[Any, Any]]:
    """Reference implementations of the candidates, on document sums, for the columns of y."""
    d = int(doc.max()) + 1
    one_hot = np.zeros((d, len(doc)))
    one_hot[doc, np.arange(len(doc))] = 1.0
    s, n = one_hot @ y, one_hot.sum(axis=1)[:, None] * np.ones((1, y.shape[1]))
    theta = s.sum(axis=0) / n.sum(axis=0)
    resid = s - theta * n
    se1 = np.sqrt(d / (d - 1) * (resid**2).sum(axis=0)) / n.sum(axis=0)
    q = float(student_t.t_quantile(0.975, d - 1))
    w = rng.multinomial(d, np.full(d, 1 / d), size=resamples).astype(float)
    num, den = w @ s, w @ n
    boot = num / den
    # Bootstrap-t: each resample's CR1 standard error (a document drawn twice counts twice).
    rss = (w @ s**2) - 2 * boot * (w @ (s * n)) + boot**2 * (w @ n**2)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_star = (boot - theta) / (np.sqrt(np.maximum(d / (d - 1) * rss, 0)) / den)
    t_star = np.where(np.isfinite(t_star), t_star, np.nan)
    t_lo, t_hi = np.nanpercentile(t_star, [2.5, 97.5], axis=0)
    ours = stats.Documents(doc.tolist()).intervals(y)
    return {
        "percentile bootstrap (before)": tuple(np.percentile(boot, [2.5, 97.5], axis=0)),
        "CR1 + t(D - 1)": (theta - q * se1, theta + q * se1),
        "bootstrap-t (studentized)": (theta - t_hi * se1, theta - t_lo * se1),
        "CR2 + Bell-McCaffrey df (batchrun)": (np.array([iv.low for iv in ours], dtype=float), np.array([iv.high for iv in ours], dtype=float)),
    }


def methods(model: Model, reps: int, batch: int, rng: np.random.Generator) -> None:
    rows: list[list[Any]] = []
    for label, extra in (("", {}), (", 10% docs scored 0", {"zero_docs": 0.1})):
        for d in DOCUMENTS:
            sc = Scenario(f"{d} docs{label}", d, False, **extra)  # type: ignore[arg-type]
            truth = model.truth_of(sc)
            rates: dict[str, Rate] = {}
            widths: dict[str, list[float]] = {}
            done = 0
            while done < reps:
                k = min(batch, reps - done)
                doc, y = model.simulate(rng, sc, k, 1)
                for name, (lo, hi) in methods_compared(doc, y, rng).items():
                    rates.setdefault(name, Rate())
                    for a, b in zip(lo, hi):
                        rates[name].add(bool(a <= truth <= b), done)
                    widths.setdefault(name, []).append(float(np.nanmedian(hi - lo)))
                done += k
            for name, rate in rates.items():
                rows.append([f"{sc.name}: {name}", rate.text(), f"{100 * np.mean(widths[name]):.1f}"])
    print("\nInterval methods on the same data (no interaction; coverage of the true mean, median width in points):")
    print_table(["scenario: method", "coverage", "width"], rows)


# --- the run ----------------------------------------------------------------------------------------------


POWER_DIFFERENCE = 0.05  # true All-tasks difference of the power scenario (5 points)


def solve_shift(model: Model, difference: float) -> float:
    """The latent shift that makes a route's true mean `difference` higher."""
    lo, hi = 0.0, 2.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(expected(MU + mid, 1.0)) - model.truth < difference else (lo, mid)
    return (lo + hi) / 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer replications (~2 minutes on 2 idle cores)")
    ap.add_argument("--reps", type=int, help="replications per scenario for coverage and compare (default 4000, quick 1000)")
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--methods", action="store_true", help="also compare interval methods (the measurement behind the choice)")
    args = ap.parse_args(argv)
    reps = args.reps or (1000 if args.quick else 4000)
    group_reps = max(reps // 5, 50)
    stress_reps = reps
    # Replications per draw of document sizes: small, so that a figure averages over many designs.
    batch = 25
    rng = np.random.default_rng(args.seed)
    settings = analysis.Settings()
    started = time.perf_counter()
    loads = [load_line()]
    model = Model()
    print(f"coverage.py: {N_TASKS} tasks; intra-document correlation {observed_icc(model.rho):.3f} (latent {model.rho:.3f}); "
          f"true mean {model.truth:.4f}; interaction share {INTERACTION_SHARE} of the document variance; "
          f"{reps} replications per scenario (tie groups {group_reps}); seed {args.seed}; {loads[0]}")

    worst = (0.0, 0.0, "")
    coverage: dict[int, float] = {}
    rows, group_rows = [], []
    for interaction in (False, True):
        for d in DOCUMENTS:
            sc = Scenario(f"{d} docs, {'with' if interaction else 'no'} interaction", d, interaction)
            note(f"{sc.name} ({load_line()})")
            r = headline_and_compare(model, sc, reps, batch, rng, settings)
            g, g_tasks = tie_groups(model, sc, group_reps, rng, settings)
            coverage[d] = min(coverage.get(d, 1.0), r["coverage"].value)
            rows.append([sc.name, r["coverage"].text(), r["sign"].text(), r["permutation"].text(), r["diff_interval"].text(),
                         r["task_sign"].text()])
            group_rows.append([sc.name, g.text(), g_tasks.text()])
            for what, rate in (("compare sign test", r["sign"]), ("compare permutation test", r["permutation"]), ("tie groups", g)):
                if rate.value > worst[0] or not worst[2]:
                    worst = (rate.value, rate.se, f"{what}, {sc.name}")
                if rate.value > ALPHA + 2 * rate.se:
                    print(f"MISSED: {what}, {sc.name}: {rate.text()} > {ALPHA} + 2 SE")
    print("\nHeadline interval and compare (two routes, same true scores; rates at p < 0.05):")
    print_table(["scenario", "coverage", "sign (docs)", "perm. (docs)", "Δ interval excl. 0", "sign (tasks, secondary)"], rows)
    print(f"\nTie-group rule ({GROUP_ROUTES} routes, same true scores, Holm over {GROUP_ROUTES * (GROUP_ROUTES - 1) // 2} pairs): "
          "share of replications split into more than one group")
    print_table(["scenario", "the rule", "Holm alone over task-level sign tests"], group_rows)

    print(f"\nThe minimum number of documents (stats.MIN_DOCUMENTS = {stats.MIN_DOCUMENTS}): coverage of the interval, no interaction")
    stress_rows = []
    for label, extra in STRESS.items():
        row: list[Any] = [label]
        for d in (2, 3, 5, 10):
            note(f"minimum: {label}, {d} docs")
            row.append(coverage_at(model, Scenario(label, d, False, **extra), stress_reps, batch, rng).text())  # type: ignore[arg-type]
        stress_rows.append(row)
    print_table(["scenario", "2 docs", "3 docs", "5 docs", "10 docs"], stress_rows)

    shift = solve_shift(model, POWER_DIFFERENCE)
    power_rows = []
    for interaction in (False, True):
        sc = Scenario(f"60 docs, {'with' if interaction else 'no'} interaction", 60, interaction)
        note(f"power: {sc.name}")
        r = headline_and_compare(model, sc, reps // 4, batch, rng, settings, shift)
        power_rows.append([sc.name, r["sign"].text(), r["permutation"].text(), r["distinct"].text(), r["task_sign"].text()])
    print(f"\nPower (what it costs): two routes {100 * POWER_DIFFERENCE:.0f} points apart in true score, 60 documents; "
          "rate at p < 0.05 (the tie-group rule for this one pair: both conditions, no Holm)")
    print_table(["scenario", "sign (docs)", "perm. (docs)", "rule", "sign (tasks, not valid)"], power_rows)

    if args.methods:
        methods(model, reps, batch, rng)
    loads.append(load_line())
    print(f"\n{time.perf_counter() - started:.0f} s; {loads[0]} at the start, {loads[-1]} at the end")
    print(f"worst type-I error: {worst[0]:.3f} ± {worst[1]:.3f} ({worst[2]})")
    print(f"coverage60={coverage[60]:.3f} coverage10={coverage[10]:.3f} type1={worst[0]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
