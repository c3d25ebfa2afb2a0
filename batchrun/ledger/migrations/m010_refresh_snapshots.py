"""The report's "what changed since the last refresh" needs the state as the last refresh left it, and
the views only know the present. `refresh` (and `demo`) record a compact snapshot of every current
cell (its policy, answer, graded question/rubric, status and score) and of each route's headline,
only when something differs from the newest snapshot (`digest`). These are derived rows, not facts:
the newest few are kept (snapshots.KEEP), older ones pruned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
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
