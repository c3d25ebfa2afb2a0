"""state.db's schema: the sqlite-utils migrations that build it.

Tables hold facts as they happened (documents seen, requests planned, batches created, every
result line downloaded, every judgment parsed); nothing is overwritten. What a cell's state *is*
(pending, in flight, ok, failed) is derived from those rows by the views below, so there is one
source of truth. `config_routes` is the one exception: a snapshot of the current config that the
views use to show only rows produced under the current policies.

Schema changes are migrations (`m001_…`, `m002_…`): never edit an applied one, add the next with
a comment saying why. docs/schema.md is generated from them (`python -m batchrun.ledger.schema_doc`).
store.Store applies the pending ones when it opens state.db for writing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported by `database()` and `_Migrations` when a writer needs them
    from sqlite_utils import Database
    from sqlite_utils.migrations import Migrations


def _import_sqlite_utils() -> None:
    """sqlite-utils imports numpy at import time when it is installed, only to map numpy types
    in inserts (batchrun inserts none). numpy is installed for the report's statistics (stats),
    which import it when they run; loading it in every command would add ~0.1 s to each, even
    `--help`. So it is hidden during this one import, unless something already loaded it."""
    import sys

    if "numpy" in sys.modules or "sqlite_utils" in sys.modules:
        import sqlite_utils  # noqa: F401
        return
    sys.modules["numpy"] = None  # type: ignore[assignment]  # makes `import numpy` raise ImportError
    try:
        import sqlite_utils  # noqa: F401
    finally:
        del sys.modules["numpy"]


def database(conn: sqlite3.Connection | None = None) -> Database:
    """sqlite-utils' Database on `conn` (in memory without one): what writers and migrations use."""
    _import_sqlite_utils()
    from sqlite_utils import Database

    return Database(conn, execute_plugins=False) if conn is not None else Database(memory=True, execute_plugins=False)


class _Migrations:
    """The migrations, registered in order with the same decorator as sqlite-utils' `Migrations`
    (`@migrations()`), which is built from them only when a writer applies them.

    Importing sqlite-utils costs about as much as the rest of a read-only command's start-up
    (issue 15: `batchrun status` within 3x of `python -c "import click, sqlite3"`); a reader
    only needs the names, to compare with those a state.db has applied (`applied_names`)."""

    def __init__(self, name: str):
        self.name = name
        self._registered: list[tuple[str, Callable[[Database], None]]] = []
        self._built: Migrations | None = None

    def __call__(self, *, name: str | None = None) -> Callable[[Callable[[Database], None]], Callable[[Database], None]]:
        def register(fn: Callable[[Database], None]) -> Callable[[Database], None]:
            self._registered.append((name or fn.__name__, fn))
            self._built = None
            return fn

        return register

    def names(self) -> list[str]:
        return [name for name, _ in self._registered]

    def _sqlite_utils(self) -> Migrations:
        if self._built is None:
            _import_sqlite_utils()
            from sqlite_utils.migrations import Migrations

            built = Migrations(self.name)
            for name, fn in self._registered:
                built(name=name)(fn)
            self._built = built
        return self._built

    def pending(self, db: Database) -> list[Any]:
        return self._sqlite_utils().pending(db)

    def apply(self, db: Database) -> None:
        self._sqlite_utils().apply(db)


migrations = _Migrations("batchrun")


def known_migrations() -> set[str]:
    """The names of the migrations this version defines."""
    return set(migrations.names())


def applied_names(conn: sqlite3.Connection) -> set[str] | None:
    """The migrations a state.db has applied (None: it has no migrations table), read with plain
    SQL from sqlite-utils' table (`_sqlite_migrations`: migration_set, name, applied_at)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlite_migrations'").fetchone() is None:
        return None
    return {r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations WHERE migration_set = ?", [migrations.name])}


# The views below are frozen with the migration that created them: every batch status and result
# kind in their SQL is a literal (the live batch statuses are lifecycle.LIVE as it was then), so
# an applied migration never changes.


@migrations()
def m001_initial(db: Database) -> None:
    statements = [
        """CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)""",
        # One row per batchrun invocation that writes; judge retries are bounded per run.
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY, command TEXT NOT NULL, started_at REAL NOT NULL,
            ended_at REAL, pid INTEGER, batchrun_version TEXT, outcome TEXT)""",
        """CREATE TABLE datasets (
            sha256 TEXT PRIMARY KEY, path TEXT NOT NULL, n_tasks INTEGER NOT NULL, first_seen REAL NOT NULL)""",
        """CREATE TABLE documents (
            sha256 TEXT PRIMARY KEY, name TEXT NOT NULL, chars INTEGER NOT NULL,
            bytes INTEGER NOT NULL, cjk INTEGER NOT NULL)""",
        # Cache of (path, size, mtime) -> sha256, so status/collect don't re-hash the corpus.
        """CREATE TABLE document_files (
            path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, sha256 TEXT NOT NULL)""",
        # The current version of each task (replaced when the dataset changes; requests keep the old).
        """CREATE TABLE tasks (
            task_id TEXT PRIMARY KEY, position INTEGER NOT NULL, question TEXT NOT NULL,
            corpus_file TEXT NOT NULL, doc_sha256 TEXT NOT NULL, rubric_json TEXT NOT NULL,
            rubric_total REAL NOT NULL, fields_json TEXT NOT NULL, task_sha256 TEXT NOT NULL,
            dataset_sha256 TEXT NOT NULL)""",
        """CREATE TABLE policies (
            fingerprint TEXT PRIMARY KEY, stage TEXT NOT NULL, route TEXT NOT NULL,
            provider TEXT NOT NULL, model TEXT NOT NULL, policy_json TEXT NOT NULL, first_seen REAL NOT NULL)""",
        # Snapshot of the current config: which routes, their role and current policy.
        """CREATE TABLE config_routes (
            route TEXT PRIMARY KEY, role TEXT NOT NULL, policy_fp TEXT NOT NULL,
            provider TEXT NOT NULL, model TEXT NOT NULL, transport TEXT NOT NULL,
            endpoint_host TEXT, panel_position INTEGER)""",
        # One row per (generation policy, task): the CJK rule, the cap and the scope decision.
        """CREATE TABLE cells (
            policy_fp TEXT NOT NULL, task_id TEXT NOT NULL, route TEXT NOT NULL,
            doc_sha256 TEXT NOT NULL, doc_chars INTEGER NOT NULL, cjk INTEGER NOT NULL,
            cap INTEGER NOT NULL, cap_source TEXT NOT NULL,
            scope TEXT NOT NULL CHECK (scope IN ('send', 'out_of_context_scope')),
            custom_id TEXT, task_sha256 TEXT NOT NULL, planned_at REAL NOT NULL,
            PRIMARY KEY (policy_fp, task_id))""",
        # One row per distinct request (deterministic custom_id); attempts are batch_requests rows.
        """CREATE TABLE requests (
            custom_id TEXT PRIMARY KEY, stage TEXT NOT NULL CHECK (stage IN ('gen', 'judge')),
            route TEXT NOT NULL, task_id TEXT NOT NULL, policy_fp TEXT NOT NULL,
            parent_custom_id TEXT, parent_result_id INTEGER,
            max_retries INTEGER NOT NULL, max_resubmits INTEGER NOT NULL,
            prompt_chars INTEGER NOT NULL, est_input_tokens INTEGER NOT NULL,
            est_output_tokens INTEGER NOT NULL, created_at REAL NOT NULL)""",
        """CREATE INDEX requests_parent ON requests (parent_custom_id)""",
        """CREATE INDEX requests_route ON requests (route, stage)""",
        # A local batch: one request file under jobs/<id>/, and what became of it at the provider.
        """CREATE TABLE batches (
            id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, route TEXT NOT NULL, stage TEXT NOT NULL,
            provider TEXT NOT NULL, transport TEXT NOT NULL, model TEXT NOT NULL,
            status TEXT NOT NULL, dir TEXT NOT NULL, request_file TEXT NOT NULL,
            sha256 TEXT, bytes INTEGER, n_requests INTEGER, est_input_tokens INTEGER,
            est_output_tokens INTEGER, est_cost REAL,
            provider_file_id TEXT, provider_batch_id TEXT, provider_status TEXT, provider_state TEXT, quota INTEGER,
            counts_json TEXT, error TEXT, last_seen_json TEXT, endpoint_host TEXT,
            run_id INTEGER, created_at REAL NOT NULL, creating_at REAL, submitted_at REAL,
            ended_at REAL, downloaded_at REAL, collected_at REAL, result_files_json TEXT)""",
        """CREATE TABLE batch_requests (
            batch_id TEXT NOT NULL, custom_id TEXT NOT NULL, position INTEGER NOT NULL,
            PRIMARY KEY (batch_id, custom_id))""",
        """CREATE INDEX batch_requests_custom_id ON batch_requests (custom_id)""",
        # Every result line ever reconciled (or synthesised for a request a batch never answered).
        """CREATE TABLE results (
            id INTEGER PRIMARY KEY, batch_id TEXT NOT NULL, custom_id TEXT NOT NULL,
            kind TEXT NOT NULL, text TEXT, finish_reason TEXT,
            input_tokens INTEGER, output_tokens INTEGER, reasoning_tokens INTEGER, cached_tokens INTEGER,
            error_type TEXT, error_message TEXT, raw_json TEXT, collected_at REAL NOT NULL,
            run_id INTEGER, cost REAL,
            UNIQUE (batch_id, custom_id))""",
        """CREATE INDEX results_custom_id ON results (custom_id)""",
        # The parsed verdict of each judge result line that returned text.
        """CREATE TABLE judgments (
            result_id INTEGER PRIMARY KEY, custom_id TEXT NOT NULL, total REAL, rubric_total REAL NOT NULL,
            score REAL, points_awarded_json TEXT, parse_error TEXT)""",
    ]
    for sql in statements:
        db.execute(sql)


