"""OpenAI's answer objects: what the emulator sends back for a request it accepted, and its error envelope.

Each shape is checked in CI against the openai SDK's own types (``openai.types.chat.ChatCompletion``,
``openai.types.responses.Response``, ``openai.types.shared.ErrorObject``) and OpenAI's published
OpenAPI spec (https://github.com/openai/openai-openapi, ``openapi.json``: ``CreateChatCompletionResponse``,
``Response``, ``ErrorResponse``), unknown fields counted as violations (tests/test_sdk_answers.py).
What is accepted or refused is decided in ``openai.py``.
"""

from __future__ import annotations

import time
from typing import Any

from .wire import Outcome, new_id

_ERRORS = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "not_found"),
    409: ("invalid_request_error", "conflict"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", "server_error"),
    502: ("server_error", "bad_gateway"),
    503: ("server_error", "service_unavailable"),
    504: ("server_error", "timeout"),
    529: ("server_error", "overloaded"),
}


# An error whose code is null although its status has a usual code (``error_envelope(code=NO_CODE)``).
NO_CODE = "-"


def error_envelope(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    err_type, default_code = _ERRORS.get(status, ("server_error" if status >= 500 else "invalid_request_error", None))
    return {"error": {"message": message, "type": err_type, "param": param, "code": None if code == NO_CODE else code or default_code}}


def chat_completion(model: str, outcome: Outcome) -> dict:
    """A ChatCompletion (openai types/chat/chat_completion.py). Refusal: content null + refusal."""
    refusal = outcome.kind == "refusal"
    return {
        "id": new_id("chatcmpl-", 29),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None if refusal else outcome.text,
                    "refusal": outcome.text if refusal else None,
                    "annotations": [],
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": outcome.input_tokens,
            "completion_tokens": outcome.output_tokens,
            "total_tokens": outcome.input_tokens + outcome.output_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_emulator",
    }


def response_body(model: str, body: dict, outcome: Outcome) -> dict:
    """A Response (openai types/responses/response.py; ``Response`` in the published spec), with
    every required field. No top-level ``store``: a request field that neither the SDK type nor the
    published Response schema defines."""
    now = time.time()
    content: list[dict[str, Any]]
    if outcome.kind == "refusal":
        content = [{"type": "refusal", "refusal": outcome.text}]
    else:
        content = [{"type": "output_text", "text": outcome.text, "annotations": [], "logprobs": []}]
    return {
        "id": new_id("resp_", 40),
        "object": "response",
        "created_at": int(now),
        "completed_at": int(now),
        "status": "completed",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": None,
        "model": model,
        "output": [{"type": "message", "id": new_id("msg_", 40), "status": "completed", "role": "assistant", "content": content}],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "service_tier": "default",
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_logprobs": 0,
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": {
            "input_tokens": outcome.input_tokens,
            # Both required by the published schema (ResponseUsage.input_tokens_details); the
            # emulator caches nothing.
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": outcome.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": outcome.input_tokens + outcome.output_tokens,
        },
        "user": None,
        "metadata": body.get("metadata") or {},
    }


def success_body(endpoint: str, body: dict, outcome: Outcome) -> dict:
    model = str(body.get("model") or "")
    if endpoint.endswith("/responses"):
        return response_body(model, body, outcome)
    return chat_completion(model, outcome)


def batch_line(custom_id: Any, outcome: Outcome, endpoint: str, body: dict) -> dict:
    """One output/error-file line: ``{id, custom_id, response: {status_code, request_id, body}, error}``
    (https://platform.openai.com/docs/guides/batch, "Retrieve the results")."""
    line_id = new_id("batch_req_", 32)
    if outcome.kind == "expired":
        # Documented verbatim for requests left over when the completion window ends.
        return {
            "id": line_id,
            "custom_id": custom_id,
            "response": None,
            "error": {"code": "batch_expired", "message": "This request could not be executed before the completion window expired."},
        }
    if outcome.ok:
        status, payload = 200, success_body(endpoint, body, outcome)
    else:
        status, payload = outcome.status, error_envelope(outcome.status, outcome.message, outcome.param, outcome.code)
    return {
        "id": line_id,
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": new_id("req_", 32), "body": payload},
        "error": None,
    }
