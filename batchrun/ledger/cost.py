"""Prices, estimates and actual spend.

Prices are per route, in dollars per million tokens at the online rate, times `batch_discount`
(0.5 for the batch transport, 1.0 for sync by default). A route without a price has an *unknown*
cost: None all the way to the report, never $0.

Billed output tokens: most providers' output token counts already include reasoning tokens; a
provider that reports reasoning apart and bills it as output (`Adapter.reasoning_billed_apart`)
has it added.

Two estimates of what is not sent yet. The **bound** assumes every answer uses its whole
max_tokens: it cannot be exceeded, so `--budget` checks it (`batches.est_cost`). The **expected**
cost uses the output a route really writes: the mean billed output tokens of the answers it has
returned so far for that stage (capped at max_tokens), or, before it has returned any, the stated
prior EXPECTED_OUTPUT_PRIOR of max_tokens (`batches.expected_cost`). Input tokens are the same
estimate in both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..base.errors import BatchrunError
from ..protocol.config import Config, Route
from ..providers import get_adapter
from .lifecycle import Status
from .store import Store


def request_cost(route: Route, input_tokens: int | None, output_tokens: int | None, *, online: bool = False) -> float | None:
    """What a request costs at the route's price: at the batch rate (batch_discount), or `online`
    at the full rate (a preflight's request, sent online whatever the route's transport)."""
    price = route.price
    if not price.known or input_tokens is None or output_tokens is None:
        return None
    pin, pout = price.input, price.output
    for tier in price.tiers:  # long-context tiers: a higher price above an input-token threshold
        if input_tokens > tier.above_input_tokens:
            pin, pout = tier.input, tier.output
    assert pin is not None and pout is not None
    return (input_tokens * pin + output_tokens * pout) / 1_000_000 * (1.0 if online else route.batch_discount)


def online_cost(route: Route, input_tokens: int, output_tokens: int) -> float | None:
    """What the same work would cost through online calls (no batch discount)."""
    c = request_cost(route, input_tokens, output_tokens)
    return None if c is None else c / route.batch_discount


def billed_output(route: Route, output_tokens: int | None, reasoning_tokens: int | None) -> int | None:
    if output_tokens is None:
        return None
    if reasoning_tokens and get_adapter(route.provider).reasoning_billed_apart:
        return output_tokens + reasoning_tokens
    return output_tokens


# Before a route has returned any answer of a stage, an answer is expected to use this fraction of
# its max_tokens. A guess, said as one: answers to a question about a document run to hundreds of
# tokens, a judge's verdict to fewer, against budgets of thousands (the demo's judges used ~0.4%);
# a quarter keeps the first night's expected figure on the high side of what is usual.
EXPECTED_OUTPUT_PRIOR = 0.25


@dataclass(frozen=True)
class ExpectedOutput:
    """Expected billed output tokens per request, per (route, stage): observed, or the prior."""

    observed: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)  # mean tokens, answers seen

    def tokens(self, route: str, stage: str, bound: int) -> int:
        seen = self.observed.get((route, stage))
        if seen is None:
            return math.ceil(bound * EXPECTED_OUTPUT_PRIOR)
        return min(bound, math.ceil(seen[0]))

    def basis(self, route: str, stage: str) -> str:
        seen = self.observed.get((route, stage))
        if seen is None:
            return f"prior: {EXPECTED_OUTPUT_PRIOR:.0%} of max_tokens"
        return f"observed: mean of {seen[1]} answer(s)"


@dataclass
class ObservedUsage:
    """The token counts of one (route, stage)'s results with usage, summed (exact integers)."""

    n: int = 0  # lines with usage: answers, refusals, empty ones (failed lines bill nothing)
    output: int = 0
    reasoning: int = 0
    n_ok: int = 0  # of them, answers (kind ok)
    billed_ok: int = 0  # their billed output: reasoning added where the provider counts it apart


def observed_usage(store: Store) -> dict[tuple[str, str], ObservedUsage]:
    """Summed usage per (route, stage) of every result so far, read by batch (a batch is one
    route and stage; its provider says whether reasoning is billed apart) through the
    results_usage index (m017): linear in results, without reading an answer."""
    batches = {r[0]: (r[1], r[2], r[3]) for r in store.db.execute("SELECT id, route, stage, provider FROM batches")}
    apart: dict[str, bool] = {}
    usage: dict[tuple[str, str], ObservedUsage] = {}
    for batch_id, ok, n, output, reasoning in store.db.execute(
            """SELECT batch_id, kind = 'ok', count(*), sum(output_tokens), sum(coalesce(reasoning_tokens, 0))
               FROM results WHERE output_tokens IS NOT NULL GROUP BY batch_id, kind = 'ok'"""):
        route, stage, provider = batches[batch_id]
        u = usage.setdefault((route, stage), ObservedUsage())
        u.n, u.output, u.reasoning = u.n + n, u.output + output, u.reasoning + reasoning
        if ok:
            if provider not in apart:
                apart[provider] = get_adapter(provider).reasoning_billed_apart
            u.n_ok += n
            u.billed_ok += output + (reasoning if apart[provider] else 0)
    return usage