@migrations()
def m002_views(db: Database) -> None:
    # Views derive every state from the fact tables; see the module docstring.
    # Frozen: m007 replaces these views (the kind lists are literals so this SQL never changes).
    db.execute(
        """CREATE VIEW request_outcomes AS
        SELECT custom_id,
          sum(kind = 'ok') AS ok_n,
          sum(kind IN ('refusal', 'empty', 'invalid')) AS final_fail_n,
          sum(kind IN ('transient')) AS transient_n,
          sum(kind IN ('expired', 'cancelled', 'missing')) AS resubmit_n,
          sum(kind = 'batch_failed') AS batch_failed_n,
          sum(kind NOT IN ('ok')) AS failure_n,
          min(CASE WHEN kind = 'ok' THEN id END) AS ok_result_id,
          max(id) AS last_result_id
        FROM results GROUP BY custom_id"""
    )
    db.execute(
        """CREATE VIEW request_status AS
        SELECT r.custom_id, r.stage, r.route, r.task_id, r.policy_fp, r.parent_custom_id,
          coalesce(o.ok_n, 0) AS ok_n, coalesce(o.transient_n, 0) AS transient_n,
          coalesce(o.resubmit_n, 0) AS resubmit_n, coalesce(o.batch_failed_n, 0) AS batch_failed_n,
          coalesce(o.failure_n, 0) AS failure_n,
          o.ok_result_id, o.last_result_id,
          CASE
            WHEN o.ok_n > 0 THEN 'ok'
            WHEN r.stage = 'gen' AND o.final_fail_n > 0 THEN 'failed'
            WHEN EXISTS (SELECT 1 FROM batch_requests br JOIN batches b ON b.id = br.batch_id
                         WHERE br.custom_id = r.custom_id AND b.status IN ('planned', 'uploading', 'uploaded', 'creating', 'in_flight', 'ended', 'downloaded')) THEN 'in_flight'
            WHEN r.stage = 'gen' AND coalesce(o.transient_n, 0) > r.max_retries THEN 'failed'
            WHEN r.stage = 'gen' AND coalesce(o.resubmit_n, 0) > r.max_resubmits THEN 'failed'
            WHEN r.stage = 'gen' AND coalesce(o.batch_failed_n, 0) > 1 THEN 'failed'
            ELSE 'pending'
          END AS state
        FROM requests r LEFT JOIN request_outcomes o ON o.custom_id = r.custom_id"""
    )
    # One row per current (contestant route, task): what the leaderboard counts.
    db.execute(
        """CREATE VIEW cell_status AS
        WITH gen AS (
          SELECT c.route, c.task_id, c.policy_fp, c.scope, c.custom_id, c.cap, c.cap_source, c.cjk, c.doc_chars,
                 s.state AS gen_state,
                 coalesce(s.ok_result_id, s.last_result_id) AS result_id
          FROM cells c
          JOIN config_routes cr ON cr.route = c.route AND cr.policy_fp = c.policy_fp AND cr.role = 'contestant'
          JOIN tasks t ON t.task_id = c.task_id AND t.task_sha256 = c.task_sha256
          LEFT JOIN request_status s ON s.custom_id = c.custom_id
        ),
        judged AS (
          SELECT g.route, g.task_id,
                 count(j.route) AS panel_n,
                 count(CASE WHEN js.state = 'ok' THEN 1 END) AS judged_n,
                 avg(jm.score) AS mean_score
          FROM gen g
          JOIN config_routes j ON j.role = 'judge'
          LEFT JOIN requests jr ON jr.parent_custom_id = g.custom_id AND jr.parent_result_id = g.result_id
                                AND jr.route = j.route AND jr.policy_fp = j.policy_fp AND jr.stage = 'judge'
          LEFT JOIN request_status js ON js.custom_id = jr.custom_id
          LEFT JOIN judgments jm ON jm.result_id = js.ok_result_id
          GROUP BY g.route, g.task_id
        )
        SELECT g.route, g.task_id, g.policy_fp, g.custom_id, g.cap, g.cap_source, g.cjk, g.doc_chars,
          CASE
            WHEN g.scope = 'out_of_context_scope' THEN 'out_of_context_scope'
            WHEN g.gen_state IN ('pending', 'in_flight') OR g.gen_state IS NULL THEN 'pending'
            WHEN g.gen_state = 'failed' THEN coalesce(
                (SELECT CASE WHEN kind IN ('refusal', 'empty') THEN kind ELSE 'error' END FROM results WHERE id = g.result_id), 'error')
            WHEN coalesce(j.judged_n, 0) < coalesce(j.panel_n, 0) THEN 'judging'
            ELSE 'ok'
          END AS status,
          g.result_id,
          coalesce(j.panel_n, 0) AS panel_n, coalesce(j.judged_n, 0) AS judged_n,
          CASE WHEN g.scope = 'send' AND g.gen_state = 'ok' AND j.judged_n = j.panel_n AND j.panel_n > 0
               THEN j.mean_score END AS score
        FROM gen g LEFT JOIN judged j ON j.route = g.route AND j.task_id = g.task_id"""
    )
    # Per contestant route, the protocol's two views (Scored and All-tasks). Headlines are null while anything
    # is pending: never publish a partial number as if it were final.
    db.execute(
        """CREATE VIEW leaderboard AS
        SELECT cr.route, cr.model, cr.provider,
          (SELECT count(*) FROM tasks) AS n_tasks,
          count(cs.task_id) AS cells,
          sum(cs.status = 'ok') AS scored_n,
          sum(cs.status = 'out_of_context_scope') AS out_of_context_n,
          sum(cs.status IN ('refusal', 'empty', 'error')) AS failed_n,
          sum(cs.status IN ('pending', 'judging')) AS pending_n,
          (sum(cs.status IN ('pending', 'judging')) = 0 AND count(cs.task_id) = (SELECT count(*) FROM tasks)) AS complete,
          CASE WHEN sum(cs.status IN ('pending', 'judging')) = 0 AND count(cs.task_id) = (SELECT count(*) FROM tasks)
               THEN round(avg(CASE WHEN cs.status = 'ok' THEN cs.score END), 6) END AS scored_overall,
          CASE WHEN sum(cs.status IN ('pending', 'judging')) = 0 AND count(cs.task_id) = (SELECT count(*) FROM tasks)
               THEN round(coalesce(sum(cs.score), 0) / (SELECT count(*) FROM tasks), 6) END AS all_tasks_overall
        FROM config_routes cr LEFT JOIN cell_status cs ON cs.route = cr.route
        WHERE cr.role = 'contestant'
        GROUP BY cr.route
        ORDER BY all_tasks_overall DESC NULLS LAST, cr.route"""
    )
    db.execute(
        """CREATE VIEW batch_summary AS
        SELECT b.id, b.route, b.stage, b.provider, b.transport, b.status, b.provider_status,
          b.provider_batch_id, b.n_requests, b.bytes, b.error,
          datetime(b.created_at, 'unixepoch') AS created, datetime(b.submitted_at, 'unixepoch') AS submitted,
          datetime(b.ended_at, 'unixepoch') AS ended, b.run_id
        FROM batches b ORDER BY b.seq"""
    )


