"""OpenAI Batch API adapter; also OpenAI-compatible batch providers (DashScope, Zhipu, Kimi).

Request line: `{"custom_id", "method": "POST", "url", "body"}` where `body` is exactly the online
endpoint's body and `url` equals the batch's `endpoint` (OpenAI Batch API reference, "The request
input object"). Budgets: chat `max_completion_tokens` (OpenAI; reasoning models reject
`max_tokens`), responses `max_output_tokens`, OpenAI-compatible chat `max_tokens` (what those
servers read).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit
from typing import TYPE_CHECKING, Any

from . import (
    TOO_LONG,
    TRACE_HEADER,
    Adapter,
    BatchState,
    BatchStatus,
    LineResult,
    ProbeAnswer,
    RequestSpec,
    ResultKind,
    RouteView,
    SdkError,
    Usage,
    error_kind_for_status,
    only_24h,
    stainless_error,
    window_hours,
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
    batch_errors_message,
    batch_object,
    custom_id_field,
    json_type,
    listed_batches,
    number_field,
    object_field,
    parse_total,
    removed_if_cut,
    text_field,
    wrong_types,
)
from ..base import netguard
from ..base.redaction import redact
from .clients import call, log
from .probing import online_probe, stated_numbers

# A prompt over the model's window: OpenAI's code `context_length_exceeded` ("This model's maximum
# context length is M tokens. However, your messages resulted in N tokens..."); OpenAI-compatible
# servers word it their own way (vLLM "maximum context length", DashScope "Range of input length").
_TOO_LONG_TEXT = re.compile(r"context_length_exceeded|maximum context length|context window|context length|"
                            r"range of input length|too many tokens|prompt is too long", re.I)
_STATED = re.compile(r"maximum context length is (?P<window>\d+) tokens.*?resulted in (?P<tokens>\d+) tokens", re.I | re.S)

_STATES: dict[str, BatchState] = {
    "validating": "pending",
    "in_progress": "running",
    "finalizing": "running",
    "cancelling": "running",
    "completed": "done",
    "failed": "failed",
    "expired": "expired",
    "cancelled": "cancelled",
}

# The smallest max_output_tokens the Responses API accepts (probe.OUTPUT_TOKENS prices this many).
RESPONSES_MIN_OUTPUT_TOKENS = 16

# The batch endpoint that takes each body shape: a line's `url` must equal the batch's `endpoint`
# (OpenAI Batch API, "The request input object"; openai-python batch_create_params.py lists the
# endpoints). A chat body sent to /v1/responses is refused, every request of it.
ENDPOINT_PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}
_BODIES = {"chat": "Chat Completions bodies (messages)", "responses": "Responses bodies (input)"}


class OpenAIAdapter:
    name: str = "openai"
    default_key_env: str = "OPENAI_API_KEY"
    sdk_base_url_env: str = "OPENAI_BASE_URL"
    alt_key_env: str | None = None
    default_host: str | None = "api.openai.com"
    # The SDK's base URL includes the API version path: https://api.openai.com/v1.
    base_url_suffix: str = "/v1"
    # 50,000 requests and 200 MB per batch input file (OpenAI Batch API guide, "Rate limits").
    file_limits: tuple[int, int] = (50_000, 200_000_000)
    endpoints: tuple[str, ...] = ("chat", "responses")
    default_api_version: str | None = None
    api_version_header: str | None = None
    no_sampling_api_versions: frozenset[str] = frozenset()
    # Batches carry our tag in `metadata`, returned on retrieve and list.
    tags_batches: bool = True
    inline_requests: bool = False
    # A batch that fails validation is a `failed` batch with `errors`, not a failed create.
    validation_failure_statuses: frozenset[int] = frozenset()
    # completion_tokens / output_tokens already include the reasoning tokens.
    reasoning_billed_apart: bool = False
    # The completion budget of a chat request: reasoning models reject `max_tokens`.
    chat_budget_key = "max_completion_tokens"
    # No token-counting endpoint, and the model object (GET /v1/models/{id}) carries no window:
    # the probe searches by sending.
    reports_window: bool = False
    completion_in_window: bool = True
    # "What sampling temperature to use, between 0 and 2" (openai-python
    # types/chat/completion_create_params.py and responses/response_create_params.py).
    temperature_range: tuple[float, float] = (0.0, 2.0)
    uses_endpoint_path: bool = True

    # -- pure halves ---------------------------------------------------------------------------

    def build_line(self, route: RouteView, req: RequestSpec) -> dict[str, Any]:
        body: dict[str, Any] = {"model": req.model}
        if route.endpoint == "responses":
            body["input"] = req.prompt
            body["max_output_tokens"] = req.max_tokens
        else:
            body["messages"] = [{"role": "user", "content": req.prompt}]
            body[self.chat_budget_key] = req.max_tokens
        if req.temperature is not None:
            body["temperature"] = req.temperature
        return {"custom_id": req.custom_id, "method": "POST", "url": route.endpoint_path, "body": body}

    def online_body(self, line: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return line["custom_id"], line["body"]

    def custom_id_of(self, obj: Any) -> str | None:
        return custom_id_field(obj, "custom_id")

    def parse_line(self, obj: Any) -> LineResult:
        return parse_total(self.custom_id_of, self._parse, obj)

    def policy_endpoint(self, route: RouteView) -> str:
        return route.endpoint  # chat | responses: the path follows from it

    def endpoint_label(self, route: RouteView) -> str:
        return route.endpoint_path if route.transport == "sync" else f"/v1/batches {route.endpoint_path}"

    # -- what the API refuses --------------------------------------------------------------------

    def min_output_tokens(self, route: RouteView) -> int:
        return RESPONSES_MIN_OUTPUT_TOKENS if route.endpoint == "responses" else 1

    def endpoint_path_problem(self, route: RouteView) -> tuple[str, str] | None:
        want, path = ENDPOINT_PATHS[route.endpoint], route.endpoint_path
        if path == want:
            return None
        other = next((e for e, p in ENDPOINT_PATHS.items() if p == path), None)
        if other is not None:
            return (f'is "{path}", the {other} endpoint, while endpoint = "{route.endpoint}" builds {_BODIES[route.endpoint]}: '
                    "OpenAI would refuse every request",
                    f'Remove endpoint_path (it follows from endpoint), or set endpoint = "{other}".')
        return (f'is "{path}", which is not the OpenAI batch endpoint of endpoint = "{route.endpoint}" ({_BODIES[route.endpoint]} '
                f'go to "{want}")', "Remove endpoint_path: it follows from endpoint.")

    def completion_window_problem(self, route: RouteView) -> tuple[str, str] | None:
        # completion_window: "Currently only 24h is supported" (OpenAI Batch API, create batch;
        # openai-python batch_create_params.py: Literal["24h"]).
        return only_24h("OpenAI", 'take only "24h" (Batch API: "currently only 24h is supported")', route.completion_window)

    def _parse(self, custom_id: str, obj: dict[str, Any]) -> LineResult:
        error = obj.get("error")
        response = obj.get("response")
        if error and not response:
            if isinstance(error, dict):
                code = as_label(error.get("code"))
                message = as_message(error.get("message"))
            else:  # vLLM writes the error as a string
                code, message = None, as_message(error)
            if code == "batch_expired":
                return LineResult(custom_id, "expired", error_type=code, error_message=message)
            if code == "batch_cancelled":
                return LineResult(custom_id, "cancelled", error_type=code, error_message=message)
            return LineResult(custom_id, "transient", error_type=code or "error", error_message=message)
        if not isinstance(response, dict):
            raise Malformed("result line has neither response nor error" if response is None
                            else f"`response` is a JSON {json_type(response)}, not an object")
        status = response.get("status_code")
        body = response.get("body")
        if status != 200:
            err = body.get("error") if isinstance(body, dict) else None
            err = err if isinstance(err, dict) else {}
            kind = error_kind_for_status(status if isinstance(status, int) else None)
            label = as_label(err.get("code") or err.get("type") or status)
            text = as_message(err.get("message") or (error if error else None))
            if kind == "invalid" and _TOO_LONG_TEXT.search(f"{label} {text}"):
                label = TOO_LONG
            return LineResult(custom_id, kind, error_type=label, error_message=text)
        body = as_object(body, "`response.body`")
        if body.get("object") == "response" or "output" in body:
            return _parse_responses_body(custom_id, body)
        return _parse_chat_body(custom_id, body)

    # -- I/O halves ----------------------------------------------------------------------------

    def make_client(self, route: RouteView, key: str, *, timeout: float, hooks: dict[str, list[Callable[[Any], None]]]) -> Any:
        import openai

        # DefaultHttpxClient: the SDK's own HTTP client settings (timeouts, limits, redirects),
        # with our event hooks.
        http = openai.DefaultHttpxClient(event_hooks=hooks)
        netguard.resolve_in_time(http)  # a host name is resolved within the connect timeout and the run's limit
        return openai.OpenAI(api_key=key, base_url=route.base_url, max_retries=0, timeout=timeout, http_client=http)

    def client_base_url(self, client: Any) -> str | None:
        base = getattr(client, "base_url", None)  # without base_url in the route: OPENAI_BASE_URL, else the default
        return str(base) if base else None

    def read_error(self, exc: BaseException) -> SdkError | None:
        return stainless_error(exc, "openai")

    def upload(self, client: Any, route: RouteView, path: Path) -> str:
        def do() -> str:
            with open(path, "rb") as f:
                return client.files.create(file=(path.name, f), purpose="batch").id

        return call(do, what="Uploading the request file", route=route)

    def create(self, client: Any, route: RouteView, *, file_id: str | None, path: Path, tag: dict[str, str]) -> BatchStatus:
        # Not wrapped in `call`: a create is never retried blindly (see submit's adoption path).
        batch = client.batches.create(
            input_file_id=file_id,
            endpoint=route.endpoint_path,
            completion_window=route.completion_window,
            metadata=tag,
        )
        return self._status(batch)

    def retrieve(self, client: Any, route: RouteView, provider_batch_id: str) -> BatchStatus:
        # Read inside the call: an answer that is not a batch (no id) is retried like a failed call.
        return call(lambda: answered_for(self._status(client.batches.retrieve(provider_batch_id)), provider_batch_id),
                    what="Checking a batch", route=route)

    def list_recent(self, client: Any, route: RouteView, since: float) -> list[BatchStatus]:
        """Batches created at or after `since` (newest first; stops paging once older)."""

        def do() -> list[BatchStatus]:
            found = []
            for status in listed_batches(client.batches.list(limit=100), self._status):
                if status.created_at is not None and status.created_at < since:
                    break
                found.append(status)
            return found

        return call(do, what="Listing batches", route=route)

    def cancel(self, client: Any, route: RouteView, provider_batch_id: str) -> None:
        import openai

        def do() -> None:
            try:
                client.batches.cancel(provider_batch_id)
            except openai.ConflictError as exc:
                # 409 "Cannot cancel a batch with status 'completed'.": the batch ended before the
                # cancel reached it (BerriAI/litellm's live tests catch this ConflictError). Not
                # transient: nothing is left to cancel, and the next poll collects how it ended.
                log.warning("Batch %s had already ended at the provider (%s); the next poll collects it.",
                            provider_batch_id, redact(" ".join(str(exc.message).split()))[:300])

        call(do, what="Cancelling a batch", route=route)

    def check_batch_access(self, client: Any, route: RouteView) -> None:
        # GET /batches?limit=1: the listing adoption reads after an uncertain create (list_recent),
        # one entry long. The SDK sends it when list() is called; the page is not iterated.
        call(lambda: client.batches.list(limit=1), what="Listing batches (preflight)", route=route, attempts=3)

    def download(self, client: Any, route: RouteView, status: BatchStatus, dest: Path) -> list[Path]:
        paths = []
        for ref, name in zip(status.result_refs, ("output.jsonl", "errors.jsonl")):
            if not ref:
                continue
            target = dest / name

            def do(ref: str = ref, target: Path = target) -> None:
                with removed_if_cut(target), client.files.with_streaming_response.content(ref) as response:
                    response.stream_to_file(target)

            call(do, what=f"Downloading result file {ref}", route=route)
            paths.append(target)
        return paths

    def send_online(self, client: Any, route: RouteView, line: dict[str, Any]) -> dict[str, Any]:
        """Send one request line online; return a result line in the batch output shape."""
        custom_id, body = self.online_body(line)
        path = route.endpoint_path
        # The SDK's base URL already ends in /v1 (or /v4 ...): post the endpoint's last segments.
        rel = "/responses" if path.endswith("/responses") else "/chat/completions"
        raw = client.post(rel, body=body, cast_to=object, options={"headers": {TRACE_HEADER: custom_id}})
        return {"custom_id": custom_id, "response": {"status_code": 200, "body": raw}, "error": None}

    def input_token_limit(self, client: Any, route: RouteView) -> int | None:
        return None

    def count_tokens(self, client: Any, route: RouteView, prompt: str) -> int | None:
        return None

    def probe_call(self, client: Any, route: RouteView, prompt: str) -> ProbeAnswer:
        # The Responses API refuses max_output_tokens below 16 ("integer below minimum value"):
        # a budget of 1 would make every probe step a 400 that is not about length.
        return online_probe(self, client, route, prompt, max_tokens=RESPONSES_MIN_OUTPUT_TOKENS if route.endpoint == "responses" else 1)

    def stated_counts(self, message: str) -> tuple[int | None, int | None]:
        return stated_numbers(_STATED, message)

    def error_line(self, custom_id: str, status: int | None, message: str, error_type: str | None = None) -> dict[str, Any]:
        """An online failure rendered as a batch error-file line, so collect has one path.

        Without an HTTP error status (no answer, or a 200 whose body could not be read: a proxy's
        HTML page) it is the connection-error form, a transient failure (a line with status 200
        must be an answer)."""
        if status is None or status < 400:
            return {"custom_id": custom_id, "response": None, "error": {"code": error_type or "connection_error", "message": message}}
        body = {"error": {"message": message, "type": error_type or "error", "param": None, "code": error_type}}
        return {"custom_id": custom_id, "response": {"status_code": status, "body": body}, "error": None}

    # -- private ---------------------------------------------------------------------------------

    def _status(self, batch: Any) -> BatchStatus:
        raw, batch_id = batch_object(batch, "id")
        status = text_field(raw, "status") or "unknown"
        # Unknown states are treated as still running, never as finished.
        state = _STATES.get(status, "running")
        data = object_field(raw, "errors").get("data")
        errors = [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
        message = batch_errors_message(errors)  # each distinct error once, with its lines as ranges
        # OpenAI's enqueued-token quota fails the batch with code token_limit_exceeded: "not now".
        quota = any(e.get("code") == "token_limit_exceeded" for e in errors)
        counts = object_field(raw, "request_counts")
        refs: tuple[str, ...] = ()
        if state in ("done", "expired", "cancelled", "failed"):
            # output_file_id holds successes, error_file_id per-request failures (and, after
            # expiry, the batch_expired lines); either may be null.
            refs = (text_field(raw, "output_file_id") or "", text_field(raw, "error_file_id") or "")
        metadata = object_field(raw, "metadata")
        total = as_count(counts.get("total"))
        # request_counts {total, completed, failed} move while the batch is in_progress; total is
        # 0 until validation has counted the file, so progress is only known past that.
        completed, failed = as_count(counts.get("completed")), as_count(counts.get("failed"))
        requests_done = None
        if total and completed is not None and failed is not None:
            requests_done = min(completed + failed, total)  # provider output: never "9/4"
        return BatchStatus(
            provider_batch_id=batch_id, state=state, raw_status=status, counts=dict(counts),
            result_refs=refs, error=message, quota=quota, tag=text_field(metadata, "batchrun_batch"),
            created_at=number_field(raw, "created_at"), raw=raw, n_requests=total,
            requests_done=requests_done,
            # What adoption tells a batch by (its tag; the request count for untagged ones): a
            # created_at or status it cannot read only widens or holds the search.
            unreadable=wrong_types(raw, request_counts=dict, metadata=dict)
            + tuple(f"metadata.{k}" for k in wrong_types(metadata, batchrun_batch=str, batchrun_store=str))
            + (("request_counts.total",) if counts.get("total") is not None and total is None else ()),
        )


@dataclass(frozen=True)
class CompatibleProvider:
    """What an OpenAI-compatible batch provider documents, known by its API host."""

    name: str
    hosts: tuple[str, ...]  # the host, or a parent domain of it
    batch_path: str  # the one url its chat batch lines take
    window_hours: tuple[int, int] | None  # the completion windows it offers; None: "24h" only
    source: str

    def serves(self, host: str) -> bool:
        return any(host == h or host.endswith("." + h) for h in self.hosts)


# The OpenAI-compatible batch APIs batchrun has facts about (../shared/design/provider-apis.md §5).
# Another host (a proxy, vLLM, the emulator) gets the general rules only: a chat path, and a
# window in whole hours or days.
COMPATIBLE_PROVIDERS = (
    CompatibleProvider(
        "Alibaba DashScope", ("dashscope.aliyuncs.com", "dashscope-intl.aliyuncs.com", "dashscope-us.aliyuncs.com", "maas.aliyuncs.com"),
        "/v1/chat/completions", (24, 336),
        "alibabacloud.com/help/en/model-studio/batch-interfaces-compatible-with-openai: url /v1/chat/completions, "
        'completion_window 24h to 336h, in h or d ("14d")'),
    CompatibleProvider(
        "Zhipu BigModel", ("open.bigmodel.cn",), "/v4/chat/completions", None,
        "docs.bigmodel.cn/api-reference/批处理-api/创建批处理任务: endpoint \"currently supports /v4/chat/completions\"; "
        "no window is documented, so only the default 24h is known to be accepted"),
    CompatibleProvider(
        "Moonshot Kimi", ("api.moonshot.ai", "api.moonshot.cn"), "/v1/chat/completions", (12, 168),
        "platform.kimi.ai/docs/api/batch-create: endpoint \"only /v1/chat/completions\", completion_window 12h to 7d"),
)


def compatible_provider(base_url: str | None) -> tuple[CompatibleProvider, str] | None:
    """The documented provider a base URL points at, and its host."""
    host = (urlsplit(base_url).hostname or "").lower() if base_url else ""
    found = next((p for p in COMPATIBLE_PROVIDERS if host and p.serves(host)), None)
    return (found, host) if found else None


class OpenAICompatibleAdapter(OpenAIAdapter):
    """An OpenAI-compatible batch API (DashScope/Qwen, Zhipu/GLM, Kimi...): the OpenAI SDK pointed
    at the provider's base URL, with the provider's own key variable."""

    name: str = "openai-compatible"
    default_key_env: str = ""  # never another provider's key: the route names its variable
    default_host: str | None = None  # the route names its base_url
    # A rehearsal sends these routes to the OpenAI-compatible provider the emulator models:
    # DashScope's compatible mode, at its real base path (https://dashscope.aliyuncs.com/compatible-mode/v1).
    base_url_suffix: str = "/compatible-mode/v1"
    # Zhipu and Kimi accept input files of up to 100 MB.
    file_limits: tuple[int, int] = (50_000, 100_000_000)
    endpoints: tuple[str, ...] = ("chat",)
    chat_budget_key = "max_tokens"  # what those servers read
    # OpenAI's range, which these servers copy; one that takes less (Kimi's k2 models take none,
    # spec §2) refuses the request, and preflight shows its message before anything is uploaded.
    temperature_range: tuple[float, float] = (0.0, 2.0)

    def policy_endpoint(self, route: RouteView) -> str:
        return route.endpoint_path  # the path differs between providers (/v1/..., /v4/...)

    def endpoint_path_problem(self, route: RouteView) -> tuple[str, str] | None:
        path = route.endpoint_path
        known = compatible_provider(route.base_url)
        # The path is the url of every batch line; a sync route posts to base_url + /chat/completions.
        if known is not None and route.transport == "batch" and path != known[0].batch_path:
            provider, host = known
            return (f'is "{path}", but {provider.name} ({host}) takes chat batch lines only at "{provider.batch_path}" '
                    f"({provider.source})", f'Set endpoint_path = "{provider.batch_path}".')
        if not path.endswith("/chat/completions"):
            return (f'is "{path}", but the requests are {_BODIES["chat"]}, which an OpenAI-compatible API takes at its '
                    "chat completions path", 'Set endpoint_path to the provider\'s, e.g. "/v1/chat/completions" '
                    '(Zhipu: "/v4/chat/completions").')
        return None

    def completion_window_problem(self, route: RouteView) -> tuple[str, str] | None:
        window = route.completion_window
        hours = window_hours(window)
        if hours is None:
            return (f'is "{window}", not a whole number of hours or days',
                    'Write it as the provider documents it, e.g. "24h" or "3d".')
        known = compatible_provider(route.base_url)
        if known is None:
            return None  # a provider batchrun has no facts about: its create says
        provider, host = known
        if provider.window_hours is None:
            return only_24h(provider.name, f"have no other documented window ({provider.source})", window)
        low, high = provider.window_hours
        if not low <= hours <= high:
            return (f'is "{window}", outside the {low}h to {high}h that {provider.name} ({host}) offers ({provider.source})',
                    f'Use a window from "{low}h" to "{high}h" (e.g. "24h").')
        return None


if TYPE_CHECKING:
    _openai: Adapter = OpenAIAdapter()
    _compatible: Adapter = OpenAICompatibleAdapter()


def _usage_chat(u: Any) -> Usage:
    u = as_object(u, "`usage`")
    return Usage(
        input_tokens=as_count(u.get("prompt_tokens")),
        output_tokens=as_count(u.get("completion_tokens")),
        reasoning_tokens=as_count(as_object(u.get("completion_tokens_details"), "`completion_tokens_details`").get("reasoning_tokens")),
        cached_tokens=as_count(as_object(u.get("prompt_tokens_details"), "`prompt_tokens_details`").get("cached_tokens")),
    )


# The error types of OpenAI's error object (platform.openai.com, error codes) that say what the
# status would have: the request or its config is wrong, or the key is.
_INVALID_TYPES = ("invalid_request_error", "invalid_prompt", "not_found_error")
_AUTH_TYPES = ("authentication_error", "permission_error")


def _error_in_200(custom_id: str, error: Any) -> LineResult:
    """An error object that came with status 200 (some OpenAI-compatible servers and proxies;
    a Responses object that failed): classified by its type, as its status would have been, so
    a config error blocks the route with its diagnosis instead of being retried run after run."""
    err = error if isinstance(error, dict) else {}
    label = as_label(err.get("type") or err.get("code")) or "error"
    codes = {as_label(err.get("type")), as_label(err.get("code"))}
    kind: ResultKind = "invalid" if codes & set(_INVALID_TYPES) else "auth" if codes & set(_AUTH_TYPES) else "transient"
    text = as_message(err.get("message") if err else error)
    if kind == "invalid" and _TOO_LONG_TEXT.search(f"{label} {text}"):
        label = TOO_LONG
    return LineResult(custom_id, kind, error_type=label, error_message=text)


def _parse_chat_body(custom_id: str, body: dict[str, Any]) -> LineResult:
    # Only a chat completion with a choice is the model's answer (an empty one is its failure,
    # scored 0). Some OpenAI-compatible servers and proxies send an error with status 200
    # (`{"error": {...}}`): read as the error it is. A body with neither is malformed (retried).
    choices = as_array(body.get("choices"), "`choices`")
    if body.get("error") and not choices:
        return _error_in_200(custom_id, body["error"])
    usage = _usage_chat(body.get("usage"))
    if not choices:
        raise Malformed("the answer body has no `choices`")
    choice = as_object(choices[0], "a choice")
    message = as_object(choice.get("message"), "`choice.message`")
    finish = as_label(choice.get("finish_reason"))
    refusal = as_text(message.get("refusal"), "`message.refusal`")
    if refusal:
        return LineResult(custom_id, "refusal", text=refusal, finish_reason=finish, usage=usage)
    content = message.get("content")
    if isinstance(content, list):  # some compatible servers return content parts
        content = "".join(as_text(p.get("text"), "a content part's `text`") or "" for p in content if isinstance(p, dict))
    content = as_text(content, "`message.content`")
    if finish == "content_filter":
        # The provider's content filter withheld the answer: a refusal (the protocol counts it as one), never retried.
        return LineResult(custom_id, "refusal", text=content or "", finish_reason=finish, usage=usage)
    if not content or not content.strip():
        if body.get("error"):  # no answer beside an error: the error, not the model's empty answer
            return _error_in_200(custom_id, body["error"])
        if not finish:
            # A choice's finish_reason is required (openai-python types/chat/chat_completion.py,
            # Choice.finish_reason): without it nothing says the model stopped, so no text is no
            # answer (a `choices: [{}]`), never the model's empty one.
            raise Malformed("a choice without text and without a `finish_reason`")
        return LineResult(custom_id, "empty", text=content or "", finish_reason=finish, usage=usage)
    return LineResult(custom_id, "ok", text=content, finish_reason=finish, usage=usage, at_budget=finish == "length")


# A Responses object is an answer when the response ended: "completed", or "incomplete" (cut at
# max_output_tokens or by the content filter). "failed" (with an `error`), "cancelled", "queued"
# and "in_progress" are not the model's answer (platform.openai.com, the response object). The
# SDK's type leaves `status` optional: a body without one is read as an answer.
_RESPONSE_NOT_ENDED = ("failed", "cancelled", "queued", "in_progress")


def _parse_responses_body(custom_id: str, body: dict[str, Any]) -> LineResult:
    if body.get("error"):
        return _error_in_200(custom_id, body["error"])
    if "output" not in body:
        # Response.output is required (openai-python types/responses/response.py): a response
        # without it says nothing the model answered, never its empty answer.
        raise Malformed("a response without its `output`")
    if (status := as_label(body.get("status"))) in _RESPONSE_NOT_ENDED:
        raise Malformed(f"the response did not end with an answer (status {status!r})")
    u = as_object(body.get("usage"), "`usage`")
    usage = Usage(
        input_tokens=as_count(u.get("input_tokens")),
        output_tokens=as_count(u.get("output_tokens")),
        reasoning_tokens=as_count(as_object(u.get("output_tokens_details"), "`output_tokens_details`").get("reasoning_tokens")),
        cached_tokens=as_count(as_object(u.get("input_tokens_details"), "`input_tokens_details`").get("cached_tokens")),
    )
    texts, refusals = [], []
    for item in as_array(body.get("output"), "`output`"):
        item = as_object(item, "an output item")
        if item.get("type") != "message":
            continue
        for part in as_array(item.get("content"), "an output message's `content`"):
            part = as_object(part, "a content part")
            if part.get("type") == "output_text":
                texts.append(as_text(part.get("text"), "an output_text part's `text`") or "")
            elif part.get("type") == "refusal":
                refusals.append(as_text(part.get("refusal"), "a refusal part's `refusal`") or "")
    finish = as_label(body.get("status"))
    reason = as_label(as_object(body.get("incomplete_details"), "`incomplete_details`").get("reason"))
    if reason:
        finish = reason
    if finish == "content_filter":
        # As on the chat endpoint: the content filter withheld the answer, a refusal.
        return LineResult(custom_id, "refusal", text="".join(texts) or "\n".join(refusals), finish_reason=finish, usage=usage)
    if refusals and not texts:
        return LineResult(custom_id, "refusal", text="\n".join(refusals), finish_reason=finish, usage=usage)
    text = "".join(texts)
    if not text.strip():
        return LineResult(custom_id, "empty", text=text, finish_reason=finish, usage=usage)
    return LineResult(custom_id, "ok", text=text, finish_reason=finish, usage=usage, at_budget=finish == "max_output_tokens")
