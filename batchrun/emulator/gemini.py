"""Gemini (Developer API): batches, the Files API and online generateContent, as google-genai sees them.

Routes live under ``/v1/`` (google-genai 3.x) and ``/v1beta/`` (older SDKs):
``models/{m}:batchGenerateContent``, ``batches/{id}`` (get, list, ``:cancel``, delete), the
resumable upload ``/upload/{ver}/files``, file get/list/delete, downloads at
``/{ver}/files/{id}:download`` and ``/download/{ver}/files/{id}:download``, online
``models/{m}:generateContent``. References: https://ai.google.dev/gemini-api/docs/batch-mode,
https://ai.google.dev/api/batch-mode and https://ai.google.dev/api/files.

``/v1/batches`` and ``/v1/files`` are also OpenAI's paths: a Gemini route claims a request when it
names a Gemini object, or names none and looks like Google's (``x-goog-api-key``, ``?key=``...).

On the wire a batch is a long-running operation: ``BATCH_STATE_PENDING`` (create response and
first get), ``BATCH_STATE_RUNNING``, then ``BATCH_STATE_SUCCEEDED`` / ``FAILED`` / ``EXPIRED`` /
``CANCELLED``; a cancel ends it at once, without results. int64 fields are JSON strings. The
answer objects (responses, google.rpc.Status errors, the error envelope) are in ``gemini_answers.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import Message
from typing import Any, ClassVar, TypeVar

from .core import TRACE_HEADER, BatchRec, Core, End, FileRec, Provider
from .gemini_answers import CANCELLED, error_envelope, generate_response, line_error
from .httpio import CHUNK, ApiError, Ctx, Resp, Route, dumps_line, iter_jsonl, json_resp, query_int
from .wire import REJECTS_TEMPERATURE, Outcome, count_input_tokens, last_user, lower_id, new_id, rfc3339

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

T = TypeVar("T")


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


@dataclass
class Upload:
    """A resumable upload session: bytes land in ``path`` until the finalize command."""

    id: str  # the file id it will get
    path: str
    mime: str
    version: str
    display_name: str | None
    offset: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Gemini(Provider):
    """Gemini Developer API (under /v1/, /v1beta/, /v1alpha/): batches, Files API, online generateContent."""

    name = "gemini"

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
            Route("GET", r"/(?:download/)?[^/]+/files/([^/:]+):download", self.download),
            Route("POST", r"/([^/]+)/models/(.+):generateContent", self.generate),
            Route("POST", r"/([^/]+)/models/(.+):batchGenerateContent", self.batch_create),
            Route("POST", r"/([^/]+)/models/(.+):countTokens", self.count_tokens),
            Route("GET", r"/([^/]+)/models/([^/:]+)", self.model_get, claim=lambda ctx, *_: ctx.provider == self.name),
            Route("POST", r"/[^/]+/batches/([^/:]+):cancel", self.batch_cancel),
            # /{ver}/batches and /{ver}/files, shared with OpenAI
            Route("GET", batches, self.batch_list, claim=self._owns_batch),
            Route("GET", batches + r"/([^/]+)", self.batch_get, claim=self._owns_batch),
            Route("DELETE", batches + r"/([^/]+)", self.batch_delete, claim=self._owns_batch),
            Route("GET", files, self.file_list, claim=self._owns_file),
            Route("GET", files + r"/([^/]+)", self.file_get, claim=self._owns_file),
            Route("DELETE", files + r"/([^/]+)", self.file_delete, claim=self._owns_file),
        ]

    def _owns_batch(self, ctx: Ctx, batch_id: str | None = None) -> bool:
        return self.core.owner(self.core.batches, batch_id, ctx) == self.name and ctx.path.split("/")[1] in VERSIONS

    def _owns_file(self, ctx: Ctx, file_id: str | None = None) -> bool:
        return self.core.owner(self.core.files, file_id, ctx) == self.name and ctx.path.split("/")[1] in VERSIONS

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

    def error_body(self, status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
        return error_envelope(status, message)

    def outgoing(self, ctx: Ctx, resp: Resp) -> None:
        if ctx.path.startswith("/upload/") and 400 <= resp.status < 500 and resp.status not in (408, 429):
            # google-genai resends a chunk (sleeping 1, 2, 4 s) while X-Goog-Upload-Status is
            # missing, which is right for transient errors (429/5xx keep no header, as the real
            # service). A permanent error says "final" so the SDK raises the APIError at once.
            resp.headers.append(("X-Goog-Upload-Status", "final"))

    def too_long(self, model: str, tokens: int, window: int, params: Any) -> Outcome:
        return Outcome.error(400, f"The input token count ({tokens}) exceeds the maximum number of tokens allowed ({window}).")

    def answer(self, model: str, request: Any, custom_id: Any) -> Outcome:
        invalid = validate_request(request, model)
        if invalid is not None:
            return invalid
        return self.core.respond(self.name, model, request, custom_id, prompt_of(request))

    def final_status(self, end: End) -> str:
        return STATES[end]

    # ------------------------------------------------------------------ files

    def _file(self, file_id: str) -> FileRec:
        rec = self.core.files.get(file_id)
        if rec is None:
            raise ApiError(404, f"File files/{file_id} not found.", provider=self.name)
        return rec

    @staticmethod
    def _file_json(rec: FileRec, ctx: Ctx, version: str = "v1beta") -> dict:
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

    def upload(self, ctx: Ctx, version: str) -> Resp:
        """Resumable upload (https://ai.google.dev/api/files, media.upload): a start POST, then chunk
        POSTs to the X-Goog-Upload-URL it returned (X-Goog-Upload-Command: upload[, finalize])."""
        upload_id = ctx.q("upload_id")
        if upload_id is None:
            return self._upload_start(ctx, version)
        # Chunk requests carry no API key: the upload URL itself authorises them.
        with self.core.lock:
            session = self._uploads.get(upload_id)
        if session is None:
            raise ApiError(404, f"Unknown upload session {upload_id!r}.")
        commands = {c.strip() for c in ctx.header("X-Goog-Upload-Command").lower().split(",")}

        def status(state: str) -> list[tuple[str, str]]:
            return [("X-Goog-Upload-Status", state)]

        if "query" in commands:
            return Resp(200, b"", headers=status("active") + [("X-Goog-Upload-Size-Received", str(session.offset))])
        with session.lock:
            if "upload" in commands:
                try:
                    offset = int(ctx.header("X-Goog-Upload-Offset") or session.offset)
                except ValueError:
                    raise ApiError(400, "Invalid X-Goog-Upload-Offset.") from None
                if offset > session.offset:
                    raise ApiError(400, f"X-Goog-Upload-Offset {offset} is beyond the {session.offset} bytes received.")
                with open(session.path, "r+b") as f:
                    f.seek(offset)
                    f.truncate()  # a resent chunk replaces what followed its offset
                    written = ctx.body.copy_to(f)
                session.offset = offset + written
            if "finalize" not in commands:
                return Resp(200, b"", headers=status("active"))
            digest = hashlib.sha256()
            with open(session.path, "rb") as received:
                for chunk in iter(lambda: received.read(CHUNK), b""):
                    digest.update(chunk)
            with self.core.lock:
                self._uploads.pop(upload_id, None)
            rec = self.core.add_file(
                FileRec(
                    session.id, self.name, session.path, session.offset, session.display_name or "", self.name, time.time(),
                    mime=session.mime, display_name=session.display_name, sha256=digest.hexdigest(),
                )
            )
        return Resp(200, json.dumps({"file": self._file_json(rec, ctx, session.version)}).encode(), headers=status("final"))

    def _upload_start(self, ctx: Ctx, version: str) -> Resp:
        self.auth(ctx)
        protocol = ctx.header("X-Goog-Upload-Protocol").lower()
        if protocol != "resumable" or "start" not in ctx.header("X-Goog-Upload-Command").lower():
            raise ApiError(400, "The emulator supports only the resumable upload protocol (X-Goog-Upload-Protocol: resumable, X-Goog-Upload-Command: start).")
        body = ctx.json()
        meta: dict = body["file"] if isinstance(body, dict) and isinstance(body.get("file"), dict) else {}
        display_name = get_field(meta, "displayName")
        mime = ctx.header("X-Goog-Upload-Header-Content-Type") or get_field(meta, "mimeType") or "application/octet-stream"
        if mime == "jsonl":  # the docs' config={"mime_type": "jsonl"}
            mime = "application/jsonl"
        name = meta.get("name")
        file_id = name[len("files/"):] if isinstance(name, str) and name.startswith("files/") else (name or lower_id(12))
        if not isinstance(file_id, str) or not re.fullmatch(r"[a-z0-9-]{1,40}", file_id):
            # The Files API's rule, and what keeps a client's name from leading out of our folder.
            raise ApiError(400, f"Invalid file name {name!r}: a name is at most 40 lowercase alphanumeric characters or dashes.")
        if file_id in self.core.files:
            raise ApiError(409, f"File files/{file_id} already exists.")
        upload_id = new_id("ABgVH", 40)
        path = os.path.join(self.core.dir, f"gemini-{file_id}-{lower_id(6)}")
        open(path, "wb").close()
        with self.core.lock:
            self._uploads[upload_id] = Upload(file_id, path, mime, version, display_name)
        upload_url = f"{ctx.base}/upload/{version}/files?upload_id={upload_id}&upload_protocol=resumable"
        return Resp(200, b"", headers=[
            ("X-Goog-Upload-URL", upload_url),
            ("X-Goog-Upload-Status", "active"),
            ("X-Goog-Upload-Chunk-Granularity", str(8 * 1024 * 1024)),
        ])

    def file_get(self, ctx: Ctx, file_id: str) -> Resp:
        self.auth(ctx)
        return json_resp(self._file_json(self._file(file_id), ctx, ctx.path.split("/")[1]))

    def file_delete(self, ctx: Ctx, file_id: str) -> Resp:
        self.auth(ctx)
        self.core.delete_file(self._file(file_id))
        return json_resp({})

    def file_list(self, ctx: Ctx) -> Resp:
        self.auth(ctx)
        version = ctx.path.split("/")[1]
        with self.core.lock:
            items = sorted((f for f in self.core.files.values() if f.provider == self.name), key=lambda f: f.created, reverse=True)
        page, token = _token_page(items, ctx)
        out: dict = {"files": [self._file_json(f, ctx, version) for f in page]}
        if token:
            out["nextPageToken"] = token
        return json_resp(out)

    def download(self, ctx: Ctx, file_id: str) -> Resp:
        self.auth(ctx)
        rec = self._file(file_id)
        return self.core.download(rec, rec.mime or "application/octet-stream")

    # ------------------------------------------------------------------ batches

    def batch_create(self, ctx: Ctx, version: str, model_path: str) -> Resp:
        self.auth(ctx)
        model = model_path[len("models/"):] if model_path.startswith("models/") else model_path
        body = ctx.json()
        batch = body.get("batch") if isinstance(body, dict) and isinstance(body.get("batch"), dict) else body
        if not isinstance(batch, dict):
            raise ApiError(400, "Invalid JSON payload: expected {\"batch\": {...}}.")
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
            is_inline = False
        elif inline is not None:
            items = get_field(inline, "requests") if isinstance(inline, dict) else inline
            if not isinstance(items, list) or not items:
                raise ApiError(400, "* BatchGenerateContentRequest.batch.input_config.requests: requests must not be empty")
            source = self.core.new_path("gemini-inline-")
            with open(source, "w", encoding="utf-8", newline="\n") as f:
                for item in items:
                    item = item if isinstance(item, dict) else {}
                    metadata = item.get("metadata") if isinstance(item.get("metadata"), dict) else None
                    key = metadata.get("key") if metadata else None
                    keys.append(key)
                    if "request" in item:
                        request = item["request"]
                    else:  # tolerate a bare GenerateContentRequest with metadata beside it
                        request = {k: v for k, v in item.items() if k != "metadata"} or None
                    f.write(dumps_line({"key": key, "metadata": metadata, "request": request}) + "\n")
            echo = {}
            is_inline = True
        else:
            raise ApiError(400, "* BatchGenerateContentRequest.batch.input_config: either file_name or requests is required")
        faults = self.core.batch_faults(self.name, model)
        if "quota" in faults:
            os.unlink(source)
            raise ApiError(429, f"Resource has been exhausted: enqueued batch tokens quota exceeded for model {model} (emulator quota fault).")
        batch_id = lower_id(36)
        endpoint = f"/{version}/models/{model}:generateContent"
        for key in keys:  # logged before the batch becomes visible to get/list
            self.core.log_request(self.name, model, key, batch_id, endpoint)
        rec = GeminiBatch(
            batch_id, model, endpoint, source, len(keys), display_name=display_name, input_config=echo, inline=is_inline, api_version=version,
        )
        self.core.add_batch(rec, faults)
        return json_resp(self._batch_json(rec))

    @staticmethod
    def _batch_json(rec: GeminiBatch) -> dict:
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

    @staticmethod
    def _lines(rec: GeminiBatch) -> Iterator[tuple[Any, dict | None, Any]]:
        """(key, metadata, request) per input line; request is None for an unparseable line."""
        for _number, raw in iter_jsonl(rec.source_path):
            try:
                line = json.loads(raw)
            except ValueError:
                yield None, None, None
                continue
            if not isinstance(line, dict):
                yield None, None, None
            elif rec.inline:
                yield line.get("key"), line.get("metadata"), line.get("request")
            elif "request" in line:
                yield line.get("key"), None, line.get("request")
            else:  # a bare GenerateContentRequest line (the docs' key-less variant)
                yield None, None, line

    def process(self, rec: BatchRec, limit: int, end: End) -> None:
        assert isinstance(rec, GeminiBatch)
        counts = {"requestCount": rec.n, "successfulRequestCount": 0, "failedRequestCount": 0, "pendingRequestCount": 0}
        rec.counts = counts
        if end == "expired":
            # An expired job has no results to retrieve (BATCH_STATE_EXPIRED in
            # https://ai.google.dev/gemini-api/docs/batch-mode).
            return
        inline: list = []
        out_path = None if rec.inline else self.core.new_path("gemini-responses-")
        out = open(out_path, "w", encoding="utf-8", newline="\n") if out_path else None
        try:
            for i, (key, metadata, request) in enumerate(self._lines(rec)):
                if i >= limit:
                    break
                if request is None:
                    outcome = Outcome.error(400, "Invalid JSON payload received: the line is not a JSON object.")
                else:
                    outcome = self.answer(rec.model, request, key)
                if outcome.ok:
                    counts["successfulRequestCount"] += 1
                    entry: dict = {"response": generate_response(rec.model, outcome)}
                else:
                    counts["failedRequestCount"] += 1
                    entry = {"error": line_error(outcome)}
                if out is not None:
                    line = {"key": key, **entry} if key is not None else entry
                    out.write(self.core.corrupt(self.name, rec.model, key, dumps_line(line)) + "\n")  # same order as the input
                else:
                    if metadata:
                        entry["metadata"] = metadata
                    inline.append(entry)
        finally:
            if out is not None:
                out.close()
        if out_path:
            file_id = lower_id(12)
            self.core.add_file(FileRec(file_id, self.name, out_path, os.path.getsize(out_path), f"batch-{rec.id}", self.name, time.time(), display_name=f"batch-{rec.id}-responses", generated=True))
            rec.output_file_id = file_id
        else:
            rec.inline_responses = inline

    def fail(self, rec: BatchRec) -> None:
        assert isinstance(rec, GeminiBatch)
        rec.error = {"code": 3, "message": "Batch failed validation (emulator fault)."}
        rec.counts = {"requestCount": rec.n}

    def _batch(self, batch_id: str) -> GeminiBatch:
        rec = self.core.batches.get(batch_id)
        if not isinstance(rec, GeminiBatch):
            raise ApiError(404, f"Batch batches/{batch_id} not found.", provider=self.name)
        return rec

    def batch_get(self, ctx: Ctx, batch_id: str) -> Resp:
        self.auth(ctx)
        rec = self._batch(batch_id)
        self.core.advance(rec)
        return json_resp(self._batch_json(rec))

    def batch_list(self, ctx: Ctx) -> Resp:
        self.auth(ctx)
        with self.core.lock:
            items = sorted((b for b in self.core.batches.values() if isinstance(b, GeminiBatch)), key=lambda b: b.seq, reverse=True)
        page, token = _token_page(items, ctx)
        operations = []
        for rec in page:
            self.core.advance(rec)
            operations.append(self._batch_json(rec))
        out: dict = {"operations": operations}
        if token:
            out["nextPageToken"] = token
        return json_resp(out)

    def batch_cancel(self, ctx: Ctx, batch_id: str) -> Resp:
        self.auth(ctx)
        rec = self._batch(batch_id)
        with rec.lock:  # not a look (see Core.request_cancel)
            if rec.state != "done":
                # Cancel stops the job at once; nothing was processed, so there is no output.
                rec.cancel_at = rec.ended_at = time.time()
                rec.counts = {"requestCount": rec.n}
                rec.final = STATES["cancelled"]
                rec.state = "done"
        return json_resp({})

    def batch_delete(self, ctx: Ctx, batch_id: str) -> Resp:
        self.auth(ctx)
        self._batch(batch_id)
        with self.core.lock:
            self.core.batches.pop(batch_id, None)
        return json_resp({})

    # ------------------------------------------------------------------ online

    def generate(self, ctx: Ctx, version: str, model_path: str) -> Resp:
        self.auth(ctx)
        model = model_path[len("models/"):] if model_path.startswith("models/") else model_path
        request = ctx.json()
        endpoint = f"/{version}/models/{model}:generateContent"
        custom_id = ctx.headers.get(TRACE_HEADER)
        self.core.log_request(self.name, model, custom_id, "online", endpoint)
        outcome = self.answer(model, request, custom_id)
        if not outcome.ok:
            raise ApiError(outcome.status, outcome.message)
        return json_resp(generate_response(model, outcome))

    def count_tokens(self, ctx: Ctx, version: str, model_path: str) -> Resp:
        """``models/{m}:countTokens`` (google-genai ``models.count_tokens``): ``contents`` or a
        whole ``generateContentRequest``."""
        self.auth(ctx)
        body = ctx.json()
        request = body.get("generateContentRequest", body) if isinstance(body, dict) else None
        if not isinstance(request, dict) or not request.get("contents"):
            raise ApiError(400, "* CountTokensRequest.contents: contents is not specified")
        tokens = count_input_tokens(prompt_of(request))
        return json_resp({"totalTokens": tokens, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": tokens}]})

    def model_get(self, ctx: Ctx, version: str, model: str) -> Resp:
        """``GET models/{m}`` (google-genai ``models.get``): the Model with ``inputTokenLimit``."""
        self.auth(ctx)
        found = {"name": f"models/{model}", "baseModelId": model, "version": "001", "displayName": model,
                 "inputTokenLimit": self.core.windows.get(model), "outputTokenLimit": 65536,
                 "supportedGenerationMethods": ["generateContent", "countTokens", "batchGenerateContent"]}
        return json_resp({k: v for k, v in found.items() if v is not None})


def _token_page(items: list[T], ctx: Ctx) -> tuple[list[T], str | None]:
    """Google page: pageSize items from the offset in pageToken; nextPageToken while more remain."""
    size = query_int(ctx.q("pageSize"), 50, 1, 1000)
    start = query_int(ctx.q("pageToken") or None, 0, 0, 1 << 60)
    page = items[start : start + size]
    return page, (str(start + size) if start + size < len(items) else None)


# --------------------------------------------------------------------------- wire shapes


def get_field(d: dict, camel: str) -> Any:
    """Proto-JSON accepts camelCase and snake_case field names; so does the emulator."""
    if camel in d:
        return d[camel]
    snake = re.sub(r"(?<!^)([A-Z])", r"_\1", camel).lower()
    return d.get(snake)


def prompt_of(request: dict) -> str:
    contents = request.get("contents")
    if isinstance(contents, dict):
        contents = [contents]
    content = last_user(contents)
    if not isinstance(content, dict):
        return ""
    parts = content.get("parts") or []
    return "\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


def validate_request(request: Any, model: str) -> Outcome | None:
    """A GenerateContentRequest as the API validates it (per line inside a batch)."""
    if not isinstance(request, dict):
        return Outcome.error(400, "Invalid JSON payload received. Request must be an object.")
    if not request.get("contents"):
        return Outcome.error(400, "* GenerateContentRequest.contents: contents is not specified")
    config = get_field(request, "generationConfig") or {}
    if isinstance(config, dict) and "temperature" in config and model in REJECTS_TEMPERATURE:
        return Outcome.error(400, f"temperature is not supported for model {model}.")
    return None
