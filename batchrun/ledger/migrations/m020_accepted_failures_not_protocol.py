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
