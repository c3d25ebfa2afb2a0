"""One small provider interface: pure halves (build a line, parse a line) apart from I/O halves.

An adapter is a class with:

- pure: `build_line(route, req) -> dict` (the provider-native request-file line) and
  `parse_line(obj) -> LineResult` (one result line, success or failure, never raising);
  `online_body(line) -> (custom_id, body)` (what the sync transport sends for a request line).
- I/O, given an SDK client from `clients.make_client(route)`: `upload`, `create`, `retrieve`,
  `list_recent`, `cancel`, `download`, `send_online`.

Per-request failures are values (`LineResult.kind`), not exceptions: one bad line never stops a
collect. Whole-call failures (the provider refused, the network is down) are `ProviderError`s
raised by the I/O halves, classified by `clients.call` so callers know whether the provider may
have acted anyway ("uncertain": a dropped connection on a create).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Literal

# Sent with every online (sync-transport) request: providers ignore unknown headers, and it lets
# a provider's logs (or the emulator's request log) tie an online call to its custom_id.
TRACE_HEADER = "X-Batchrun-Custom-Id"
# The sync transport writes an online failure as a batch-shaped result line; where the provider
# sent Retry-After it adds this key (ignored by every parse_line), so the retry honours it.
RETRY_AFTER_KEY = "batchrun_retry_after"

BatchState = Literal["pending", "running", "done", "failed", "expired", "cancelled"]
TERMINAL_STATES: tuple[str, ...] = ("done", "failed", "expired", "cancelled")

ResultKind = Literal[
    "ok",  # text returned (for judges: a parseable verdict)
    "refusal",  # the model refused (OpenAI message.refusal, Anthropic stop_reason refusal, Gemini SAFETY)
    "empty",  # no text
    "invalid",  # the provider rejected the request itself (400-class): the config's fault; blocks the route
    "auth",  # the provider rejected the key (401/403): blocks the route until the key is fixed
    "transient",  # 429 / 5xx / overloaded / timeout: retried, at most max_retries times
    "expired",  # the batch expired before this request ran: resubmitted without using retries
    "cancelled",  # the batch was cancelled before this request ran: resubmitted likewise
    "missing",  # the batch ended but returned no line for this request: resubmitted likewise
    "batch_failed",  # the provider failed the whole batch (validation): re-queued once
    "unparseable",  # judges only: text with no parseable total (an infrastructure failure)
]


@dataclass(frozen=True)
class RequestSpec:
    """What a request says, independent of any provider. The prompt is the single user turn."""

    custom_id: str
    model: str
    prompt: str
    max_tokens: int
    temperature: float | None  # None: the key is absent from the request, not null


@dataclass(frozen=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None


@dataclass(frozen=True)
class LineResult:
    custom_id: str
    kind: ResultKind
    text: str | None = None
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    error_type: str | None = None
    error_message: str | None = None


@dataclass(frozen=True)
class BatchStatus:
    """A provider batch as last seen. `state` is ours; `raw_status` keeps the provider's word."""

    provider_batch_id: str
    state: BatchState
    raw_status: str
    counts: dict[str, Any] = field(default_factory=dict)
    result_refs: tuple[str, ...] = ()  # file ids / names to download once terminal
    error: str | None = None  # whole-batch error (validation failure)
    quota: bool = False  # the provider refused for a queue/quota limit: "not now", not a failure
    tag: str | None = None  # our local batch id, where the provider keeps one (OpenAI metadata, Gemini displayName)
    created_at: float | None = None
    raw: dict[str, Any] = field(default_factory=dict)


def error_kind_for_status(status: int | None) -> ResultKind:
    """Per-request HTTP-ish status -> failure kind. 408/409/429/5xx and unknowns are transient."""
    if status in (400, 404, 413, 422):
        return "invalid"
    if status in (401, 403):
        return "auth"
    return "transient"


_ADAPTERS = {
    "openai": "batchrun.providers.openai:OpenAIAdapter",
    "openai-compatible": "batchrun.providers.openai:OpenAIAdapter",
    "anthropic": "batchrun.providers.anthropic:AnthropicAdapter",
    "gemini": "batchrun.providers.gemini:GeminiAdapter",
}


def get_adapter(provider: str) -> Any:
    """The adapter for a provider name, imported lazily (a plain registry)."""
    module, _, cls = _ADAPTERS[provider].partition(":")
    return getattr(importlib.import_module(module), cls)()
