"""Anthropic: the Message Batches API and online Messages, as the anthropic SDK sees them.

Routes: ``POST``/``GET /v1/messages/batches``, ``GET``/``DELETE /v1/messages/batches/{id}``,
``POST .../cancel``, ``GET .../results`` (JSONL) and online ``POST /v1/messages``. Reference:
https://platform.claude.com/docs/en/api/creating-message-batches and the SDK types named below.

The handlers' flow (retrieve, list, cancel, delete, processing) is ``batches.py``'s; this module
supplies Anthropic's paths, auth, ids, shapes, before_id/after_id pages, validation and quirks.

On the wire a batch is ``in_progress`` (every request counted as ``processing``) until it has
ended, ``canceling`` after a user cancel, then ``ended`` with a ``results_url``. There is no
failed batch: quota and validation refusals are HTTP errors on create, and nothing is accepted.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from typing import Any, ClassVar
from urllib.parse import quote

from .anthropic_rules import batch_create_refusal, params_refusal
from .batches import BatchApi, BatchLine, Paged, ResultFile, first_last
from .core import BatchRec, End, FileRec
from .httpio import ApiError, Ctx, Resp, Route, dumps_line, iter_jsonl, json_resp, query_int
from .wire import Outcome, count_input_tokens, last_user, new_id, rfc3339, text_of

# The anthropic-version values the emulator accepts. 2026-10-21 (the default of anthropic SDK
# 2.x) rejects the sampling parameters on every model (anthropic_rules.py).
VERSIONS = ("2023-06-01", "2026-10-21")
CUSTOM_ID_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
DAY = 86400

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


@dataclass
class AnthropicBatch(BatchRec):
    provider: ClassVar[str] = "anthropic"
    anthropic_version: str = "2023-06-01"
    results_path: str | None = None


class Anthropic(BatchApi):
    """Anthropic: the Message Batches API and online Messages."""

    name = "anthropic"
    batch_cls = AnthropicBatch

    def routes(self) -> list[Route]:
        # Batch ids are matched on the path as sent: an alias_batch id may hold a "/".
        one = r"/v1/messages/batches/([^/]+)"
        return [
            Route("POST", r"/v1/messages", self.online),
            Route("POST", r"/v1/messages/count_tokens", self.count_tokens),
            # /v1/models/{id} is Gemini 3.x's path too: answered when the call looks like Anthropic's.
            Route("GET", r"/v1/models/([^/]+)", self.model_get, claim=lambda ctx, *_: ctx.provider == self.name),
            Route("POST", r"/v1/messages/batches", self.batch_create),
            Route("GET", r"/v1/messages/batches", self.batch_list),
            Route("GET", one, self.batch_retrieve, raw=True),
            Route("DELETE", one, self.batch_delete, raw=True),
            Route("POST", one + "/cancel", self.batch_cancel, raw=True),
            Route("GET", one + "/results", self.batch_results, raw=True),
        ]

    def looks_like(self, path: str, headers: Message, query: dict[str, list[str]]) -> bool:
        return path.startswith("/v1/messages") or bool(headers.get("anthropic-version") or headers.get("x-api-key"))

    def auth(self, ctx: Ctx) -> None:
        # The anthropic SDK up to 1.x sends x-api-key; 2.x sends Authorization: Bearer.
        authorization = ctx.header("Authorization")
        if not (ctx.header("x-api-key") or (authorization.startswith("Bearer ") and len(authorization) > 7)):
            raise ApiError(401, "x-api-key header is required")
        # The real API prefers x-api-key when both are sent (provider-apis.md §3.1).
        if self.core.key_refused(ctx.header("x-api-key") or authorization[7:]):
            raise ApiError(401, "invalid x-api-key")
        version = ctx.header("anthropic-version")
        if not version:
            raise ApiError(400, "anthropic-version: header is required")
        if version not in VERSIONS:
            raise ApiError(400, f"anthropic-version: invalid version {version!r}; the emulator knows {', '.join(VERSIONS)}")

    def error_body(self, status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
        return error_envelope(status, message)

    def error_response(self, exc: ApiError) -> Resp:
        resp = super().error_response(exc)
        resp.headers.append(("request-id", json.loads(resp.body)["request_id"]))
        return resp

    def outgoing(self, ctx: Ctx, resp: Resp) -> None:
        # "The Anthropic API includes the following headers in every response: request-id ..."
        # (https://platform.claude.com/docs/en/api/overview, Response headers); the SDK exposes it
        # as `_request_id`. An error already carries the one its body names.
        if not ctx.path.startswith("/_emulator") and not any(k.lower() == "request-id" for k, _ in resp.headers):
            resp.headers.append(("request-id", new_id("req_011C", 20)))

    def too_long(self, model: str, tokens: int, window: int, params: Any) -> Outcome:
        return Outcome.error(400, f"prompt is too long: {tokens} tokens > {window} maximum")

    def answer(self, model: str, params: Any, custom_id: Any, version: str) -> Outcome:
        invalid = params_refusal(params, version, lambda m: self.core.models.known(self.name, m))
        if invalid is not None:
            return invalid
        return self.core.respond(self.name, model, params, custom_id, prompt_of(params))

    # ------------------------------------------------------------------ batches

    def batch_create(self, ctx: Ctx) -> Resp:
        self.auth(ctx)
        body = ctx.json()
        refusal = batch_create_refusal(body)
        if refusal is not None:
            raise ApiError(400, refusal)
        requests = body["requests"]
        seen: set = set()
        for i, item in enumerate(requests):
            custom_id = item.get("custom_id")
            if not isinstance(custom_id, str) or not CUSTOM_ID_RE.match(custom_id):
                raise ApiError(400, f"requests.{i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
            if custom_id in seen:
                raise ApiError(400, f"requests.{i}.custom_id: Duplicate custom_id {custom_id!r}; custom_id must be unique within a batch.")
            seen.add(custom_id)
        model = str(requests[0]["params"].get("model") or "")
        source = self.core.new_path("anthropic-input-")
        with open(source, "w", encoding="utf-8", newline="\n") as f:
            for item in requests:
                f.write(dumps_line({"custom_id": item["custom_id"], "params": item["params"]}) + "\n")
        faults = self.batch_faults(model, source)
        accepted = [(str(item["params"].get("model") or ""), item["custom_id"], "/v1/messages") for item in requests]
        del requests, body
        rec = AnthropicBatch(
            new_id("msgbatch_01", 22), model, "/v1/messages", source, len(accepted),
            anthropic_version=ctx.header("anthropic-version") or "2023-06-01",
        )
        self.admit(rec, faults, accepted)
        alias = self.core.faults.take("alias_batch", {"provider": self.name, "model": model})
        if alias is not None:
            with self.core.lock:  # the same batch, also known (and listed first) under a hostile id
                self.core.batches[alias["id"]] = rec
        return json_resp(self.batch_json(rec, ctx, rec.id))

    def refused_at_create(self, faults: dict, model: str) -> ApiError | None:
        # The Message Batches API has no "failed" batch state: quota and validation refusals are
        # synchronous HTTP errors on create, and nothing is accepted.
        if "quota" in faults:
            return ApiError(429, f"Number of batch requests in the queue exceeds your rate limit for {model} (emulator quota fault).")
        if "fail_validation" in faults:
            return ApiError(400, "requests.0.params: batch failed validation (emulator fault).")
        return None

    def batch_missing(self, batch_id: str) -> ApiError:
        return ApiError(404, f"Message batch {batch_id} not found.", provider=self.name)

    def batch_json(self, rec: AnthropicBatch, ctx: Ctx, shown_id: str) -> dict:
        # shown_id: an alias_batch fault shows the batch under another id
        done = rec.state == "done"
        status = "ended" if done else ("canceling" if rec.state == "cancel_requested" else "in_progress")
        # Requests count as `processing` until the whole batch has ended; only then do they move
        # to succeeded/errored/canceled/expired (request_counts in
        # https://platform.claude.com/docs/en/api/creating-message-batches).
        counts = rec.counts if done else {"processing": rec.n, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        return {
            "id": shown_id,
            "type": "message_batch",
            "processing_status": status,
            "request_counts": counts,
            "ended_at": rfc3339(rec.ended_at) if done else None,
            "created_at": rfc3339(rec.created),
            "expires_at": rfc3339(rec.created + DAY),
            "cancel_initiated_at": rfc3339(rec.cancel_at),
            "archived_at": None,
            # The SDK uses an absolute results_url verbatim, so build it from the Host the client used.
            "results_url": f"{ctx.base}/v1/messages/batches/{quote(shown_id, safe='')}/results" if done else None,
        }

    def batch_page(self, ctx: Ctx, ids: list[str]) -> Paged:
        """Anthropic's page: ``limit`` ids before ``before_id`` or after ``after_id``."""
        limit = query_int(ctx.q("limit"), 20, 1, 1000)
        before_id, after_id = ctx.q("before_id"), ctx.q("after_id")
        if before_id:
            stop = ids.index(before_id) if before_id in ids else 0
            start = max(0, stop - limit)
            has_more = start > 0
        else:
            start = ids.index(after_id) + 1 if after_id and after_id in ids else (len(ids) if after_id else 0)
            stop = start + limit
            has_more = stop < len(ids)
        return slice(start, stop), lambda data: {"data": data, "has_more": has_more, **first_last(data)}

    def batch_lines(self, rec: AnthropicBatch) -> Iterator[BatchLine]:
        for _number, raw in iter_jsonl(rec.source_path):
            item = json.loads(raw)
            params = item["params"]
            yield BatchLine(item["custom_id"], str(params.get("model") or ""), params)

    def answer_line(self, rec: AnthropicBatch, line: BatchLine) -> Outcome:
        return self.answer(line.model, line.request, line.custom_id, rec.anthropic_version)

    def unprocessed(self, end: End) -> Outcome:
        # Every request of an ended batch has a result: one that never ran is "canceled" or
        # "expired" (MessageBatchCanceledResult / MessageBatchExpiredResult, anthropic
        # types/messages/message_batch_result.py).
        return Outcome("expired" if end == "expired" else "canceled")

    def process(self, rec: BatchRec, limit: int, end: End) -> None:
        assert isinstance(rec, AnthropicBatch)
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        with ResultFile(self, "anthropic-results-") as out:
            for line, outcome in self.outcomes(rec, limit, end):
                counts[{"text": "succeeded", "refusal": "succeeded", "error": "errored"}.get(outcome.kind, outcome.kind)] += 1
                out.write(line, result_line(line.custom_id, line.model, outcome))
        rec.results_path = out.path
        rec.counts = counts

    def cancel_ended(self, rec: AnthropicBatch, batch_id: str) -> ApiError:
        return ApiError(400, f"Batch {batch_id} has already ended and cannot be canceled.")

    def deletable(self, rec: AnthropicBatch, batch_id: str) -> None:
        # A batch can be deleted only once it has ended (provider-apis.md §3.2, `.delete(id)`: "only after `ended`").
        self.core.advance(rec)
        if rec.state != "done":
            raise ApiError(400, f"Batch {batch_id} cannot be deleted while it is still processing; cancel it first.")

    def deleted_answer(self, batch_id: str) -> dict:
        return {"id": batch_id, "type": "message_batch_deleted"}

    def batch_results(self, ctx: Ctx, batch_id: str) -> Resp:
        self.auth(ctx)
        rec = self.batch(batch_id)
        self.core.advance(rec)
        if rec.state != "done" or not rec.results_path:
            raise ApiError(404, f"Results for message batch {batch_id} are not available: the batch has not ended yet.")
        # Served as a generated file (truncate faults apply), but not one of a Files API.
        file_rec = FileRec(rec.id, self.name, rec.results_path, os.path.getsize(rec.results_path), "results.jsonl", "results", rec.created, generated=True)
        return self.core.download(file_rec, "application/x-jsonl")

    # ------------------------------------------------------------------ online

    def online(self, ctx: Ctx) -> Resp:
        self.auth(ctx)
        params = ctx.json()
        model = str(params.get("model") or "") if isinstance(params, dict) else ""
        version = ctx.header("anthropic-version")
        outcome = self.answer_online(ctx, model, "/v1/messages", lambda custom_id: self.answer(model, params, custom_id, version))
        return json_resp(message_body(model, outcome))

    def count_tokens(self, ctx: Ctx) -> Resp:
        """``POST /v1/messages/count_tokens`` (anthropic ``messages.count_tokens``): ``{"input_tokens": N}``."""
        self.auth(ctx)
        params = ctx.json()
        if not isinstance(params, dict) or not isinstance(params.get("messages"), list) or not params.get("model"):
            raise ApiError(400, "model and messages: Field required")
        if not self.core.models.known(self.name, str(params["model"])):
            raise ApiError(404, f"model: {params['model']}")
        return json_resp({"input_tokens": count_input_tokens(prompt_of(params))})

    def model_get(self, ctx: Ctx, model_id: str) -> Resp:
        """``GET /v1/models/{id}`` (anthropic ``models.retrieve``): a ModelInfo with ``max_input_tokens``."""
        self.auth(ctx)
        if not self.core.models.known(self.name, model_id):
            raise ApiError(404, f"model: {model_id}")
        # `capabilities` is required (nullable) by the published spec (ModelInfo.kt in
        # anthropics/anthropic-sdk-java 2.57.0); the emulator does not describe them.
        return json_resp({
            "type": "model", "id": model_id, "display_name": model_id, "created_at": "2026-01-01T00:00:00Z",
            "lifecycle": "active", "max_input_tokens": self.core.windows.get(model_id), "max_tokens": 128000,
            "capabilities": None,
        })