@migrations()
def m003_cost_view(db: Database) -> None:
    # Spend per result row (cost is stored per result at collect, from usage x price x discount).
    db.execute(
        """CREATE VIEW cost AS
        SELECT b.route, b.stage, b.provider, b.transport,
          date(coalesce(b.ended_at, b.submitted_at, b.created_at), 'unixepoch', 'localtime') AS night,
          b.id AS batch_id, count(r.id) AS results,
          sum(r.input_tokens) AS input_tokens, sum(r.output_tokens) AS output_tokens,
          sum(r.reasoning_tokens) AS reasoning_tokens, sum(r.cached_tokens) AS cached_tokens,
          b.est_cost AS estimated_cost,
          CASE WHEN count(r.id) > 0 AND count(r.cost) = count(r.id) THEN sum(r.cost) END AS actual_cost
        FROM batches b LEFT JOIN results r ON r.batch_id = b.id
        WHERE b.status NOT IN ('writing', 'abandoned', 'superseded', 'planned')
        GROUP BY b.id"""
    )


@migrations()
def m004_cost_night_noon_to_noon(db: Database) -> None:
    # A "night" is noon to noon (as the budget counts it), so an overnight run that crosses
    # midnight is one night, labelled by the date it started: shift timestamps back 12 hours.
    db.execute("DROP VIEW cost")
    db.execute(
        """CREATE VIEW cost AS
        SELECT b.route, b.stage, b.provider, b.transport,
          date(coalesce(b.ended_at, b.submitted_at, b.created_at), 'unixepoch', 'localtime', '-12 hours') AS night,
          b.id AS batch_id, count(r.id) AS results,
          sum(r.input_tokens) AS input_tokens, sum(r.output_tokens) AS output_tokens,
          sum(r.reasoning_tokens) AS reasoning_tokens, sum(r.cached_tokens) AS cached_tokens,
          b.est_cost AS estimated_cost,
          CASE WHEN count(r.id) > 0 AND count(r.cost) = count(r.id) THEN sum(r.cost) END AS actual_cost
        FROM batches b LEFT JOIN results r ON r.batch_id = b.id
        WHERE b.status NOT IN ('writing', 'abandoned', 'superseded', 'planned')
        GROUP BY b.id"""
    )


@migrations()
def m005_no_headline_without_judges(db: Database) -> None:
    # A config with an empty judge panel (generation only) scores nothing: its headline numbers
    # must be null, not an all-tasks 0 that reads like a result.
    db.execute("DROP VIEW leaderboard")
    db.execute(
        """CREATE VIEW leaderboard AS
        SELECT cr.route, cr.model, cr.provider,
          (SELECT count(*) FROM tasks) AS n_tasks,
          count(cs.task_id) AS cells,
          sum(cs.status = 'ok') AS scored_n,
          sum(cs.status = 'out_of_context_scope') AS out_of_context_n,
          sum(cs.status IN ('refusal', 'empty', 'error')) AS failed_n,
          sum(cs.status IN ('pending', 'judging')) AS pending_n,
          (sum(cs.status IN ('pending', 'judging')) = 0 AND count(cs.task_id) = (SELECT count(*) FROM tasks)) AS complete,
          CASE WHEN sum(cs.status IN ('pending', 'judging')) = 0 AND count(cs.task_id) = (SELECT count(*) FROM tasks)
               AND EXISTS (SELECT 1 FROM config_routes WHERE role = 'judge')
               THEN round(avg(CASE WHEN cs.status = 'ok' THEN cs.score END), 6) END AS scored_overall,
          CASE WHEN sum(cs.status IN ('pending', 'judging')) = 0 AND count(cs.task_id) = (SELECT count(*) FROM tasks)
               AND EXISTS (SELECT 1 FROM config_routes WHERE role = 'judge')
               THEN round(coalesce(sum(cs.score), 0) / (SELECT count(*) FROM tasks), 6) END AS all_tasks_overall
        FROM config_routes cr LEFT JOIN cell_status cs ON cs.route = cr.route
        WHERE cr.role = 'contestant'
        GROUP BY cr.route
        ORDER BY all_tasks_overall DESC NULLS LAST, cr.route"""
    )


