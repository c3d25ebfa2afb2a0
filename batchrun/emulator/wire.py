"""Provider wire shapes: prompts in, usage, validation, responses and error envelopes out.

Everything here is pure (no I/O, no state). Facts come from the providers' public API references
(linked where a shape is built) and the SDK types named in each comment.

Usage accounting (deterministic; the same for every provider):

* input tokens  = ceil(non-CJK characters of the prompt / 4) + number of CJK characters
  (U+4E00-U+9FFF), where the prompt is the text of the single user turn;
* output tokens = ceil(len(answer) / 4) (a refusal counts its text; Gemini's blocked candidate
  carries no text and reports 0).
"""

from __future__ import annotations

import math
import re
import secrets
import string
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

# Models that reject `temperature` outright (OpenAI reasoning models, newer Claude models, Kimi
# K2.6 on its OpenAI-compatible API). Checked by exact model name.
REJECTS_TEMPERATURE = {"gpt-5.4", "claude-opus-4.6", "claude-opus-4.8", "o1", "o3", "o4-mini", "kimi-k2.6"}


GARBAGE_ANSWER = "I think it is fine."

_CJK_RE = re.compile(r"[\u4e00-\u9fff]")
_ALNUM = string.ascii_lowercase + string.digits
_B62 = string.ascii_letters + string.digits


# --------------------------------------------------------------------------- ids and times


def new_id(prefix: str = "", n: int = 24, alphabet: str = _B62) -> str:
    return prefix + "".join(secrets.choice(alphabet) for _ in range(n))


def lower_id(n: int) -> str:
    """Gemini-style id: lowercase alphanumerics only (no '-', see SDK t_file_name's [a-z0-9]+)."""
    return new_id("", n, _ALNUM)


def rfc3339(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def window_seconds(window: str) -> int:
    """'24h' / '14d' / '90m' -> seconds (OpenAI-compatible providers accept other windows); default 24 h."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", window or "")
    if not m:
        return 86400
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


# --------------------------------------------------------------------------- usage


def count_input_tokens(text: str) -> int:
    cjk = len(text) - len(_CJK_RE.sub("", text))  # C-speed count, no list of matches
    return math.ceil((len(text) - cjk) / 4) + cjk


def count_output_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


# --------------------------------------------------------------------------- outcomes


@dataclass
class Outcome:
    """What happened to one request. ``kind``: text | refusal | error | expired | canceled."""

    kind: str
    text: str = ""
    status: int = 200
    message: str = ""
    param: str | None = None
    code: str | None = None  # OpenAI error code override (e.g. unsupported_value)
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def ok(self) -> bool:
        return self.kind in ("text", "refusal")

    @classmethod
    def error(cls, status: int, message: str, param: str | None = None, code: str | None = None) -> "Outcome":
        return cls("error", status=status, message=message, param=param, code=code)


# --------------------------------------------------------------------------- prompts


def text_of(content: Any, text_types: tuple[str, ...]) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type", "text") in text_types and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "\n".join(parts)
    return ""


def first_user(messages: Any) -> Any:
    if not isinstance(messages, list) or not messages:
        return None
    for message in messages:
        if isinstance(message, dict) and message.get("role", "user") == "user":
            return message
    return messages[0]


def openai_prompt(body: dict, endpoint: str) -> str:
    if endpoint.endswith("/responses"):
        value = body.get("input")
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            item = first_user(value)
            if isinstance(item, dict):
                return text_of(item.get("content"), ("input_text", "text", "output_text"))
            if isinstance(item, str):
                return item
        return ""
    message = first_user(body.get("messages"))
    return text_of(message.get("content"), ("text",)) if isinstance(message, dict) else ""


# --------------------------------------------------------------------------- validation
# Validation runs per request inside batches (the providers validate batch lines asynchronously:
# create succeeds and the line comes back as an error) and synchronously for online calls.


def validate_openai(body: Any, endpoint: str) -> Outcome | None:
    if not isinstance(body, dict):
        return Outcome.error(400, "The request body must be a JSON object.", code="invalid_request_body")
    model = body.get("model")
    if not model:
        return Outcome.error(400, "you must provide a model parameter", param="model", code="missing_required_parameter")
    if endpoint.endswith("/responses"):
        if body.get("input") in (None, "", []):
            return Outcome.error(400, "Missing required parameter: 'input'.", param="input", code="missing_required_parameter")
    elif endpoint.endswith("/chat/completions"):
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return Outcome.error(
                400, "Missing required parameter: 'messages'.", param="messages", code="missing_required_parameter"
            )
    else:
        return Outcome.error(400, f"Invalid URL (POST {endpoint})", code="invalid_url")
    if body.get("stream"):
        return Outcome.error(400, "The emulator does not support stream=true.", param="stream", code="unsupported_value")
    # Reasoning models reject temperature with this 400 (type invalid_request_error, code
    # unsupported_value, param "temperature"); only the default value 1 is accepted.
    if "temperature" in body and model in REJECTS_TEMPERATURE:
        return Outcome.error(
            400,
            f"Unsupported value: 'temperature' does not support {body['temperature']} with this model. "
            "Only the default (1) value is supported.",
            param="temperature",
            code="unsupported_value",
        )
    return None


# --------------------------------------------------------------------------- error envelopes

_OPENAI_ERRORS = {
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

def openai_error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    err_type, default_code = _OPENAI_ERRORS.get(status, ("server_error" if status >= 500 else "invalid_request_error", None))
    return {"error": {"message": message, "type": err_type, "param": param, "code": code or default_code}}


# --------------------------------------------------------------------------- OpenAI bodies


def openai_chat_completion(model: str, outcome: Outcome) -> dict:
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


def openai_response(model: str, body: dict, outcome: Outcome) -> dict:
    """A Response (openai types/responses/response.py), with every required field."""
    now = time.time()
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
        "output": [
            {
                "type": "message",
                "id": new_id("msg_", 40),
                "status": "completed",
                "role": "assistant",
                "content": content,
            }
        ],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "service_tier": "default",
        "store": bool(body.get("store", True)),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_logprobs": 0,
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": {
            "input_tokens": outcome.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": outcome.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": outcome.input_tokens + outcome.output_tokens,
        },
        "user": None,
        "metadata": body.get("metadata") or {},
    }


def openai_success_body(endpoint: str, body: dict, outcome: Outcome) -> dict:
    model = str(body.get("model") or "")
    if endpoint.endswith("/responses"):
        return openai_response(model, body, outcome)
    return openai_chat_completion(model, outcome)


def openai_batch_line(custom_id: Any, outcome: Outcome, endpoint: str, body: dict) -> dict:
    """One output/error-file line: ``{id, custom_id, response: {status_code, request_id, body}, error}``
    (https://platform.openai.com/docs/guides/batch, "Retrieve the results")."""
    line_id = new_id("batch_req_", 32)
    if outcome.kind == "expired":
        # Documented verbatim for requests left over when the completion window ends.
        return {
            "id": line_id,
            "custom_id": custom_id,
            "response": None,
            "error": {
                "code": "batch_expired",
                "message": "This request could not be executed before the completion window expired.",
            },
        }
    if outcome.ok:
        status, payload = 200, openai_success_body(endpoint, body, outcome)
    else:
        status, payload = outcome.status, openai_error_body(outcome.status, outcome.message, outcome.param, outcome.code)
    return {
        "id": line_id,
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": new_id("req_", 32), "body": payload},
        "error": None,
    }


# --------------------------------------------------------------------------- Anthropic bodies


# --------------------------------------------------------------------------- Gemini bodies


