"""Anthropic Message Batches adapter.

Anthropic batches take their requests inline (`{"requests": [{"custom_id", "params"}]}`), not as
an uploaded file. The request file under jobs/ holds exactly those entries, one a line, and the
create body is built from it byte for byte, once (no per-request dicts: a 256 MB batch must not
cost several copies of itself in memory). Batches carry no tag, so adoption after a crash matches
candidates by creation time and request count, then by the custom_ids in their results (see
submit.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base import netguard
from ..base.errors import ProviderError
from . import (
    TOO_LONG,
    TRACE_HEADER,
    UNKNOWN_MODEL,
    Adapter,
    BatchState,
    BatchStatus,
    LineResult,
    MalformedResponse,
    ProbeAnswer,
    RequestSpec,
    ResultKind,
    RouteView,
    SdkError,
    Usage,
    only_24h,
    stainless_error,
)
from .reading import (
    Malformed,
    answered_for,
    as_array,
    as_count,
    as_label,
    as_message,
    as_object,
    as_text,
    batch_object,
    custom_id_field,
    listed_batches,
    malformed,
    object_field,
    parse_total,
    removed_if_cut,
    text_field,
    wrong_types,
)
from .clients import call
from .probing import online_probe, stated_numbers

# result.error.error.type values that mean "fix the request" (the docs' own sample checks
# `invalid_request`); anything else (api_error, overloaded_error, rate_limit_error...) is transient.
_INVALID_ERRORS = {"invalid_request_error", "not_found_error", "request_too_large"}
# The key (or its workspace) was refused: the route is blocked until it is fixed.
_AUTH_ERRORS = {"authentication_error", "permission_error"}
# An invalid_request_error for a prompt over the window: "prompt is too long: N tokens > M
# maximum"; with the completion budget counted in, "input length and `max_tokens` exceed context limit".
_TOO_LONG_TEXT = re.compile(r"prompt is too long|exceed context limit|context window", re.I)
_STATED = re.compile(r"prompt is too long: (?P<tokens>\d+) tokens > (?P<window>\d+) maximum", re.I)
# A model id Anthropic does not know: 404 not_found_error whose message is "model: <the id>"
# (mattermost/mattermost-plugin-agents#257, anthropics/claude-code#5349), online and per batch line.
_UNKNOWN_MODEL_TEXT = re.compile(r"model: \S+$")


class AnthropicAdapter:
    name: str = "anthropic"
    default_key_env: str = "ANTHROPIC_API_KEY"
    sdk_base_url_env: str = "ANTHROPIC_BASE_URL"
    alt_key_env: str | None = None
    default_host: str | None = "api.anthropic.com"
    base_url_suffix: str = ""  # the SDK adds /v1 to each path itself
    # 100,000 requests or 256 MB per batch (Message Batches API, "Batch limitations"): the limit is
    # on the create body, which is our file plus a few bytes of framing, hence the margin.
    file_limits: tuple[int, int] = (100_000, 255_000_000)
    endpoints: tuple[str, ...] = ("chat",)
    # Sent explicitly whatever the SDK's major version: SDK 2.x defaults to 2026-10-21, which
    # rejects temperature, top_p and top_k on every model.
    default_api_version: str | None = "2023-06-01"
    api_version_header: str | None = "anthropic-version"
    no_sampling_api_versions: frozenset[str] = frozenset({"2026-10-21"})
    # Message batches carry no metadata of ours: adoption matches candidates by request count,
    # then by the custom_ids in their results (submit._adopt).
    tags_batches: bool = False
    inline_requests: bool = True
    # There is no "failed" batch state: the requests travel in the create body, so a batch that
    # fails validation is a 400 (413 too large, 422) on create.
    validation_failure_statuses: frozenset[int] = frozenset({400, 413, 422})
    reasoning_billed_apart: bool = False
    # Models API: ModelInfo.max_input_tokens; Token Count API: messages.count_tokens (free).
    reports_window: bool = True
    completion_in_window: bool = True
    # temperature: "Defaults to 1.0. Ranges from 0.0 to 1.0" (Messages API reference).
    temperature_range: tuple[float, float] = (0.0, 1.0)
    # Message batches go to /v1/messages/batches whatever the route says.
    uses_endpoint_path: bool = False

    # -- pure halves ---------------------------------------------------------------------------

    def build_line(self, route: RouteView, req: RequestSpec) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": req.model,
            "max_tokens": req.max_tokens,
            "messages": [{"role": "user", "content": req.prompt}],
        }
        if req.temperature is not None:
            params["temperature"] = req.temperature
        return {"custom_id": req.custom_id, "params": params}

    def online_body(self, line: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return line["custom_id"], line["params"]

    def custom_id_of(self, obj: Any) -> str | None:
        return custom_id_field(obj, "custom_id")

    def parse_line(self, obj: Any) -> LineResult:
        return parse_total(self.custom_id_of, self._parse, obj)

    def policy_endpoint(self, route: RouteView) -> str:
        # endpoint_path is not used for Anthropic; it stays in the policy (as the config's default)
        # so that fingerprints, and the cells planned under them, do not change.
        return route.endpoint_path

    def endpoint_label(self, route: RouteView) -> str:
        return "/v1/messages" if route.transport == "sync" else "/v1/messages/batches"

    def min_output_tokens(self, route: RouteView) -> int:
        return 1  # max_tokens >= 1 ("max_tokens: 0" is refused in a batch: Message Batches docs)

    def endpoint_path_problem(self, route: RouteView) -> tuple[str, str] | None:
        return None

    def completion_window_problem(self, route: RouteView) -> tuple[str, str] | None:
        # "Processing ends when all requests finish or after 24 hours" (Message Batches docs): the
        # create takes no window, so another one would be a setting silently ignored.
        return only_24h("Anthropic", "end after 24 hours, always (the Message Batches API takes no window)", route.completion_window)

    def _parse(self, custom_id: str, obj: dict[str, Any]) -> LineResult:
        result = as_object(obj.get("result"), "`result`")
        kind = result.get("type")
        if kind == "succeeded":
            # Only a Message is an answer: "succeeded" without one is not the model's (never an "empty").
            if not isinstance(result.get("message"), dict) or result["message"].get("type", "message") != "message":
                raise Malformed("a succeeded result without a `message` object")
            message = as_object(result.get("message"), "`result.message`")
            u = as_object(message.get("usage"), "`usage`")
            usage = Usage(
                input_tokens=as_count(u.get("input_tokens")),
                output_tokens=as_count(u.get("output_tokens")),
                cached_tokens=as_count(u.get("cache_read_input_tokens")),
            )
            stop = as_label(message.get("stop_reason"))
            texts = []
            for block in as_array(message.get("content"), "`message.content`"):
                block = as_object(block, "a content block")
                if block.get("type") == "text":
                    texts.append(as_text(block.get("text"), "a text block's `text`") or "")
            text = "".join(texts)
            if stop == "refusal":
                return LineResult(custom_id, "refusal", text=text, finish_reason=stop, usage=usage)
            if not text.strip():
                if not stop:
                    # Message.stop_reason: "In non-streaming mode this value is always non-null"
                    # (anthropic-sdk-python types/message.py): without it nothing says the model
                    # answered, so no text is no answer (a `message: {}`), never its empty one.
                    raise Malformed("a message without text and without a `stop_reason`")
                return LineResult(custom_id, "empty", text=text, finish_reason=stop, usage=usage)
            # model_context_window_exceeded: cut by the context window (anthropic-sdk-python 0.119+), as final as max_tokens.
            return LineResult(custom_id, "ok", text=text, finish_reason=stop, usage=usage,
                              at_budget=stop in ("max_tokens", "model_context_window_exceeded"))
        if kind == "errored":
            err = as_object(as_object(result.get("error"), "`result.error`").get("error"), "`result.error.error`")
            etype = as_label(err.get("type")) or "error"
            failure: ResultKind = "invalid" if etype in _INVALID_ERRORS else "auth" if etype in _AUTH_ERRORS else "transient"
            why = as_message(err.get("message"))
            if failure == "invalid" and _TOO_LONG_TEXT.search(why or ""):
                etype = TOO_LONG
            elif etype == "not_found_error" and _UNKNOWN_MODEL_TEXT.match((why or "").strip()):
                etype = UNKNOWN_MODEL
            return LineResult(custom_id, failure, error_type=etype, error_message=why)
        if kind == "canceled":
            return LineResult(custom_id, "cancelled", error_type="canceled")
        if kind == "expired":
            return LineResult(custom_id, "expired", error_type="expired")
        return malformed(custom_id, f"unknown result type {as_label(kind)!r}")

    # -- I/O halves ----------------------------------------------------------------------------

    def make_client(self, route: RouteView, key: str, *, timeout: float, hooks: dict[str, list[Callable[[Any], None]]]) -> Any:
        import anthropic

        # The SDK's own HTTP client settings (timeouts, limits, redirects, TCP keepalive), with our
        # event hooks; a host name is resolved within the connect timeout and the run's limit.
        http = anthropic.DefaultHttpxClient(event_hooks=hooks)
        netguard.resolve_in_time(http)
        return anthropic.Anthropic(
            api_key=key, base_url=route.base_url, max_retries=0, timeout=timeout,
            default_headers={"anthropic-version": route.api_version or self.default_api_version or ""},
            http_client=http,
        )

    def client_base_url(self, client: Any) -> str | None:
        base = getattr(client, "base_url", None)  # without base_url in the route: ANTHROPIC_BASE_URL, else the default
        return str(base) if base else None

    def read_error(self, exc: BaseException) -> SdkError | None:
        return stainless_error(exc, "anthropic")

    def upload(self, client: Any, route: RouteView, path: Path) -> str | None:
        return None  # inline requests: nothing to upload

    def create(self, client: Any, route: RouteView, *, file_id: str | None, path: Path, tag: dict[str, str]) -> BatchStatus:
        from anthropic.types.messages import MessageBatch

        body = InlineBody(path)
        batch = client.post(
            "/v1/messages/batches", cast_to=MessageBatch, content=body,
            options={"headers": {"Content-Type": "application/json", "Content-Length": str(body.length)}},
        )
        return self._status(batch)

    def retrieve(self, client: Any, route: RouteView, provider_batch_id: str) -> BatchStatus:
        # Read inside the call: an answer that is not a batch (no id) is retried like a failed call.
        return call(lambda: answered_for(self._status(client.messages.batches.retrieve(provider_batch_id)), provider_batch_id),
                    what="Checking a batch", route=route)

    def list_recent(self, client: Any, route: RouteView, since: float) -> list[BatchStatus]:
        def do() -> list[BatchStatus]:
            found = []
            for status in listed_batches(client.messages.batches.list(limit=100), self._status):  # newest first
                if status.created_at is not None and status.created_at < since:
                    break
                found.append(status)
            return found

        return call(do, what="Listing batches", route=route)

    def cancel(self, client: Any, route: RouteView, provider_batch_id: str) -> None:
        call(lambda: client.messages.batches.cancel(provider_batch_id), what="Cancelling a batch", route=route)

    def check_batch_access(self, client: Any, route: RouteView) -> None:
        # GET /v1/messages/batches?limit=1 (the listing adoption reads), sent when list() is called.
        call(lambda: client.messages.batches.list(limit=1), what="Listing batches (preflight)", route=route, attempts=3)

    def download(self, client: Any, route: RouteView, status: BatchStatus, dest: Path) -> list[Path]:
        target = dest / "results.jsonl"

        def do() -> None:
            with removed_if_cut(target), client.messages.batches.with_streaming_response.results(status.provider_batch_id) as response:
                with open(target, "wb") as f:
                    for chunk in response.iter_bytes():
                        f.write(chunk)

        call(do, what="Downloading batch results", route=route)
        return [target]

    def send_online(self, client: Any, route: RouteView, line: dict[str, Any]) -> dict[str, Any]:
        custom_id, params = self.online_body(line)
        raw = client.post("/v1/messages", body=params, cast_to=object, options={"headers": {TRACE_HEADER: custom_id}})
        return {"custom_id": custom_id, "result": {"type": "succeeded", "message": raw}}

    def input_token_limit(self, client: Any, route: RouteView) -> int | None:
        try:
            info = call(lambda: client.models.retrieve(route.model), what="Reading the model's metadata", route=route)
        except ProviderError as e:
            if getattr(getattr(e, "classified", None), "failure", None) in ("not_found", "client"):
                return None  # a proxy or an older API without the Models API: the probe searches instead
            raise
        limit = getattr(info, "max_input_tokens", None)
        return limit if isinstance(limit, int) and limit > 0 else None

    def count_tokens(self, client: Any, route: RouteView, prompt: str) -> int | None:
        def count() -> int:
            # Checked inside the call: a malformed answer is retried, then reported as the provider's.
            counted = client.messages.count_tokens(model=route.model, messages=[{"role": "user", "content": prompt}])
            total = as_count(getattr(counted, "input_tokens", None))
            if total is None:
                raise MalformedResponse("count_tokens was answered without a token count (input_tokens)")
            return total

        return call(count, what="Counting tokens", route=route)

    def probe_call(self, client: Any, route: RouteView, prompt: str) -> ProbeAnswer:
        return online_probe(self, client, route, prompt)

    def stated_counts(self, message: str) -> tuple[int | None, int | None]:
        return stated_numbers(_STATED, message)

    def error_line(self, custom_id: str, status: int | None, message: str, error_type: str | None = None) -> dict[str, Any]:
        if error_type is None:
            # Anthropic's error types by HTTP status (docs.anthropic.com/en/api/errors): 404 is not_found_error.
            error_type = ("not_found_error" if status == 404 else "invalid_request_error" if status in (400, 413, 422)
                          else "authentication_error" if status == 401 else "permission_error" if status == 403 else "api_error")
        return {"custom_id": custom_id, "result": {"type": "errored", "error": {"type": "error", "error": {"type": error_type, "message": message}}}}

    # -- private ---------------------------------------------------------------------------------

    def _status(self, batch: Any) -> BatchStatus:
        raw, batch_id = batch_object(batch, "id")
        processing = text_field(raw, "processing_status") or "unknown"
        counts = object_field(raw, "request_counts")
        state: BatchState
        if processing == "ended":
            # Per-line kinds (succeeded / errored / canceled / expired) carry the detail.
            state = "cancelled" if raw.get("cancel_initiated_at") else "done"
        else:
            state = "running"  # in_progress, canceling, and anything unknown
        created = raw.get("created_at")
        created_ts = _ts(created)
        refs = (text_field(raw, "results_url") or "",) if processing == "ended" else ()
        # request_counts: every request counts as `processing` until the whole batch has ended, and
        # only then moves to succeeded/errored/canceled/expired (Anthropic's Message Batches docs),
        # so an in-progress batch reads 0 done: true, and no time-left estimate can be made.
        total = total_requests(counts)
        return BatchStatus(
            provider_batch_id=batch_id, state=state, raw_status=processing, counts=dict(counts),
            result_refs=refs, created_at=created_ts, raw=raw, n_requests=total,
            # Untagged: adoption tells a batch by its request count, so counts it cannot read (or
            # a total of 0, which no real batch has) make the entry unreadable.
            unreadable=wrong_types(raw, request_counts=dict) + (
                ("request_counts",) if isinstance(raw.get("request_counts"), dict) and (total == 0 or any(
                    counts.get(k) is not None and as_count(counts.get(k)) is None
                    for k in ("processing", "succeeded", "errored", "canceled", "expired"))) else ()),
            requests_done=min(max(total - (as_count(counts.get("processing")) or 0), 0), total) if total > 0 else None,
        )


def _ts(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class InlineBody:
    """`{"requests":[<line>,<line>...]}` streamed from the request file, never held whole.

    The lines are already exactly the request entries, so the body is their concatenation with
    commas; its length is known up front, so it goes out with a Content-Length (not chunked).
    """

    HEAD, TAIL = b'{"requests":[', b"]}"

    def __init__(self, path: Path):
        self.path = path
        n = payload = 0
        with open(path, "rb") as f:
            for raw in f:
                line = raw.rstrip(b"\r\n")
                if line:
                    n += 1
                    payload += len(line)
        self.length = len(self.HEAD) + payload + max(n - 1, 0) + len(self.TAIL)

    def __iter__(self) -> Iterator[bytes]:
        yield self.HEAD
        first = True
        with open(self.path, "rb") as f:
            for raw in f:
                line = raw.rstrip(b"\r\n")
                if not line:
                    continue
                yield line if first else b"," + line
                first = False
        yield self.TAIL


def total_requests(counts: dict[str, Any]) -> int:
    return sum(as_count(counts.get(k)) or 0 for k in ("processing", "succeeded", "errored", "canceled", "expired"))


if TYPE_CHECKING:
    _anthropic: Adapter = AnthropicAdapter()