@migrations()
def m006_judge_lookup_index(db: Database) -> None:
    # cell_status finds each cell's judge requests by (parent, judge route, judge policy). Without
    # this index SQLite used requests_route and scanned every judge request of a judge for every
    # (cell, judge) pair: quadratic, minutes per collect at WildTrace scale (bench/ingest.py).
    db.execute("CREATE INDEX requests_parent_route_policy ON requests (parent_custom_id, route, policy_fp)")


@migrations()
def m007_failure_semantics(db: Database) -> None:
    """Infrastructure failures are never zeros; any change to what a judge grades re-judges.

    - `invalid`/`auth` results block their request (a config problem with a diagnosis) instead
      of failing it; retry budgets count per run (the newest `runs` row), so a request whose
      budget is used up *waits* for the next run; `reopens` (batchrun retry) and
      `accepted_failures` (batchrun accept-failures) are the maintainer's recorded decisions.
    - Judge requests record `graded_sha256`, the hash of what the judge grades apart from the
      answer (prompts.judge_graded_sha256); a judgment counts only while it equals the current
      task's, and its score is normalised by the current rubric sum.
    - `results.retry_after`: the provider's Retry-After on an online failure, honoured before
      the next attempt.
    - `config_routes` carries each route's retry budgets, so the views need no config.
    """
    db.execute("ALTER TABLE requests ADD COLUMN graded_sha256 TEXT")
    db.execute("ALTER TABLE tasks ADD COLUMN graded_sha256 TEXT")
    db.execute("ALTER TABLE results ADD COLUMN retry_after REAL")
    db.execute("ALTER TABLE config_routes ADD COLUMN retry_budget INTEGER")
    db.execute("ALTER TABLE config_routes ADD COLUMN resubmit_budget INTEGER")
    db.execute(
        """CREATE TABLE reopens (
            id INTEGER PRIMARY KEY, custom_id TEXT NOT NULL, route TEXT NOT NULL, task_id TEXT NOT NULL,
            state TEXT NOT NULL, reason TEXT, created_at REAL NOT NULL, run_id INTEGER)"""
    )
    db.execute("CREATE INDEX reopens_custom_id ON reopens (custom_id)")
    db.execute(
        """CREATE TABLE accepted_failures (
            id INTEGER PRIMARY KEY, route TEXT NOT NULL, policy_fp TEXT NOT NULL, reason TEXT NOT NULL,
            cells INTEGER NOT NULL, created_at REAL NOT NULL, run_id INTEGER)"""
    )
    _backfill_graded_sha256(db)
    for view in ("leaderboard", "cell_status", "request_status", "request_outcomes"):
        db.execute(f"DROP VIEW {view}")
    # Counts after the request's last reopen; `_run` ones only in the newest run (the one running,
    # or, for a reader, the last one: its budget-exhausted requests read as waiting).
    db.execute(
        """CREATE VIEW request_outcomes AS
        SELECT res.custom_id,
          sum(res.kind = 'ok') AS ok_n,
          sum(res.kind IN ('refusal', 'empty')) AS final_fail_n,
          sum(res.kind = 'transient') AS transient_n,
          sum(res.kind IN ('expired', 'cancelled', 'missing')) AS resubmit_n,
          sum(res.kind = 'batch_failed') AS batch_failed_n,
          sum(res.kind != 'ok') AS failure_n,
          sum(res.kind IN ('invalid', 'auth') AND res.collected_at > coalesce(ro.at, 0)) AS blocking_n,
          sum(res.kind = 'batch_failed' AND res.collected_at > coalesce(ro.at, 0)) AS batch_failed_open_n,
          sum(res.kind IN ('expired', 'cancelled', 'missing') AND res.run_id IS cur.id
              AND res.collected_at > coalesce(ro.at, 0)) AS resubmit_run_n,
          sum(res.kind NOT IN ('ok', 'invalid', 'auth', 'batch_failed', 'expired', 'cancelled', 'missing')
              AND res.run_id IS cur.id AND res.collected_at > coalesce(ro.at, 0)) AS retry_run_n,
          min(CASE WHEN res.kind != 'ok' THEN res.collected_at END) AS first_failure_at,
          min(CASE WHEN res.kind = 'ok' THEN res.id END) AS ok_result_id,
          min(CASE WHEN res.kind IN ('refusal', 'empty') THEN res.id END) AS final_result_id,
          max(res.id) AS last_result_id,
          max(ro.at) AS reopened_at
        FROM results res
        LEFT JOIN (SELECT custom_id, max(created_at) AS at FROM reopens GROUP BY custom_id) ro ON ro.custom_id = res.custom_id
        CROSS JOIN (SELECT max(id) AS id FROM runs) cur
        GROUP BY res.custom_id"""
    )
    # A request's state. Order matters: an answer (ok, or a refusal/empty generation) is final;
    # a live batch means "wait"; then the maintainer's acceptance (of failures that happened
    # before it, for the contestant route's current policy); then blocked, waiting, pending.
    db.execute(
        """CREATE VIEW request_status AS
        SELECT r.custom_id, r.stage, r.route, r.task_id, r.policy_fp, r.parent_custom_id,
          coalesce(o.ok_n, 0) AS ok_n, coalesce(o.transient_n, 0) AS transient_n,
          coalesce(o.resubmit_n, 0) AS resubmit_n, coalesce(o.batch_failed_n, 0) AS batch_failed_n,
          coalesce(o.failure_n, 0) AS failure_n, coalesce(o.retry_run_n, 0) AS retry_run_n,
          coalesce(o.resubmit_run_n, 0) AS resubmit_run_n,
          o.ok_result_id, o.final_result_id, o.last_result_id, o.first_failure_at, o.reopened_at,
          CASE
            WHEN o.ok_n > 0 THEN 'ok'
            WHEN r.stage = 'gen' AND o.final_fail_n > 0 THEN 'failed'
            WHEN EXISTS (SELECT 1 FROM batch_requests br JOIN batches b ON b.id = br.batch_id
                         WHERE br.custom_id = r.custom_id AND b.status IN ('planned', 'uploading', 'uploaded', 'creating', 'in_flight', 'ended', 'downloaded')) THEN 'in_flight'
            WHEN o.first_failure_at IS NOT NULL AND EXISTS (
                SELECT 1 FROM accepted_failures a
                WHERE a.route = coalesce(p.route, r.route) AND a.policy_fp = coalesce(p.policy_fp, r.policy_fp)
                  AND a.created_at >= o.first_failure_at AND a.created_at > coalesce(o.reopened_at, 0)) THEN 'accepted'
            WHEN o.blocking_n > 0 OR o.batch_failed_open_n > 1 THEN 'blocked'
            WHEN o.retry_run_n > coalesce(cr.retry_budget, r.max_retries)
              OR o.resubmit_run_n > coalesce(cr.resubmit_budget, r.max_resubmits) THEN 'waiting'
            ELSE 'pending'
          END AS state
        FROM requests r
        LEFT JOIN request_outcomes o ON o.custom_id = r.custom_id
        LEFT JOIN requests p ON p.custom_id = r.parent_custom_id
        LEFT JOIN config_routes cr ON cr.route = r.route"""
    )
    # One row per current (contestant route, task). Statuses: final ones are ok, refusal, empty,
    # out_of_context_scope and accepted (zero-filled by the maintainer's decision); open ones are
    # pending, judging (something can still move this run), waiting (a run's retry budget is
    # used up: the next run resumes) and blocked (the config must change: see `diagnose`).
    db.execute(
        """CREATE VIEW cell_status AS
        WITH gen AS (
          SELECT c.route, c.task_id, c.policy_fp, c.scope, c.custom_id, c.cap, c.cap_source, c.cjk, c.doc_chars,
                 t.graded_sha256, t.rubric_total,
                 s.state AS gen_state,
                 coalesce(s.ok_result_id, s.final_result_id, s.last_result_id) AS result_id
          FROM cells c
          JOIN config_routes cr ON cr.route = c.route AND cr.policy_fp = c.policy_fp AND cr.role = 'contestant'
          JOIN tasks t ON t.task_id = c.task_id AND t.task_sha256 = c.task_sha256
          LEFT JOIN request_status s ON s.custom_id = c.custom_id
        ),
        judged AS (
          SELECT g.route, g.task_id,
                 count(j.route) AS panel_n,
                 count(CASE WHEN js.state = 'ok' THEN 1 END) AS judged_n,
                 count(CASE WHEN js.state IS NULL OR js.state IN ('pending', 'in_flight') THEN 1 END) AS open_n,
                 count(CASE WHEN js.state = 'blocked' THEN 1 END) AS blocked_n,
                 count(CASE WHEN js.state = 'waiting' THEN 1 END) AS waiting_n,
                 avg(CASE WHEN jm.total IS NULL THEN NULL
                          WHEN g.rubric_total > 0 THEN min(max(jm.total / g.rubric_total, 0.0), 1.0)
                          ELSE 0.0 END) AS mean_score
          FROM gen g
          JOIN config_routes j ON j.role = 'judge'
          LEFT JOIN requests jr ON jr.parent_custom_id = g.custom_id AND jr.parent_result_id = g.result_id
                                AND jr.route = j.route AND jr.policy_fp = j.policy_fp AND jr.stage = 'judge'
                                AND jr.graded_sha256 = g.graded_sha256
          LEFT JOIN request_status js ON js.custom_id = jr.custom_id
          LEFT JOIN judgments jm ON jm.result_id = js.ok_result_id
          WHERE g.gen_state = 'ok'
          GROUP BY g.route, g.task_id
        )
        SELECT g.route, g.task_id, g.policy_fp, g.custom_id, g.cap, g.cap_source, g.cjk, g.doc_chars,
          CASE
            WHEN g.scope = 'out_of_context_scope' THEN 'out_of_context_scope'
            WHEN g.gen_state = 'failed' THEN coalesce((SELECT kind FROM results WHERE id = g.result_id), 'empty')
            WHEN g.gen_state IN ('accepted', 'blocked', 'waiting') THEN g.gen_state
            WHEN g.gen_state IS NULL OR g.gen_state != 'ok' THEN 'pending'
            WHEN coalesce(j.judged_n, 0) = coalesce(j.panel_n, 0) THEN 'ok'
            WHEN j.open_n > 0 THEN 'judging'
            WHEN j.blocked_n > 0 THEN 'blocked'
            WHEN j.waiting_n > 0 THEN 'waiting'
            ELSE 'accepted'
          END AS status,
          g.result_id,
          coalesce(j.panel_n, 0) AS panel_n, coalesce(j.judged_n, 0) AS judged_n,
          CASE WHEN g.scope = 'send' AND g.gen_state = 'ok' AND j.judged_n = j.panel_n AND j.panel_n > 0
               THEN j.mean_score END AS score
        FROM gen g LEFT JOIN judged j ON j.route = g.route AND j.task_id = g.task_id"""
    )
    # Headlines are null while any cell is open (pending, judging, waiting or blocked): never
    # publish a partial number as if it were final. pending_n counts every open cell.
    db.execute(
        """CREATE VIEW leaderboard AS
        SELECT cr.route, cr.model, cr.provider,
          (SELECT count(*) FROM tasks) AS n_tasks,
          count(cs.task_id) AS cells,
          sum(cs.status = 'ok') AS scored_n,
          sum(cs.status = 'out_of_context_scope') AS out_of_context_n,
          sum(cs.status IN ('refusal', 'empty', 'accepted')) AS failed_n,
          sum(cs.status IN ('pending', 'judging', 'waiting', 'blocked')) AS pending_n,
          sum(cs.status = 'waiting') AS waiting_n,
          sum(cs.status = 'blocked') AS blocked_n,
          sum(cs.status = 'accepted') AS accepted_n,
          (sum(cs.status IN ('pending', 'judging', 'waiting', 'blocked')) = 0
           AND count(cs.task_id) = (SELECT count(*) FROM tasks)) AS complete,
          CASE WHEN sum(cs.status IN ('pending', 'judging', 'waiting', 'blocked')) = 0
               AND count(cs.task_id) = (SELECT count(*) FROM tasks)
               AND EXISTS (SELECT 1 FROM config_routes WHERE role = 'judge')
               THEN round(avg(CASE WHEN cs.status = 'ok' THEN cs.score END), 6) END AS scored_overall,
          CASE WHEN sum(cs.status IN ('pending', 'judging', 'waiting', 'blocked')) = 0
               AND count(cs.task_id) = (SELECT count(*) FROM tasks)
               AND EXISTS (SELECT 1 FROM config_routes WHERE role = 'judge')
               THEN round(coalesce(sum(cs.score), 0) / (SELECT count(*) FROM tasks), 6) END AS all_tasks_overall
        FROM config_routes cr LEFT JOIN cell_status cs ON cs.route = cr.route
        WHERE cr.role = 'contestant'
        GROUP BY cr.route
        ORDER BY all_tasks_overall DESC NULLS LAST, cr.route"""
    )


