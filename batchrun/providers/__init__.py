"""The provider interface: one adapter per provider, typed (`Adapter`), with declared capabilities.

An adapter has pure halves (build a request line, parse a result line) apart from I/O halves
(upload, create, retrieve, list, cancel, download, send online), given an SDK client it builds
itself (`make_client`, called by `clients.make_client`). What differs between providers and the
pipeline must act on is declared on the adapter, in the manner of llm's `can_stream` /
`supports_schema`: whether batches carry our tag, whether requests travel inline, the default
key variable, the file limits, the endpoint, how reasoning tokens are billed... No module outside
this package tests a provider's name: adding a provider is one adapter file plus its line in
`_ADAPTERS`.

Per-request failures are values (`LineResult.kind`), not exceptions: one bad line never stops a
collect. Whole-call failures (the provider refused, the network is down) are `ProviderError`s
raised by the I/O halves, classified by `clients.call` so callers know whether the provider may
have acted anyway ("uncertain": a dropped connection on a create).

The package: this module (the interface, its values and the registry), `clients.py` (the one
place SDK clients are built, keys read, and calls classified and retried), `reading.py`
(provider output read without trusting its shape), `probing.py` (a context window probed
online), and one adapter module per provider (`openai.py` also serves the
OpenAI-compatible batch APIs). A route is known here only as a `RouteView`: providers/ sits
below the config.

May import: base.
"""

from __future__ import annotations

import functools
import importlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, cast

