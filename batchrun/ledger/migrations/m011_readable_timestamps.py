"""`runs` and `batches` keep their times as epoch seconds (REAL: exact, cheap to compare); an audit
reads them as ISO-8601 UTC through these views (old rows included: nothing is rewritten).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
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
