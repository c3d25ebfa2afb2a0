"""What is owed: the requests the current config wants, and which of them are pending.

`current_requests_sql` is the one definition of "a request the current config wants";
`evaluate_requests` evaluates its state once per command (the views' own SQL, `view_sql`, over
just those rows); `scan_pending` lists the wanted requests with nothing live and something left
to try, split into the ones due now and the ones backing off after a failure;
`observed_output_tokens` replaces the output budget by what a route really returned once it has
returned enough. plan.py writes the pending requests into request files; collect, refresh,
diagnosis and decisions read the same bookkeeping from here.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Literal

from ..base.backoff import round_backoff
from ..base.errors import damaged_database
from ..protocol.config import Config
from .cost import observed_usage
from .lifecycle import Status, move_all
from .store import Store


def current_requests_sql(among: str | None = None, *, columns: str | None = None) -> str:
    """custom_ids of the requests the current config wants (gen of current cells, judges of those).
    `among`: a table of custom_ids; only those of them (ledger.kept: the requests that changed).
    `columns`: instead of the custom_ids, the wanted requests' rows (`requests_rowid` and these
    columns of requests), each once: a cell's custom_id is a hash of its policy and task (ledger.ids), so
    no two current cells share one, and a judge request has one parent."""
    current_cell = """JOIN config_routes cr ON cr.route = c.route AND cr.policy_fp = c.policy_fp AND cr.role = 'contestant'
        JOIN tasks t ON t.task_id = c.task_id AND t.task_sha256 = c.task_sha256"""
    judge_route = "JOIN config_routes j ON j.route = jr.route AND j.policy_fp = jr.policy_fp AND j.role = 'judge'"
    if among:  # a few (CROSS JOIN: without statistics SQLite would scan the cells and requests for them)
        judges = f"""{among} a CROSS JOIN requests jr ON jr.custom_id = a.custom_id {judge_route}
        JOIN cells c ON c.custom_id = jr.parent_custom_id {current_cell}"""
    else:
        # Every current cell's judge requests, found by parent (index requests_parent_route_policy),
        # rather than every request ever queued scanned for its cell (SQLite's choice without the
        # CROSS JOIN): 0.21 s instead of 0.25-0.34 s at bench/ingest.py's night 2 (89,862 judges).
        judges = f"cells c {current_cell} CROSS JOIN requests jr ON jr.parent_custom_id = c.custom_id {judge_route}"
    gen, gen_rows, judge_rows = "c.custom_id", "", "jr.custom_id"
    if columns:
        gen_rows = "JOIN requests r ON r.custom_id = c.custom_id"
        gen = ", ".join(["r.rowid AS requests_rowid"] + [f"r.{col}" for col in columns.split(", ")])
        judge_rows = ", ".join(["jr.rowid AS requests_rowid"] + [f"jr.{col}" for col in columns.split(", ")])
    return f"""
      SELECT {gen} FROM {f"{among} a CROSS JOIN cells c ON c.custom_id = a.custom_id" if among else "cells c"}
        {current_cell} {gen_rows}
        WHERE c.custom_id IS NOT NULL
      UNION ALL
      SELECT {judge_rows} FROM {judges}
        WHERE jr.stage = 'judge' AND jr.graded_sha256 = t.graded_sha256"""


def view_sql(store: Store, view: str, **tables: str) -> str:
    """The SELECT of one of state.db's views as its newest migration defined it, with the views it
    reads (keys) replaced by tables already evaluated (values). The views stay the one definition
    of every state; this only lets a command evaluate each of them once."""
    sql = store.scalar("SELECT sql FROM sqlite_master WHERE type = 'view' AND name = ?", [view])
    match = re.match(rf"\s*CREATE\s+VIEW\s+{view}\s+AS\s", sql or "", re.IGNORECASE)
    if match is None:
        # Every migration that defines it was applied (Store's version check): removed or
        # replaced since, by hand or by a partial restore.
        raise damaged_database(store.path, f"its view {view!r} is missing or not the one batchrun's migrations created")
    body = sql[match.end():]
    for name, table in tables.items():
        body = re.sub(rf"\b{name}\b", table, body)
    return body


def drop_temp(store: Store, name: str) -> None:
    """Drop the temporary table or view `name` if there is one (`requests_now` and `cells_now` are
    views of the kept state when it is current, tables evaluated here when it is not)."""
    kind = store.scalar("SELECT type FROM sqlite_temp_master WHERE name = ?", [name])
    if kind in ("table", "view"):
        store.db.execute(f"DROP {kind.upper()} temp.{name}")


# The results request_outcomes aggregates: those of the wanted requests, with the columns it reads
# (a migration that reads another one fails here, loudly). Each request's are found in the covering
# index results_outcome (custom_id, kind, collected_at, run_id; rowid is the id), never in the
# table's rows, whose text comes before collected_at: copying them into a table in id order read
# every row (0.25 of 0.58 s for the two statements at bench/ingest.py's night 2, 102,148 results;
# now 0.28 s for this one). CROSS JOIN keeps the wanted requests outside: without statistics
# SQLite would scan the whole index for a few of them (kept._update). The aggregate sums counts
# and takes min/max, so the order rows arrive in changes no value.
WANTED_RESULTS = """(SELECT res.id, res.custom_id, res.kind, res.collected_at, res.run_id
                     FROM temp.wanted w CROSS JOIN main.results res ON res.custom_id = w.custom_id)"""


# The columns of requests that request_status reads (r.* and its parent p), copied for the wanted
# requests (a migration that reads another one fails here, loudly): the other six (the estimates,
# the answer graded, when it was queued) only made the copy and its drop bigger.
STATUS_COLUMNS = "custom_id, stage, route, task_id, policy_fp, parent_custom_id, max_retries, max_resubmits"


def evaluate_requests(store: Store, among: str | None = None) -> None:
    """request_status evaluated once, into the temporary table `requests_now`, for the requests
    the current config wants (current_requests_sql) and only their results, found by index.

    A view is evaluated again by every query that reads it, and SQLite pushes no filter into
    request_outcomes (an aggregate over every result ever collected, history included), so a
    query of request_status costs all of history. This runs the views' own SQL (view_sql) once,
    over just the rows they need: plan's scan and outputs.snapshot_cells read `requests_now`.
    `among`: only the requests of that table of custom_ids (ledger.kept: the ones that changed)."""
    db = store.db
    for table in ("requests_now", "outcomes_now", "wanted", "requests_wanted"):
        drop_temp(store, table)
        drop_temp(store, SPENT + table)  # set_aside's, and their indexes' names with them
    if among:
        db.execute("CREATE TEMP TABLE wanted (custom_id TEXT PRIMARY KEY) WITHOUT ROWID")
        db.execute(f"INSERT OR IGNORE INTO temp.wanted {current_requests_sql(among)}")
        # A few wanted requests, looked up.
        db.execute(f"""CREATE TEMP TABLE requests_wanted AS SELECT {', '.join(f'r.{c}' for c in STATUS_COLUMNS.split(', '))}
                       FROM temp.wanted w CROSS JOIN requests r ON r.custom_id = w.custom_id ORDER BY r.rowid""")
    else:
        # All of them: their rows taken as the cells' requests and judge requests are found (in
        # requests' own order, as a scan of requests gave them), not their ids gathered into a
        # table first and requests scanned for them: at bench/ingest.py's nights (101,474 wanted
        # requests) 0.63 s -> ~0.3 s for this and the index below.
        db.execute(f"""CREATE TEMP TABLE requests_wanted AS SELECT {STATUS_COLUMNS}
                       FROM ({current_requests_sql(columns=STATUS_COLUMNS)}) ORDER BY requests_rowid""")
    db.execute("CREATE UNIQUE INDEX temp.requests_wanted_id ON requests_wanted (custom_id)")  # request_status's parent lookup
    if not among:
        db.execute("CREATE TEMP VIEW wanted AS SELECT custom_id FROM temp.requests_wanted")  # WANTED_RESULTS reads it
    # Keyed by custom_id (the view's own columns, untyped as CREATE TABLE AS made them): request_status
    # looks each request's outcomes up by it, and SQLite built an automatic index over every
    # column of an unkeyed table for that; the GROUP BY hands the rows over in key order, so
    # each goes in at the end of the tree. request_status 0.33 -> 0.26 s at night 2 (101,474).
    columns = [row[1] for row in db.execute("PRAGMA main.table_info(request_outcomes)")]
    if columns[:1] != ["custom_id"]:
        raise RuntimeError("state.db's request_outcomes does not begin with custom_id")
    db.execute(f"CREATE TEMP TABLE outcomes_now (custom_id PRIMARY KEY, {', '.join(columns[1:])}) WITHOUT ROWID")
    db.execute(f"INSERT INTO temp.outcomes_now {view_sql(store, 'request_outcomes', results=WANTED_RESULTS)}")
    db.execute(f"""CREATE TEMP TABLE requests_now AS {view_sql(store, 'request_status', request_outcomes='temp.outcomes_now',
                                                              requests='temp.requests_wanted')}""")


# evaluate_requests' tables once read (set_aside): renamed, their pages released with the
# connection's temporary file, or dropped by the next evaluation.
SPENT = "spent_"


def set_aside(store: Store) -> None:
    """evaluate_requests' temporary tables out of the way once read, without dropping them.

    Dropping a table frees its pages one by one, reading back each one SQLite's page cache had
    written out to the temporary file: the full evaluation's tables at bench/ingest.py's night 2
    (105,254 requests, ~70 MB) took 0.2-0.25 s of CPU to drop. Renamed, they go with the
    temporary file when the connection closes (a command's end), or when the next evaluation in
    the same connection drops them; the page cache stays capped, so memory does not grow."""
    for table in ("requests_now", "requests_wanted", "outcomes_now", "wanted"):
        if store.scalar("SELECT type FROM sqlite_temp_master WHERE name = ?", [table]) == "table":
            drop_temp(store, SPENT + table)
            store.db.execute(f"ALTER TABLE temp.{table} RENAME TO {SPENT}{table}")
        else:
            drop_temp(store, table)  # the view `wanted` of the full evaluation


def supersede_stale_batches(store: Store) -> None:
    """Batches not created at a provider, holding requests the inputs no longer want, are dropped.

    Planned ones were never uploaded. Uploaded ones (or a crashed upload) have a file at the
    provider but no batch: every create refused certainly (a quota hold, a refused key) leaves
    them there, and nothing of them was sent to a model, so nothing is lost by planning the cells
    again from the new inputs (resume.py refuses only where a provider has the batch)."""
    stale = f"""EXISTS (SELECT 1 FROM batch_requests br WHERE br.batch_id = batches.id
                        AND br.custom_id NOT IN ({current_requests_sql()}))"""
    move_all(store, Status.PLANNED, Status.SUPERSEDED, stale, error="config changed before upload")
    for status in (Status.UPLOADING, Status.UPLOADED):
        move_all(store, status, Status.SUPERSEDED, stale, error="inputs changed before the batch was created (nothing was sent to a model)")


# --- pending requests -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pending:
    """A request to write: what plan needs to build its line and estimate it (slots: a plan of
    30 routes holds ~15,000 of these)."""

    custom_id: str
    stage: Literal["gen", "judge"]
    route: str
    task_id: str
    parent_result_id: int | None  # judge requests: the answer being graded
    est_input_tokens: int
    est_output_tokens: int


@dataclass(frozen=True)
class PendingScan:
    """What can be sent now, and what waits for its backoff to end."""

    due: list[Pending]
    backing_off: int = 0  # requests that failed and wait out their backoff before the next attempt
    next_retry_at: float | None = None  # when the first of those becomes due (epoch seconds)
    # Per route: (requests backing off, when the first of them becomes due): what `status` says.
    backing_off_by_route: dict[str, tuple[int, float]] = field(default_factory=dict)


def pending_requests(store: Store, config: Config, *, routes: set[str] | None = None, stages: set[str] | None = None,
                     states: str | None = None) -> list[Pending]:
    """Current requests with nothing live, something left to try, and no backoff to wait out."""
    return scan_pending(store, config, routes=routes, stages=stages, states=states).due


def scan_pending(store: Store, config: Config, *, routes: set[str] | None = None, stages: set[str] | None = None,
                 now: float | None = None, states: str | None = None, estimates: bool = True) -> PendingScan:
    """Pending requests in a stable order, split into those due now and those backing off.

    A request that failed is due `clients.round_backoff` after its last failure was collected
    (honouring the provider's Retry-After), counted by its failures in this run; a `retry`
    (reopen) after the failure makes it due at once. `states`: a table of request_status's rows
    for the current requests (kept.request_states: the kept state, current); evaluated here without.
    `estimates=False`: the due requests keep their planned output estimates (a reader that only
    asks what backs off skips reading every result's usage)."""
    now = time.time() if now is None else now
    if states is None:
        evaluate_requests(store)  # request_status of the current requests only: not all of history
        states = "temp.requests_now"
    cur = store.db.execute(
        f"""SELECT s.custom_id, s.stage, s.route, s.task_id, r.parent_result_id, r.est_input_tokens, r.est_output_tokens,
                   p.route AS judged_route, s.retry_run_n + s.resubmit_run_n AS run_failures, s.reopened_at,
                   last.collected_at AS failed_at, last.retry_after, b.transport, last.batch_id
            FROM {states} s JOIN requests r ON r.custom_id = s.custom_id
            JOIN tasks t ON t.task_id = s.task_id
            LEFT JOIN requests p ON p.custom_id = r.parent_custom_id
            LEFT JOIN results last ON last.id = s.last_result_id
            LEFT JOIN batches b ON b.id = last.batch_id
            WHERE s.state = 'pending'
            ORDER BY s.stage DESC, s.route, t.position, r.rowid"""  # ties (a judge's answers of one task) as queued
    )
    observed = observed_output_tokens(store) if estimates else {}
    due: list[Pending] = []
    backing_off = 0
    next_at: float | None = None
    by_route: dict[str, tuple[int, float]] = {}
    for (custom_id, stage, route, task_id, parent_result_id, est_in, est_out, judged_route, run_failures, reopened_at,
         failed_at, retry_after, transport, failed_batch) in cur:
        if routes and route not in routes and not (stage == "judge" and judged_route in routes):
            continue
        if stages and stage not in stages:
            continue
        if failed_at is not None and not (reopened_at is not None and reopened_at >= failed_at):
            # Requests that failed together in one batch share their jitter: they go out together.
            wait = round_backoff(transport or "batch", max(run_failures, 1), retry_after=retry_after,
                                 jitter_key=f"{route}:{failed_batch}")
            if failed_at + wait > now:
                backing_off += 1
                next_at = failed_at + wait if next_at is None else min(next_at, failed_at + wait)
                n, at = by_route.get(route, (0, failed_at + wait))
                by_route[route] = (n + 1, min(at, failed_at + wait))
                continue
        avg = observed.get((route, stage))
        if avg is not None:
            est_out = min(avg, est_out)
        due.append(Pending(custom_id, stage, route, task_id, parent_result_id, est_in, est_out))
    return PendingScan(due, backing_off, next_at, by_route)


# Successful results a route needs before its observed average replaces the budget as the estimate.
OBSERVED_MIN_RESULTS = 5


def observed_output_tokens(store: Store) -> dict[tuple[str, str], int]:
    """Average output tokens per (route, stage) over its successful results, once there are enough
    (billed output: with the reasoning tokens of providers that report them apart)."""
    return {key: math.ceil(u.billed_ok / u.n_ok) for key, u in observed_usage(store).items() if u.n_ok >= OBSERVED_MIN_RESULTS}
