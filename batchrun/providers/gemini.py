"""Gemini Developer API Batch Mode adapter (file input through the resumable upload).

Request line: `{"key", "request": GenerateContentRequest}` (Gemini API, Batch Mode: "input file"); the budget is
`generationConfig.maxOutputTokens`. The local batch id travels in `displayName`, which the SDK
returns on get/list, so an orphan batch can be found after a crash. The SDK maps the wire's
`BATCH_STATE_*` to `JOB_STATE_*`; both spellings are understood here. google-genai 3.x talks to
`/v1`, older majors to `/v1beta`.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..base.errors import ProviderError
from . import (
    TOO_LONG,
    TRACE_HEADER,
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
    parse_total,
    removed_if_cut,
)
from ..base import netguard
from .clients import Classified, call, provider_error
from .probing import online_probe, stated_numbers

_STATES: dict[str, BatchState] = {
    "PENDING": "pending", "QUEUED": "pending", "UNSPECIFIED": "pending",
    "RUNNING": "running", "CANCELLING": "running", "UPDATING": "running", "PAUSED": "running",
    "SUCCEEDED": "done", "PARTIALLY_SUCCEEDED": "done",
    "FAILED": "failed", "CANCELLED": "cancelled", "EXPIRED": "expired",
}
# Candidates stopped for these reasons were blocked: the protocol counts them as refusals.
_BLOCKED = {"SAFETY", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "RECITATION", "IMAGE_SAFETY"}
# Error codes meaning "fix the request": HTTP 400/404 or gRPC INVALID_ARGUMENT(3)/NOT_FOUND(5).
_INVALID_CODES = {400, 404, 413, 3, 5}
# A file the Files API does not hold is answered 403 PERMISSION_DENIED with this (see download).
_FILE_MAY_NOT_EXIST = re.compile(r"permission to access the File .* or it may not exist", re.S)
# The key was refused: HTTP 401/403 or gRPC UNAUTHENTICATED(16)/PERMISSION_DENIED(7).
_AUTH_CODES = {401, 403, 16, 7}
# 400 INVALID_ARGUMENT "The input token count (N) exceeds the maximum number of tokens allowed (M)."
_TOO_LONG_TEXT = re.compile(r"input token count|exceeds the maximum number of tokens|context window", re.I)
_STATED = re.compile(r"input token count \((?P<tokens>\d+)\) exceeds the maximum number of tokens allowed \((?P<window>\d+)\)", re.I)


def state_of(raw_state: str) -> BatchState:
    suffix = raw_state.rsplit(".", 1)[-1]
    for prefix in ("BATCH_STATE_", "JOB_STATE_"):
        if suffix.startswith(prefix):
            suffix = suffix[len(prefix):]
    return _STATES.get(suffix, "running")  # unknown: still running, never finished


T = TypeVar("T")


def _sdk_parsed(fn: Callable[[], T]) -> T:
    """Run a google-genai call whose answer the SDK parses into its models.

    google-genai converts and validates an answer while building its models (BatchJob and
    friends): a field of the wrong type raises pydantic's ValidationError, an unknown enum value
    ValueError, some shapes AttributeError inside its converters. Raised while reading an answer
    (its *_from_mldev / *_from_vertex converters, t_recv_* transformers, BaseModel._from_response),
    these are a malformed answer (clients.MalformedResponse: retried, then the batch waits). The
    SDK also validates our own arguments before sending: a mistake there is ours and is raised."""
    try:
        return fn()
    except (ValueError, TypeError, AttributeError, KeyError) as e:
        if any(frame.name == "_from_response" or frame.name.endswith(("_from_mldev", "_from_vertex")) or frame.name.startswith("t_recv_")
               for frame in traceback.extract_tb(e.__traceback__)):
            raise MalformedResponse(f"the answer does not have the shape google-genai expects ({type(e).__name__}: "
                                    f"{str(e).splitlines()[0][:200] if str(e) else ''})") from e
        raise


# Empty pages a listing may serve in a row: pages with entries are bounded by the reader, which
# stops after the entries it wants (list_recent: 2,000), whatever the page size the server chose
# (AIP-158 lets it return fewer than asked); a server naming empty pages for ever is not.
MAX_EMPTY_PAGES = 100


def _entries(pager: Any) -> Iterator[Any]:
    """A google-genai pager's entries, page by page, each page parsed as it is fetched. Not through
    the pager's own iterator: a page may be empty and still name a next one ("may return fewer
    results than page_size, including zero results, even if not at the end of the collection",
    Google AIP-158), and its __next__ then raises IndexError (pagers.Pager.__next__)."""
    tokens: set[str] = set()
    empty = 0
    while True:
        page = list(pager.page)
        empty = 0 if page else empty + 1
        if empty > MAX_EMPTY_PAGES:
            raise MalformedResponse(f"the listing served more than {MAX_EMPTY_PAGES:,} empty pages in a row")
        yield from page
        token = pager.config.get("page_token")
        if not token:
            return
        if token in tokens:  # the same page named again: it would be served for ever
            raise MalformedResponse("the listing names the same next page twice")
        tokens.add(token)
        _sdk_parsed(pager.next_page)


def _timestamp(value: Any) -> float | None:
    """A batch's creation time in seconds; None for anything else (year 1 without a timezone
    cannot be converted: ValueError)."""
    if not isinstance(value, datetime):
        return None
    try:
        return value.timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def _get(d: dict[str, Any], camel: str, snake: str) -> Any:
    # Result files use proto-JSON camelCase; SDK objects dumped online use snake_case.
    return d.get(camel, d.get(snake))


def _sdk_chunk_sleeps() -> float:
    """The seconds google-genai sleeps, at most, resending one upload chunk answered without
    X-Goog-Upload-Status (google-genai 3.6, _api_client._upload_fd: INITIAL_RETRY_DELAY *
    DELAY_MULTIPLIER**i for each of MAX_RETRY_COUNT tries, 1 + 2 + 4 s; the last sleep comes after
    the last try, before the SDK gives up). Read from the SDK, so another version's values count."""
    from google.genai import _api_client as sdk

    first, factor, tries = (getattr(sdk, name, default) for name, default in
                            (("INITIAL_RETRY_DELAY", 1), ("DELAY_MULTIPLIER", 2), ("MAX_RETRY_COUNT", 3)))
    return float(sum(first * factor**i for i in range(tries)))


