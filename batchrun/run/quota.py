"""What may be created now: the night's budget and each route's provider queue limits.

Budget: a batch is created only if the night's committed spend plus its estimate stays within the
budget. Committed spend = estimates of batches in flight + actual cost of batches that ended this
night (a "night" runs from local noon to noon, so one overnight run is one night). A batch whose
cost is unknown (no price) cannot be checked and is held while a budget is set.

Queues: OpenAI limits the prompt tokens queued per model, Anthropic and Gemini the queued
requests; `max_enqueued_tokens` and `max_batches_in_flight` keep a route's in-flight batches
under them, so the rest go out as earlier batches finish instead of being rejected.

Order (submit walks batches in this order): judging first, so routes already started finish, then
generation retries, then new generation; within each, the order they were planned.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from ..ledger.cost import fmt_money
from ..ledger.lifecycle import QUEUED, SPENDING, STARTED, Status
from ..ledger.store import Store, sql_list
from ..protocol.config import Config


def night_start(now: float | None = None) -> float:
    t = datetime.fromtimestamp(now or time.time())
    noon = t.replace(hour=12, minute=0, second=0, microsecond=0)
    return (noon if t >= noon else noon - timedelta(days=1)).timestamp()


def committed_spend(store: Store) -> float:
    since = night_start()
    in_flight = store.scalar(
        f"SELECT coalesce(sum(est_cost), 0) FROM batches WHERE status IN {sql_list(SPENDING)} AND coalesce(submitted_at, creating_at) >= ?",
        [since]) or 0.0
    actual = store.scalar(
        "SELECT coalesce(sum(r.cost), 0) FROM results r JOIN batches b ON b.id = r.batch_id WHERE b.status = ? AND b.submitted_at >= ?",
        [Status.COLLECTED, since]) or 0.0
    return float(in_flight) + float(actual)


def submission_order(batches: list[dict[str, Any]], store: Store) -> list[dict[str, Any]]:
    started = {r[0] for r in store.db.execute(f"SELECT DISTINCT b.route FROM batches b WHERE b.status IN {sql_list(STARTED)} AND b.stage = 'gen'")}

    def key(b: dict[str, Any]) -> tuple[int, int]:
        if b["stage"] == "judge":
            return (0, b["seq"])
        return (1 if b["route"] in started else 2, b["seq"])

    return sorted(batches, key=key)


class Gate:
    def __init__(self, store: Store, config: Config, budget: float | None):
        self.store, self.config, self.budget = store, config, budget
        self.spend = committed_spend(store) if budget is not None else 0.0
        self.queued: dict[str, tuple[int, int]] = {}
        for row in store.rows(
            "SELECT route, count(*) AS n, coalesce(sum(est_input_tokens), 0) AS tokens FROM batches "
            f"WHERE status IN {sql_list(QUEUED)} AND transport = 'batch' GROUP BY route"
        ):
            self.queued[row["route"]] = (row["n"], row["tokens"])

    def check(self, b: dict[str, Any]) -> str | None:
        """None if the batch may be created now, else why not."""
        route = self.config.routes[b["route"]]
        if self.budget is not None:
            if b["est_cost"] is None:
                return f"route {route.name!r} has no price, so its cost cannot be checked against the budget (set price for the route)"
            if self.spend + b["est_cost"] > self.budget + 1e-9:
                return (f"budget: {fmt_money(self.spend)} committed tonight + est. {fmt_money(b['est_cost'])} "
                        f"would exceed {fmt_money(self.budget)}")
        if b["transport"] == "batch":
            n, tokens = self.queued.get(route.name, (0, 0))
            if route.max_batches_in_flight is not None and n + 1 > route.max_batches_in_flight:
                return f"queue: route {route.name!r} already has {n} batch(es) in flight (max_batches_in_flight = {route.max_batches_in_flight})"
            if route.max_enqueued_tokens is not None and n > 0 and tokens + (b["est_input_tokens"] or 0) > route.max_enqueued_tokens:
                return (f"queue: route {route.name!r} has ~{tokens:,} prompt tokens enqueued; this batch adds "
                        f"~{b['est_input_tokens']:,} (max_enqueued_tokens = {route.max_enqueued_tokens:,})")
        return None

    def copy(self) -> Gate:
        """A copy to try admissions on, leaving this one as it is."""
        trial = Gate.__new__(Gate)
        trial.store, trial.config, trial.budget, trial.spend = self.store, self.config, self.budget, self.spend
        trial.queued = dict(self.queued)
        return trial

    def admit(self, b: dict[str, Any]) -> None:
        if self.budget is not None and b["est_cost"] is not None:
            self.spend += b["est_cost"]
        if b["transport"] == "batch":
            n, tokens = self.queued.get(b["route"], (0, 0))
            self.queued[b["route"]] = (n + 1, tokens + (b["est_input_tokens"] or 0))
