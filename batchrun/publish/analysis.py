"""The statistics of a publishable report, computed from state.db: intervals, paired comparisons,
breakdowns, judge panel health and what changed since the last refresh.

Everything is read once from `cells_now` (outputs.snapshot_cells) and the tables, then handed to
the pure functions of `stats`. Scores are fractions 0-1 in the data (JSON, CSV); human formats
show 0-100. The document is the unit of every interval and paired test (one `stats.Documents`
per report): an interval resting on fewer than stats.MIN_DOCUMENTS documents is not printed, and
the pairwise tables say when a pair differs on too few documents for any test to reject.

Which tasks count, per value (spec 001 §5):
- All-tasks: a scored cell counts its score, a final failure (out of context, refusal, empty,
  accepted) counts 0; an open cell (pending, judging, waiting, blocked) counts nothing, and a
  route with one has no headline, hence no interval either.
- Scored: scored cells only.

A route with accepted failures (accept-failures) has no protocol All-tasks (`all_tasks_overall`
null, spec 001 §5; its `accepted_overall` is not a protocol number): it is left out of the
ranked routes, hence of intervals, pairs, groups and breakdowns, unless the report or comparison
is asked for `provisional` results, which say so.
"""

from __future__ import annotations

import json
import string
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..base.errors import BatchrunError, ConfigError, Incomplete
from ..base.gcpause import gc_paused
from ..ledger.inputs import Inputs, as_inputs
from ..ledger.store import Store
from ..protocol.config import Config
from . import agreement, stats
from .outputs import ZERO_FILLED, judge_scores, report_data

DEFAULT_RESAMPLES = stats.DEFAULT_RESAMPLES
DEFAULT_SEED = stats.DEFAULT_SEED
# The range a mean can take: intervals are clipped to it (a wide interval on 3 documents would
# otherwise run past 0 or 100).
SCORE_BOUNDS = (0.0, 1.0)
DIFF_BOUNDS = (-1.0, 1.0)

# Document length buckets, in characters as the harness reads them (powers of 4 from 4,000: at
# ~3.3 characters a token, <1.2k, 1.2k-5k, 5k-20k, 20k-80k, 80k-300k and >=300k tokens of English).
LENGTH_BUCKETS: tuple[tuple[int, int | None, str], ...] = (
    (0, 4_000, "<4k"), (4_000, 16_000, "4k-16k"), (16_000, 64_000, "16k-64k"), (64_000, 256_000, "64k-256k"),
    (256_000, 1_000_000, "256k-1M"), (1_000_000, None, ">=1M"),
)
LENGTH_RULE = "document length in characters: <4k, 4k-16k, 16k-64k, 64k-256k, 256k-1M, >=1M"
# A dataset field is a breakdown when every task's value is a scalar (or missing) and it has
# between 2 and MAX_CATEGORIES distinct values, at most one per two tasks (ids and free text are not).
MAX_CATEGORIES = 20
CATEGORY_RULE = (f"every dataset field whose values are scalars with 2 to {MAX_CATEGORIES} distinct values, "
                 "at most one distinct value per two tasks")
LANGUAGE_RULE = "the CJK rule: more than 20 ideographs U+4E00-U+9FFF in the document's first 4,000 characters"
OPEN_STATUSES = ("pending", "judging", "waiting", "blocked")


@dataclass(frozen=True)
class Settings:
    resamples: int = DEFAULT_RESAMPLES  # Monte-Carlo sign flips of the document permutation test
    seed: int = DEFAULT_SEED
    alpha: float = stats.ALPHA
    # Rank routes with accepted failures too, by accepted_overall (report --provisional): their
    # numbers are not protocol numbers, and every output says so.
    provisional: bool = False


@dataclass(frozen=True)
class Task:
    task_id: str
    position: int
    doc: str  # the document's sha256: the unit of every interval and paired test
    corpus_file: str
    question: str
    fields: dict[str, Any]
    doc_chars: int | None
    cjk: bool | None


