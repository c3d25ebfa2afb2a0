"""Every state is derived from a request's results grouped by custom_id (request_outcomes reads
custom_id, kind, collected_at, run_id and id). With only (custom_id) indexed, SQLite visited each
results row in custom_id order to read its kind: random reads through a table of answers (hundreds
of MB at 300k results). This index covers those columns, so the grouping reads the index alone,
and "the first ok result of a request" is one index probe. It replaces results_custom_id (its
prefix serves every lookup by custom_id).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
    db.execute("CREATE INDEX results_outcome ON results (custom_id, kind, collected_at, run_id)")
    db.execute("DROP INDEX results_custom_id")
