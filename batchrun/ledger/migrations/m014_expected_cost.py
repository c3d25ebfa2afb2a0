"""Two estimates per batch: est_cost, the bound (every answer uses its whole max_tokens; what
--budget checks), and expected_cost, from the output the route really writes (cost.py). The cost
view shows both beside the actual spend. Older batches have no expected cost (NULL).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
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