@dataclass(frozen=True)
class Cells:
    """Every current cell, read once: tasks in dataset order and per route a status and score per task."""

    tasks: tuple[Task, ...]
    status: dict[str, dict[str, str]]
    score: dict[str, dict[str, float | None]]
    board: tuple[dict[str, Any], ...] = field(default_factory=tuple)  # leaderboard rows, in order
    provisional: bool = False  # Settings.provisional

    def all_tasks(self, route: str) -> list[float | None]:
        """Per task: the score, 0 for a final failure, None for an open cell."""
        st, sc = self.status.get(route, {}), self.score.get(route, {})
        return [sc.get(t.task_id) if st.get(t.task_id) == "ok" else 0.0 if st.get(t.task_id) in ZERO_FILLED else None
                for t in self.tasks]

    def scored(self, route: str) -> list[float | None]:
        st, sc = self.status.get(route, {}), self.score.get(route, {})
        return [sc.get(t.task_id) if st.get(t.task_id) == "ok" else None for t in self.tasks]

    def matrix(self, kind: str, routes: list[str]) -> Any:
        """numpy tasks x routes of `all_tasks` or `scored` values, NaN for None."""
        import numpy as np

        get = self.all_tasks if kind == "all_tasks" else self.scored
        return np.array([[np.nan if v is None else v for v in get(r)] for r in routes], dtype=np.float64).reshape(
            len(routes), len(self.tasks)).T

    @property
    def complete_routes(self) -> list[str]:
        """Routes with a headline, in leaderboard order (All-tasks descending). Provisional: also
        the routes whose All-tasks is withheld for accepted failures, ranked by accepted_overall."""
        if not self.provisional:
            return [r["route"] for r in self.board if r["complete"] and r["all_tasks_overall"] is not None]
        value: dict[str, float] = {}
        for r in self.board:
            v = r["all_tasks_overall"] if r["all_tasks_overall"] is not None else r.get("accepted_overall")
            if r["complete"] and v is not None:
                value[r["route"]] = v
        return sorted(value, key=lambda route: -value[route])  # stable: ties keep the board's order


def read_cells(store: Store, board: list[dict[str, Any]], *, provisional: bool = False) -> Cells:
    """Reads `cells_now` (fill it first with outputs.snapshot_cells)."""
    per_task: dict[str, tuple[int | None, bool | None]] = {}
    status: dict[str, dict[str, str]] = defaultdict(dict)
    score: dict[str, dict[str, float | None]] = defaultdict(dict)
    for route, task_id, st, sc, chars, cjk in store.db.execute("SELECT route, task_id, status, score, doc_chars, cjk FROM cells_now"):
        status[route][task_id] = st
        score[route][task_id] = sc
        per_task.setdefault(task_id, (chars, None if cjk is None else bool(cjk)))
    tasks = tuple(
        Task(r[0], r[1], r[2], r[3], r[4], json.loads(r[5] or "{}"), *per_task.get(r[0], (None, None)))
        for r in store.db.execute("SELECT task_id, position, doc_sha256, corpus_file, question, fields_json FROM tasks ORDER BY position"))
    return Cells(tasks, dict(status), dict(score), tuple(board), provisional)


def _letters(i: int) -> str:
    s = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        s = string.ascii_uppercase[r] + s
    return s


# --- per route ---------------------------------------------------------------------------------------


def route_statistics(cells: Cells, docs: stats.Documents) -> dict[str, dict[str, Any]]:
    """Per route: All-tasks and Scored with intervals (complete routes only), and coverage."""
    import numpy as np

    complete = set(cells.complete_routes)
    keys = [r["route"] for r in cells.board if r["route"] in complete]
    columns = np.empty((len(cells.tasks), 2 * len(keys)))
    columns[:, 0::2] = cells.matrix("all_tasks", keys)
    columns[:, 1::2] = cells.matrix("scored", keys)
    ivs = docs.intervals(columns, bounds=SCORE_BOUNDS)
    by_route = {route: (ivs[2 * i], ivs[2 * i + 1]) for i, route in enumerate(keys)}
    out = {}
    for r in cells.board:
        a, s = by_route.get(r["route"], (None, None))
        out[r["route"]] = {
            "complete": r["route"] in complete,
            "all_tasks": a.as_json() if a else None,
            "scored": s.as_json() if s else None,
            "coverage": {"n_tasks": r["n_tasks"], "scored": r["scored_n"], "out_of_context": r["out_of_context_n"],
                         "failed": r["failed_n"], "pending": r["pending_n"], "waiting": r["waiting_n"],
                         "blocked": r["blocked_n"], "accepted": r["accepted_n"]},
        }
    return out