class RouteView(Protocol):
    """What the providers read of a route. `config.Route` is the one implementation; providers/
    sits below the config in the stack (docs/architecture.md), so an adapter knows a route only
    through these fields, never the config it came from."""

    @property
    def name(self) -> str: ...
    @property
    def provider(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def transport(self) -> str: ...  # "batch" | "sync"
    @property
    def endpoint(self) -> str: ...  # "chat" | "responses"
    @property
    def endpoint_path(self) -> str: ...
    @property
    def base_url(self) -> str | None: ...
    @property
    def api_key_env(self) -> str: ...
    @property
    def api_version(self) -> str | None: ...
    @property
    def completion_window(self) -> str: ...
    @property
    def key_optional(self) -> bool: ...
    @property
    def endpoint_host(self) -> str: ...


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
    # The answer stopped at the request's output budget (max tokens): it may end mid-sentence, so
    # a judge's verdict in it is read only as a whole JSON object (grading.parse_verdict).
    at_budget: bool = False


#: `LineResult.error_type` of a request the provider refused because its prompt is longer than the
#: model's context window (each adapter recognises its provider's wording; kind stays "invalid":
#: the route's caps are wrong, a config problem, never the model's failure).
TOO_LONG = "context_too_long"
#: `LineResult.error_type` of a request the provider refused because it does not know the model id
#: (each adapter recognises its provider's wording; kind stays "invalid": the route's model id is
#: wrong, a config problem; diagnosis says to correct it).
UNKNOWN_MODEL = "unknown_model"


@dataclass(frozen=True)
class ProbeAnswer:
    """What one minimal online call (max_tokens 1; 16 where the API's minimum is 16) of `batchrun probe` got back."""

    outcome: Literal["accepted", "too_long", "error"]
    input_tokens: int | None = None  # an accepted call's usage, or the count a refusal states
    output_budget: int = 1  # the max tokens sent: an accepted call is billed at most this much output
    window: int | None = None  # the window a refusal states, where the provider states it
    status: int | None = None
    message: str = ""


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
    tag: str | None = None  # our local batch id, where the provider keeps one (Adapter.tags_batches)
    created_at: float | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    n_requests: int | None = None  # requests in the batch, where the provider says (adoption without a tag compares it)
    # Requests the provider has finished (answered or failed) so far, of n_requests: None where the
    # provider (or its SDK) does not say. Progress lines and the time-left estimate read it.
    requests_done: int | None = None
    # Fields adoption tells a batch by (tag, request counts), present but unreadable: a listing
    # with such an entry cannot tell whether it is a batch an uncertain create made (listed_batches).
    unreadable: tuple[str, ...] = ()


class MalformedResponse(Exception):
    """A provider answered a call successfully but without what its protocol requires (a Gemini
    upload start without its X-Goog-Upload-URL header). Transient: a proxy or a provider bug
    that may be gone on the next attempt; the call is retried (clients.call), then the batch
    waits for a later round, with this message."""

    def __init__(self, message: str, status: int | None = 200):
        super().__init__(message)
        self.status = status


_WINDOW = re.compile(r"([1-9][0-9]{0,5})([hd])")


def window_hours(window: str) -> int | None:
    """A completion window written as whole hours or days ("24h", "14d") in hours; None for any
    other form. The OpenAI-compatible batch APIs that document a range write it so (DashScope
    "24h" to "336h" or "14d"; Kimi "12h" to "7d")."""
    found = _WINDOW.fullmatch(window)
    if found is None:
        return None
    return int(found.group(1)) * (24 if found.group(2) == "d" else 1)


def only_24h(provider: str, why: str, window: str) -> tuple[str, str] | None:
    """The (problem, fix) of a window other than "24h" where the provider offers only that one."""
    if window == "24h":
        return None
    return (f'is "{window}", but {provider} batches {why}',
            'Remove completion_window (batchrun sends "24h").')


def error_kind_for_status(status: int | None) -> ResultKind:
    """Per-request HTTP-ish status -> failure kind. 408/409/429/5xx and unknowns are transient."""
    if status in (400, 404, 413, 422):
        return "invalid"
    if status in (401, 403):
        return "auth"
    return "transient"


@dataclass(frozen=True)
class SdkError:
    """What an exception raised by a provider's SDK says, read by that provider's adapter
    (`Adapter.read_error`); `clients.classify` decides what it means for us."""

    status: int | None  # the HTTP status of the provider's answer; None: no answer was read
    message: str
    retry_after: float | None = None  # the provider's Retry-After, in seconds
    no_response: bool = False  # a connection error or timeout: the request may or may not have arrived


class Adapter(Protocol):
    """Everything the pipeline asks of a provider.

    Capabilities are declared facts about the provider, read by the pipeline instead of testing
    the provider's name."""

    name: str
    # -- keys, hosts and limits ------------------------------------------------------------------
    #: The environment variable holding the key when a route names none; "" = the route must name it.
    default_key_env: str
    #: A second variable the provider's SDK reads the same key from, tried when the default is unset
    #: (and always redacted).
    alt_key_env: str | None
    #: The API host when a route sets no base_url; None = the route must set base_url.
    default_host: str | None
    #: The variable the provider's SDK reads a base URL from when the route sets none.
    sdk_base_url_env: str
    #: What the SDK's base URL carries after the origin (the emulator serves every provider at one
    #: origin: `--emulator URL` becomes URL + this).
    base_url_suffix: str
    #: The provider's limits for one batch: (requests, bytes of the request file).
    file_limits: tuple[int, int]
    #: The `endpoint` values a route may choose (chat, responses...).
    endpoints: tuple[str, ...]
    #: The API version header sent when a route sets no api_version; None = no versions (a route's
    #: api_version is refused).
    default_api_version: str | None
    #: The header that carries the API version, as provenance names it.
    api_version_header: str | None
    #: API versions that reject temperature on every model.
    no_sampling_api_versions: frozenset[str]
    # -- how batches behave ----------------------------------------------------------------------
    #: Batches carry our tag (`BatchStatus.tag`), so an uncertain create is resolved by finding the
    #: tagged batch; without, by request count and then by the custom_ids in the results.
    tags_batches: bool
    #: Requests travel in the create call's body, read from the request file then (nothing is
    #: uploaded before): the file is checked again right before each create.
    inline_requests: bool
    #: HTTP statuses of a create that mean "the provider failed this batch at validation" (a
    #: provider without a failed batch state validates inline requests in the create call); the
    #: batch is recorded as failed as a whole, like a failed batch elsewhere.
    validation_failure_statuses: frozenset[int]
    #: Reasoning tokens are reported apart from output tokens and billed as output.
    reasoning_billed_apart: bool
    # -- what the API refuses (config_file checks a route against these before anything is sent) --
    #: The sampling temperatures the API accepts, inclusive (a wider value is a 400 on every request).
    temperature_range: tuple[float, float]
    #: A route's `endpoint_path` means something for this provider (the url of its batch lines).
    uses_endpoint_path: bool

    def min_output_tokens(self, route: RouteView) -> int:
        """The smallest completion budget the route's endpoint accepts."""
        ...

    def endpoint_path_problem(self, route: RouteView) -> tuple[str, str] | None:
        """(problem, fix) when the route's endpoint_path is not where the provider takes its body shape."""
        ...

    def completion_window_problem(self, route: RouteView) -> tuple[str, str] | None:
        """(problem, fix) when the provider does not offer the route's completion_window."""
        ...

    # -- pure halves -----------------------------------------------------------------------------
    def build_line(self, route: RouteView, req: RequestSpec) -> dict[str, Any]:
        """The provider-native request-file line for one request."""
        ...

    def online_body(self, line: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """(custom_id, body) the sync transport sends online for a request line."""
        ...

    def custom_id_of(self, obj: Any) -> str | None:
        """The request a decoded result line answers, or None if it names none."""
        ...

    def parse_line(self, obj: Any) -> LineResult:
        """One decoded result line, success or failure; never raises, whatever JSON value it is."""
        ...

    def error_line(self, custom_id: str, status: int | None, message: str, error_type: str | None = None) -> dict[str, Any]:
        """An online failure written as a batch result line, so collect has one path."""
        ...

    def policy_endpoint(self, route: RouteView) -> str:
        """What the route's policy fingerprint records as its endpoint."""
        ...

    def endpoint_label(self, route: RouteView) -> str:
        """The API endpoint the route's requests go to, for provenance."""
        ...

    # -- I/O halves ------------------------------------------------------------------------------
    def make_client(self, route: RouteView, key: str, *, timeout: float, hooks: dict[str, list[Callable[[Any], None]]]) -> Any:
        """The SDK client for a route: its key, its base URL, SDK retries off (see clients.py), and
        `hooks` as its HTTP client's event hooks (netguard.Guard: the route's origin only, within
        the run's time limit), for every request it sends."""
        ...

    def client_base_url(self, client: Any) -> str | None:
        """The base URL a client really sends to (the SDKs also read their own variables)."""
        ...

    def read_error(self, exc: BaseException) -> SdkError | None:
        """What an exception raised by this provider's SDK says; None if its SDK did not raise it."""
        ...

    def upload(self, client: Any, route: RouteView, path: Path) -> str | None:
        """Upload a request file; its file id (None: nothing to upload, see inline_requests)."""
        ...

    def create(self, client: Any, route: RouteView, *, file_id: str | None, path: Path, tag: dict[str, str]) -> BatchStatus:
        """Create the batch. Never retried blindly: submit's adoption path handles failures."""
        ...

    def retrieve(self, client: Any, route: RouteView, provider_batch_id: str) -> BatchStatus:
        ...

    def list_recent(self, client: Any, route: RouteView, since: float) -> list[BatchStatus]:
        """Batches created at or after `since` (epoch seconds), for adoption."""
        ...

    def cancel(self, client: Any, route: RouteView, provider_batch_id: str) -> None:
        ...

    def download(self, client: Any, route: RouteView, status: BatchStatus, dest: Path) -> list[Path]:
        """Fetch a terminal batch's result files into `dest`."""
        ...

    def send_online(self, client: Any, route: RouteView, line: dict[str, Any]) -> dict[str, Any]:
        """Send one request line online; return a result line in the batch output shape."""
        ...

    def check_batch_access(self, client: Any, route: RouteView) -> None:
        """The cheapest call that proves the key may use the provider's batch API (preflight): a
        listing of one batch. Raises ProviderError (clients.call) when it is refused."""
        ...

    # -- context windows (batchrun probe) ----------------------------------------------------------
    #: The provider states a model's input window in its model metadata and counts tokens without
    #: running the model, so the probe needs no online calls.
    reports_window: bool
    #: A request's completion budget (max_tokens) counts against the window with its prompt, so a
    #: document must leave room for the answer (OpenAI: "you requested N tokens (A in the
    #: messages, B in the completion)"; Anthropic: "input length and `max_tokens` exceed context
    #: limit"). Gemini's output limit is separate from its input window.
    completion_in_window: bool

    def input_token_limit(self, client: Any, route: RouteView) -> int | None:
        """The model's input window in tokens as the provider states it; None where it does not."""
        ...

    def count_tokens(self, client: Any, route: RouteView, prompt: str) -> int | None:
        """Input tokens of a one-turn prompt, counted by the provider; None: no counting endpoint."""
        ...

    def probe_call(self, client: Any, route: RouteView, prompt: str) -> ProbeAnswer:
        """Send `prompt` online with a completion budget of 1 token: accepted, too long, or another
        failure, as a value (never raises for the provider's answer)."""
        ...

    def stated_counts(self, message: str) -> tuple[int | None, int | None]:
        """(prompt tokens, window) as a too-long refusal's text states them, where it does."""
        ...


# The registry: provider name -> "module:class", imported lazily (a provider's SDK is imported
# only when it is used).
_ADAPTERS = {
    "openai": "batchrun.providers.openai:OpenAIAdapter",
    "anthropic": "batchrun.providers.anthropic:AnthropicAdapter",
    "gemini": "batchrun.providers.gemini:GeminiAdapter",
    "openai-compatible": "batchrun.providers.openai:OpenAICompatibleAdapter",
}
PROVIDER_NAMES: tuple[str, ...] = tuple(_ADAPTERS)


@functools.cache
def get_adapter(provider: str) -> Adapter:
    """The adapter for a provider name (one instance per process; adapters hold no state)."""
    module, _, cls = _ADAPTERS[provider].partition(":")
    return cast(Adapter, getattr(importlib.import_module(module), cls)())


def providers_where(capability: Callable[[Adapter], object]) -> tuple[str, ...]:
    """The names of the providers whose adapter has a capability, e.g. for a config message."""
    return tuple(name for name in PROVIDER_NAMES if capability(get_adapter(name)))


def read_sdk_error(exc: BaseException) -> SdkError | None:
    """What a provider SDK's exception says, read by the adapter of the SDK that raised it."""
    for name in PROVIDER_NAMES:
        found = get_adapter(name).read_error(exc)
        if found is not None:
            return found
    return None


def stainless_error(exc: BaseException, package: str) -> SdkError | None:
    """Read an exception of openai-python or anthropic-sdk-python (both generated by Stainless,
    with the same exception tree): `APIConnectionError`/`APITimeoutError` mean no answer was read;
    `APIStatusError` carries `status_code` and the `response` with its headers."""
    if not type(exc).__module__.startswith(package):
        return None
    name = type(exc).__name__
    if "Connection" in name or "Timeout" in name:
        return SdkError(None, str(exc), no_response=True)
    retry_after = None
    response = getattr(exc, "response", None)
    if response is not None:
        value = response.headers.get("retry-after")
        try:
            retry_after = float(value) if value is not None else None
        except ValueError:
            retry_after = None
        # RFC 9110 section 10.2.3: delay-seconds is a non-negative integer. float() also reads
        # "-5", "nan" and "inf", which no wait can honour (time.sleep raises on the first two).
        if retry_after is not None and not 0 <= retry_after < math.inf:
            retry_after = None
    # The provider's own words: `str(exc)` is "Error code: 401 - {<the whole error body>}"; the
    # parsed body is `exc.body` (OpenAI's `error` object, Anthropic's `{"type": "error", "error":
    # {...}}`), whose message is what a person needs to read.
    return SdkError(getattr(exc, "status_code", None), _body_message(getattr(exc, "body", None)) or str(exc), retry_after)


def _body_message(body: Any) -> str | None:
    """The `message` of a provider's error body (or of its `error` object), if it has one."""
    for _ in range(3):
        if not isinstance(body, dict):
            return None
        if isinstance(body.get("message"), str) and body["message"].strip():
            return body["message"]
        body = body.get("error")
    return None
