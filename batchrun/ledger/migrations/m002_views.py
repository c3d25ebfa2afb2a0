"""The views: every state (of a request, a cell, a route's headline) derived from the fact tables,
so there is one source of truth (see the package docstring). Frozen: m007 replaces these views
(the kind lists are literals so this SQL never changes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
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