# --- paired comparisons ------------------------------------------------------------------------------


VARIANTS = {
    "all_tasks": "every task both routes have finished, zero-filled (out of context, refusal, empty and accepted count 0)",
    "both_scored": "the tasks both routes scored",
}


def compare_pairs(cells: Cells, pairs: list[tuple[str, str]], docs: stats.Documents, settings: Settings) -> list[dict[str, Any]]:
    """Both variants for each (a, b): mean of a - b with its interval, and the paired tests with
    the document as the unit (documents won/lost/tied, the exact sign test on them, the
    permutation test flipping whole documents); Holm across `pairs` per variant and test. The
    task-level wins/losses/ties and sign test stay as a labelled secondary figure (`tasks`): they
    treat tasks as independent. The differences of every pair are one numpy matrix (tasks x pairs)."""
    import numpy as np

    names = sorted({r for p in pairs for r in p})
    index = {r: i for i, r in enumerate(names)}
    ia, ib = [index[a] for a, _ in pairs], [index[b] for _, b in pairs]
    results: dict[str, dict[str, list[Any]]] = {}
    for variant in VARIANTS:
        values = cells.matrix(variant, names)
        diffs = values[:, ia] - values[:, ib]  # NaN where either side has no value
        counted = ~np.isnan(diffs)
        wins, losses = (np.nan_to_num(diffs) > 0).sum(axis=0), (np.nan_to_num(diffs) < 0).sum(axis=0)
        ties = counted.sum(axis=0) - wins - losses
        tests = docs.paired_tests(diffs, resamples=settings.resamples, seed=settings.seed)
        results[variant] = {"iv": docs.intervals(diffs, bounds=DIFF_BOUNDS), "tests": tests,
                            "sign_holm": stats.holm([t.sign_p for t in tests]),
                            "perm_holm": stats.holm([t.permutation.p for t in tests]),
                            "tasks": [{"wins": int(w), "losses": int(lo), "ties": int(t), "sign_p": stats.round_p(stats.sign_test(int(w), int(lo)))}
                                      for w, lo, t in zip(wins, losses, ties)]}
    out = []
    for k, (a, b) in enumerate(pairs):
        entry: dict[str, Any] = {"a": a, "b": b}
        for variant, r in results.items():
            iv, test = r["iv"][k], r["tests"][k]
            entry[variant] = {
                "n": iv.n, "n_documents": iv.n_documents, "mean_diff": stats._round(iv.estimate), "low": stats._round(iv.low),
                "high": stats._round(iv.high), "se": stats._round(iv.se), "df": stats._round(iv.df, 3),
                "wins": test.wins, "losses": test.losses, "ties": test.ties,
                "sign_p": stats.round_p(test.sign_p), "sign_p_holm": stats.round_p(r["sign_holm"][k]),
                "permutation": test.permutation.as_json(), "permutation_p_holm": stats.round_p(r["perm_holm"][k]),
                "tasks": r["tasks"][k],
            }
        out.append(entry)
    return out