def _chunk_without_upload_status(response: Any) -> None:
    """An event hook (every response of a Gemini client): an upload chunk answered without
    X-Goog-Upload-Status (a 429 or 5xx: the service sets it on other answers) is resent by
    google-genai after `time.sleep`s of 1, 2 and 4 s, which nothing can cut, so within a run's
    time limit shorter than those sleeps it is the caller's failure at once instead (a transient
    one: `clients.call` retries the upload while there is time, the next run otherwise). With the
    time to spare (or no limit) the SDK resends the chunk as it always did."""
    if "x-goog-upload-command" not in response.request.headers or response.headers.get("x-goog-upload-status"):
        return
    left = netguard.remaining()
    if left is None or left > _sdk_chunk_sleeps():
        return
    raise MalformedResponse(
        f"an upload chunk was answered HTTP {response.status_code} without X-Goog-Upload-Status, and google-genai's resends "
        f"(after sleeping up to {_sdk_chunk_sleeps():g} s) would outlast the run's time limit ({max(left, 0):.1f} s left)",
        status=response.status_code)


class GeminiAdapter:
    name: str = "gemini"
    default_key_env: str = "GEMINI_API_KEY"
    sdk_base_url_env: str = "GOOGLE_GEMINI_BASE_URL"
    alt_key_env: str | None = "GOOGLE_API_KEY"  # google-genai's own alternative to GEMINI_API_KEY
    default_host: str | None = "generativelanguage.googleapis.com"
    base_url_suffix: str = ""  # the SDK adds the API version (/v1beta, /v1) to each path itself
    # File input up to 2 GB (Gemini API, Batch Mode).
    file_limits: tuple[int, int] = (1_000_000, 2_000_000_000)
    endpoints: tuple[str, ...] = ("chat",)
    default_api_version: str | None = None
    api_version_header: str | None = None
    no_sampling_api_versions: frozenset[str] = frozenset()
    # Batches carry our tag in `displayName`, returned on get and list.
    tags_batches: bool = True
    inline_requests: bool = False
    validation_failure_statuses: frozenset[int] = frozenset()  # a failed batch is JOB_STATE_FAILED
    # candidatesTokenCount excludes thinking, reported as thoughtsTokenCount and billed as output.
    reasoning_billed_apart: bool = True
    # models.get: Model.input_token_limit; models.count_tokens (free).
    reports_window: bool = True
    completion_in_window: bool = False
    # generationConfig.temperature: "Values can range from [0.0, 2.0]" (Gemini API reference,
    # GenerationConfig).
    temperature_range: tuple[float, float] = (0.0, 2.0)
    # Batches go to models/{model}:batchGenerateContent whatever the route says.
    uses_endpoint_path: bool = False

    # -- pure halves ---------------------------------------------------------------------------

    def build_line(self, route: RouteView, req: RequestSpec) -> dict[str, Any]:
        generation_config: dict[str, Any] = {"maxOutputTokens": req.max_tokens}
        if req.temperature is not None:
            generation_config["temperature"] = req.temperature
        return {
            "key": req.custom_id,
            "request": {"contents": [{"role": "user", "parts": [{"text": req.prompt}]}], "generationConfig": generation_config},
        }

    def online_body(self, line: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return line["key"], line["request"]

    def custom_id_of(self, obj: Any) -> str | None:
        # File output carries `key`; inline responses carry it in `metadata` (we send files).
        found = custom_id_field(obj, "key")
        if found is None and isinstance(obj, dict):
            found = custom_id_field(obj.get("metadata"), "key")
        return found

    def parse_line(self, obj: Any) -> LineResult:
        return parse_total(self.custom_id_of, self._parse, obj)

    def policy_endpoint(self, route: RouteView) -> str:
        # endpoint_path is not used for Gemini; it stays in the policy (as the config's default)
        # so that fingerprints, and the cells planned under them, do not change.
        return route.endpoint_path

    def endpoint_label(self, route: RouteView) -> str:
        return f"/models/{route.model}:" + ("generateContent" if route.transport == "sync" else "batchGenerateContent")

    def min_output_tokens(self, route: RouteView) -> int:
        return 1

    def endpoint_path_problem(self, route: RouteView) -> tuple[str, str] | None:
        return None

    def completion_window_problem(self, route: RouteView) -> tuple[str, str] | None:
        # Batch Mode's target turnaround is 24 hours and a job expires after 48 (Gemini API, Batch
        # Mode): the create takes no window, so another one would be a setting silently ignored.
        return only_24h("Gemini", "have a fixed 24-hour target (Batch Mode takes no window)", route.completion_window)

    def _parse(self, custom_id: str, obj: dict[str, Any]) -> LineResult:
        err = obj.get("error")
        if err:
            if not isinstance(err, dict):
                return LineResult(custom_id, "transient", error_type="error", error_message=as_message(err))
            code = err.get("code")
            number = code if isinstance(code, int) and not isinstance(code, bool) else None
            kind: ResultKind = "invalid" if number in _INVALID_CODES else "auth" if number in _AUTH_CODES else "transient"
            text = as_message(err.get("message"))
            label = TOO_LONG if kind == "invalid" and _TOO_LONG_TEXT.search(text or "") else as_label(err.get("status") or code)
            return LineResult(custom_id, kind, error_type=label, error_message=text)
        if obj.get("response") is None:
            # Neither an answer nor an error: not a result the model gave (never an "empty").
            raise Malformed("result line has neither `response` nor `error`")
        response = as_object(obj.get("response"), "`response`")
        u = as_object(_get(response, "usageMetadata", "usage_metadata"), "`usageMetadata`")

        def count(camel: str, snake: str) -> int | None:
            # proto3 JSON omits an int32 at 0 (https://protobuf.dev/programming-guides/json/): a
            # MAX_TOKENS answer that only thought has no candidatesTokenCount
            # (adcontextprotocol/adcp#7359), a model that did not think no thoughtsTokenCount. In a
            # usageMetadata that is there, an absent count is 0; a bad value stays unknown.
            value = _get(u, camel, snake)
            return 0 if value is None and u else as_count(value)

        usage = Usage(
            input_tokens=count("promptTokenCount", "prompt_token_count"),
            output_tokens=count("candidatesTokenCount", "candidates_token_count"),
            reasoning_tokens=count("thoughtsTokenCount", "thoughts_token_count"),
            cached_tokens=count("cachedContentTokenCount", "cached_content_token_count"),
        )
        feedback = as_object(_get(response, "promptFeedback", "prompt_feedback"), "`promptFeedback`")
        block = as_label(_get(feedback, "blockReason", "block_reason"))
        if block:
            return LineResult(custom_id, "refusal", finish_reason=block, usage=usage, error_message=f"prompt blocked: {block}")
        candidates = as_array(response.get("candidates"), "`candidates`")
        if not candidates:
            # No candidate and no blocked prompt: nothing the model answered (never an "empty").
            raise Malformed("the response has no `candidates` and no `promptFeedback.blockReason`")
        cand = as_object(candidates[0], "a candidate")
        finish = as_label(_get(cand, "finishReason", "finish_reason"))
        parts = as_array(as_object(cand.get("content"), "`candidate.content`").get("parts"), "`content.parts`")
        texts = []
        for part in parts:
            part = as_object(part, "a content part")
            if not part.get("thought"):
                texts.append(as_text(part.get("text"), "a part's `text`") or "")
        text = "".join(texts)
        if finish in _BLOCKED:
            return LineResult(custom_id, "refusal", text=text, finish_reason=finish, usage=usage)
        if not text.strip():
            if not finish:
                # "The reason why the model stopped generating tokens. If empty, the model has not
                # stopped generating the tokens." (Candidate.FinishReason, Google Cloud AI Platform v1
                # reference): no text and no finish reason is no answer, never the model's empty one.
                # (google-genai turns a `candidates` of garbage into `[{}]`: a string, numbers and
                # unknown objects alike, models._GenerateContentResponse_from_mldev.)
                raise Malformed("a candidate without text and without a finishReason: the model had not stopped")
            return LineResult(custom_id, "empty", text=text, finish_reason=finish, usage=usage)
        return LineResult(custom_id, "ok", text=text, finish_reason=finish, usage=usage, at_budget=finish == "MAX_TOKENS")

    # -- I/O halves ----------------------------------------------------------------------------

    def make_client(self, route: RouteView, key: str, *, timeout: float, hooks: dict[str, list[Callable[[Any], None]]]) -> Any:
        from google import genai
        from google.genai import types

        # client_args: passed to the sync httpx/httpx2 client google-genai builds (which follows
        # redirects); the hooks see every request, the resumable upload's chunks included.
        hooks = {**hooks, "response": [*hooks.get("response", []), _chunk_without_upload_status]}
        http_options: dict[str, Any] = {"timeout": int(timeout * 1000), "client_args": {"event_hooks": hooks}}
        if route.base_url:
            http_options["base_url"] = route.base_url
        client = genai.Client(api_key=key, http_options=types.HttpOptions(**http_options))
        # A host name resolved within the connect timeout and the run's limit: google-genai builds
        # its sync HTTP client itself (BaseApiClient._httpx_client in 3.x; a version without it
        # keeps the SDK's own resolution).
        netguard.resolve_in_time(getattr(getattr(client, "_api_client", None), "_httpx_client", None))
        return client

    def client_base_url(self, client: Any) -> str | None:
        # google-genai keeps it in its API client's HTTP options (GOOGLE_GEMINI_BASE_URL included).
        options = getattr(getattr(client, "_api_client", None), "_http_options", None)
        base = getattr(options, "base_url", None)
        return str(base) if base else None

    def read_error(self, exc: BaseException) -> SdkError | None:
        # google.genai.errors.APIError carries the HTTP status as `code`; a connection error is
        # httpx's own, not wrapped (clients.classify reads those).
        if not type(exc).__module__.startswith("google.genai"):
            return None
        return SdkError(getattr(exc, "code", None), getattr(exc, "message", None) or str(exc))

    def upload(self, client: Any, route: RouteView, path: Path) -> str:
        def do() -> str:
            try:
                # Python's mimetypes does not know .jsonl: pass the MIME type explicitly.
                file = client.files.upload(file=str(path), config={"mime_type": "application/jsonl", "display_name": path.parent.name})
            except KeyError as e:
                # google-genai reads the resumable session's URL as headers["x-goog-upload-url"]
                # and raises KeyError when the upload start came back without it (a proxy that
                # drops headers, a broken endpoint): nothing was uploaded, try again later.
                raise MalformedResponse(f"the upload start was answered without the X-Goog-Upload-URL header ({e})") from e
            except ValueError as e:
                # google-genai (_api_client._upload_fd) raises a bare ValueError when the last chunk
                # is answered without X-Goog-Upload-Status: final ("... upload status is not
                # finalized."): the endpoint's failure, the upload is tried again later.
                if "upload status" not in str(e).lower():
                    raise
                raise MalformedResponse(f"the upload was not finalized by the provider ({e})") from e
            name = getattr(file, "name", None)
            if not isinstance(name, str) or not name:
                raise MalformedResponse("the upload was answered without a file name")
            return name

        return call(do, what="Uploading the request file", route=route)

    def create(self, client: Any, route: RouteView, *, file_id: str | None, path: Path, tag: dict[str, str]) -> BatchStatus:
        job = _sdk_parsed(lambda: client.batches.create(model=route.model, src=file_id, config={"display_name": tag["display_name"]}))
        return self._status(job)

    def retrieve(self, client: Any, route: RouteView, provider_batch_id: str) -> BatchStatus:
        # Read inside the call: an answer that is not a batch (no id) is retried like a failed call.
        return call(lambda: answered_for(self._status(_sdk_parsed(lambda: client.batches.get(name=provider_batch_id))), provider_batch_id),
                    what="Checking a batch", route=route)

    def list_recent(self, client: Any, route: RouteView, since: float) -> list[BatchStatus]:
        def do() -> list[BatchStatus]:
            found = []
            # The SDK parses a whole page at once: an entry it cannot read fails the page, and so
            # does one without a name (listed_batches): retried, then the listing fails.
            pager = _sdk_parsed(lambda: client.batches.list(config={"page_size": 100}))
            for i, status in enumerate(listed_batches(_entries(pager), self._status)):
                if status.created_at is None or status.created_at >= since:
                    found.append(status)
                if i >= 2000:  # listing order is not documented: bound the scan
                    break
            return found

        return call(do, what="Listing batches", route=route)

    def cancel(self, client: Any, route: RouteView, provider_batch_id: str) -> None:
        call(lambda: client.batches.cancel(name=provider_batch_id), what="Cancelling a batch", route=route)

    def check_batch_access(self, client: Any, route: RouteView) -> None:
        # GET /{ver}/batches?pageSize=1: google-genai fetches the first page when list() is called.
        call(lambda: _sdk_parsed(lambda: client.batches.list(config={"page_size": 1})), what="Listing batches (preflight)",
             route=route, attempts=3)

    def download(self, client: Any, route: RouteView, status: BatchStatus, dest: Path) -> list[Path]:
        paths = []
        for ref in status.result_refs:
            if not ref:
                continue
            target = dest / "results.jsonl"

            def do(ref: str = ref) -> Any:
                return client.files.download(file=ref)  # bytes

            try:
                data = call(do, what=f"Downloading result file {ref}", route=route)
            except ProviderError as e:
                c: Classified | None = getattr(e, "classified", None)
                if c is None or c.status != 403 or not _FILE_MAY_NOT_EXIST.search(c.message):
                    raise
                # The Files API answers a file it does not hold (deleted, or past its 48 h) 403
                # "You do not have permission to access the File X or it may not exist"
                # (googleapis/python-genai#1218, discuss.ai.google.dev/t/50428): a missing file, not
                # a refused key (the same key has just retrieved the batch). Read as a 404 (poll:
                # the results are gone, or the route blocked for the run), never "check the key".
                raise provider_error(replace(c, failure="not_found"), what=f"Downloading result file {ref}", route=route) from e
            # A disk that fails mid-write (full, an I/O error) must not leave the part written: it is
            # not yet redacted (poll redacts a file once whole), as for the streamed downloads.
            with removed_if_cut(target):
                target.write_bytes(data)
            paths.append(target)
        return paths

    def send_online(self, client: Any, route: RouteView, line: dict[str, Any]) -> dict[str, Any]:
        from google.genai import types

        custom_id, request = self.online_body(line)
        gc = request.get("generationConfig") or {}
        config = types.GenerateContentConfig(
            max_output_tokens=gc.get("maxOutputTokens"), temperature=gc.get("temperature"),
            http_options=types.HttpOptions(headers={TRACE_HEADER: custom_id}),
        )
        # Parsed like every google-genai answer: its converters raise TypeError and friends on an
        # answer of the wrong shape (`candidates: [1, 2]`), a malformed answer, not a crash.
        response = _sdk_parsed(lambda: client.models.generate_content(model=route.model, contents=request["contents"], config=config))
        raw = response.model_dump(mode="json", exclude_none=True, exclude={"sdk_http_response"})
        return {"key": custom_id, "response": raw}

    def input_token_limit(self, client: Any, route: RouteView) -> int | None:
        model = call(lambda: client.models.get(model=route.model), what="Reading the model's metadata", route=route)
        limit = getattr(model, "input_token_limit", None)
        return limit if isinstance(limit, int) and limit > 0 else None

    def count_tokens(self, client: Any, route: RouteView, prompt: str) -> int | None:
        def count() -> int:
            # Checked inside the call: a malformed answer is retried, then reported as the provider's.
            total = as_count(getattr(client.models.count_tokens(model=route.model, contents=prompt), "total_tokens", None))
            if total is None:
                raise MalformedResponse("countTokens was answered without a token count (totalTokens)")
            return total

        return call(count, what="Counting tokens", route=route)

    def probe_call(self, client: Any, route: RouteView, prompt: str) -> ProbeAnswer:
        return online_probe(self, client, route, prompt)

    def stated_counts(self, message: str) -> tuple[int | None, int | None]:
        return stated_numbers(_STATED, message)

    def error_line(self, custom_id: str, status: int | None, message: str, error_type: str | None = None) -> dict[str, Any]:
        return {"key": custom_id, "error": {"code": status or 503, "message": message, "status": error_type or "UNAVAILABLE"}}

    # -- private ---------------------------------------------------------------------------------

    def _status(self, job: Any) -> BatchStatus:
        raw, name = batch_object(job.model_dump(mode="json", exclude_none=True, warnings=False) if hasattr(job, "model_dump") else job,
                                 "name")
        raw_state = str(getattr(job.state, "value", job.state) or "UNSPECIFIED")
        state = state_of(raw_state)
        dest = getattr(job, "dest", None)
        file_name = getattr(dest, "file_name", None) if dest is not None else None
        created = getattr(job, "create_time", None)
        error = getattr(job, "error", None)
        message = None
        if state == "failed":
            # google-genai does not expose the batch operation's error on the Developer API.
            message = getattr(error, "message", None) or f"Gemini reported {raw_state} (no error detail exposed by the SDK)"
        # Progress: google-genai maps Vertex's completionStats to `completion_stats`, but drops the
        # Gemini Developer API's metadata.batchStats (request/pending/successful/failed counts), so
        # there the SDK exposes no progress and none is claimed.
        stats = getattr(job, "completion_stats", None)
        numbers = [getattr(stats, k, None) for k in ("successful_count", "failed_count", "incomplete_count")]
        counts: dict[str, Any] = {}
        done = total = None
        if all(isinstance(x, int) and x >= 0 for x in numbers):
            ok_n, failed_n, left_n = (int(x or 0) for x in numbers)
            counts = {"successful": ok_n, "failed": failed_n, "incomplete": left_n}
            done, total = ok_n + failed_n, ok_n + failed_n + left_n
        return BatchStatus(
            provider_batch_id=name, state=state, raw_status=raw_state, counts=counts,
            n_requests=total or None, requests_done=done if total else None,
            result_refs=(file_name,) if (file_name and state in ("done", "cancelled", "expired")) else (),
            error=message, tag=getattr(job, "display_name", None),
            created_at=_timestamp(created), raw=raw,
        )


if TYPE_CHECKING:
    _gemini: Adapter = GeminiAdapter()
