"""The per-cell state kept current in state.db: the views' rows, evaluated only for what changed.

`request_status` and `cell_status` are the definition of every state (docs/schema.md). Evaluating
them costs all of the current requests and their results (~1.3 s at 32 routes and 100,000
results), and every command used to pay it: `status`, `report`, a `collect` with nothing new.
Here their rows are kept in `kept_requests` and `kept_cells` (migration m023, which says how a
change is noticed) and brought up to date by `keep_current`, in the transaction of the writer
that changed them: collect calls it once its lines are in and their judge requests queued, and
every writer at its end.

`keep_current` evaluates the views' own SQL (pending.view_sql) exactly as a command did, over
the current requests that changed (`kept_dirty`, and every result above `results_upto`) and the
cells they belong to, and replaces those rows; when the inputs changed (another config, dataset,
corpus) it evaluates everything again. `is_current` says whether the kept rows may be read as
they are: a reader (`status`, `report`) that finds them stale evaluates the views itself and
writes nothing. tests/test_kept_state.py compares the kept rows with the views over randomized
histories, writers killed mid-way included.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .pending import drop_temp, evaluate_requests, set_aside, view_sql
from .store import Store

# What the views read besides results, requests, batches and reopens (which kept_dirty follows):
# compared by content, since the sync rewrites these tables on every command.
_INPUTS = (
    "SELECT route, role, policy_fp, provider, model, retry_budget, resubmit_budget, panel_position FROM config_routes "
    "ORDER BY route, role",
    "SELECT task_id, task_sha256, graded_sha256, rubric_total FROM tasks ORDER BY task_id",
    """SELECT c.route, c.task_id, c.policy_fp, c.scope, c.custom_id, c.cap, c.cap_source, c.cjk, c.doc_chars, c.task_sha256
       FROM config_routes cr JOIN cells c ON c.policy_fp = cr.policy_fp AND c.route = cr.route
       WHERE cr.role = 'contestant' ORDER BY c.route, c.task_id""",
)


# Above this share of the kept requests changed, everything is evaluated again rather than the
# changed ones: the views over all current requests cost about as much as over a third of them
# plus replacing their rows (bench/ingest.py's nights change most of them).
REBUILD_SHARE = 0.3


@dataclass(frozen=True)
class Mark:
    """kept_meta: what the kept rows were computed from."""

    inputs: str | None
    run_id: int | None
    results_upto: int | None
    epoch: int


def available(store: Store) -> bool:
    """Whether this state.db has the kept tables (m023; a reader may open an older one)."""
    return store.scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'kept_meta'") is not None


def inputs_digest(store: Store) -> str:
    """The inputs the kept rows depend on beyond what kept_dirty follows (~15,000 cells at 32
    routes: ~0.1 s). Computed again only when this connection changed a row since (its
    total_changes) or another one committed (data_version): a command asks up to four times."""
    conn = store.db.conn
    key = (conn.total_changes, conn.execute("PRAGMA data_version").fetchone()[0])
    memo = _DIGESTS.get(store)
    if memo is not None and memo[0] == key:
        return memo[1]
    h = hashlib.sha256()
    for sql in _INPUTS:
        for row in store.db.execute(sql):
            h.update(repr(row).encode())
        h.update(b"\x00")
    _DIGESTS[store] = (key, h.hexdigest())
    return h.hexdigest()


_DIGESTS: weakref.WeakKeyDictionary[Store, tuple[tuple[int, int], str]] = weakref.WeakKeyDictionary()


def _mark(store: Store) -> Mark:
    row = store.db.execute("SELECT inputs, run_id, results_upto, epoch FROM kept_meta WHERE id = 1").fetchone()
    return Mark(*row) if row else Mark(None, None, None, 0)


def _now(store: Store) -> tuple[int | None, int | None]:
    """The newest run and result (rowid order: results and runs are never deleted)."""
    return store.scalar("SELECT max(id) FROM runs"), store.scalar("SELECT max(id) FROM results")


def is_current(store: Store) -> bool:
    """Whether kept_requests and kept_cells are what the views give now."""
    if not available(store):
        return False
    mark = _mark(store)
    if mark.inputs is None or (mark.run_id, mark.results_upto) != _now(store):
        return False
    if store.scalar("SELECT 1 FROM kept_dirty LIMIT 1") is not None:
        return False
    return mark.inputs == inputs_digest(store)


def request_states(store: Store) -> str | None:
    """For a writer: the kept request states, brought up to date, as a table name for
    pending.scan_pending (None: this state.db keeps none, or it is read-only; evaluate them)."""
    if store.readonly or not available(store):
        return None
    keep_current(store)
    return "main.kept_requests"


def keep_current(store: Store, *, check_inputs: bool = True) -> None:
    """Bring the kept rows up to date, inside the caller's transaction if there is one.

    `check_inputs=False`: the caller knows the inputs did not change since they were last
    checked (the digest is then not computed; tests/test_kept_state.py mixes both)."""
    db = store.db
    with db.atomic(), _temp_cache(store):
        mark = _mark(store)
        run_id, results_upto = _now(store)
        digest = inputs_digest(store) if check_inputs or mark.inputs is None else mark.inputs
        if mark.inputs != digest:
            _rebuild(store)
            changed = True
        elif _most_changed(store, store.scalar("SELECT count(*) FROM kept_dirty") or 0):
            # Decided by what the triggers named alone (the rows added below only add to it):
            # neither night of bench/ingest.py then copies its 15,000 / 87,000 new results' ids
            # into kept_dirty to delete them again (0.03 / 0.15 s of CPU).
            _rebuild(store)
            changed = True
        else:
            if results_upto is not None and results_upto != mark.results_upto:
                db.execute("INSERT OR IGNORE INTO kept_dirty (custom_id) SELECT custom_id FROM results WHERE id > ?",
                           [mark.results_upto or 0])
            if run_id != mark.run_id:
                # A new run: the retry budgets count this run's failures, of which there are none
                # yet (each result of it is new, above), so only the counts of the run before go.
                db.execute("""INSERT OR IGNORE INTO kept_dirty (custom_id) SELECT custom_id FROM kept_requests
                              WHERE retry_run_n > 0 OR resubmit_run_n > 0 OR state = 'waiting'""")
            if _most_changed(store, store.scalar("SELECT count(*) FROM kept_dirty") or 0):
                _rebuild(store)  # most requests changed (a night's answers or verdicts): all at once is cheaper
                changed = True
            else:
                changed = _update(store)
        set_aside(store)  # evaluate_requests' tables (a reader's requests_now is kept_requests now)
        db.execute("DELETE FROM kept_dirty")
        db.execute("UPDATE kept_meta SET inputs = ?, run_id = ?, results_upto = ?, epoch = epoch + ? WHERE id = 1",
                   [digest, run_id, results_upto, int(changed)])
        if check_inputs or mark.inputs is None:  # computed just now: the writes since changed no input
            conn = db.conn
            _DIGESTS[store] = ((conn.total_changes, conn.execute("PRAGMA data_version").fetchone()[0]), digest)


# SQLite's page cache for the temporary tables while they are evaluated (its own, default 2 MB;
# store.page_cache sets main's). The full evaluation's tables are ~70 MB at bench/ingest.py's
# night 2 (105,254 requests): with 2 MB they went out to the temporary file and were read back
# 1.7 GB in 4 KB reads; with 32 MB, 0.5 GB, and the full evaluation took 1.75 s of CPU instead
# of 2.05 (median of 4, load ~4.5; 64 MB: 1.79, temp_store=MEMORY: 1.70 but not capped). A cap,
# so memory still follows it, not the number of requests.
TEMP_CACHE_KIB = 32768


@contextmanager
def _temp_cache(store: Store) -> Iterator[None]:
    db = store.db
    old = db.execute("PRAGMA temp.cache_size").fetchone()[0]
    db.execute(f"PRAGMA temp.cache_size = -{TEMP_CACHE_KIB}")
    try:
        yield
    finally:
        db.execute(f"PRAGMA temp.cache_size = {int(old)}")


def _most_changed(store: Store, dirty: int) -> bool:
    """Whether `dirty` changed requests are enough to evaluate everything again (REBUILD_SHARE)."""
    return dirty > REBUILD_SHARE * (store.scalar("SELECT count(*) FROM kept_requests") or 0)


def _columns(store: Store, table: str) -> str:
    return ", ".join(r[1] for r in store.db.execute(f"PRAGMA main.table_info({table})"))


def _cells_sql(store: Store, cells: str, requests: str) -> str:
    # cell_status over the given cells and a table of their requests' states.
    return view_sql(store, "cell_status", request_status=requests, cells=cells)


# The index _rebuild gives temp.requests_now before evaluating cell_status over it (why: there).
CELLS_INDEX = "CREATE INDEX temp.requests_now_cells ON requests_now (custom_id, state, ok_result_id, final_result_id, last_result_id)"


def _rebuild(store: Store) -> None:
    """Everything evaluated again (the inputs changed, or first use)."""
    db = store.db
    evaluate_requests(store)
    req, cel = _columns(store, "kept_requests"), _columns(store, "kept_cells")
    db.execute("DELETE FROM kept_requests")
    db.execute(f"INSERT INTO kept_requests ({req}) SELECT {req} FROM temp.requests_now")
    # cell_status looks up each cell's request and each judge request by custom_id: without an
    # index SQLite builds the same automatic covering index twice per evaluation (~0.35 s of
    # 0.75 s at 15,000 cells, bench/ingest.py). This is that index, built once: the columns the
    # view reads, so the plan (and the order each mean adds its judges in) stays the same; with
    # a unique index on custom_id SQLite reorders the joins and the last bit of some means differs
    # (tests/test_kept_state.py compares the plans).
    db.execute(CELLS_INDEX)
    db.execute("DELETE FROM kept_cells")
    db.execute(f"INSERT INTO kept_cells ({cel}) SELECT {cel} FROM ({_cells_sql(store, 'cells', 'temp.requests_now')})")


def _update(store: Store) -> bool:
    """The dirty requests and their cells evaluated again; whether any kept row changed."""
    db = store.db
    if db.execute("SELECT 1 FROM kept_dirty LIMIT 1").fetchone() is None:
        return False
    req, cel = _columns(store, "kept_requests"), _columns(store, "kept_cells")
    # A judge request's state reads its answer's request (an accepted failure is the contestant
    # route's): evaluated with it, as the full evaluation has it at hand.
    # (CROSS JOIN: the changed requests looked up, not every request scanned for them.)
    db.execute("""INSERT OR IGNORE INTO kept_dirty (custom_id) SELECT r.parent_custom_id FROM kept_dirty d
                  CROSS JOIN requests r ON r.custom_id = d.custom_id WHERE r.parent_custom_id IS NOT NULL""")
    evaluate_requests(store, among="main.kept_dirty")  # temp.requests_now: the dirty ones still wanted
    for table in ("kept_old_requests", "kept_cell_keys", "kept_old_cells", "kept_new_cells", "kept_sub_requests"):
        db.execute(f"DROP TABLE IF EXISTS temp.{table}")
    db.execute(f"CREATE TEMP TABLE kept_old_requests AS SELECT {req} FROM kept_requests WHERE custom_id IN (SELECT custom_id FROM kept_dirty)")
    db.execute("DELETE FROM kept_requests WHERE custom_id IN (SELECT custom_id FROM kept_dirty)")
    db.execute(f"INSERT INTO kept_requests ({req}) SELECT {req} FROM temp.requests_now")
    # The cells whose state reads a dirty request: its own cell, or the cell a judge request grades.
    db.execute("""CREATE TEMP TABLE kept_cell_keys AS
                  SELECT c.policy_fp, c.task_id FROM kept_dirty d JOIN cells c ON c.custom_id = d.custom_id
                  UNION
                  SELECT c.policy_fp, c.task_id FROM kept_dirty d JOIN requests r ON r.custom_id = d.custom_id
                  JOIN cells c ON c.custom_id = r.parent_custom_id""")
    db.execute("""CREATE TEMP TABLE kept_new_cells AS SELECT c.* FROM cells c
                  JOIN config_routes cr ON cr.route = c.route AND cr.policy_fp = c.policy_fp AND cr.role = 'contestant'
                  WHERE (c.policy_fp, c.task_id) IN (SELECT policy_fp, task_id FROM temp.kept_cell_keys)""")
    db.execute(f"CREATE TEMP TABLE kept_old_cells AS SELECT {cel} FROM kept_cells WHERE (route, task_id) IN "
               "(SELECT route, task_id FROM temp.kept_new_cells)")
    db.execute("DELETE FROM kept_cells WHERE (route, task_id) IN (SELECT route, task_id FROM temp.kept_new_cells)")
    # cell_status reads the states of each cell's request and of its judge requests: copied into
    # a table without an index, as the full evaluation has them (temp.requests_now), so SQLite
    # plans the view the same way and each score's mean over the judges adds them in the same
    # order (over the indexed kept_requests the last bit of a mean can differ).
    db.execute(f"""CREATE TEMP TABLE kept_sub_requests AS SELECT {req} FROM kept_requests
                   WHERE custom_id IN (SELECT custom_id FROM temp.kept_new_cells)
                      OR parent_custom_id IN (SELECT custom_id FROM temp.kept_new_cells) ORDER BY rowid""")
    db.execute(f"""INSERT INTO kept_cells ({cel}) SELECT {cel} FROM
                   ({_cells_sql(store, 'temp.kept_new_cells', 'temp.kept_sub_requests')})""")
    changed = any(
        db.execute(sql).fetchone() is not None for sql in (
            f"""SELECT 1 FROM (SELECT {req} FROM temp.requests_now EXCEPT SELECT {req} FROM temp.kept_old_requests)""",
            f"""SELECT 1 FROM (SELECT {req} FROM temp.kept_old_requests EXCEPT SELECT {req} FROM temp.requests_now)""",
            f"""SELECT 1 FROM (SELECT {cel} FROM kept_cells WHERE (route, task_id) IN (SELECT route, task_id FROM temp.kept_new_cells)
                               EXCEPT SELECT {cel} FROM temp.kept_old_cells)""",
            f"""SELECT 1 FROM (SELECT {cel} FROM temp.kept_old_cells EXCEPT SELECT {cel} FROM kept_cells
                               WHERE (route, task_id) IN (SELECT route, task_id FROM temp.kept_new_cells))""",
        ))
    for table in ("kept_old_requests", "kept_cell_keys", "kept_old_cells", "kept_new_cells", "kept_sub_requests"):
        db.execute(f"DROP TABLE temp.{table}")
    return changed


# Where each row out of requests' order goes (keep_planned). Keyed by the row's rowid, so that
# each move looks its target up: without a key every move scanned the table, and the moves grow
# with every _update since the last full evaluation (each appends its rows at the end): 37,415 of
# 54,507 rows out of order after four reopen rounds took 18.9 s instead of 0.3 s (found by review;
# tests/test_kept_state.py checks the plan).
PLANNED_MOVES_TABLE = "CREATE TEMP TABLE kept_planned_moves (kr INTEGER PRIMARY KEY, rn INTEGER NOT NULL)"
PLANNED_MOVES = """UPDATE kept_requests SET rowid = -(SELECT rn FROM temp.kept_planned_moves m WHERE m.kr = kept_requests.rowid)
                   WHERE rowid IN (SELECT kr FROM temp.kept_planned_moves)"""


def keep_planned(store: Store, planned: list[str]) -> bool:
    """The kept state brought up to date after plan put the pending requests `planned` into
    batches now 'planned', without evaluating the views; whether it was (False: nothing done,
    keep_current evaluates them as before).

    The caller promises that this is the only change since the kept state was last brought up to
    date (plan: kept.request_states, then files written and recorded). What request_status then
    gives is known: a pending request is neither 'ok' (no ok result) nor 'failed', so in a
    planned batch it is 'in_flight' and every other column (they read results, reopens and runs)
    is as it was; and no cell's row moves (cell_status reads 'pending' and 'in_flight' alike: a
    contestant cell is 'pending' with either, a judge request counts as open with either). At 30
    routes plan moves 40,578 of 54,318 current requests, past REBUILD_SHARE, and keep_current
    evaluated every view again for that (~0.65 s of the judge stage's ~3 s). What the triggers
    named is checked against `planned` (kept_dirty must hold exactly those), with the runs, the
    results and the inputs; anything else falls back. The rows end as keep_current leaves them,
    rowids included (the order a later update reads them in): numbered in requests' order where
    it would evaluate everything, the moved ones appended in that order where it would update
    them. tests/test_kept_state.py compares them with keep_current's rows and with the views."""
    db = store.db
    if not planned or not available(store):
        return False
    with db.atomic(), _temp_cache(store):
        mark = _mark(store)
        if mark.inputs is None or (mark.run_id, mark.results_upto) != _now(store):
            return False
        # Exactly the requests planned, each once, and each of them pending (custom_ids are ASCII:
        # SQLite's BINARY order is Python's).
        if [r[0] for r in db.execute("SELECT custom_id FROM kept_dirty ORDER BY custom_id")] != sorted(planned):
            return False
        if store.scalar("""SELECT count(*) FROM kept_dirty d CROSS JOIN kept_requests k ON k.custom_id = d.custom_id
                           WHERE k.state = 'pending'""") != len(planned):
            return False
        if mark.inputs != inputs_digest(store):
            return False
        if _most_changed(store, len(planned)):
            # keep_current would evaluate everything again, its rows numbered in requests' order:
            # the rows not already at their number are moved there (214 of 54,318 at 30 routes;
            # through negative numbers, which no row has), the planned ones' state set in place.
            # (Every row copied out and back in that order cost 0.3-0.35 s of CPU at 30 routes.)
            db.execute("DROP TABLE IF EXISTS temp.kept_planned_moves")
            db.execute(PLANNED_MOVES_TABLE)
            db.execute("""INSERT INTO temp.kept_planned_moves SELECT kr, rn FROM (
                              SELECT k.rowid AS kr, row_number() OVER (ORDER BY r.rowid) AS rn FROM kept_requests k
                              CROSS JOIN requests r ON r.custom_id = k.custom_id) WHERE kr != rn""")
            db.execute(PLANNED_MOVES)
            db.execute("UPDATE kept_requests SET rowid = -rowid WHERE rowid < 0")
            db.execute("DROP TABLE temp.kept_planned_moves")
            db.execute("UPDATE kept_requests SET state = 'in_flight' WHERE custom_id IN (SELECT custom_id FROM kept_dirty)")
        else:
            # keep_current would update the changed ones and the answers their judge requests grade
            # (_update): those rows deleted, then appended in requests' order.
            req = _columns(store, "kept_requests")
            state = "CASE WHEN k.custom_id IN (SELECT custom_id FROM kept_dirty) THEN 'in_flight' ELSE k.state END AS state"
            rows = ", ".join(state if c == "state" else f"k.{c}" for c in req.split(", "))
            db.execute("DROP TABLE IF EXISTS temp.kept_planned_rows")
            db.execute(f"""CREATE TEMP TABLE kept_planned_rows AS SELECT {rows}
                           FROM (SELECT custom_id FROM kept_dirty UNION SELECT q.parent_custom_id
                                 FROM kept_dirty d CROSS JOIN requests q ON q.custom_id = d.custom_id) m
                           CROSS JOIN kept_requests k ON k.custom_id = m.custom_id
                           CROSS JOIN requests r ON r.custom_id = k.custom_id ORDER BY r.rowid""")
            db.execute("DELETE FROM kept_requests WHERE custom_id IN (SELECT custom_id FROM temp.kept_planned_rows)")
            db.execute(f"INSERT INTO kept_requests ({req}) SELECT {req} FROM temp.kept_planned_rows ORDER BY rowid")
            db.execute("DROP TABLE temp.kept_planned_rows")
        db.execute("DELETE FROM kept_dirty")
        db.execute("UPDATE kept_meta SET epoch = epoch + 1 WHERE id = 1")
        conn = db.conn  # the inputs were checked just now, and these writes changed none
        _DIGESTS[store] = ((conn.total_changes, conn.execute("PRAGMA data_version").fetchone()[0]), mark.inputs)
    return True