def grouping_rule(n_pairs: int, alpha: float) -> str:
    return (f"Routes are ranked by All-tasks. Each route joins the group of the route ranked just above it unless that route "
            f"is better on two counts, on every task (zero-filled), with the document as the unit: it wins significantly more "
            f"documents than it loses (a document counts by the sign of its summed difference; exact two-sided sign test, "
            f"Holm-adjusted across all {n_pairs} pairs, p < {alpha}), and the 95% interval of the mean difference (documents "
            f"as clusters) lies above 0. Routes in one group are statistically indistinguishable by this rule; groups chain, "
            f"so the ends of a long group may still differ from each other. Two routes that differ on fewer than "
            f"{stats.min_documents_to_reject(alpha, max(n_pairs, 1))} documents can never be told apart: the smallest sign-test "
            f"p on n documents is 2/2^n.")


def distinct(v: dict[str, Any], alpha: float) -> bool:
    """The grouping rule for one pair (either way round), on the published (rounded) figures so
    that anyone can re-derive the groups from the JSON. The sign test on documents (exact at
    any number of documents, and Holm-adjusted without the resolution floor a Monte-Carlo p
    would put on 435 pairs) says one route wins more documents; the interval says the mean,
    which the ranking uses, is higher too. Both must point the same way: a route with many
    zero-filled tasks can have the higher mean yet lose most documents where the two differ.
    Both treat the document as the unit, so the sign test's Holm adjustment alone bounds the
    family-wise error by alpha, and requiring the interval too only rejects less often
    (measured: bench/coverage.py)."""
    p, low, high = v["sign_p_holm"], v["low"], v["high"]
    if p is None or p >= alpha or low is None:
        return False
    return (v["wins"] > v["losses"] and low > 0) or (v["wins"] < v["losses"] and high < 0)


def pairwise(cells: Cells, docs: stats.Documents, settings: Settings) -> dict[str, Any]:
    ranked = cells.complete_routes
    pairs = [(ranked[i], ranked[j]) for i in range(len(ranked)) for j in range(i + 1, len(ranked))]
    table = compare_pairs(cells, pairs, docs, settings)
    index = {(e["a"], e["b"]): e for e in table}
    adjacent = [distinct(index[(ranked[i], ranked[i + 1])]["all_tasks"], settings.alpha) for i in range(len(ranked) - 1)]
    groups = stats.indistinguishable_groups(ranked, adjacent)
    return {
        "routes": ranked, "variants": VARIANTS, "pairs": table,
        "tests": tests_description(settings),
        "few_documents": few_documents(len(pairs), settings.alpha),
        "groups": {"rule": grouping_rule(len(pairs), settings.alpha), "alpha": settings.alpha,
                   "groups": [{"label": _letters(i), "routes": g} for i, g in enumerate(groups)]},
    }


def tests_description(settings: Settings) -> dict[str, str]:
    return {
        "unit": "document",
        "decision": "exact two-sided sign test on the documents each route wins (a document counts once, by the sign of its "
                    "summed difference; tied documents dropped), Holm-adjusted across all pairs, together with the 95% interval "
                    "of the mean difference (see the grouping rule)",
        "also": "paired sign-flip permutation test of the mean difference that flips all of a document's tasks together: exact "
                f"enumeration up to {stats.EXACT_PERMUTATION_MAX} documents that differ, else Monte-Carlo with "
                f"{settings.resamples} draws (seed {settings.seed})",
        "interval": "95% t interval of the mean difference with the document as the cluster (CR2 standard error, "
                    "Bell-McCaffrey degrees of freedom)",
        "tasks": "secondary, for reference: wins/losses/ties over tasks and the sign test on them treat tasks as independent, "
                 "which tasks sharing a document are not; such a test rejects far more often than its level when a route's "
                 "advantage varies by document (bench/coverage.py)",
    }


def few_documents(n_pairs: int, alpha: float) -> dict[str, Any]:
    """When a comparison rests on too few documents to mean anything, and what it can't do then."""
    one, holm_all = stats.min_documents_to_reject(alpha), stats.min_documents_to_reject(alpha, max(n_pairs, 1))
    return {"interval_min_documents": stats.MIN_DOCUMENTS, "reject_min_documents": one, "reject_min_documents_holm": holm_all,
            "note": f"An interval needs at least {stats.MIN_DOCUMENTS} documents (fewer: not estimable, \"—\"). A pair that "
                    f"differs on fewer than {one} documents cannot reach p < {alpha} on its own, nor on fewer than {holm_all} "
                    f"after Holm's adjustment across all {n_pairs} pairs: the smallest exact p on n documents is 2/2^n."}


