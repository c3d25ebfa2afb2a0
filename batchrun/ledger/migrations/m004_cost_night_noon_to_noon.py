"""A "night" is noon to noon (as the budget counts it), so an overnight run that crosses midnight is
one night, labelled by the date it started: shift timestamps back 12 hours.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
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
