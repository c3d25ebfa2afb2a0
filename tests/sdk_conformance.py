"""Is an object the emulator answered with one the real provider could have sent?

Two independent checks, both with unknown fields counted as violations:

* **The official SDKs' own types** (openai, anthropic, google-genai as installed): the JSON is
  validated for real (``model_validate_json``, strict for openai/anthropic, never ``construct``),
  then the validated model is walked and every key that landed in a model's extras (openai and
  anthropic models accept extra keys at runtime) is a violation. google-genai models forbid extras
  themselves and are validated by their wire (camelCase) names only.
* **The providers' published schemas**, where they say more than the SDK types do, written down per
  SDK class with the spec they come from (``Published``) and checked by the same walk: OpenAI's
  OpenAPI spec (``OPENAI``: the fields it marks required, required fields it does not let be null,
  SDK fields it does not define, enums narrower than the SDK's; the listing and error envelopes,
  which the SDK has no type for, as closed models); Anthropic's published spec through the fields
  it marks required (``ANTHROPIC_REQUIRED``). The Python SDKs type every nullable field
  ``Optional[...] = None``, so they cannot tell a required null from an absent field. Google's REST
  reference (https://ai.google.dev/api) for the wire objects google-genai has no type for (the
  batch Operation, result-file lines, google.rpc.Status), written below as extra-forbidding models.

tests/answers.py records what an emulator sends and picks these checks for each answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import anthropic.types as at
import openai.types as ot
import pydantic
from anthropic.types.messages import MessageBatch
from anthropic.types.shared import ErrorResponse as AnthropicErrorResponse
from google.genai import _common as gt_common
from google.genai import types as gt
from openai.types import batch as ot_batch
from openai.types import batch_usage as ot_batch_usage
from openai.types import completion_usage as ot_usage
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat import chat_completion as ot_chat
from openai.types.chat import chat_completion_message as ot_message
from openai.types.chat import chat_completion_token_logprob as ot_logprob
from openai.types.responses import Response, ResponseError, ResponseOutputMessage, ResponseOutputRefusal, ResponseOutputText
from openai.types.responses import response as ot_response
from openai.types.responses import response_usage as ot_response_usage
from openai.types.shared import ErrorObject, ResponseFormatText
from pydantic import BaseModel, ConfigDict, Field, ValidationError

# --------------------------------------------------------------------------- SDK types


@dataclass(frozen=True)
class Published:
    """What a provider's published schema says about the SDK's classes beyond their Python types:
    fields it requires (``required``), required fields whose schema is not nullable although the SDK
    types them Optional (``not_null``), SDK fields it does not define (``undefined``), and fields
    whose enum is narrower than the SDK's Literal (``enums``, keyed by class and field)."""

    required: Mapping[type, tuple[str, ...]]
    not_null: Mapping[type, tuple[str, ...]] = field(default_factory=dict)
    undefined: Mapping[type, tuple[str, ...]] = field(default_factory=dict)
    enums: Mapping[tuple[type, str], tuple[str, ...]] = field(default_factory=dict)


NOTHING_PUBLISHED = Published(required={})


