"""The maintainer's recorded decisions about failures that will not resolve by themselves.

- `reopen` (`batchrun retry`): send blocked, waiting or accepted requests again now, with a
  fresh retry budget, e.g. after fixing a key in the environment or when a provider was at fault.
- `accept_failures` (`batchrun accept-failures`): zero-fill a contestant route's remaining
  infrastructure failures so its headline can be published. The decision is scoped to the
  route's current policy (a changed config undoes it by itself), covers the failures that
  happened before it (a later outage is not silently zeroed), appears in the route's provenance
  and the report, and is undone for any request reopened after it.

Both are new rows (`reopens`, `accepted_failures`); no earlier row is ever edited.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..base.errors import BatchrunError
from ..protocol.config import Config
from .pending import current_requests_sql
from .store import Store

REOPENABLE = ("blocked", "waiting", "accepted")


@dataclass(frozen=True)
class Reopened:
    route: str
    requests: int
    by_state: dict[str, int]


def _route_requests_sql(statuses: tuple[str, ...]) -> str:
    """Current requests of a route: its own (generation, or a judge's), and the judgments of its
    cells when it is a contestant (so `retry --route R` also reopens R's blocked judging)."""
    marks = ", ".join("?" for _ in statuses)
    return f"""SELECT s.custom_id, s.route, s.task_id, s.state FROM request_status s
               LEFT JOIN requests p ON p.custom_id = s.parent_custom_id
               WHERE (s.route = ? OR p.route = ?) AND s.state IN ({marks}) AND (? IS NULL OR s.task_id = ?)
                 AND s.custom_id IN ({current_requests_sql()})"""


def _check_route(config: Config, route: str) -> None:
    config.require_routes([route])


def reopen(store: Store, config: Config, *, route: str, task: str | None = None, status: str | None = None,
           reason: str | None = None) -> Reopened:
    """Record a reopen of the route's blocked, waiting or accepted requests (or those of one status)."""
    _check_route(config, route)
    if status is not None and status not in REOPENABLE:
        hint = ("Refusals and empty answers are the model's answer (spec §2: no content retry)."
                if status in ("failed", "refusal", "empty") else f"Use one of: {', '.join(REOPENABLE)}.")
        raise BatchrunError(f"--status {status!r} cannot be retried.", hint)
    statuses = (status,) if status else REOPENABLE
    if task is not None and store.scalar("SELECT 1 FROM tasks WHERE task_id = ?", [task]) is None:
        raise BatchrunError(f"--task {task!r} is not a task of the dataset.", "See the task_id values in the dataset file.")
    rows = store.rows(_route_requests_sql(statuses), [route, route, *statuses, task, task])
    if not rows:
        raise BatchrunError(
            f"Nothing to retry for route {route!r}" + (f", task {task!r}" if task else "") + f" ({' or '.join(statuses)}).",
            "See `batchrun status` for the route's cells; pending ones are sent by the next submit or refresh anyway.")
    now = time.time()
    with store.db.atomic():
        store.db.conn.executemany(
            "INSERT INTO reopens (custom_id, route, task_id, state, reason, created_at, run_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(r["custom_id"], r["route"], r["task_id"], r["state"], reason, now, store.run_id) for r in rows])
    by_state: dict[str, int] = {}
    for r in rows:
        by_state[r["state"]] = by_state.get(r["state"], 0) + 1
    return Reopened(route, len(rows), by_state)


@dataclass(frozen=True)
class Accepted:
    route: str
    cells: int
    reason: str


def accept_failures(store: Store, config: Config, *, route: str, reason: str) -> Accepted:
    """Record the decision to zero-fill the route's current infrastructure failures."""
    _check_route(config, route)
    policy_fp = store.scalar("SELECT policy_fp FROM config_routes WHERE route = ? AND role = 'contestant'", [route])
    if policy_fp is None:
        raise BatchrunError(f"Route {route!r} is a judge, not a contestant: it has no cells to zero-fill.",
                            f"Use `batchrun retry --route {route}` once the judge works again.")
    if not reason.strip():
        raise BatchrunError("--reason is empty.", "Say why these cells cannot finish; it is published with the route.")
    # Cells whose generation or judging failed for infrastructure and is not in flight now.
    cells = store.scalar(
        f"""SELECT count(DISTINCT s.task_id) FROM request_status s LEFT JOIN requests p ON p.custom_id = s.parent_custom_id
            WHERE coalesce(p.route, s.route) = ? AND s.failure_n > 0 AND s.state IN ('blocked', 'waiting', 'pending')
              AND s.custom_id IN ({current_requests_sql()})""", [route]) or 0
    if not cells:
        raise BatchrunError(f"Route {route!r} has no infrastructure failures to accept.",
                            "Nothing was recorded. See `batchrun status`: open cells without failures are still being sent.")
    with store.db.atomic():
        store.db.execute(
            "INSERT INTO accepted_failures (route, policy_fp, reason, cells, created_at, run_id) VALUES (?, ?, ?, ?, ?, ?)",
            [route, policy_fp, reason.strip(), cells, time.time(), store.run_id])
    return Accepted(route, cells, reason.strip())
