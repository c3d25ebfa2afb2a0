"""A config with an empty judge panel (generation only) scores nothing: its headline numbers must be
null, not an all-tasks 0 that reads like a result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
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