def _task_list(ids: list[str], limit: int = 10) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def compare(store: Store, config: Config, a: str, b: str, settings: Settings = Settings()) -> dict[str, Any]:
    """`batchrun compare A B`: the paired comparison of two contestant routes, on equal runs.

    Spec 002's contract (a comparison refuses runs whose task sets differ): both routes must have
    finished every task, else `Incomplete` (exit 2) names the missing and unfinished tasks per
    route. A route with accepted failures has no protocol All-tasks (spec 001 §5) and is refused
    too (exit 1). `settings.provisional` compares the tasks both have finished instead (accepted
    cells counted 0, as in its accepted_overall), and the result says so. Nothing compared (n = 0)
    is always refused."""
    from .outputs import leaderboard

    board = leaderboard(store)  # fills cells_now
    names = [r["route"] for r in board]
    for name in (a, b):
        if name not in names:
            raise config.route_error(name, what="", among=names, kind="contestant route")
    if a == b:
        raise ConfigError("compare needs two different routes.", f"Contestant routes: {', '.join(n for n in config.routes if n in names)}.")
    cells = read_cells(store, board)
    rows = {r["route"]: r for r in board}
    unequal = []
    for r in (a, b):
        st = cells.status.get(r, {})
        missing = [t.task_id for t in cells.tasks if t.task_id not in st]
        unfinished = [t.task_id for t in cells.tasks if st.get(t.task_id) in OPEN_STATUSES]
        if missing:
            unequal.append(f"{r}: {len(missing)} task(s) not planned yet ({_task_list(missing)})")
        if unfinished:
            unequal.append(f"{r}: {len(unfinished)} task(s) unfinished ({_task_list(unfinished)})")
    accepted = [r for r in (a, b) if rows[r]["accepted_n"]]
    notes = []
    if unequal and not settings.provisional:
        raise Incomplete(f"compare {a} {b}: the two runs are not equal, so their comparison would not be either: "
                         + "; ".join(unequal) + ".",
                         "Run `batchrun refresh` until both routes are complete (`batchrun status` shows what is open), or "
                         "pass --provisional to compare only the tasks both have finished.")
    if accepted and not settings.provisional:
        raise BatchrunError(
            f"compare {a} {b}: " + ", ".join(f"{r} has {rows[r]['accepted_n']} accepted infrastructure failure(s)" for r in accepted)
            + ": its All-tasks is not a protocol number (spec 001 §5), so it is compared only provisionally.",
            f"Pass --provisional to compare anyway (the result says so), or reopen them: batchrun retry --route {accepted[0]} "
            "--status accepted.")
    docs = stats.Documents([t.doc for t in cells.tasks])
    (entry,) = compare_pairs(cells, [(a, b)], docs, settings)
    n = entry["all_tasks"]["n"]
    if n == 0:
        raise Incomplete(f"compare {a} {b}: no task is finished by both routes, so there is nothing to compare (n = 0)"
                         + (": " + "; ".join(unequal) if unequal else "") + ".",
                         "Run `batchrun refresh` until both routes have answers.")
    # Provisional only where it had to be: equal, complete runs without accepted failures are not.
    provisional = settings.provisional and bool(unequal or accepted)
    if provisional and unequal:
        notes.append(f"PROVISIONAL: compared on the {n} of {len(cells.tasks)} task(s) both routes have finished, not on equal "
                     "complete runs: " + "; ".join(unequal) + ".")
    if provisional:
        notes += [f"PROVISIONAL: {r} has {rows[r]['accepted_n']} accepted infrastructure failure(s), counted 0 here: "
                  "not a protocol number (spec 001 §5)." for r in accepted]
    if entry["both_scored"]["n"] == 0:
        notes.append("No task was scored by both routes: the both-scored view has nothing to compare (n = 0).")
    few = few_documents(1, settings.alpha)
    for variant, title in (("all_tasks", "every task"), ("both_scored", "the tasks both scored")):
        v = entry[variant]
        if not v["n"]:
            continue
        if v["n_documents"] < stats.MIN_DOCUMENTS:
            notes.append(f"{title}: {v['n_documents']} document(s), fewer than {stats.MIN_DOCUMENTS}: no interval (not estimable)")
        if v["wins"] + v["losses"] < few["reject_min_documents"]:
            notes.append(f"{title}: the routes differ on {v['wins'] + v['losses']} document(s), fewer than "
                         f"{few['reject_min_documents']}: neither test can reach p < {settings.alpha} on so few")
    return {"a": a, "b": b, "score_scale": "0-1", "scale": "fractions 0-1 (differences a - b)",
            "provisional": provisional, "protocol": config.protocol, "protocol_note": config.protocol_note,
            "headline": {r: {"all_tasks_overall": rows[r]["all_tasks_overall"], "scored_overall": rows[r]["scored_overall"],
                             "accepted_overall": rows[r]["accepted_overall"], "complete": bool(rows[r]["complete"])} for r in (a, b)},
            "variants": VARIANTS, "all_tasks": entry["all_tasks"], "both_scored": entry["both_scored"],
            "intervals": docs.describe(), "tests": tests_description(settings), "few_documents": few,
            "permutations": {"resamples": settings.resamples, "seed": settings.seed, "exact_up_to": stats.EXACT_PERMUTATION_MAX,
                             "unit": "document"},
            "notes": notes, "rehearsal": config.rehearsal or store.meta("rehearsal")}


