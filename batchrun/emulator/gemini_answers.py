"""Gemini's answer objects: generateContent responses, google.rpc.Status errors, the HTTP error envelope.

Each shape is checked in CI against google-genai's own types (``GenerateContentResponse``, which
forbids unknown fields) and Google's REST reference (https://ai.google.dev/api), unknown fields
counted as violations (tests/test_sdk_answers.py). What is accepted or refused is decided in
``gemini.py``.

Two codes, not to be mixed up (https://cloud.google.com/apis/design/errors): an HTTP error body
``{"error": {"code", "message", "status"}}`` carries the HTTP status as ``code`` and the
google.rpc.Code *name* as ``status``; a ``google.rpc.Status`` (a batch result line's or inline
response's ``error``, a long-running operation's ``error``) carries the google.rpc.Code *number*
as ``code`` (https://ai.google.dev/api/batch-mode#Status).
"""

from __future__ import annotations

from .wire import Outcome, new_id

# HTTP status -> (google.rpc.Code number, name), the reverse of the HTTP mapping documented on
# each code in https://github.com/googleapis/googleapis/blob/master/google/rpc/code.proto.
RPC_CODES = {
    400: (3, "INVALID_ARGUMENT"),
    401: (16, "UNAUTHENTICATED"),
    403: (7, "PERMISSION_DENIED"),
    404: (5, "NOT_FOUND"),
    409: (6, "ALREADY_EXISTS"),
    # Google answers an over-large request 400 INVALID_ARGUMENT; 413 is what responders use.
    413: (3, "INVALID_ARGUMENT"),
    429: (8, "RESOURCE_EXHAUSTED"),
    499: (1, "CANCELLED"),
    500: (13, "INTERNAL"),
    501: (12, "UNIMPLEMENTED"),
    503: (14, "UNAVAILABLE"),
    504: (4, "DEADLINE_EXCEEDED"),
    529: (14, "UNAVAILABLE"),  # "overloaded" (Anthropic's 529): Google says 503 UNAVAILABLE
}

# A cancelled long-running operation: "On successful cancellation, the operation is not deleted;
# instead, it becomes an operation with an Operation.error value with a google.rpc.Status.code of
# 1, corresponding to Code.CANCELLED" (google/longrunning/operations.proto, CancelOperation;
# the batches.cancel method of https://ai.google.dev/api/batch-mode).
CANCELLED = {"code": 1, "message": "The batch was cancelled."}


def rpc_code(status: int) -> tuple[int, str]:
    """The google.rpc.Code (number, name) for an HTTP status."""
    return RPC_CODES.get(status, (13, "INTERNAL") if status >= 500 else (9, "FAILED_PRECONDITION"))


def status_name(status: int) -> str:
    return rpc_code(status)[1]


def error_envelope(status: int, message: str, details: list | None = None) -> dict:
    """The HTTP error body: ``code`` is the HTTP status, ``status`` the google.rpc.Code name, and
    the google.rpc.Status ``details`` (ErrorInfo, BadRequest) where the refusal has them."""
    error: dict = {"code": status, "message": message, "status": status_name(status)}
    if details:
        error["details"] = details
    return {"error": error}


def generate_response(model: str, outcome: Outcome) -> dict:
    """A GenerateContentResponse. Refusal: candidate finishReason SAFETY and no content parts."""
    if outcome.kind == "refusal":
        candidate: dict = {
            "finishReason": "SAFETY",
            "index": 0,
            "finishMessage": outcome.text,
            "safetyRatings": [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}],
        }
        output_tokens = 0
    else:
        parts = [{"text": outcome.text}] if outcome.text else []
        candidate = {"content": {"parts": parts, "role": "model"}, "finishReason": "STOP", "index": 0}
        output_tokens = outcome.output_tokens
    usage = {
        "promptTokenCount": outcome.input_tokens,
        "candidatesTokenCount": output_tokens,
        "totalTokenCount": outcome.input_tokens + output_tokens,
        "thoughtsTokenCount": 0,  # the emulator does not think
    }
    return {
        "candidates": [candidate],
        # proto3 JSON omits an int32 at 0 (https://protobuf.dev/programming-guides/json/): an empty
        # answer has no candidatesTokenCount (a captured MAX_TOKENS answer without it:
        # adcontextprotocol/adcp#7359; neuron-core/neuron-ai#443), a model that did not think no
        # thoughtsTokenCount.
        "usageMetadata": {**{k: v for k, v in usage.items() if v},
                          "promptTokensDetails": [{"modality": "TEXT", "tokenCount": outcome.input_tokens}]},
        "modelVersion": model,
        "responseId": new_id("", 22),
    }


def line_error(outcome: Outcome) -> dict:
    """The google.rpc.Status of a failed request in a batch: the google.rpc.Code number of the
    HTTP status the request would have got online (400 -> 3 INVALID_ARGUMENT, 429 -> 8
    RESOURCE_EXHAUSTED, 500 -> 13 INTERNAL, 503 -> 14 UNAVAILABLE ...)."""
    return {"code": rpc_code(outcome.status)[0], "message": outcome.message}
