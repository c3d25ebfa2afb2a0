"""DashScope (Alibaba Cloud Model Studio) in OpenAI-compatible mode: the OpenAI-compatible provider
the emulator models, at its real base path ``/compatible-mode/v1``.

The OpenAI SDK talks to it unmodified (``base_url=".../compatible-mode/v1"``); the files, batches
and online routes and the objects answered are OpenAI's (``openai.py``), the rules are DashScope's
own. Sources: help.aliyun.com/zh/model-studio/batch-interfaces-compatible-with-openai and
alibabacloud.com/help/en/model-studio/openai-compatible-batch-file-input (the Batch File API:
base URLs ``https://dashscope.aliyuncs.com/compatible-mode/v1`` and
``https://dashscope-intl.aliyuncs.com/compatible-mode/v1``, the models it batches, endpoints
``/v1/chat/completions``, ``/v1/embeddings`` and the test model's ``/v1/chat/ds-test``, a
``completion_window`` of 24h to 336h written in ``h`` or ``d``, 50,000 requests a file, one model
a file), help.aliyun.com/zh/model-studio/qwen-api-via-openai-chat-completions (the request body:
OpenAI's fields plus ``enable_thinking``, ``thinking_budget``, ``top_k``, ``repetition_penalty``,
``enable_search`` ...; temperature in [0, 2), top_p in (0, 1], presence_penalty in [-2, 2], n 1-4)
and alibabacloud.com/help/en/model-studio/error-code (400 ``InvalidParameter``, 401
``InvalidApiKey``, 404 ``ModelNotFound``; in compatible mode the OpenAI envelope with codes
``invalid_parameter_error``, ``invalid_api_key``, ``model_not_found``). Model ids: ``models.py``.

A rule that DashScope's documents do not settle is modelled as strict as OpenAI's: a key outside
OpenAI's request type and DashScope's documented extras is refused. Parameter refusals are worded
as DashScope words its range errors ("<400> InternalError.Algo.InvalidParameter: Range of input
length should be [1, 30720]", the wording the openai adapter recognises as too long); the
completion-window message is modelled on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.message import Message
from typing import Any, ClassVar

from .models import DASHSCOPE_BATCH_MODELS
from .openai import OpenAI, OpenAIBatch
from .openai_rules import batch_create_type, chat_type, describe_violation, line_error, metadata_refusal
from .schema import check
from .wire import Outcome, rejects_temperature

# DashScope's own body fields (qwen-api-via-openai-chat-completions), with their JSON types.
EXTRAS: dict[str, tuple[type, ...]] = {
    "enable_thinking": (bool,), "thinking_budget": (int,), "top_k": (int,), "repetition_penalty": (int, float),
    "enable_search": (bool,), "search_options": (dict,), "translation_options": (dict,),
    "vl_high_resolution_images": (bool,), "enable_code_interpreter": (bool,),
}
ENDPOINTS = ("/v1/chat/completions", "/v1/embeddings", "/v1/chat/ds-test")
# (field, low, high, low inclusive, high inclusive)
RANGES = (("temperature", 0, 2, True, False), ("top_p", 0, 1, False, True), ("presence_penalty", -2, 2, True, True),
          ("max_tokens", 1, None, True, True), ("n", 1, 4, True, True), ("thinking_budget", 1, None, True, True))
WINDOW_RE = re.compile(r"(\d+)([hd])")
PARAM = "<400> InternalError.Algo.InvalidParameter: "


def invalid(message: str, param: str | None = None) -> Outcome:
    return Outcome.error(400, message, param=param, code="invalid_parameter_error")


def body_refusal(body: Any, endpoint: str, model_known: Any) -> Outcome | None:
    """Why DashScope refuses a chat body (online, or a batch line); None: accepted."""
    if not isinstance(body, dict):
        return invalid("The request body must be a JSON object.")
    if body.get("stream") is True:  # an emulator limitation: whole bodies only
        return Outcome.error(400, "The emulator does not support stream=true.", param="stream", code="unsupported_value")
    if not endpoint.endswith("/chat/completions"):
        return Outcome.error(404, f"Invalid URL (POST {endpoint}): the emulator serves DashScope's /chat/completions.", code="invalid_url")
    for name, types in EXTRAS.items():
        if name in body and (not isinstance(body[name], types) or isinstance(body[name], bool) and bool not in types):
            return invalid(f"{PARAM}{name} has an invalid type.", param=name)
    standard = {k: v for k, v in body.items() if k not in EXTRAS}
    found = check(standard, chat_type())
    if found:
        unknown = next((v for v in found if v.kind == "unknown"), found[0])
        said = describe_violation(unknown, top_level_unrecognized=True)
        return invalid(said.message, said.param)
    if not body["messages"]:
        return invalid(f"{PARAM}messages must not be empty.", param="messages")
    for name, low, high, low_in, high_in in RANGES:
        value = body.get(name)
        if value is None or isinstance(value, bool):
            continue
        below = low is not None and (value < low if low_in else value <= low)
        above = high is not None and (value > high if high_in else value >= high)
        if below or above:
            interval = f"{'[' if low_in else '('}{low}, {'' if high is None else high}{']' if high_in else ')'}"
            return invalid(f"{PARAM}Range of {name} should be {interval}", param=name)
    model = body["model"]
    if not model_known(model):
        return Outcome.error(404, f"The model `{model}` does not exist or you do not have access to it.", code="model_not_found")
    if "temperature" in body and rejects_temperature(model):
        return invalid(f"{PARAM}temperature is not supported by {model}; leave it out.", param="temperature")
    return None


def window_hours(window: Any) -> int | None:
    found = WINDOW_RE.fullmatch(window) if isinstance(window, str) else None
    if not found:
        return None
    return int(found.group(1)) * (24 if found.group(2) == "d" else 1)


def batch_create_refusal(body: Any) -> Outcome | None:
    """Why DashScope refuses ``POST /batches``: OpenAI's BatchCreateParams, but DashScope's own
    endpoints and a completion_window of 24h to 336h (``h`` or ``d``)."""
    if not isinstance(body, dict):
        return invalid("The request body must be a JSON object.")
    found = [v for v in check(body, batch_create_type()) if not (v.kind == "value" and v.path in (("endpoint",), ("completion_window",)))]
    if found:
        said = describe_violation(found[0], top_level_unrecognized=True)
        return invalid(said.message, said.param)
    if body["endpoint"] not in ENDPOINTS:
        return invalid(f"{PARAM}endpoint {body['endpoint']!r} is not supported; use one of {', '.join(ENDPOINTS)}.", param="endpoint")
    if body["endpoint"] != "/v1/chat/completions":  # an emulator limitation
        return invalid(f"The emulator serves DashScope's /v1/chat/completions batches only, not {body['endpoint']}.", param="endpoint")
    hours = window_hours(body["completion_window"])
    if hours is None or not 24 <= hours <= 336:
        return invalid(f"{PARAM}completion_window should be between 24h and 336h (1d to 14d), "
                       f"got {body['completion_window']!r}.", param="completion_window")
    return metadata_refusal(body.get("metadata"))


def key_refusal(key: str) -> Outcome:
    return Outcome.error(401, "Incorrect API key provided. ", code="invalid_api_key")


@dataclass
class DashScopeBatch(OpenAIBatch):
    provider: ClassVar[str] = "dashscope"


class DashScope(OpenAI):
    """DashScope's OpenAI-compatible mode under /compatible-mode/v1."""

    name = "dashscope"
    prefix = "/compatible-mode/v1"
    batch_cls = DashScopeBatch
    refuse_create = staticmethod(batch_create_refusal)
    refuse_key = staticmethod(key_refusal)

    def refuse(self, body: Any, endpoint: str) -> Outcome | None:
        return body_refusal(body, endpoint, lambda model: self.core.models.known(self.name, model))

    def refuse_line(self, line: dict, number: int, endpoint: str, first_model: str | None) -> dict | None:
        problem = line_error(line, number, endpoint, first_model)
        model = line["body"].get("model")
        if problem is None and isinstance(model, str) and model not in DASHSCOPE_BATCH_MODELS and not self.core.models.is_added(model):
            # The Batch File API batches only the models it lists (one model a file).
            problem = {"code": "model_not_found", "message": f"The model `{model}` is not supported by the Batch API.",
                       "param": "body.model", "line": number}
        return problem

    def looks_like(self, path: str, headers: Message, query: dict[str, list[str]]) -> bool:
        return path.startswith(self.prefix + "/")
