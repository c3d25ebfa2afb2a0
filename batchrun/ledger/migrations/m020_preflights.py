"""`batchrun preflight`, and submit/refresh before a route's first upload under a new policy: one
tiny online request of the route's own kind and one listing of its batch API, proving its model
id, key, parameters, base URL and API version in seconds (preflight.py). Every preflight is kept,
passed or not; a pass under a route's current preflight_key (its policy fingerprint and where it
goes: the base URL its client sends to, the key variable, the transport) means none is sent again.
Its cost is spent like any other: the cost view shows it as stage 'preflight' (one row each,
batch_id 'preflight-<id>').
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlite_utils import Database


def migrate(db: Database) -> None:
    db.execute(
        """CREATE TABLE preflights (
            id INTEGER PRIMARY KEY, route TEXT NOT NULL, stage TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,
            policy_fp TEXT NOT NULL, base_url TEXT NOT NULL, endpoint_host TEXT NOT NULL, api_key_env TEXT NOT NULL,
            transport TEXT NOT NULL, preflight_key TEXT NOT NULL, outcome TEXT NOT NULL, online TEXT NOT NULL, batch_api TEXT,
            message TEXT, fix TEXT, input_tokens INTEGER, output_tokens INTEGER, est_cost REAL, cost REAL,
            started_at REAL NOT NULL, seconds REAL NOT NULL, run_id INTEGER)"""
    )
    db.execute("CREATE INDEX preflights_by_key ON preflights (preflight_key, outcome)")
    db.execute(
        """CREATE VIEW preflights_log AS
        SELECT id, route, stage, provider, model, endpoint_host, api_key_env, transport, outcome, online, batch_api, message, fix,
          input_tokens, output_tokens, cost, seconds, run_id, strftime('%Y-%m-%dT%H:%M:%SZ', started_at, 'unixepoch') AS started_at_utc
        FROM preflights ORDER BY id"""
    )
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
        GROUP BY b.id
        UNION ALL
        SELECT p.route, 'preflight' AS stage, p.provider, 'online' AS transport,
          date(p.started_at, 'unixepoch', 'localtime', '-12 hours') AS night,
          'preflight-' || p.id AS batch_id, 1 AS results, p.input_tokens, p.output_tokens,
          NULL AS reasoning_tokens, NULL AS cached_tokens,
          p.est_cost AS estimated_cost, p.est_cost AS expected_cost, p.cost AS actual_cost
        FROM preflights p"""
    )