def sdk_violations(model: type[BaseModel], data: Any, *, strict: bool = True, published: Published = NOTHING_PUBLISHED) -> list[str]:
    """Validate ``data`` (JSON text or a decoded value) as ``model`` and walk the result: errors,
    keys outside the models' fields and whatever ``published`` says the answer breaks."""
    text = data if isinstance(data, (str, bytes)) else json.dumps(data)
    name = model.__name__
    try:
        if issubclass(model, gt_common.BaseModel):
            # google-genai: wire names only (its models also accept snake_case field names).
            obj = model.model_validate_json(text, strict=strict, by_alias=True, by_name=False)
        else:
            obj = model.model_validate_json(text, strict=strict)
    except ValidationError as exc:
        return [f"{name}.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    out: list[str] = []
    _walk(obj, name, out, published)
    return out


def _walk(value: Any, path: str, out: list[str], published: Published) -> None:
    if isinstance(value, BaseModel):
        cls, present = type(value), value.model_fields_set
        out.extend(f"{path}.{key}: not a field of {cls.__name__}" for key in (value.model_extra or {}))
        out.extend(f"{path}.{name}: missing (required by the published schema)"
                   for name in published.required.get(cls, ()) if name not in present)
        out.extend(f"{path}.{name}: null (the published schema's type is not nullable)"
                   for name in published.not_null.get(cls, ()) if name in present and getattr(value, name) is None)
        out.extend(f"{path}.{name}: not defined by the published schema"
                   for name in published.undefined.get(cls, ()) if name in present)
        for name in cls.model_fields:
            item = getattr(value, name)
            allowed = published.enums.get((cls, name))
            if allowed is not None and item is not None and item not in allowed:
                out.append(f"{path}.{name}: {item!r} is not one of the published schema's {list(allowed)}")
            _walk(item, f"{path}.{name}", out, published)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _walk(item, f"{path}[{i}]", out, published)
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk(item, f"{path}[{key!r}]", out, published)


# --------------------------------------------------------------------------- OpenAI's published spec

# OpenAI's published OpenAPI spec, https://github.com/openai/openai-openapi, openapi.json at commit
# f85dbe223d40e1a31cba812ab2d755c7e98a92a3, components/schemas, by the SDK class that types the same
# object (the schema's name in the comment when it differs). The spec's objects are closed (no
# additionalProperties): an unknown key is a violation, as the SDK walk already reports.

# Each schema's `required` list.
OPENAI_REQUIRED: dict[type, tuple[str, ...]] = {
    # Batch, its request_counts (BatchRequestCounts), errors and usage (inline objects)
    ot.Batch: ("id", "object", "endpoint", "input_file_id", "completion_window", "status", "created_at"),
    ot.BatchRequestCounts: ("total", "completed", "failed"),
    ot_batch.Errors: (),
    ot.BatchError: (),
    ot_batch_usage.BatchUsage: ("input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details", "total_tokens"),
    ot_batch_usage.InputTokensDetails: ("cached_tokens",),
    ot_batch_usage.OutputTokensDetails: ("reasoning_tokens",),
    ot.FileObject: ("id", "object", "bytes", "created_at", "filename", "purpose", "status"),  # OpenAIFile
    ot.FileDeleted: ("id", "object", "deleted"),  # DeleteFileResponse
    # CreateChatCompletionResponse, its choices[] and choices[].logprobs (inline objects)
    ChatCompletion: ("choices", "created", "id", "model", "object"),
    ot_chat.Choice: ("finish_reason", "index", "message", "logprobs"),
    ot_chat.ChoiceLogprobs: ("content", "refusal"),
    ot_logprob.ChatCompletionTokenLogprob: ("token", "logprob", "bytes", "top_logprobs"),
    ot_logprob.TopLogprob: ("token", "logprob", "bytes"),
    ChatCompletionMessage: ("role", "content", "refusal"),  # ChatCompletionResponseMessage
    ot_message.Annotation: ("type", "url_citation"),
    ot_message.AnnotationURLCitation: ("end_index", "start_index", "url", "title"),
    ot_usage.CompletionUsage: ("prompt_tokens", "completion_tokens", "total_tokens"),
    ot_usage.CompletionTokensDetails: (),
    ot_usage.PromptTokensDetails: (),
    # Response (allOf ModelResponseProperties, ResponseProperties and its own properties)
    Response: ("id", "object", "created_at", "error", "incomplete_details", "instructions", "model", "tools", "output",
               "parallel_tool_calls", "metadata", "tool_choice", "temperature", "top_p"),
    ot_response.IncompleteDetails: (),
    ResponseError: ("code", "message"),
    ot_response_usage.ResponseUsage: ("input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details",
                                      "total_tokens"),
    ot_response_usage.InputTokensDetails: ("cached_tokens", "cache_write_tokens"),
    ot_response_usage.OutputTokensDetails: ("reasoning_tokens",),
    ResponseOutputMessage: ("id", "type", "role", "content", "status"),  # OutputMessage
    ResponseOutputText: ("type", "text", "annotations", "logprobs"),  # OutputTextContent
    ResponseOutputRefusal: ("type", "refusal"),  # RefusalContent
    ResponseFormatText: ("type",),
    ot_response.PromptCacheOptions: ("ttl", "mode"),
    ErrorObject: ("type", "message", "param", "code"),  # Error
}

OPENAI = Published(
    required=OPENAI_REQUIRED,
    # Required with a non-nullable schema, typed Optional by the SDK.
    not_null={ResponseOutputText: ("logprobs",)},  # OutputTextContent.logprobs: array
    # SDK fields the spec's properties do not define.
    undefined={
        Response: ("access_programs", "image", "input_transformations", "prompt_cache_diagnostics", "tool_usage"),
        ot_response_usage.InputTokensDetails: ("cache_write_tokens_details",),  # ResponseUsage.input_tokens_details
        ResponseError: ("misalignment", "param", "type"),
        ot_response.PromptCacheOptions: ("comparison_response_id",),
        ErrorObject: ("misalignment",),  # Error
    },
    # Enums narrower than the SDK's Literal.
    enums={
        (ot_response.IncompleteDetails, "reason"): ("max_output_tokens", "content_filter"),  # Response.incomplete_details
        (ResponseError, "code"): (  # ResponseErrorCode
            "server_error", "rate_limit_exceeded", "invalid_prompt", "data_residency_mismatch", "bio_policy",
            "vector_store_timeout", "invalid_image", "invalid_image_format", "invalid_base64_image", "invalid_image_url",
            "image_too_large", "image_too_small", "image_parse_error", "image_content_policy_violation",
            "invalid_image_mode", "image_file_too_large", "unsupported_image_media_type", "empty_image_file",
            "failed_to_download_image", "image_file_not_found"),
        (ot_response.PromptCacheOptions, "ttl"): ("30m",),  # PromptCacheTTLEnum
    },
)


class _ClosedOpenAI(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ListBatchesResponse(_ClosedOpenAI):
    """ListBatchesResponse (the SDK pages it without a type): object, data, has_more required."""

    object: Literal["list"]
    data: list[ot.Batch]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool


class ListFilesResponse(_ClosedOpenAI):
    """ListFilesResponse: all five required; ``object`` is any string there, the ids strings."""

    object: str
    data: list[ot.FileObject]
    first_id: str
    last_id: str
    has_more: bool


class OpenAIErrorResponse(_ClosedOpenAI):
    """ErrorResponse: ``{"error": Error}``."""

    error: ErrorObject


# --------------------------------------------------------------------------- Anthropic's published spec

# Fields Anthropic's published OpenAPI spec marks required (most of them nullable, which the
# Python SDK types as `Optional[...] = None`). Read from the builders Stainless generates from the
# same spec for the Java SDK ("The following fields are required"): anthropics/anthropic-sdk-java
# 2.57.0 (commit 8f5861c8, .stats.yml openapi_spec_url .../anthropic-893a61e9....yml),
# anthropic-java-core/src/main/kotlin/com/anthropic/models/{messages/Usage.kt, messages/Message.kt,
# messages/TextBlock.kt, messages/batches/MessageBatch.kt, ErrorResponse.kt, ...}. The constant
# `type` fields are required by the Python types already.
ANTHROPIC_REQUIRED: dict[type, tuple[str, ...]] = {
    at.Message: ("id", "container", "content", "model", "role", "stop_details", "stop_reason", "stop_sequence", "type", "usage"),
    at.Usage: ("cache_creation", "cache_creation_input_tokens", "cache_read_input_tokens", "inference_geo", "input_tokens",
               "output_tokens", "output_tokens_details", "server_tool_use", "service_tier"),
    at.TextBlock: ("citations", "text", "type"),
    at.CacheCreation: ("ephemeral_1h_input_tokens", "ephemeral_5m_input_tokens"),
    at.ServerToolUsage: ("web_fetch_requests", "web_search_requests"),
    at.RefusalStopDetails: ("category", "explanation", "type"),
    MessageBatch: ("id", "archived_at", "cancel_initiated_at", "created_at", "ended_at", "expires_at", "processing_status",
                   "request_counts", "results_url", "type"),
    AnthropicErrorResponse: ("error", "request_id", "type"),
    at.ModelInfo: ("capabilities", "created_at", "display_name", "id", "max_input_tokens", "max_tokens", "type"),
}
ANTHROPIC = Published(required=ANTHROPIC_REQUIRED)


class AnthropicPage(BaseModel):
    """A list page (anthropic.pagination.SyncPage; BatchListPageResponse in the spec: all four required)."""

    model_config = ConfigDict(extra="allow")
    data: list[MessageBatch]
    has_more: bool
    first_id: str | None
    last_id: str | None


# --------------------------------------------------------------------------- Google's REST reference


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


class RpcStatus(_Closed):
    """google.rpc.Status (https://ai.google.dev/api/batch-mode, Status): ``code`` is a google.rpc.Code
    (0 OK ... 16 UNAUTHENTICATED, google/rpc/code.proto), not an HTTP status."""

    code: int = Field(ge=0, le=16)
    message: str
    details: list[dict[str, Any]] | None = None


class BatchStats(_Closed):
    """BatchStats: int64 counts, as JSON strings (proto3 JSON)."""

    requestCount: str = Field(pattern=r"^\d+$")
    successfulRequestCount: str | None = Field(default=None, pattern=r"^\d+$")
    failedRequestCount: str | None = Field(default=None, pattern=r"^\d+$")
    pendingRequestCount: str | None = Field(default=None, pattern=r"^\d+$")


class InlinedResponse(_Closed):
    response: gt.GenerateContentResponse | None = None
    error: RpcStatus | None = None
    metadata: dict[str, Any] | None = None


class InlinedResponses(_Closed):
    inlinedResponses: list[InlinedResponse]


class BatchOutput(_Closed):
    """GenerateContentBatchOutput: one of responsesFile / inlinedResponses."""

    responsesFile: str | None = None
    inlinedResponses: InlinedResponses | None = None


class BatchOutputAny(BatchOutput):
    at_type: Literal["type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput"] = Field(alias="@type")


class InputConfig(_Closed):
    fileName: str | None = None
    requests: dict[str, Any] | None = None


class GenerateContentBatch(_Closed):
    """GenerateContentBatch (https://ai.google.dev/api/batch-mode#GenerateContentBatch) as an Any
    in Operation.metadata. (``displayName`` is Required of a create request; whether a batch
    created without one is refused is a request rule, not an answer's shape.)"""

    at_type: Literal["type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch"] = Field(alias="@type")
    model: str
    name: str
    displayName: str | None = None
    inputConfig: InputConfig | None = None
    output: BatchOutput | None = None
    createTime: str
    endTime: str | None = None
    updateTime: str
    batchStats: BatchStats
    state: Literal["BATCH_STATE_UNSPECIFIED", "BATCH_STATE_PENDING", "BATCH_STATE_RUNNING", "BATCH_STATE_SUCCEEDED",
                   "BATCH_STATE_FAILED", "BATCH_STATE_CANCELLED", "BATCH_STATE_EXPIRED"]
    priority: str | None = None


class Operation(_Closed):
    """google.longrunning.Operation (https://ai.google.dev/api/batch-mode#Operation)."""

    name: str
    metadata: GenerateContentBatch
    done: bool | None = None
    error: RpcStatus | None = None
    response: BatchOutputAny | None = None

    @pydantic.model_validator(mode="after")
    def _result(self) -> Operation:
        # "If done == false, neither error nor response is set. If done == true, exactly one of
        # error or response can be set" (google/longrunning/operations.proto); a cancelled one
        # has error code 1 CANCELLED (CancelOperation), a failed one says why.
        state = self.metadata.state
        if not self.done and (self.error or self.response):
            raise ValueError("an operation not done has an error or a response")
        if self.error and self.response:
            raise ValueError("an operation has both an error and a response")
        if state == "BATCH_STATE_CANCELLED" and (self.error is None or self.error.code != 1):
            raise ValueError("a cancelled operation has no error with google.rpc.Code 1 CANCELLED")
        if state == "BATCH_STATE_FAILED" and self.error is None:
            raise ValueError("a failed operation has no error")
        ended = state in ("BATCH_STATE_SUCCEEDED", "BATCH_STATE_FAILED", "BATCH_STATE_CANCELLED", "BATCH_STATE_EXPIRED")
        if ended != bool(self.done):
            raise ValueError(f"done is {self.done} in state {state}")
        return self


class ListOperations(_Closed):
    """ListOperationsResponse: proto3 JSON omits an empty ``operations`` (an empty listing is {})."""

    operations: list[Operation] | None = None
    nextPageToken: str | None = None


class ResultLine(_Closed):
    """One line of a batch's responses file (https://ai.google.dev/gemini-api/docs/batch-mode):
    ``key`` and either ``response`` or ``error``."""

    key: str | None = None
    response: gt.GenerateContentResponse | None = None
    error: RpcStatus | None = None


class UploadedFile(_Closed):
    file: gt.File


class GoogleErrorBody(_Closed):
    """The HTTP error JSON of Google APIs (https://cloud.google.com/apis/design/errors#http_mapping):
    here ``code`` is the HTTP status and ``status`` the google.rpc.Code name."""

    code: int
    message: str
    status: Literal["CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
                    "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"]
    details: list[dict[str, Any]] | None = None


class GoogleError(_Closed):
    error: GoogleErrorBody


class GeminiModel(_Closed):
    """The REST Model resource (https://ai.google.dev/api/models#Model); the SDK renames its fields."""

    name: str
    baseModelId: str
    version: str
    displayName: str | None = None
    description: str | None = None
    inputTokenLimit: int | None = None
    outputTokenLimit: int | None = None
    supportedGenerationMethods: list[str] | None = None
    thinking: bool | None = None
    temperature: float | None = None
    maxTemperature: float | None = None
    topP: float | None = None
    topK: int | None = None


class CountTokens(_Closed):
    """CountTokensResponse (https://ai.google.dev/api/tokens#CountTokensResponse)."""

    totalTokens: int
    cachedContentTokenCount: int | None = None
    promptTokensDetails: list[gt.ModalityTokenCount] | None = None
    cacheTokensDetails: list[gt.ModalityTokenCount] | None = None


class Empty(_Closed):
    """google.protobuf.Empty: what delete and cancel answer."""


def gemini_violations(model: type[BaseModel], data: Any) -> list[str]:
    """A Google wire object: lax (int64 counts are JSON strings), closed at every level."""
    out = sdk_violations(model, data, strict=False)
    if not out and model is Operation and isinstance(data, (str, bytes)):
        # The SDK's own reading of the operation must hold too (google.genai.batches).
        from google.genai.batches import _BatchJob_from_mldev

        try:  # the SDK's field names (snake_case), as its own parser builds them
            gt.BatchJob.model_validate(_BatchJob_from_mldev(json.loads(data)))
        except ValidationError as exc:
            out = [f"BatchJob.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    return out


# --------------------------------------------------------------------------- OpenAI result lines


class OpenAILineError(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str
    message: str


class OpenAILineResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status_code: int
    request_id: str
    body: dict[str, Any]


class OpenAILine(BaseModel):
    """A batch output/error file line (https://platform.openai.com/docs/guides/batch, "Retrieve the
    results"; the expired form under "Batch expiration"): the SDKs have no type for it."""

    model_config = ConfigDict(extra="forbid")
    id: str
    custom_id: str
    response: OpenAILineResponse | None
    error: OpenAILineError | None


def openai_violations(model: type[BaseModel], data: Any) -> list[str]:
    """An OpenAI JSON object against the SDK type and the published spec (``OPENAI``)."""
    return sdk_violations(model, data, published=OPENAI)


OPENAI_MODELS: dict[str, type[BaseModel]] = {
    "batch": ot.Batch, "file": ot.FileObject, "file_deleted": ot.FileDeleted, "chat": ChatCompletion, "response": Response,
    "batch_list": ListBatchesResponse, "file_list": ListFilesResponse,
}


def openai_body_violations(kind: str, body: Any) -> list[str]:
    """An OpenAI JSON answer by kind (as tests/answers.py names them)."""
    return openai_violations(OPENAI_MODELS[kind], body)


def openai_error_violations(body: Any) -> list[str]:
    return openai_violations(OpenAIErrorResponse, body)


def openai_line_violations(line: str, endpoint: str) -> list[str]:
    out = sdk_violations(OpenAILine, line)
    if out:
        return out
    obj = json.loads(line)
    if obj["response"] is None:
        return [] if obj["error"] else ["line: neither response nor error"]
    status, body = obj["response"]["status_code"], obj["response"]["body"]
    if obj["error"] is not None:
        return ["line: both response and error"]
    if status != 200:
        return [f"body: {v}" for v in openai_error_violations(body)]
    kind = "response" if endpoint.endswith("/responses") else "chat"
    return [f"body: {v}" for v in openai_body_violations(kind, body)]


def openai_list_violations(kind: str, body: Any) -> list[str]:
    return openai_body_violations(f"{kind}_list", body)


def anthropic_violations(model: type[BaseModel], data: Any) -> list[str]:
    return sdk_violations(model, data, published=ANTHROPIC)