# --- breakdowns -------------------------------------------------------------------------------------------


def _bucket(chars: int | None) -> str | None:
    if chars is None:
        return None
    for low, high, label in LENGTH_BUCKETS:
        if chars >= low and (high is None or chars < high):
            return label
    return None


def categorical_fields(tasks: tuple[Task, ...]) -> list[str]:
    n = len(tasks)
    names: list[str] = []
    for t in tasks:
        names += [k for k in t.fields if k not in names]
    out = []
    for name in names:
        values = [t.fields.get(name) for t in tasks]
        if any(isinstance(v, (dict, list)) for v in values):
            continue
        distinct = {json.dumps(v) for v in values if v is not None}
        if 2 <= len(distinct) <= MAX_CATEGORIES and len(distinct) <= n / 2:
            out.append(name)
    return out


def _label(v: Any) -> str:
    if v is None:
        return "(missing)"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def breakdowns(cells: Cells, docs: stats.Documents) -> list[dict[str, Any]]:
    """Per dimension and value: its tasks and documents and, per complete route, All-tasks and
    Scored with intervals (each with the documents it rests on; None below MIN_DOCUMENTS)."""
    dims: list[tuple[str, str, str, list[str | None]]] = [
        ("language", "Language", LANGUAGE_RULE,
         [None if t.cjk is None else ("CJK" if t.cjk else "non-CJK") for t in cells.tasks]),
        ("doc_length", "Document length", LENGTH_RULE, [_bucket(t.doc_chars) for t in cells.tasks]),
    ]
    for name in categorical_fields(cells.tasks):
        dims.append((f"field:{name}", name, f"dataset field `{name}` ({CATEGORY_RULE})",
                     [_label(t.fields.get(name)) for t in cells.tasks]))
    import numpy as np

    routes = cells.complete_routes
    all_m, scored_m = cells.matrix("all_tasks", routes), cells.matrix("scored", routes)
    plan: list[tuple[int, str, list[int]]] = []
    for d, (_, _, _, keys) in enumerate(dims):
        values: dict[str, list[int]] = defaultdict(list)
        for i, k in enumerate(keys):
            if k is not None:
                values[k].append(i)
        if d == 1:
            order = [label for _, _, label in LENGTH_BUCKETS if label in values]
        else:
            order = sorted(values, key=lambda v: (-len(values[v]), v))
        plan += [(d, v, values[v]) for v in order]
    # Per group, its routes' All-tasks then Scored columns, NaN outside the group: one matrix.
    blocks = []
    for _, _, idx in plan:
        member = np.zeros(len(cells.tasks), dtype=bool)
        member[idx] = True
        pair = np.empty((len(cells.tasks), 2 * len(routes)))
        pair[:, 0::2] = np.where(member[:, None], all_m, np.nan)
        pair[:, 1::2] = np.where(member[:, None], scored_m, np.nan)
        blocks.append(pair)
    ivs = docs.intervals(np.hstack(blocks), bounds=SCORE_BOUNDS) if blocks and routes else []
    out: list[dict[str, Any]] = [{"dimension": key, "title": title, "rule": rule, "values": []} for key, title, rule, _ in dims]
    slot = 0
    for d, value, idx in plan:
        entry: dict[str, Any] = {"value": value, "n_tasks": len(idx), "n_documents": len({cells.tasks[i].doc for i in idx}),
                                 "routes": {}}
        for r in routes:
            entry["routes"][r] = {"all_tasks": ivs[slot].as_json(), "scored": ivs[slot + 1].as_json()}
            slot += 2
        out[d]["values"].append(entry)
    return [d for d in out if d["values"]]