def expected_output(store: Store, config: Config) -> ExpectedOutput:
    """The mean billed output of each route's answers so far (lines with usage: answers, refusals,
    empty ones; failed lines bill nothing and say nothing of answer length)."""
    observed: dict[tuple[str, str], tuple[float, int]] = {}
    for (name, stage), u in observed_usage(store).items():
        route = config.routes.get(name)
        if route is None or not u.n:
            continue
        # The means, as SQL's avg() gave them (exact integer sums, one division).
        mean = u.output / u.n + (u.reasoning / u.n if get_adapter(route.provider).reasoning_billed_apart and u.reasoning else 0)
        observed[(name, stage)] = (mean, u.n)
    return ExpectedOutput(observed)


def fmt_money(value: float | None) -> str:
    if value is None:
        return "unknown"
    if 0 < abs(value) < 1:
        return f"${value:.4f}"  # small but real: never let it read as $0.00
    return f"${value:,.2f}"


def parse_night(text: str) -> str:
    """--since YYYY-MM-DD, checked: an unknown word or an impossible date must not print an empty
    table that reads like "nothing was spent"."""
    from datetime import date

    try:
        return date.fromisoformat(text).isoformat() if len(text) == 10 else _bad_date(text)
    except ValueError:
        return _bad_date(text)


def _bad_date(text: str) -> str:
    raise BatchrunError(f"--since {text!r} is not a date.", "Use YYYY-MM-DD, e.g. --since 2026-11-01 (nights run noon to noon).")


def cost_report(store: Store, since: str | None = None, order: Sequence[str] = ()) -> dict[str, Any]:
    """Per night and route: the expected estimate, the bound and the actual spend (the `cost` view);
    per route over those nights, how far the actual spend was from the expected estimate. Routes
    in `order` (the config's) first, in that order, then any others by name.

    A night's total is the sum over its priced routes; the routes without a price are named beside
    it (`unpriced_routes`), not turned into an unknown total."""
    # A batch the provider refused for a queue quota never ran (its requests went again in another batch).
    where = "WHERE batch_id NOT IN (SELECT id FROM batches WHERE status = ?)"
    params: list[Any] = [Status.REFUSED]
    if since:
        where, params = where + " AND night >= ?", [*params, parse_night(since)]
    rows = store.rows(
        f"""SELECT night, route, stage, count(*) AS batches, coalesce(sum(input_tokens), 0) AS input_tokens,
               coalesce(sum(output_tokens), 0) AS output_tokens,
               CASE WHEN count(expected_cost) = count(*) THEN sum(expected_cost) END AS expected_cost,
               CASE WHEN count(estimated_cost) = count(*) THEN sum(estimated_cost) END AS estimated_cost,
               CASE WHEN count(actual_cost) = count(*) THEN sum(actual_cost) END AS actual_cost
            FROM cost {where} GROUP BY night, route, stage ORDER BY night, route, stage""", params)
    rank = {name: i for i, name in enumerate(order)}
    rows.sort(key=lambda r: (r["night"], rank.get(r["route"], len(rank)), r["route"]))  # stable: stage order stays
    nights: dict[str, dict[str, Any]] = {}
    for r in rows:
        n = nights.setdefault(r["night"], {"night": r["night"], "batches": 0, "expected_cost": 0.0, "estimated_cost": 0.0,
                                           "actual_cost": 0.0, "unpriced_routes": []})
        n["batches"] += r["batches"]
        if r["estimated_cost"] is None and r["actual_cost"] is None:
            if r["route"] not in n["unpriced_routes"]:
                n["unpriced_routes"].append(r["route"])
            continue
        for key in ("expected_cost", "estimated_cost", "actual_cost"):
            n[key] = None if (n[key] is None or r[key] is None) else n[key] + r[key]
    # Estimate vs actual per route: only batches whose actual cost is known (collected), so the
    # error compares like with like; older batches (before expected costs were kept) have none.
    # A preflight's estimate is its bound (16 output tokens), not an expectation: not compared.
    routes = store.rows(
        f"""SELECT route, stage, count(*) AS batches, sum(expected_cost) AS expected_cost,
               sum(estimated_cost) AS estimated_cost, sum(actual_cost) AS actual_cost
            FROM cost {where} AND actual_cost IS NOT NULL AND expected_cost IS NOT NULL AND stage != 'preflight'
            GROUP BY route, stage ORDER BY route, stage""", params)
    routes.sort(key=lambda r: (rank.get(r["route"], len(rank)), r["route"]))
    for r in routes:
        r["error"] = (r["actual_cost"] - r["expected_cost"]) / r["expected_cost"] if r["expected_cost"] else None
    return {"rows": rows, "nights": list(nights.values()), "routes": routes,
            "nights_run": "noon to noon, local time (a night is labelled by the date it starts)"}