@migrations()
def m008_provider_output_limits(db: Database) -> None:
    """What a broken or hostile provider's output may cost is bounded, and recorded.

    - `batches.download_attempts`: result downloads of the batch so far, across runs. A file that
      is cut short every time is fetched a bounded number of times (poll.MAX_DOWNLOAD_ATTEMPTS),
      then accepted as it is, with `batches.download_truncated` = 1: the requests in its
      unreadable tail get `missing` rows and are resubmitted.
    - `results.truncated` = 1: the stored `text` (and `raw_json`) of that line was cut to
      collect.MAX_STORED_CHARS; the whole line stays in the batch's file under jobs/.
    """
    db.execute("ALTER TABLE batches ADD COLUMN download_attempts INTEGER")
    db.execute("ALTER TABLE batches ADD COLUMN download_truncated INTEGER")
    db.execute("ALTER TABLE results ADD COLUMN truncated INTEGER")


def _backfill_graded_sha256(db: Database) -> None:
    """Judge requests from before m007 carry no graded_sha256. Their custom_id was
    "j-" + sha256(judge, policy, parent, sha256(answer), task_sha256)[:40]: where that equals the id
    computed with the task's current sha256, the judgment graded the current question and rubric,
    and gets the current task's graded hash (only this new column is written). Any other old
    judgment graded an older version of the task and never counts again."""
    import hashlib
    import json

    from ..protocol.prompts import judge_graded_sha256

    def h(*parts: str) -> str:
        return hashlib.sha256("\x00".join(parts).encode()).hexdigest()

    @dataclass(frozen=True)
    class Item:
        points: int | float
        criterion: str

    graded = {
        task_id: (task_sha, judge_graded_sha256(question, [Item(i["points"], i["correct_criterion"]) for i in json.loads(rubric)]))
        for task_id, task_sha, question, rubric in db.execute("SELECT task_id, task_sha256, question, rubric_json FROM tasks")
    }
    updates = []
    for custom_id, policy_fp, parent, task_id, text in db.execute(
        """SELECT jr.custom_id, jr.policy_fp, jr.parent_custom_id, jr.task_id, res.text FROM requests jr
           JOIN results res ON res.id = jr.parent_result_id WHERE jr.stage = 'judge' AND jr.graded_sha256 IS NULL"""
    ):
        task = graded.get(task_id)
        if task and custom_id == "j-" + h("judge", policy_fp, parent, h(text or ""), task[0])[:40]:
            updates.append((task[1], custom_id))
    db.conn.executemany("UPDATE requests SET graded_sha256 = ? WHERE custom_id = ?", updates)