# --------------------------------------------------------------------------- wire shapes


def prompt_of(params: dict) -> str:
    message = last_user(params.get("messages"))
    return text_of(message.get("content"), ("text",)) if isinstance(message, dict) else ""


def error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_envelope(status: int, message: str, request_id: str | None = None) -> dict:
    return {
        "type": "error",
        "error": {"type": error_type(status), "message": message},
        "request_id": request_id or new_id("req_011C", 20),
    }


def message_body(model: str, outcome: Outcome, service_tier: str = "standard") -> dict:
    """A Message (anthropic types/message.py). Refusal: stop_reason "refusal" + stop_details.

    Every field Anthropic's published spec marks required is present, null where it may be
    (the Python SDK types them ``Optional[...] = None``; the Java SDK generated from the same spec
    lists them as required: anthropics/anthropic-sdk-java 2.57.0,
    com/anthropic/models/messages/{Message,Usage,TextBlock}.kt, "The following fields are
    required"). The emulator runs no server tools, no container and no cache."""
    refusal = outcome.kind == "refusal"
    content = [{"type": "text", "text": outcome.text, "citations": None}] if outcome.text else []
    return {
        "id": new_id("msg_01", 22),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "container": None,  # set only when a code-execution container was used
        "stop_reason": "refusal" if refusal else "end_turn",
        "stop_sequence": None,
        "stop_details": {"type": "refusal", "category": None, "explanation": outcome.text} if refusal else None,
        "usage": {
            "input_tokens": outcome.input_tokens,
            "output_tokens": outcome.output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            # Where inference ran: "global" is the default of the inference_geo request parameter
            # (https://platform.claude.com/docs/en/build-with-claude/data-residency).
            "inference_geo": "global",
            "output_tokens_details": {"thinking_tokens": 0},
            "server_tool_use": None,  # nullable: no server tool (web search / fetch) ran
            "service_tier": service_tier,
        },
    }


def result_line(custom_id: str, model: str, outcome: Outcome) -> dict:
    """One results line (anthropic types/messages/message_batch_individual_response.py)."""
    if outcome.kind == "canceled":
        result: dict = {"type": "canceled"}
    elif outcome.kind == "expired":
        result = {"type": "expired"}
    elif outcome.ok:
        result = {"type": "succeeded", "message": message_body(model, outcome, "batch")}
    else:
        result = {"type": "errored", "error": error_envelope(outcome.status, outcome.message)}
    return {"custom_id": custom_id, "result": result}
