"""Prices, estimates and actual spend.

Prices are per route, in dollars per million tokens at the online rate, times `batch_discount`
(0.5 for the batch transport, 1.0 for sync by default). A route without a price has an *unknown*
cost: None all the way to the report, never $0.

Billed output tokens: most providers' output token counts already include reasoning tokens; a
provider that reports reasoning apart and bills it as output (`Adapter.reasoning_billed_apart`)
has it added.
"""

from __future__ import annotations

from typing import Any

from .config import Route
from .errors import BatchrunError
from .lifecycle import Status
from .providers import get_adapter
from .store import Store


def request_cost(route: Route, input_tokens: int | None, output_tokens: int | None) -> float | None:
    price = route.price
    if not price.known or input_tokens is None or output_tokens is None:
        return None
    pin, pout = price.input, price.output
    for tier in price.tiers:  # long-context tiers: a higher price above an input-token threshold
        if input_tokens > tier.above_input_tokens:
            pin, pout = tier.input, tier.output
    assert pin is not None and pout is not None
    return (input_tokens * pin + output_tokens * pout) / 1_000_000 * route.batch_discount


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


def cost_report(store: Store, since: str | None = None) -> dict[str, Any]:
    """Per night and route: estimate vs actual, from the `cost` view."""
    # A batch the provider refused for a queue quota never ran (its requests went again in another batch).
    where = "WHERE batch_id NOT IN (SELECT id FROM batches WHERE status = ?)"
    params: list[Any] = [Status.REFUSED]
    if since:
        where, params = where + " AND night >= ?", [*params, parse_night(since)]
    rows = store.rows(
        f"""SELECT night, route, stage, count(*) AS batches, coalesce(sum(input_tokens), 0) AS input_tokens,
               coalesce(sum(output_tokens), 0) AS output_tokens,
               CASE WHEN count(estimated_cost) = count(*) THEN sum(estimated_cost) END AS estimated_cost,
               CASE WHEN count(actual_cost) = count(*) THEN sum(actual_cost) END AS actual_cost
            FROM cost {where} GROUP BY night, route, stage ORDER BY night, route, stage""", params)
    nights = store.rows(
        f"""SELECT night, count(*) AS batches,
               CASE WHEN count(estimated_cost) = count(*) THEN sum(estimated_cost) END AS estimated_cost,
               CASE WHEN count(actual_cost) = count(*) THEN sum(actual_cost) END AS actual_cost
            FROM cost {where} GROUP BY night ORDER BY night""", params)
    return {"rows": rows, "nights": nights}