@migrations()
def m009_document_readings(db: Database) -> None:
    # A document's length and CJK flag depend on how its bytes are read as text. batchrun first
    # kept \r\n and lone \r as they are; the reference harness reads with universal newlines
    # (corpus.READING). Measurements are cached per reading here, keyed by it, so a store
    # measured under an older rule re-measures every document once and its `documents` rows
    # (chars and cjk as first measured) stay as they were, for audit. `document_files` (path ->
    # sha256 of the bytes) does not depend on the reading and stays valid.
    db.execute(
        """CREATE TABLE document_readings (
            sha256 TEXT NOT NULL, reading TEXT NOT NULL, chars INTEGER NOT NULL, cjk INTEGER NOT NULL,
            measured_at REAL NOT NULL, newlines_translated INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (sha256, reading))"""
    )


@migrations()
def m010_refresh_snapshots(db: Database) -> None:
    # "What changed since the last refresh" needs the state as the last refresh left it, and the
    # views only know the present. `refresh` (and `demo`) record a compact snapshot of every
    # current cell (its policy, answer, graded question/rubric, status and score) and of each
    # route's headline, only when something differs from the newest snapshot (`digest`). These
    # are derived rows, not facts: the newest few are kept (snapshots.KEEP), older ones pruned.
    db.execute(
        """CREATE TABLE snapshots (
            id INTEGER PRIMARY KEY, taken_at REAL NOT NULL, run_id INTEGER, command TEXT NOT NULL,
            digest TEXT NOT NULL, panel_json TEXT NOT NULL, n_cells INTEGER NOT NULL)"""
    )
    db.execute(
        """CREATE TABLE snapshot_routes (
            snapshot_id INTEGER NOT NULL, route TEXT NOT NULL, model TEXT, policy_fp TEXT, complete INTEGER NOT NULL,
            all_tasks_overall REAL, scored_overall REAL, scored_n INTEGER, out_of_context_n INTEGER, failed_n INTEGER,
            pending_n INTEGER, PRIMARY KEY (snapshot_id, route))"""
    )
    db.execute(
        """CREATE TABLE snapshot_cells (
            snapshot_id INTEGER NOT NULL, route TEXT NOT NULL, task_id TEXT NOT NULL, policy_fp TEXT NOT NULL,
            result_id INTEGER, graded_sha256 TEXT, status TEXT NOT NULL, score REAL,
            PRIMARY KEY (snapshot_id, route, task_id)) WITHOUT ROWID"""
    )


@migrations()
def m011_readable_timestamps(db: Database) -> None:
    # `runs` and `batches` keep their times as epoch seconds (REAL: exact, cheap to compare); an
    # audit reads them as ISO-8601 UTC through these views (old rows included: nothing is rewritten).
    db.execute(
        """CREATE VIEW runs_log AS
        SELECT id, command, outcome, batchrun_version, pid,
          strftime('%Y-%m-%dT%H:%M:%SZ', started_at, 'unixepoch') AS started_at_utc,
          strftime('%Y-%m-%dT%H:%M:%SZ', ended_at, 'unixepoch') AS ended_at_utc,
          round(ended_at - started_at, 1) AS seconds
        FROM runs"""
    )
    db.execute(
        """CREATE VIEW batches_log AS
        SELECT id, route, stage, provider, transport, model, status, provider_status, provider_state,
          provider_batch_id, n_requests, est_cost, error, run_id,
          strftime('%Y-%m-%dT%H:%M:%SZ', created_at, 'unixepoch') AS created_at_utc,
          strftime('%Y-%m-%dT%H:%M:%SZ', creating_at, 'unixepoch') AS creating_at_utc,
          strftime('%Y-%m-%dT%H:%M:%SZ', submitted_at, 'unixepoch') AS submitted_at_utc,
          strftime('%Y-%m-%dT%H:%M:%SZ', ended_at, 'unixepoch') AS ended_at_utc,
          strftime('%Y-%m-%dT%H:%M:%SZ', downloaded_at, 'unixepoch') AS downloaded_at_utc,
          strftime('%Y-%m-%dT%H:%M:%SZ', collected_at, 'unixepoch') AS collected_at_utc
        FROM batches ORDER BY seq"""
    )


@migrations()
def m012_results_outcome_index(db: Database) -> None:
    # Every state is derived from a request's results grouped by custom_id (request_outcomes reads
    # custom_id, kind, collected_at, run_id and id). With only (custom_id) indexed, SQLite visited
    # each results row in custom_id order to read its kind: random reads through a table of
    # answers (hundreds of MB at 300k results). This index covers those columns, so the grouping
    # reads the index alone, and "the first ok result of a request" is one index probe. It
    # replaces results_custom_id (its prefix serves every lookup by custom_id).
    db.execute("CREATE INDEX results_outcome ON results (custom_id, kind, collected_at, run_id)")
    db.execute("DROP INDEX results_custom_id")


@migrations()
def m013_probes(db: Database) -> None:
    # `batchrun probe ROUTE` measures a model's context window (spec §3: a new model's window is
    # probed, never inherited) and suggests caps; each probe is kept for audit with its evidence
    # (method, token counts, every step sent, largest accepted and smallest rejected length) and
    # what it spent, whether or not its caps were written to the config.
    db.execute(
        """CREATE TABLE probes (
            id INTEGER PRIMARY KEY, route TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,
            method TEXT NOT NULL, en_cap INTEGER, cjk_cap INTEGER, window_tokens INTEGER, cost REAL NOT NULL,
            max_cost REAL, precision REAL, evidence_json TEXT NOT NULL, written INTEGER NOT NULL DEFAULT 0,
            probed_at REAL NOT NULL, run_id INTEGER)"""
    )
    db.execute(
        """CREATE VIEW probes_log AS
        SELECT id, route, provider, model, method, en_cap, cjk_cap, window_tokens, cost, max_cost, precision, written, run_id,
          strftime('%Y-%m-%dT%H:%M:%SZ', probed_at, 'unixepoch') AS probed_at_utc
        FROM probes ORDER BY id"""
    )