# --- the judge panel -----------------------------------------------------------------------------------


def judge_health(store: Store, config: Config, cells: Cells, judgments: list[dict[str, Any]]) -> dict[str, Any]:
    panel = [j.name for j in config.judges]
    models = {j.name: j.model for j in config.judges}
    attempts: dict[str, dict[str, int]] = defaultdict(dict)
    # Every request of history is read either way: NOT INDEXED reads the table in order instead of
    # the requests_route index and then each row of the table by rowid (0.10 s vs 0.17 s at 95,000
    # requests, bench/scale.py). Grouped and counted: the same rows in any order.
    for judge, kind, n in store.db.execute(
        """SELECT jr.route, res.kind, count(*) FROM requests jr NOT INDEXED JOIN results res ON res.custom_id = jr.custom_id
           JOIN config_routes j ON j.route = jr.route AND j.policy_fp = jr.policy_fp AND j.role = 'judge'
           WHERE jr.stage = 'judge' GROUP BY jr.route, res.kind"""):
        attempts[judge][kind] = n
    by_cell: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for r in judgments:
        if r["score"] is not None:
            by_cell[(r["route"], r["task_id"])][r["judge"]] = r["score"]
    judges = []
    for j in panel:
        scores = [s[j] for s in by_cell.values() if j in s]
        tries = attempts.get(j, {})
        total = sum(tries.values())
        failed = total - tries.get("ok", 0)
        judges.append({
            "judge": j, "model": models[j], "n_scored": len(scores), "mean_score": stats._round(stats.mean(scores)),
            "attempts": total, "failed_attempts": failed, "parse_failures": tries.get("unparseable", 0),
            "retry_rate": stats._round(failed / total) if total else None,
            "parse_failure_rate": stats._round(tries.get("unparseable", 0) / total) if total else None,
            "failures_by_kind": {k: v for k, v in sorted(tries.items()) if k != "ok"},
        })
    pairs = []
    for i, a in enumerate(panel):
        for b in panel[i + 1:]:
            both = [(s[a], s[b]) for s in by_cell.values() if a in s and b in s]
            xs, ys = [x for x, _ in both], [y for _, y in both]
            pairs.append({"a": a, "b": b, "n": len(both), "pearson": stats._round(agreement.pearson(xs, ys)),
                          "spearman": stats._round(agreement.spearman(xs, ys)),
                          "mean_abs_diff": stats._round(agreement.mean_abs_diff(xs, ys))})
    units = [[s.get(j) for j in panel] for s in by_cell.values()]
    alpha = agreement.krippendorff_alpha(units, "interval") if len(panel) >= 2 else None
    # Each route's answers that every judge scored, grouped in one pass (in by_cell's order).
    scored_by_all: dict[str, list[dict[str, float]]] = defaultdict(list)
    for (rt, _), s in by_cell.items():
        if all(j in s for j in panel):
            scored_by_all[rt].append(s)
    spread = []
    for r in cells.board:
        route = r["route"]
        full = scored_by_all.get(route, [])
        means = {j: stats._round(stats.mean([s[j] for s in full])) for j in panel}
        present = [m for m in means.values() if m is not None]
        panel_mean = stats.mean(present)
        far = max(panel, key=lambda j: abs((means[j] or 0) - (panel_mean or 0))) if present else None
        spread.append({"route": route, "n": len(full), "judge_means": means,
                       "spread": stats._round(max(present) - min(present)) if present else None,
                       "farthest_from_panel_mean": far})
    return {
        "panel": panel, "judges": judges, "agreement": pairs,
        "krippendorff_alpha_interval": stats._round(alpha), "alpha_units": sum(1 for u in units if sum(v is not None for v in u) >= 2),
        "spread_by_route": spread,
        "notes": "Per-task scores are each judge's clamp(total / rubric sum, 0, 1) on the current cells; agreement and "
                 "alpha use every (route, task) answer the judges both (all) scored. retry_rate: share of a judge's "
                 "attempts (results rows under its current policy) that were not ok; parse failures are replies with no "
                 "parseable total.",
    }


