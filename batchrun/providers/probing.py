"""Probing a model's context window online (`Adapter.probe_call`, `batchrun probe`): one minimal
request sent the way a run would send it, and the numbers a too-long refusal states."""

from __future__ import annotations

import re
from typing import Any

from ..base.redaction import redact
from . import TOO_LONG, Adapter, ProbeAnswer, RequestSpec, RouteView
from .clients import send_online


def online_probe(adapter: Adapter, client: Any, route: RouteView, prompt: str, max_tokens: int = 1) -> ProbeAnswer:
    """`Adapter.probe_call` for every adapter: the request line the route would send, with a
    budget of 1 token and no temperature, sent online; the answer read by the adapter's own
    `parse_line` (an SDK error through its `error_line`), so one classification of "too long"
    serves runs and probes alike."""
    line = adapter.build_line(route, RequestSpec("batchrun-probe", route.model, prompt, max_tokens, None))
    out, failed = send_online(adapter, client, route, line, "batchrun-probe")
    status = 200 if failed is None else failed.status
    result = adapter.parse_line(out)
    if result.kind in ("ok", "empty", "refusal"):
        return ProbeAnswer("accepted", input_tokens=result.usage.input_tokens, output_budget=max_tokens, status=status)
    # An answer (a 200 that holds an error, as some OpenAI-compatible servers send) is not a failed
    # call, which clients.classify redacts: its words may quote the key back too, and the probe
    # keeps them in state.db (`probes`) and prints them.
    message = redact(result.error_message or result.error_type or result.kind)
    if result.error_type == TOO_LONG:
        tokens, window = adapter.stated_counts(message)
        return ProbeAnswer("too_long", input_tokens=tokens, window=window, status=status, message=message)
    return ProbeAnswer("error", status=status, message=message)


def stated_numbers(pattern: re.Pattern[str], message: str) -> tuple[int | None, int | None]:
    """(tokens, window) from a refusal's text by a pattern with named groups `tokens` and `window`."""
    found = pattern.search(message or "")
    if found is None:
        return None, None
    groups = found.groupdict()
    def number(name: str) -> int | None:
        value = groups.get(name)
        return int(value) if value else None
    return number("tokens"), number("window")
