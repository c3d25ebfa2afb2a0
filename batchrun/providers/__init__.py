"""One small provider interface: pure halves (build a line, parse a line) apart from I/O halves.

An adapter is a class with:

- pure: `build_line(route, req) -> dict` (the provider-native request-file line) and
  `parse_line(obj) -> LineResult` (one result line, success or failure, never raising on any
  JSON value: see `parse_total`); `custom_id_of(obj)` (the request a line answers, or None);
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
import json
from collections.abc import Callable
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


# -- reading result lines that may not have the documented shape ------------------------------
#
# A result line is provider output: a broken or hostile provider can send any JSON value
# (`[1,2,3]`, `null`, a `result` that is a string). Such a line is a per-request infrastructure
# failure ("transient", error_type "malformed": retried, never a zero) of the custom_id it names,
# if it names one; it must never raise and stop the other lines of the batch. The adapters read
# fields through these helpers, which raise `Malformed` on a wrong type; `parse_total` turns that
# into the LineResult.

# Longest provider label (finish reason, error type) and error message kept per line: real ones
# are a few words or sentences; a provider sending megabytes there must not fill state.db.
MAX_LABEL_CHARS = 200
MAX_MESSAGE_CHARS = 16_384


class Malformed(ValueError):
    """A result line (or a field of it) without the shape the provider documents."""


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def as_object(value: Any, what: str) -> dict[str, Any]:
    """An object field; absent/null reads as {} (the adapters treat missing parts as before)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Malformed(f"{what} is a JSON {json_type(value)}, not an object")
    return value


def as_array(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Malformed(f"{what} is a JSON {json_type(value)}, not an array")
    return value


def as_text(value: Any, what: str) -> str | None:
    """Answer text: a string or absent; anything else is malformed (never silently empty)."""
    if value is None or isinstance(value, str):
        return value
    raise Malformed(f"{what} is a JSON {json_type(value)}, not a string")


def as_count(value: Any) -> int | None:
    """A token count, or None (unknown) when it is not a non-negative integer SQLite can hold:
    a bad usage figure makes the cost unknown, it does not discard the answer."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value < 2**63:
        return value
    return None


def as_label(value: Any) -> str | None:
    """A finish reason, error type or code, as short text (numbers kept: Gemini codes are ints)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value[:MAX_LABEL_CHARS]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)[:MAX_LABEL_CHARS]
    return _compact(value)[:MAX_LABEL_CHARS]


def as_message(value: Any) -> str | None:
    """A provider's error message, as text of bounded length."""
    if value is None:
        return None
    text = value if isinstance(value, str) else _compact(value)
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + " [cut]"


def _compact(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def malformed(custom_id: str | None, why: str) -> LineResult:
    """A line that names a request but cannot be read: an infrastructure failure of that request
    (retried). With no readable custom_id the LineResult names no request and collect skips it."""
    return LineResult(custom_id or "", "transient", error_type="malformed", error_message=as_message(why))


def parse_total(custom_id_of: Callable[[Any], str | None], parse: Callable[[str, dict[str, Any]], LineResult], obj: Any) -> LineResult:
    """Run an adapter's parser on one decoded line so that no JSON value makes it raise.

    `Malformed` is the expected way out; the other exception types are what a field of an
    unexpected type can still raise in a parser (a missed check is then a malformed line, not a
    crash of the collect)."""
    custom_id = custom_id_of(obj)
    if not isinstance(obj, dict):
        return malformed(custom_id, f"result line is a JSON {json_type(obj)}, not an object")
    try:
        return parse(custom_id or "", obj)
    except Malformed as e:
        return malformed(custom_id, str(e))
    except (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError) as e:
        return malformed(custom_id, f"unexpected result line shape ({type(e).__name__}: {e})")


def custom_id_field(obj: Any, *names: str) -> str | None:
    """The first of `names` that holds a string in a line object; None if the line names none.
    Our custom_ids are strings: a number or an object there is not one of ours."""
    if not isinstance(obj, dict):
        return None
    for name in names:
        value = obj.get(name)
        if isinstance(value, str) and value:
            return value
    return None


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
