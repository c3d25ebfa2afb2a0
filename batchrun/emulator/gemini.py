"""Gemini (Developer API): batches, the Files API and online generateContent, as google-genai sees them.

Routes live under ``/v1/`` (google-genai 3.x) and ``/v1beta/`` (older SDKs):
``models/{m}:batchGenerateContent``, ``batches/{id}`` (get, list, ``:cancel``, delete), the
resumable upload ``/upload/{ver}/files``, file get/list/delete, downloads at
``/{ver}/files/{id}:download`` and ``/download/{ver}/files/{id}:download``, online
``models/{m}:generateContent``. References: https://ai.google.dev/gemini-api/docs/batch-mode,
https://ai.google.dev/api/batch-mode and https://ai.google.dev/api/files.

``/v1/batches`` and ``/v1/files`` are also OpenAI's paths: a Gemini route claims a request when it
names a Gemini object, or names none and looks like Google's (``x-goog-api-key``, ``?key=``...).

The handlers' flow (get, list, cancel, delete, processing, the file handlers) is the shared
core's (``batches.py``, ``files.py``); this module supplies Google's paths, auth, ids, shapes,
page tokens, inline and file input, validation and quirks.

On the wire a batch is a long-running operation: ``BATCH_STATE_PENDING`` (create response and
first get), ``BATCH_STATE_RUNNING``, then ``BATCH_STATE_SUCCEEDED`` / ``FAILED`` / ``EXPIRED`` /
``CANCELLED``; a cancel ends it at once, without results. int64 fields are JSON strings. The
answer objects (responses, google.rpc.Status errors, the error envelope) are in ``gemini_answers.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from typing import Any, ClassVar

from .batches import BatchApi, BatchLine, Paged, ResultFile, refused
from .core import BatchRec, Core, End, FileRec
from .files import FileApi
from .gemini_answers import CANCELLED, error_envelope, generate_response, line_error
from .gemini_rules import batch_body_refusal, get_field, key_refusal, line_refusal, model_refusal, request_refusal
from .gemini_upload import ResumableUploads, Upload
from .httpio import ApiError, Ctx, Resp, Route, dumps_line, iter_jsonl, json_resp, query_int
from .wire import Outcome, count_input_tokens, last_user, lower_id, rfc3339

VERSIONS = ("v1", "v1beta", "v1alpha")
BATCH_TYPE = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch"
OUTPUT_TYPE = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput"
FILE_TTL = 48 * 3600  # Files API files are deleted after 48 h
STATES = {
    "completed": "BATCH_STATE_SUCCEEDED",
    "failed": "BATCH_STATE_FAILED",
    "expired": "BATCH_STATE_EXPIRED",
    "cancelled": "BATCH_STATE_CANCELLED",
}


@dataclass
class GeminiBatch(BatchRec):
    provider: ClassVar[str] = "gemini"
    display_name: str | None = None
    input_config: dict | None = None  # echoed in the batch's metadata (file input only)
    inline: bool = False
    api_version: str = "v1"
    output_file_id: str | None = None
    inline_responses: list | None = None
    error: dict | None = None  # google.rpc.Status of a batch that failed as a whole


class Gemini(ResumableUploads, FileApi, BatchApi):
    """Gemini Developer API (under /v1/, /v1beta/, /v1alpha/): batches, Files API, online generateContent."""

    name = "gemini"
    batch_cls = GeminiBatch

    def __init__(self, core: Core) -> None:
        super().__init__(core)
        self._uploads: dict[str, Upload] = {}

    def reset(self) -> None:
        with self.core.lock:
            self._uploads.clear()

    def routes(self) -> list[Route]:
        batches, files = r"(?:/[^/]+)*/batches", r"(?:/[^/]+)*/files"
        return [
            # upload / download prefixes and Google custom methods (":verb")
            Route("POST", r"/upload/([^/]+)/files", self.upload),
            Route("GET", r"/(?:download/)?[^/]+/files/([^/:]+):download", self.file_content),
            Route("POST", r"/([^/]+)/models/(.+):generateContent", self.generate),
            Route("POST", r"/([^/]+)/models/(.+):batchGenerateContent", self.batch_create),
            Route("POST", r"/([^/]+)/models/(.+):countTokens", self.count_tokens),
            Route("GET", r"/([^/]+)/models/([^/:]+)", self.model_get, claim=lambda ctx, *_: ctx.provider == self.name),
            Route("POST", r"/[^/]+/batches/([^/:]+):cancel", self.batch_cancel),
            # /{ver}/batches and /{ver}/files, shared with OpenAI
            Route("GET", batches, self.batch_list, claim=self.owns_batch),
            Route("GET", batches + r"/([^/]+)", self.batch_retrieve, claim=self.owns_batch),
            Route("DELETE", batches + r"/([^/]+)", self.batch_delete, claim=self.owns_batch),
            Route("GET", files, self.file_list, claim=self.owns_file),
            Route("GET", files + r"/([^/]+)", self.file_retrieve, claim=self.owns_file),
            Route("DELETE", files + r"/([^/]+)", self.file_delete, claim=self.owns_file),
        ]

    def owns_batch(self, ctx: Ctx, batch_id: str | None = None) -> bool:
        return super().owns_batch(ctx, batch_id) and ctx.path.split("/")[1] in VERSIONS

    def owns_file(self, ctx: Ctx, file_id: str | None = None) -> bool:
        return super().owns_file(ctx, file_id) and ctx.path.split("/")[1] in VERSIONS

    def looks_like(self, path: str, headers: Message, query: dict[str, list[str]]) -> bool:
        if path.startswith(("/upload/", "/download/")):
            return True
        first = path.split("/", 2)[1] if path.count("/") >= 1 else ""
        if first in ("v1beta", "v1alpha"):
            return True
        if ":" in path.rsplit("/", 1)[-1]:  # Google custom methods: models/x:generateContent, batches/x:cancel
            return True
        return bool(headers.get("x-goog-api-key") or headers.get("x-goog-api-client") or "key" in query)

    def auth(self, ctx: Ctx) -> None:
        # google-genai sends x-goog-api-key; REST users may pass ?key=.
        if not (ctx.header("x-goog-api-key") or ctx.q("key")):
            raise ApiError(
                403,
                "Method doesn't allow unregistered callers (callers without established identity). "
                "Please use API Key or other form of API consumer identity to call this API.",
            )
        if self.core.key_refused(ctx.header("x-goog-api-key") or ctx.q("key") or ""):
            raise refused(key_refusal())

    def check_model(self, model: str, version: str, method: str) -> str:
        """The model in the URL (``models/`` dropped), which must be one the API serves (models.py)."""
        model = model.removeprefix("models/")
        if not self.core.models.known(self.name, model):
            raise refused(model_refusal(model, version, method))
        return model

    def error_body(self, status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
        return error_envelope(status, message)

    def error_response(self, exc: ApiError) -> Resp:
        resp = super().error_response(exc)
        if exc.details:
            resp.body = json.dumps(error_envelope(exc.status, exc.message, exc.details)).encode()
        return resp

    def outgoing(self, ctx: Ctx, resp: Resp) -> None:
        if ctx.path.startswith("/upload/") and 400 <= resp.status < 500 and resp.status not in (408, 429):
            # google-genai resends a chunk (sleeping 1, 2, 4 s) while X-Goog-Upload-Status is
            # missing, which is right for transient errors (429/5xx keep no header, as the real
            # service). A permanent error says "final" so the SDK raises the APIError at once.
            resp.headers.append(("X-Goog-Upload-Status", "final"))

    def too_long(self, model: str, tokens: int, window: int, params: Any) -> Outcome:
        return Outcome.error(400, f"The input token count ({tokens}) exceeds the maximum number of tokens allowed ({window}).")

    def answer(self, model: str, request: Any, custom_id: Any) -> Outcome:
        invalid = request.outcome if isinstance(request, LineRefused) else request_refusal(request)
        if invalid is not None:
            return invalid
        return self.core.respond(self.name, model, request, custom_id, prompt_of(request))

    def final_status(self, end: End) -> str:
        return STATES[end]

    # ------------------------------------------------------------------ files

    def file_missing(self, file_id: str) -> ApiError:
        # The Files API answers a file it does not hold (never uploaded, deleted, or past its 48 h)
        # with 403 PERMISSION_DENIED, not a 404: "You do not have permission to access the File
        # xxxx or it may not exist." (googleapis/python-genai#1218 on files.get,
        # google-gemini/deprecated-generative-ai-js#236 on getFile of an id never uploaded, and
        # discuss.ai.google.dev/t/50428: files gone after 48 h answer "403: either you don't have
        # permission or the file is missing").
        return ApiError(403, f"You do not have permission to access the File {file_id} or it may not exist.", provider=self.name)

    def file_json(self, rec: FileRec, ctx: Ctx, version: str | None = None) -> dict:
        version = version or ctx.path.split("/")[1]  # the API version the file was asked under
        data = {
            "name": f"files/{rec.id}",
            "mimeType": rec.mime,
            "sizeBytes": str(rec.size),  # int64 as a JSON string
            "createTime": rfc3339(rec.created),
            "updateTime": rfc3339(rec.created),
            "expirationTime": rfc3339(rec.created + FILE_TTL),
            "sha256Hash": rec.sha256 or "",
            "uri": f"{ctx.base}/{version}/files/{rec.id}",
            "state": "ACTIVE",
            "source": "GENERATED" if rec.generated else "UPLOADED",
        }
        if rec.display_name:
            data["displayName"] = rec.display_name
        if rec.generated:
            data["downloadUri"] = f"{ctx.base}/download/{version}/files/{rec.id}:download?alt=media"
        return data

    def file_page(self, ctx: Ctx, ids: list[str]) -> Paged:
        return token_page(ctx, ids, "files")

    # ------------------------------------------------------------------ batches

    def batch_create(self, ctx: Ctx, version: str, model_path: str) -> Resp:
        self.auth(ctx)
        model = self.check_model(model_path, version, "batchGenerateContent")
        body = ctx.json()
        refusal = batch_body_refusal(body)
        if refusal is not None:
            raise refused(refusal)
        batch = body.get("batch")
        if not isinstance(batch, dict):
            raise ApiError(400, "* BatchGenerateContentRequest.batch: batch is required")
        display_name = get_field(batch, "displayName")
        input_config = get_field(batch, "inputConfig")
        if not isinstance(input_config, dict):
            raise ApiError(400, "* BatchGenerateContentRequest.batch.input_config: input_config is required")
        file_name = get_field(input_config, "fileName")
        inline = get_field(input_config, "requests")
        keys: list = []
        if file_name:
            file_id = file_name[len("files/"):] if file_name.startswith("files/") else file_name
            file_rec = self.core.files.get(file_id)
            if file_rec is None or file_rec.provider != self.name:
                raise ApiError(400, f"File {file_name} not found or not accessible.")
            source = self.core.link_private(file_rec.path, "gemini-input-")
            for _number, raw in iter_jsonl(source):
                try:
                    line = json.loads(raw)
                    keys.append(line.get("key") if isinstance(line, dict) else None)
                except ValueError:
                    keys.append(None)
            echo: dict = {"fileName": f"files/{file_id}"}
        elif inline is not None:
            items = get_field(inline, "requests") if isinstance(inline, dict) else inline
            if not isinstance(items, list) or not items:
                raise ApiError(400, "* BatchGenerateContentRequest.batch.input_config.requests: requests must not be empty")
            source = self.core.new_path("gemini-inline-")
            with open(source, "w", encoding="utf-8", newline="\n") as f:
                for item in items:  # each an InlinedRequest {request, metadata} (batch_body_refusal)
                    metadata = item.get("metadata") if isinstance(item.get("metadata"), dict) else None
                    key = metadata.get("key") if metadata else None
                    keys.append(key)
                    f.write(dumps_line({"key": key, "metadata": metadata, "request": item.get("request", {})}) + "\n")
            echo = {}
        else:
            raise ApiError(400, "* BatchGenerateContentRequest.batch.input_config: either file_name or requests is required")
        faults = self.batch_faults(model, source)
        endpoint = f"/{version}/models/{model}:generateContent"
        rec = GeminiBatch(
            lower_id(36), model, endpoint, source, len(keys), display_name=display_name, input_config=echo, inline=not file_name,
            api_version=version,
        )
        self.admit(rec, faults, [(model, key, endpoint) for key in keys])
        return json_resp(self.batch_json(rec, ctx, rec.id))

    def refused_at_create(self, faults: dict, model: str) -> ApiError | None:
        # A quota fault is refused at once, in Google's words for an exhausted quota (per-tier batch
        # quotas exist: provider-apis.md §4.7); a batch that fails validation is created and ends
        # BATCH_STATE_FAILED (``fail``).
        if "quota" in faults:
            return ApiError(429, f"Resource has been exhausted: enqueued batch tokens quota exceeded for model {model} (emulator quota fault).")
        return None

    def batch_missing(self, batch_id: str) -> ApiError:
        return ApiError(404, f"Batch batches/{batch_id} not found.", provider=self.name)

    def batch_json(self, rec: GeminiBatch, ctx: Ctx, shown_id: str) -> dict:
        done = rec.state == "done"
        state = rec.final if done else ("BATCH_STATE_PENDING" if rec.looks <= 1 else "BATCH_STATE_RUNNING")
        name = f"batches/{rec.id}"
        # int64 fields are JSON strings; proto3 JSON omits zero counts.
        if done:
            stats = {k: str(v) for k, v in rec.counts.items() if v or k == "requestCount"}
        else:
            stats = {"requestCount": str(rec.n), "pendingRequestCount": str(rec.n)}
        metadata: dict = {
            "@type": BATCH_TYPE,
            "model": f"models/{rec.model}",
            "createTime": rfc3339(rec.created),
            "updateTime": rfc3339(rec.ended_at or rec.created),
            "batchStats": stats,
            "state": state,
            "name": name,
        }
        if rec.display_name:
            metadata["displayName"] = rec.display_name
        if rec.input_config:
            metadata["inputConfig"] = rec.input_config
        op: dict = {"name": name, "metadata": metadata}
        if done:
            metadata["endTime"] = rfc3339(rec.ended_at)
            op["done"] = True
            output: dict | None = None
            if rec.output_file_id:
                output = {"responsesFile": f"files/{rec.output_file_id}"}
            elif rec.inline_responses is not None:
                # Inline output is double-nested: output.inlinedResponses.inlinedResponses[].
                output = {"inlinedResponses": {"inlinedResponses": rec.inline_responses}}
            # A cancelled operation carries google.rpc.Code 1 CANCELLED (see gemini_answers.CANCELLED).
            error = rec.error or (CANCELLED if rec.final == STATES["cancelled"] else None)
            if output is not None:
                metadata["output"] = output  # what the SDK reads (partial results of a cancelled batch too)
                if error is None:  # a done Operation sets one of `response` / `error`, never both
                    op["response"] = {"@type": OUTPUT_TYPE, **output}  # what REST users read
            if error is not None:
                op["error"] = error
        return op

    def batch_page(self, ctx: Ctx, ids: list[str]) -> Paged:
        return token_page(ctx, ids, "operations")

    def batch_lines(self, rec: GeminiBatch) -> Iterator[BatchLine]:
        """Each input line; its request is None when the line is not a JSON object."""
        for _number, raw in iter_jsonl(rec.source_path):
            try:
                line = json.loads(raw)
            except ValueError:
                line = None
            if not isinstance(line, dict):
                yield BatchLine(None, rec.model, None)
            elif rec.inline:
                yield BatchLine(line.get("key"), rec.model, line.get("request"), metadata=line.get("metadata"))
            elif (refusal := line_refusal(line)) is not None:
                yield BatchLine(line.get("key"), rec.model, LineRefused(refusal))
            elif "request" in line:
                yield BatchLine(line.get("key"), rec.model, line.get("request"))
            else:  # a bare GenerateContentRequest line (the docs' key-less variant)
                yield BatchLine(None, rec.model, line)

    def answer_line(self, rec: GeminiBatch, line: BatchLine) -> Outcome:
        if line.request is None:
            return Outcome.error(400, "Invalid JSON payload received: the line is not a JSON object.")
        return self.answer(rec.model, line.request, line.custom_id)

    def process(self, rec: BatchRec, limit: int, end: End) -> None:
        assert isinstance(rec, GeminiBatch)
        counts = {"requestCount": rec.n, "successfulRequestCount": 0, "failedRequestCount": 0, "pendingRequestCount": 0}
        rec.counts = counts
        if end == "expired":
            # An expired job has no results to retrieve (BATCH_STATE_EXPIRED in
            # https://ai.google.dev/gemini-api/docs/batch-mode).
            return
        inline: list = []
        out = None if rec.inline else ResultFile(self, "gemini-responses-")
        try:
            for line, outcome in self.outcomes(rec, limit, end):
                if outcome.ok:
                    counts["successfulRequestCount"] += 1
                    entry: dict = {"response": generate_response(rec.model, outcome)}
                else:
                    counts["failedRequestCount"] += 1
                    entry = {"error": line_error(outcome)}
                if out is not None:
                    out.write(line, {"key": line.custom_id, **entry} if line.custom_id is not None else entry)  # input order
                else:
                    if line.metadata:
                        entry["metadata"] = line.metadata
                    inline.append(entry)
        finally:
            if out is not None:
                out.close()
        if out is not None:
            rec.output_file_id = out.keep(lower_id(12), f"batch-{rec.id}", self.name, display_name=f"batch-{rec.id}-responses").id
        else:
            rec.inline_responses = inline

    def fail(self, rec: BatchRec) -> None:
        assert isinstance(rec, GeminiBatch)
        rec.error = {"code": 3, "message": "Batch failed validation (emulator fault)."}
        rec.counts = {"requestCount": rec.n}

    def cancel(self, rec: GeminiBatch) -> None:
        # Cancel stops the job at once; nothing was processed, so there is no output.
        rec.cancel_at = rec.ended_at = time.time()
        rec.counts = {"requestCount": rec.n}
        rec.final = STATES["cancelled"]
        rec.state = "done"

    def cancel_answer(self, rec: GeminiBatch, ctx: Ctx, batch_id: str) -> dict:
        return {}  # batches.cancel ignores the response (provider-apis.md §4.2: `{}` is fine)

    # ------------------------------------------------------------------ online

    def generate(self, ctx: Ctx, version: str, model_path: str) -> Resp:
        self.auth(ctx)
        model = self.check_model(model_path, version, "generateContent")
        request = ctx.json()
        endpoint = f"/{version}/models/{model}:generateContent"
        outcome = self.answer_online(ctx, model, endpoint, lambda custom_id: self.answer(model, request, custom_id))
        return json_resp(generate_response(model, outcome))

    def count_tokens(self, ctx: Ctx, version: str, model_path: str) -> Resp:
        """``models/{m}:countTokens`` (google-genai ``models.count_tokens``): ``contents`` or a
        whole ``generateContentRequest``."""
        self.auth(ctx)
        self.check_model(model_path, version, "countTokens")
        body = ctx.json()
        request = body.get("generateContentRequest", body) if isinstance(body, dict) else None
        if not isinstance(request, dict) or not request.get("contents"):
            raise ApiError(400, "* CountTokensRequest.contents: contents is not specified")
        tokens = count_input_tokens(prompt_of(request))
        return json_resp({"totalTokens": tokens, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": tokens}]})

    def model_get(self, ctx: Ctx, version: str, model: str) -> Resp:
        """``GET models/{m}`` (google-genai ``models.get``): the Model with ``inputTokenLimit``."""
        self.auth(ctx)
        self.check_model(model, version, "get")
        found = {"name": f"models/{model}", "baseModelId": model, "version": "001", "displayName": model,
                 "inputTokenLimit": self.core.windows.get(model), "outputTokenLimit": 65536,
                 "supportedGenerationMethods": ["generateContent", "countTokens", "batchGenerateContent"]}
        return json_resp({k: v for k, v in found.items() if v is not None})


def token_page(ctx: Ctx, ids: list[str], key: str) -> Paged:
    """Google page: pageSize items from the offset in pageToken; nextPageToken while more remain."""
    size = query_int(ctx.q("pageSize"), 50, 1, 1000)
    start = query_int(ctx.q("pageToken") or None, 0, 0, 1 << 60)
    token = str(start + size) if start + size < len(ids) else None
    # proto3 JSON omits fields at their default value, an empty repeated field too
    # (https://protobuf.dev/programming-guides/json/): an empty page has no ``key`` at all.
    return slice(start, start + size), lambda data: {**({key: data} if data else {}), **({"nextPageToken": token} if token else {})}


# --------------------------------------------------------------------------- wire shapes


def prompt_of(request: dict) -> str:
    contents = request.get("contents")
    if isinstance(contents, dict):
        contents = [contents]
    content = last_user(contents)
    if not isinstance(content, dict):
        return ""
    parts = content.get("parts") or []
    return "\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


@dataclass(frozen=True)
class LineRefused:
    """A file-input line refused for its own shape (gemini_rules.line_refusal), answered as its error."""

    outcome: Outcome

