"""OpenAI (and OpenAI-compatible providers): files, batches and online calls, as the openai SDK sees them.

Routes under ``/v1`` (an OpenAI-compatible provider subclass sets its own prefix: DashScope
``/compatible-mode/v1``): ``files`` (multipart upload, retrieve, ``/content``, list, delete),
``batches`` (create, retrieve, list, ``/cancel``), online ``/chat/completions`` and
``/responses``. What is refused, and how, is in ``openai_rules.py``. References:
https://platform.openai.com/docs/api-reference/batch, https://platform.openai.com/docs/guides/batch
and the SDK types named below.

``/v1/batches`` and ``/v1/files`` are also Gemini 3.x's paths: an OpenAI route claims a request
when it names an OpenAI object, or names none and does not look like Google's or Anthropic's.

The handlers' flow (retrieve, list, cancel, processing, the file handlers) is the shared core's
(``batches.py``, ``files.py``); this module supplies OpenAI's paths, auth, ids, shapes, cursor
pages, validation and quirks.

On the wire a batch is ``validating`` (create response and first retrieve; its request_counts all
0), then ``in_progress``, ``finalizing`` (the last tenth of the emulator's latency), then
``completed`` / ``failed`` / ``expired`` / ``cancelled`` (``cancelling`` after a user cancel,
until the next look); results go to an output file and an error file, each set only when it has a
line.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import Message
from typing import Any, BinaryIO, ClassVar

from .batches import BatchApi, BatchLine, Paged, ResultFile, first_last, refused
from .core import BatchRec, End, FileRec
from .files import FileApi
from .httpio import ApiError, BodyError, Ctx, Resp, Route, iter_jsonl, json_resp, parse_multipart, query_int
from .openai_answers import NO_CODE, batch_line, error_envelope, success_body
from .openai_rules import batch_create_refusal, body_refusal, expires_after_refusal, key_refusal, line_error, scan_lines
from .wire import Outcome, last_user, new_id, text_of

FILE_TTL = 30 * 86400  # purpose=batch files expire after 30 days by default
# The purposes an upload may name: openai-python's FilePurpose (types/file_purpose.py) and
# "responses", which the API lists in its refusal of any other: 400 "'answers' is not one of
# ['fine-tune', 'assistants', 'batch', 'user_data', 'responses', 'vision'] - 'purpose'"
# (irudnyts/openai#66).
FILE_PURPOSES = frozenset({"assistants", "batch", "fine-tune", "vision", "user_data", "evals", "responses"})


@dataclass
class OpenAIBatch(BatchRec):
    provider: ClassVar[str] = "openai"
    completion_window: str = "24h"
    metadata: Any = None
    input_file_id: str | None = None
    invalid_errors: list = field(default_factory=list)  # the input lines that do not validate
    usage: dict = field(default_factory=lambda: {"input_tokens": 0, "output_tokens": 0})
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list | None = None
    output_ttl: int = FILE_TTL  # seconds the output/error files live (output_expires_after)


class OpenAI(FileApi, BatchApi):
    """OpenAI under /v1 (https://api.openai.com/v1): files, batches, online. An OpenAI-compatible
    provider subclasses it with its own prefix and rules (``dashscope.py``)."""

    name = "openai"
    prefix = "/v1"  # the SDK's base URL ends in /v1 and appends /files, /batches ...
    batch_cls: ClassVar[type[OpenAIBatch]] = OpenAIBatch
    # request_counts {completed, failed} move while a batch is in_progress (BatchApi.progress).
    running_counts = True
    # in_progress -> finalizing -> completed: "finalizing: the batch has completed and the results
    # are being prepared" (Batch guide, "Batch object" status table; types/batch.py Batch.status);
    # finalizing_at is set then, output_file_id only once completed (ProjectTech4DevAI/kaapi-backend#723:
    # a real batch's finalizing_at 2 s before its completed_at).
    finalizes = True

    # What is refused, and how it is worded (openai_rules.py): a request body (online or a batch
    # line), a batch create, an input line that fails the batch's validation, a wrong key.
    refuse_create = staticmethod(batch_create_refusal)
    refuse_line = staticmethod(line_error)
    refuse_key = staticmethod(key_refusal)

    def refuse(self, body: Any, endpoint: str) -> Outcome | None:
        return body_refusal(body, endpoint, lambda model: self.core.models.known(self.name, model))

    def routes(self) -> list[Route]:
        prefix = re.escape(self.prefix)
        batches, files = prefix + "/batches", prefix + "/files"
        return [
            Route("POST", batches, self.batch_create, claim=self.owns_batch),
            Route("GET", batches, self.batch_list, claim=self.owns_batch),
            Route("GET", batches + r"/([^/]+)", self.batch_retrieve, claim=self.owns_batch),
            Route("POST", batches + r"/([^/]+)/cancel", self.batch_cancel, claim=self.owns_batch),
            Route("POST", files, self.file_create, claim=self.owns_file),
            Route("GET", files, self.file_list, claim=self.owns_file),
            Route("GET", files + r"/([^/]+)/content", self.file_content, claim=self.owns_file),
            Route("GET", files + r"/([^/]+)", self.file_retrieve, claim=self.owns_file),
            Route("DELETE", files + r"/([^/]+)", self.file_delete, claim=self.owns_file),
            Route("POST", prefix + r"/(?:chat/completions|responses)", self.online, claim=lambda ctx: ctx.provider == self.name),
        ]

    def looks_like(self, path: str, headers: Message, query: dict[str, list[str]]) -> bool:
        return True  # any request that does not look like Google's or Anthropic's (tried first)

    def auth(self, ctx: Ctx) -> None:
        authorization = ctx.header("Authorization")
        if not (authorization.startswith("Bearer ") and len(authorization) > 7):
            raise ApiError(401, "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
        if self.core.key_refused(authorization[7:]):
            raise refused(self.refuse_key(authorization[7:]))

    def error_body(self, status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
        return error_envelope(status, message, param, code)

    def outgoing(self, ctx: Ctx, resp: Resp) -> None:
        # Every response carries its request's id in x-request-id
        # (https://platform.openai.com/docs/api-reference/debugging-requests); the SDK exposes it as
        # `_request_id`.
        if not ctx.path.startswith("/_emulator"):
            resp.headers.append(("x-request-id", new_id("req_", 32)))

    def too_long(self, model: str, tokens: int, window: int, params: Any) -> Outcome:
        # Chat Completions states both counts; the Responses API states neither (same code).
        if isinstance(params, dict) and "input" in params and "messages" not in params:
            return Outcome.error(400, "Your input exceeds the context window of this model. Please adjust your input and try again.",
                                 param="input", code="context_length_exceeded")
        return Outcome.error(400, f"This model's maximum context length is {window} tokens. However, your messages resulted in "
                             f"{tokens} tokens. Please reduce the length of the messages.", param="messages", code="context_length_exceeded")

    def answer(self, model: str, body: Any, custom_id: Any, endpoint: str) -> Outcome:
        invalid = self.refuse(body, endpoint)
        if invalid is not None:
            return invalid
        return self.core.respond(self.name, model, body, custom_id, prompt_of(body, endpoint))

    # ------------------------------------------------------------------ files

    def file_missing(self, file_id: str) -> ApiError:
        return ApiError(404, f"No such File object: {file_id}", param="id", provider=self.name)

    def file_json(self, rec: FileRec, ctx: Ctx) -> dict:
        return {
            "id": rec.id,
            "object": "file",
            "bytes": rec.size,
            "created_at": int(rec.created),
            "filename": rec.filename,
            "purpose": rec.purpose,
            "status": "processed",
            "expires_at": int(rec.expires_at) if rec.expires_at else None,
            "status_details": None,
        }

    def file_page(self, ctx: Ctx, ids: list[str]) -> Paged:
        return cursor_page(ctx, ids, query_int(ctx.q("limit"), 10000, 1, 10000))

    def listed_files(self, ctx: Ctx) -> list[FileRec]:
        # files.list filters by purpose and orders by created_at, newest first unless order=asc.
        purpose = ctx.q("purpose")
        with self.core.lock:
            items = [f for f in self.core.files.values() if f.provider == self.name and (not purpose or f.purpose == purpose)]
        items.sort(key=lambda f: f.created, reverse=ctx.q("order", "desc") != "asc")
        return items

    def deleted_file(self, file_id: str) -> dict:
        return {"id": file_id, "object": "file", "deleted": True}

    def content_type(self, rec: FileRec) -> str:
        return "application/octet-stream"

    def file_create(self, ctx: Ctx) -> Resp:
        self.auth(ctx)
        content_type = ctx.header("Content-Type")
        if not content_type.startswith("multipart/form-data"):
            raise ApiError(400, "Expected a multipart/form-data upload with fields 'purpose' and 'file'.")
        file_id = new_id("file-", 22)
        created: list[str] = []

        def open_file() -> tuple[str, BinaryIO]:
            path = os.path.join(self.core.dir, f"{file_id}-{len(created)}")
            created.append(path)
            return path, open(path, "wb")

        try:
            fields, files = parse_multipart(ctx.body, content_type, open_file)
        except BodyError:
            for path in created:
                os.unlink(path)
            raise
        part = files.get("file")
        for extra in created:
            if part is None or extra != part.path:
                os.unlink(extra)
        if part is None:
            raise ApiError(400, "Missing required parameter: 'file'.", param="file")
        purpose = fields.get("purpose")
        if not purpose:
            os.unlink(part.path)
            raise ApiError(400, "Missing required parameter: 'purpose'.", param="purpose")
        if purpose not in FILE_PURPOSES:
            os.unlink(part.path)
            raise ApiError(400, f"{purpose!r} is not one of {sorted(FILE_PURPOSES)} - 'purpose'", param="purpose")
        if purpose == "batch" and not (part.filename or "").endswith(".jsonl"):
            # Refused at upload, param and code null: {"message": "Invalid file format for Batch API.
            # Must be .jsonl", "type": "invalid_request_error", "param": null, "code": null}
            # (BerriAI/litellm#37527, a curl capture through to api.openai.com). DashScope's
            # compatible mode documents JSONL input files (dashscope.py's sources) but not this
            # refusal: as strict as OpenAI, in OpenAI's words.
            os.unlink(part.path)
            raise ApiError(400, "Invalid file format for Batch API. Must be .jsonl")
        now = time.time()
        expires_at: float | None = now + FILE_TTL if purpose == "batch" else None
        # expires_after as the SDK sends it in a form: expires_after[anchor], expires_after[seconds].
        policy: dict[str, Any] = {key[len("expires_after["):-1]: value for key, value in fields.items() if key.startswith("expires_after[")}
        if policy:
            if "seconds" in policy:
                try:
                    policy["seconds"] = int(policy["seconds"])
                except ValueError:
                    pass  # refused as a wrong type below
            refusal = expires_after_refusal(policy, "expires_after")
            if refusal is not None:
                os.unlink(part.path)
                raise refused(refusal)
            expires_at = now + policy["seconds"]
        rec = self.core.add_file(FileRec(file_id, self.name, part.path, part.size, part.filename, purpose, now, expires_at=expires_at))
        return json_resp(self.file_json(rec, ctx))

    # ------------------------------------------------------------------ batches

    def batch_create(self, ctx: Ctx) -> Resp:
        self.auth(ctx)
        body = ctx.json()
        refusal = self.refuse_create(body)
        if refusal is not None:
            raise refused(refusal)
        endpoint, window, file_id = body["endpoint"], body["completion_window"], body["input_file_id"]
        file_rec = self.core.files.get(file_id)
        if file_rec is None or file_rec.provider != self.name:
            raise ApiError(400, f"Invalid 'input_file_id': {file_id!r}. File not found.", param="input_file_id", code="invalid_value")
        if file_rec.purpose != "batch":
            # "Your input file ... must be uploaded with the purpose `batch`" (types/batch_create_params.py
            # input_file_id; llm-d/llm-d-batch-gateway#152: another purpose is a 400); worded as the
            # not-found refusal above.
            raise ApiError(400, f"Invalid 'input_file_id': {file_id!r}. The file's purpose is {file_rec.purpose!r}; "
                           "a batch input file must be uploaded with purpose 'batch'.", param="input_file_id", code="invalid_value")
        source = self.core.link_private(file_rec.path, "openai-input-")
        # Batch-level faults match on the model, which comes from the first line (one model per file).
        model = ""
        for _number, raw in iter_jsonl(source):
            try:
                model = str(json.loads(raw)["body"].get("model") or "")
                break
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
        # One pass validates the lines and collects them as accepted. The provider validates batch
        # lines asynchronously: create succeeds and a bad line fails the batch (``fail``).
        accepted: list[tuple[str, Any, str]] = []
        n, invalid = scan_lines(iter_jsonl(source), endpoint, self.refuse_line,
                                lambda body, custom_id, url: accepted.append((str(body.get("model") or ""), custom_id, str(url or endpoint))))
        faults = self.batch_faults(model, source)
        rec = self.batch_cls(
            new_id("batch_", 32, "0123456789abcdef"), model, endpoint, source, n, completion_window=window,
            metadata=body.get("metadata"), input_file_id=file_id, invalid_errors=invalid, invalid=bool(invalid),
            # output_expires_after: "the anchor is the file creation time, not the time the batch is
            # created" (types/batch_create_params.py OutputExpiresAfter.anchor).
            output_ttl=(body.get("output_expires_after") or {}).get("seconds", FILE_TTL),
        )
        self.admit(rec, faults, accepted)
        return json_resp(self.batch_json(rec, ctx, rec.id))

    def batch_missing(self, batch_id: str) -> ApiError:
        return ApiError(404, f"No batch found with id '{batch_id}'.", param="batch_id", provider=self.name)

    def batch_json(self, rec: OpenAIBatch, ctx: Ctx, shown_id: str) -> dict:
        if rec.state == "done":
            status = rec.final
        elif rec.state == "cancel_requested":
            status = "cancelling"
        else:
            status = "validating" if rec.looks <= 1 else "finalizing" if rec.finalizing_at else "in_progress"
        if rec.state == "done":
            counts = rec.counts
        elif status == "validating":
            # The file is not counted until validation has read it: the API reference's create
            # example answers "status": "validating" with "request_counts": {"total": 0,
            # "completed": 0, "failed": 0} (platform.openai.com/docs/api-reference/batch/create).
            counts = {"total": 0, "completed": 0, "failed": 0}
        else:
            # Running counts move as requests finish (BatchApi.progress answered these).
            completed = sum(1 for o in rec.answered if o.ok)
            counts = {"total": rec.n, "completed": completed, "failed": len(rec.answered) - completed}
        ended = int(rec.ended_at) if rec.ended_at else None
        usage = rec.usage
        return {
            "id": rec.id,
            "object": "batch",
            "endpoint": rec.endpoint,
            "model": rec.model or None,
            "errors": {"object": "list", "data": rec.errors} if rec.errors else None,
            "input_file_id": rec.input_file_id,
            "completion_window": rec.completion_window,
            "status": status,
            "output_file_id": rec.output_file_id,
            "error_file_id": rec.error_file_id,
            "created_at": int(rec.created),
            "in_progress_at": int(rec.in_progress_at) if rec.in_progress_at and status != "failed" else None,
            "expires_at": int(rec.created) + window_seconds(rec.completion_window),
            "finalizing_at": int(rec.finalizing_at) if rec.finalizing_at and status in ("finalizing", "completed", "expired") else None,
            "completed_at": ended if status == "completed" else None,
            "failed_at": ended if status == "failed" else None,
            "expired_at": ended if status == "expired" else None,
            "cancelling_at": int(rec.cancel_at) if rec.cancel_at else None,
            "cancelled_at": ended if status == "cancelled" else None,
            "request_counts": counts,
            "usage": {
                "input_tokens": usage["input_tokens"],
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": usage["output_tokens"],
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage["input_tokens"] + usage["output_tokens"],
            },
            "metadata": rec.metadata,
        }

    def batch_page(self, ctx: Ctx, ids: list[str]) -> Paged:
        return cursor_page(ctx, ids, query_int(ctx.q("limit"), 20, 1, 100))

    def batch_lines(self, rec: OpenAIBatch) -> Iterator[BatchLine]:
        for _number, raw in iter_jsonl(rec.source_path):
            line = json.loads(raw)
            body = line["body"]
            yield BatchLine(line.get("custom_id"), str(body.get("model") or ""), body, str(line.get("url") or rec.endpoint))

    def answer_line(self, rec: OpenAIBatch, line: BatchLine) -> Outcome:
        return self.answer(line.model, line.request, line.custom_id, line.endpoint)

    def unprocessed(self, end: End) -> Outcome | None:
        # Expired requests go to the error file with code batch_expired
        # (https://platform.openai.com/docs/guides/batch, "Batch expiration"); a cancelled batch's
        # unprocessed requests are simply absent.
        return Outcome("expired") if end == "expired" else None

    def process(self, rec: BatchRec, limit: int, end: End) -> None:
        assert isinstance(rec, OpenAIBatch)
        with ResultFile(self, "openai-output-") as out, ResultFile(self, "openai-errors-") as err:
            for line, outcome in self.outcomes(rec, limit, end):
                (out if outcome.ok else err).write(line, batch_line(line.custom_id, outcome, line.endpoint, line.request))
                if outcome.ok:
                    rec.usage["input_tokens"] += outcome.input_tokens
                    rec.usage["output_tokens"] += outcome.output_tokens
        now = time.time()
        # output_file_id / error_file_id are only set when the file has at least one line.
        for file, attr, suffix in ((out, "output_file_id", "output"), (err, "error_file_id", "error")):
            if file.lines:
                kept = file.keep(new_id("file-", 22), f"{rec.id}_{suffix}.jsonl", "batch_output", now, expires_at=now + rec.output_ttl)
                setattr(rec, attr, kept.id)
            else:
                file.discard()
        rec.counts = {"total": rec.n, "completed": out.lines, "failed": err.lines}

    def fail(self, rec: BatchRec) -> None:
        assert isinstance(rec, OpenAIBatch)
        if rec.quota:
            rec.errors = [{
                "code": "token_limit_exceeded",
                "message": f"Enqueued token limit reached for {rec.model} in organization org-emulator. "
                "Limit: 90,000 enqueued tokens. Please try again once some in_progress batches have been completed.",
                "param": None, "line": None,
            }]
        elif rec.invalid_errors:
            rec.errors = rec.invalid_errors
        else:
            rec.errors = [{"code": "invalid_request", "message": "The batch failed validation (emulator fault).", "param": None, "line": 1}]
        rec.counts = {"total": 0 if rec.quota else rec.n, "completed": 0, "failed": 0}

    def cancel_ended(self, rec: OpenAIBatch, batch_id: str) -> ApiError:
        # 409, type invalid_request_error, param and code null: "Cannot cancel a batch with status
        # 'completed'." (BerriAI/litellm tests/batches_tests/test_openai_batches_and_files.py, run
        # against api.openai.com, catches it as openai.ConflictError; a captured body in a public
        # Ruby client: {"message": ..., "type": "invalid_request_error", "param": null, "code": null}).
        # The Stainless SDKs retry a 409 by default, as they would against the API.
        return ApiError(409, f"Cannot cancel a batch with status '{rec.final}'.", code=NO_CODE, provider=self.name)

    # ------------------------------------------------------------------ online

    def online(self, ctx: Ctx) -> Resp:
        self.auth(ctx)
        body = ctx.json()
        endpoint = ctx.path
        model = str(body.get("model") or "") if isinstance(body, dict) else ""
        outcome = self.answer_online(ctx, model, endpoint, lambda custom_id: self.answer(model, body, custom_id, endpoint))
        return json_resp(success_body(endpoint, body, outcome))


def cursor_page(ctx: Ctx, ids: list[str], limit: int) -> Paged:
    """OpenAI cursor page: the next page is requested with after=<id of the last item>."""
    after, start = ctx.q("after"), 0
    if after:
        start = ids.index(after) + 1 if after in ids else len(ids)
    has_more = start + limit < len(ids)
    return slice(start, start + limit), lambda data: {"object": "list", "data": data, **first_last(data), "has_more": has_more}


# --------------------------------------------------------------------------- wire shapes
# Validation runs per request inside batches (the provider validates batch lines asynchronously:
# create succeeds and the line comes back in the error file) and synchronously for online calls.


def window_seconds(window: str) -> int:
    """'24h' / '14d' / '90m' -> seconds (OpenAI-compatible providers accept other windows); default 24 h."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", window or "")
    if not m:
        return 86400
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def prompt_of(body: dict, endpoint: str) -> str:
    if endpoint.endswith("/responses"):
        value = body.get("input")
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            item = last_user(value)
            if isinstance(item, dict):
                return text_of(item.get("content"), ("input_text", "text", "output_text"))
            if isinstance(item, str):
                return item
        return ""
    message = last_user(body.get("messages"))
    return text_of(message.get("content"), ("text",)) if isinstance(message, dict) else ""


