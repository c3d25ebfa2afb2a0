"""`batchrun probe ROUTE` measures a model's context window (spec §3: a new model's window is probed,
never inherited) and suggests caps; each probe is kept for audit with its evidence (method, token
counts, every step sent, largest accepted and smallest rejected length) and what it spent, whether
or not its caps were written to the config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
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