@migrations()
def m014_expected_cost(db: Database) -> None:
    # Two estimates per batch: est_cost, the bound (every answer uses its whole max_tokens; what
    # --budget checks), and expected_cost, from the output the route really writes (cost.py). The
    # cost view shows both beside the actual spend. Older batches have no expected cost (NULL).
    db.execute("ALTER TABLE batches ADD COLUMN expected_cost REAL")
    db.execute("DROP VIEW cost")
    db.execute(
        """CREATE VIEW cost AS
        SELECT b.route, b.stage, b.provider, b.transport,
          date(coalesce(b.ended_at, b.submitted_at, b.created_at), 'unixepoch', 'localtime', '-12 hours') AS night,
          b.id AS batch_id, count(r.id) AS results,
          sum(r.input_tokens) AS input_tokens, sum(r.output_tokens) AS output_tokens,
          sum(r.reasoning_tokens) AS reasoning_tokens, sum(r.cached_tokens) AS cached_tokens,
          b.est_cost AS estimated_cost, b.expected_cost AS expected_cost,
          CASE WHEN count(r.id) > 0 AND count(r.cost) = count(r.id) THEN sum(r.cost) END AS actual_cost
        FROM batches b LEFT JOIN results r ON r.batch_id = b.id
        WHERE b.status NOT IN ('writing', 'abandoned', 'superseded', 'planned')
        GROUP BY b.id"""
    )


@migrations()
def m015_result_file_checksums(db: Database) -> None:
    # The sha256 of each result file as downloaded (or, for the sync transport, as written when
    # its last answer arrived), in the order of result_files_json: collect reads a file only if it
    # is still those bytes, so an answer edited on disk is never scored as the provider's. NULL
    # for batches downloaded before this column (nothing to compare with: read as before).
    db.execute("ALTER TABLE batches ADD COLUMN result_files_sha256_json TEXT")



@migrations()
def m016_results_files(db: Database) -> None:
    # What collect last wrote to each results/ file (outputs.write_results): a fingerprint of the
    # data the file renders and the sha256 of the bytes written. A collect whose data for a file
    # is unchanged, and finds the file still those bytes, leaves it alone instead of rewriting
    # every route's files (64 files, ~66 MB at 32 routes). Recorded after the file is in place, so
    # a crash in between leaves an old record and the next collect writes the file again.
    db.execute(
        """CREATE TABLE results_files (
            path TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, sha256 TEXT NOT NULL, written_at REAL NOT NULL)"""
    )

@migrations()
def m017_results_usage(db: Database) -> None:
    # plan's expected output per route (cost.observed_usage) sums the token counts of every result
    # with usage, grouped by batch (a batch is one route and stage). Read through this index alone,
    # that is a scan of ~40 bytes a result instead of every row with its answer text joined to its
    # request: 2.0 s -> 0.14 s for the two readers at 300,000 results (issue 15; plan at 4 routes,
    # where nearly all results are history).
    db.execute("CREATE INDEX results_usage ON results (batch_id, kind, output_tokens, reasoning_tokens)")


@migrations()
def m018_request_blake3(db: Database) -> None:
    # The BLAKE3 checksum of each request file, recorded by plan and verified by submit and
    # `batchrun verify` (checksums.py: ~5 GB/s on one core against SHA-256's ~1.1, for files that
    # run to 17 GB a night at 30 routes). Batches planned from now on leave `sha256` NULL; those
    # planned before keep their SHA-256, and are still checked with it.
    db.execute("ALTER TABLE batches ADD COLUMN blake3 TEXT")


@migrations()
def m019_reread_false_zeros(db: Database) -> None:
    # Result lines that batchrun read wrongly until the sixth session (an adversarial review;
    # tests/test_no_false_zeros.py), read again with today's adapters and verdict parser: a 200
    # that was not an answer, recorded as the model's 'empty' answer (a final 0), and judge
    # replies whose total was NaN (stored NULL: the judge dropped out of the mean), infinite,
    # too big for a float, or read from a reply cut at its output budget. Only rows whose reading
    # changes are updated; their requests then go out again (an error is retried or blocks with
    # its diagnosis, a verdict is asked for again) as if the lines had been collected today.
    # Once, on the first writer command after the upgrade: ~12 µs of parsing per judge answer
    # (~1-2 s per 100,000 results besides reading them).
    _reread_false_zeros(db)


def _reread_false_zeros(db: Database) -> None:
    import json

    from ..protocol.grading import parse_verdict
    from ..providers import get_adapter

    rows = db.execute(
        """SELECT r.id, q.stage, r.kind, r.text, r.raw_json, r.truncated, b.provider, j.total, j.parse_error
           FROM results r JOIN batches b ON b.id = r.batch_id JOIN requests q ON q.custom_id = r.custom_id
           LEFT JOIN judgments j ON j.result_id = r.id
           WHERE (q.stage = 'gen' AND r.kind = 'empty') OR (q.stage = 'judge' AND r.kind = 'ok')""").fetchall()
    for rid, stage, kind, text, raw_json, truncated, provider, total, parse_error in rows:
        try:
            line = json.loads(raw_json) if raw_json else None
        except ValueError:
            line = None
        if not isinstance(line, dict) or "batchrun_cut" in line:
            continue  # nothing to read again (a line over MAX_STORED_CHARS is kept as a pointer)
        try:
            read = get_adapter(provider).parse_line(line)
        except (KeyError, ValueError):
            continue  # an adapter this batchrun no longer has
        if stage == "gen":
            if read.kind != "empty":
                db.execute("UPDATE results SET kind = ?, error_type = ?, error_message = ? WHERE id = ?",
                           [read.kind, read.error_type, read.error_message, rid])
            continue
        if total is None and parse_error is not None:
            continue  # already unparseable as a verdict
        verdict = parse_verdict(text, complete=not (read.at_budget or truncated))
        if verdict.total is None:
            db.execute("UPDATE results SET kind = 'unparseable' WHERE id = ?", [rid])
            db.execute("UPDATE judgments SET total = NULL, score = NULL, parse_error = ? WHERE result_id = ?",
                       [verdict.error or "no usable total", rid])


