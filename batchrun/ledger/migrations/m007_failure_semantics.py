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

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
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


def _backfill_graded_sha256(db: Database) -> None:
    """Judge requests from before m007 carry no graded_sha256. Their custom_id was
    "j-" + sha256(judge, policy, parent, sha256(answer), task_sha256)[:40]: where that equals the id
    computed with the task's current sha256, the judgment graded the current question and rubric,
    and gets the current task's graded hash (only this new column is written). Any other old
    judgment graded an older version of the task and never counts again."""
    import hashlib
    import json

    from ...protocol.prompts import judge_graded_sha256

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