# --- everything -----------------------------------------------------------------------------------------


def statistics(store: Store, config: Config, board: list[dict[str, Any]], settings: Settings = Settings(),
               *, judgments: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The `statistics` block of the report. Reads `cells_now` (fill it first)."""
    from . import snapshots

    cells = read_cells(store, board, provisional=settings.provisional)
    docs = stats.Documents([t.doc for t in cells.tasks])
    pw = pairwise(cells, docs, settings)
    group_of = {route: g["label"] for g in pw["groups"]["groups"] for route in g["routes"]}
    routes = route_statistics(cells, docs)
    for route, entry in routes.items():
        entry["group"] = group_of.get(route)
    return {
        "scale": "fractions 0-1 in JSON and CSV; Markdown and HTML show 0-100",
        "provisional": settings.provisional,
        "intervals": docs.describe(),
        "permutations": {"resamples": settings.resamples, "seed": settings.seed, "exact_up_to": stats.EXACT_PERMUTATION_MAX,
                         "unit": "document"},
        "routes": routes,
        "pairwise": pw,
        "breakdowns": breakdowns(cells, docs),
        "judges": judge_health(store, config, cells, judgments if judgments is not None else judge_scores(store)),
        "changes": snapshots.changes(store, board=board),
    }


def full_report(store: Store, config: Config | Inputs, settings: Settings = Settings(), *,
                judgments: list[dict[str, Any]] | None = None, board: list[dict[str, Any]] | None = None,
                with_tasks: bool = True) -> dict[str, Any]:
    """report_data (leaderboard, per-task scores, provenance) plus its statistics. `board`: the
    leaderboard just read (outputs.leaderboard, which filled cells_now), if the caller has it.
    `with_tasks=False`: without each route's per-task rows (for Markdown and CSV, which print none).
    `config`: the command's resolved inputs (a Config's policies are resolved here)."""
    from .outputs import leaderboard

    inputs = as_inputs(store, config, corpus=False)

    # The report is ~100,000 small dicts and lists, none in a cycle: the cyclic garbage collector's
    # passes over them found nothing and cost ~0.09 s at 32 routes x 100k results (issue 15).
    with gc_paused():
        board = board if board is not None else leaderboard(store)  # fills cells_now
        judgments = judgments if judgments is not None else judge_scores(store)
        data = report_data(store, inputs, board, judgments, with_tasks=with_tasks)
        # The report's routes carry every leaderboard column the statistics read.
        data["statistics"] = statistics(store, inputs.config, data["routes"], settings, judgments=judgments)
    return data