@migrations()
def m020_accepted_failures_not_protocol(db: Database) -> None:
    """Accepted infrastructure failures are not the model's failures, and not a protocol number.

    Spec 001 §5: judge (and generation) infrastructure failures are not model failures, and they
    leave `overall` null. `accept-failures` records the maintainer's decision to stop waiting for
    them; it does not turn them into the model's zeros. So in `leaderboard`:
    - `failed_n` counts only the model's own failures (refusal, empty); `accepted_n` apart;
    - `all_tasks_overall` is null for a route with accepted cells (the protocol has no All-tasks
      number for it), and `accepted_overall` carries the figure the decision publishes instead:
      All-tasks with the accepted cells counted 0, marked as not a protocol number wherever shown;
    - `scored_overall` stays: it is the mean over the answers the full panel scored, which the
      accepted cells are not part of.
    """
    db.execute("DROP VIEW leaderboard")
    db.execute(
        """CREATE VIEW leaderboard AS
        SELECT cr.route, cr.model, cr.provider,
          (SELECT count(*) FROM tasks) AS n_tasks,
          count(cs.task_id) AS cells,
          sum(cs.status = 'ok') AS scored_n,
          sum(cs.status = 'out_of_context_scope') AS out_of_context_n,
          sum(cs.status IN ('refusal', 'empty')) AS failed_n,
          sum(cs.status IN ('pending', 'judging', 'waiting', 'blocked')) AS pending_n,
          sum(cs.status = 'waiting') AS waiting_n,
          sum(cs.status = 'blocked') AS blocked_n,
          sum(cs.status = 'accepted') AS accepted_n,
          (sum(cs.status IN ('pending', 'judging', 'waiting', 'blocked')) = 0
           AND count(cs.task_id) = (SELECT count(*) FROM tasks)) AS complete,
          CASE WHEN sum(cs.status IN ('pending', 'judging', 'waiting', 'blocked')) = 0
               AND count(cs.task_id) = (SELECT count(*) FROM tasks)
               AND EXISTS (SELECT 1 FROM config_routes WHERE role = 'judge')
               THEN round(avg(CASE WHEN cs.status = 'ok' THEN cs.score END), 6) END AS scored_overall,
          CASE WHEN sum(cs.status IN ('pending', 'judging', 'waiting', 'blocked')) = 0
               AND sum(cs.status = 'accepted') = 0
               AND count(cs.task_id) = (SELECT count(*) FROM tasks)
               AND EXISTS (SELECT 1 FROM config_routes WHERE role = 'judge')
               THEN round(coalesce(sum(cs.score), 0) / (SELECT count(*) FROM tasks), 6) END AS all_tasks_overall,
          CASE WHEN sum(cs.status IN ('pending', 'judging', 'waiting', 'blocked')) = 0
               AND sum(cs.status = 'accepted') > 0
               AND count(cs.task_id) = (SELECT count(*) FROM tasks)
               AND EXISTS (SELECT 1 FROM config_routes WHERE role = 'judge')
               THEN round(coalesce(sum(cs.score), 0) / (SELECT count(*) FROM tasks), 6) END AS accepted_overall
        FROM config_routes cr LEFT JOIN cell_status cs ON cs.route = cr.route
        WHERE cr.role = 'contestant'
        GROUP BY cr.route
        ORDER BY all_tasks_overall DESC NULLS LAST, accepted_overall DESC NULLS LAST, cr.route"""
    )


def schema_markdown() -> str:
    """docs/schema.md, generated from the migrations so it cannot drift."""
    db = database()
    migrations.apply(db)
    out = [
        "# state.db schema",
        "",
        "Generated from the migrations in `batchrun/ledger/schema.py` by `python -m batchrun.ledger.schema_doc`;",
        "do not edit by hand (a test checks it is current).",
        "",
        "Scores are fractions 0–1 in every table and view (`judgments.score`, `leaderboard.all_tasks_overall`,",
        "`leaderboard.scored_overall`, `cell_status.score`...), as in JSON and CSV; Markdown and HTML show 0–100.",
        "",
    ]
    for kind in ("table", "view"):
        for (name, sql) in db.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = ? AND name NOT LIKE 'sqlite_%' ORDER BY name", [kind]
        ).fetchall():
            out += [f"## {kind} `{name}`", "", "```sql", sql.strip(), "```", ""]
    return "\n".join(out)


@migrations()
def m020_preflights(db: Database) -> None:
    # `batchrun preflight`, and submit/refresh before a route's first upload under a new policy:
    # one tiny online request of the route's own kind and one listing of its batch API, proving
    # its model id, key, parameters, base URL and API version in seconds (preflight.py). Every
    # preflight is kept, passed or not; a pass under a route's current preflight_key (its policy
    # fingerprint and where it goes: the base URL its client sends to, the key variable, the
    # transport) means none is sent again. Its cost is spent like any other: the cost view shows
    # it as stage 'preflight' (one row each, batch_id 'preflight-<id>').
    db.execute(
        """CREATE TABLE preflights (
            id INTEGER PRIMARY KEY, route TEXT NOT NULL, stage TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,
            policy_fp TEXT NOT NULL, base_url TEXT NOT NULL, endpoint_host TEXT NOT NULL, api_key_env TEXT NOT NULL,
            transport TEXT NOT NULL, preflight_key TEXT NOT NULL, outcome TEXT NOT NULL, online TEXT NOT NULL, batch_api TEXT,
            message TEXT, fix TEXT, input_tokens INTEGER, output_tokens INTEGER, est_cost REAL, cost REAL,
            started_at REAL NOT NULL, seconds REAL NOT NULL, run_id INTEGER)"""
    )
    db.execute("CREATE INDEX preflights_by_key ON preflights (preflight_key, outcome)")
    db.execute(
        """CREATE VIEW preflights_log AS
        SELECT id, route, stage, provider, model, endpoint_host, api_key_env, transport, outcome, online, batch_api, message, fix,
          input_tokens, output_tokens, cost, seconds, run_id, strftime('%Y-%m-%dT%H:%M:%SZ', started_at, 'unixepoch') AS started_at_utc
        FROM preflights ORDER BY id"""
    )
    db.execute("DROP VIEW cost")
    db.execute(
        """CREATE VIEW cost AS
        SELECT b.route, b.stage, b.provider, b.transport,
          date(coalesce(b.ended_at, b.submitted_at, b.created_at), 'unixepoch', 'localtime', '-12 hours') AS night,
          b.id AS batch_id, count(r.id) AS results,
          sum(r.input_tokens) AS input_tokens, sum(r.output_tokens) AS output_tokens,
          sum(r.reasoning_tokens) AS reasoning_tokens, sum(r.cached_tokens) AS cached_tokens,
          b.est_cost AS estimated_cost, b.expected_cost AS expected_cost,
          CASE WHEN count(r.id) > 0 AND count(r.cost) = count(r.id) THEN sum(r.cost) END AS actual_cost
        FROM batches b LEFT JOIN results r ON r.batch_id = b.id
        WHERE b.status NOT IN ('writing', 'abandoned', 'superseded', 'planned')
        GROUP BY b.id
        UNION ALL
        SELECT p.route, 'preflight' AS stage, p.provider, 'online' AS transport,
          date(p.started_at, 'unixepoch', 'localtime', '-12 hours') AS night,
          'preflight-' || p.id AS batch_id, 1 AS results, p.input_tokens, p.output_tokens,
          NULL AS reasoning_tokens, NULL AS cached_tokens,
          p.est_cost AS estimated_cost, p.est_cost AS expected_cost, p.cost AS actual_cost
        FROM preflights p"""
    )
