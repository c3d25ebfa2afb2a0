"""What the Anthropic Messages API refuses, and how it says so (``anthropic.py`` calls these at the
entry of its handlers, and per line while a batch is processed).

Field sets: the installed anthropic SDK's ``MessageCreateParamsNonStreaming``
(anthropic/types/message_create_params.py) and ``BatchCreateParams`` /
``Request`` (anthropic/types/messages/batch_create_params.py), checked by ``schema.check``,
except ``user_profile_id`` and ``workspace_id``, which the SDK sends as the headers
``anthropic-user-profile-id`` / ``anthropic-workspace-id`` (resources/messages/messages.py), never
in the body.

One field the protocol needs is absent from the type: ``temperature``. SDK 2.x types the API as of
its default version 2026-10-21, which removed ``temperature``, ``top_p`` and ``top_k`` from the
request schema (they fail like any unknown field: "temperature: Extra inputs are not permitted";
docs' model-deprecations "API parameter deprecations", sannuta/news-atom-lite#1); batchrun pins
``anthropic-version: 2023-06-01`` (provider-apis.md §3.6, ARCHITECTURE.md), under which the API
still takes ``temperature`` (a number from 0 to 1: "Anthropic's Messages API only accepts
temperature in 0.0-1.0 and returns HTTP 400 for anything higher", odysseus-dev/odysseus#1721,
vercel/ai#10308). So under 2023-06-01, and only then, ``temperature`` is accepted.

Wording (pydantic's, as the API answers; 400 ``invalid_request_error``): "foo: Extra inputs are
not permitted" and nested "messages.0.content.0.x: Extra inputs are not permitted"
(anthropics/claude-code#4378, #31033, Aider-AI/aider#4404), "max_tokens: Field required"
(provider-apis.md §3.4), "max_tokens: Input should be a valid integer", "temperature: Input should
be less than or equal to 1"; an unknown model: 404 ``not_found_error`` "model: claude-x"
(mattermost/mattermost-plugin-agents#257, anthropics/claude-code#5349); a wrong key: 401
``authentication_error`` "invalid x-api-key" (eyaltoledano/claude-task-master#222,
abi/screenshot-to-code#430). In a batch, params are validated asynchronously: a bad request comes
back as an ``errored`` result, the batch is still created (batch-processing docs); only the
batch body's own shape (``requests[i]`` keys, custom_id) is refused on create.
"""

from __future__ import annotations

from typing import Any

from .schema import Violation, check, dotted
from .wire import Outcome, rejects_temperature

HEADER_FIELDS = ("user_profile_id", "workspace_id")
# "A Message Batch is limited to either 100,000 Message requests or 256 MB in size, whichever is
# reached first" (Message Batches docs, batch limitations); refused on create, in pydantic's words
# as the API's other list bounds ("List should have at least 1 item ...").
MAX_BATCH_REQUESTS = 100_000
PINNED_VERSION = "2023-06-01"  # the version under which temperature is still a request field
RANGES = (("temperature", 0, 1), ("top_p", 0, 1), ("max_tokens", 1, None))

_TYPE_WORDS = {"an integer": "a valid integer", "a number": "a valid number", "a string": "a valid string",
               "a boolean": "a valid boolean", "an object": "a valid dictionary", "an array": "a valid list"}


def params_type() -> Any:
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

    return MessageCreateParamsNonStreaming


def request_type() -> Any:
    from anthropic.types.messages.batch_create_params import Request

    return Request


def describe(v: Violation, prefix: str = "") -> str:
    where = prefix + dotted(v.path, "anthropic")
    if v.kind == "unknown":
        return f"{where}: Extra inputs are not permitted"
    if v.kind == "missing":
        return f"{where}: Field required"
    if v.kind == "value":
        allowed = v.expected.removeprefix("one of ").split(", ")
        return f"{where}: Input should be " + (" or ".join(allowed) if len(allowed) <= 2 else ", ".join(allowed[:-1]) + " or " + allowed[-1])
    expected = v.expected.removeprefix("one of ")
    return f"{where}: Input should be {_TYPE_WORDS.get(expected, expected)}"


def params_refusal(params: Any, version: str, model_known: Any, prefix: str = "") -> Outcome | None:
    """Why the Messages API refuses a request's params (online, or a batch line); None: accepted.
    ``prefix`` names where the params sit in the body (a batch line's are reported as such)."""
    if not isinstance(params, dict):
        return Outcome.error(400, f"{prefix or 'body'}: Input should be a valid dictionary")
    if params.get("stream"):  # not allowed in a batch; online, an emulator limitation
        return Outcome.error(400, f"{prefix}stream: streaming is not supported in batches or by the emulator")
    typed = {k: v for k, v in params.items() if not (k == "temperature" and version == PINNED_VERSION)}
    found = [v for v in check(typed, params_type()) if v.path[:1] not in [(h,) for h in HEADER_FIELDS]]
    found += [v for h in HEADER_FIELDS if h in params for v in [Violation("unknown", (h,))]]
    if version == PINNED_VERSION and "temperature" in params:
        found += check(params["temperature"], float, ("temperature",))
    if found:
        return Outcome.error(400, describe(found[0], prefix))
    if not params["messages"]:
        return Outcome.error(400, f"{prefix}messages: List should have at least 1 item after validation, not 0")
    if (blank := _blank_text(params["messages"])) is not None:
        return Outcome.error(400, f"{prefix}{blank}")
    for name, low, high in RANGES:
        value = params.get(name)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if value < low:
            return Outcome.error(400, f"{prefix}{name}: Input should be greater than or equal to {low}")
        if high is not None and value > high:
            return Outcome.error(400, f"{prefix}{name}: Input should be less than or equal to {high}")
    model = params["model"]
    if not model_known(model):
        return Outcome.error(404, f"model: {model}")
    if "temperature" in params and rejects_temperature(model):
        # Newer models refuse a non-default temperature even under 2023-06-01 (provider-apis.md §3.6).
        return Outcome.error(400, "`temperature` is deprecated for this model.")
    return None


def _blank_text(messages: list[Any]) -> str | None:
    """Why the API refuses a message's empty or whitespace-only text, or None: "messages.N: all
    messages must have non-empty content except for the optional final assistant message" (a
    prefill may be empty; anthropics/claude-code#3196, #6774), "messages: text content blocks must
    be non-empty" and "... must contain non-whitespace text" (anthropics/claude-code#59812,
    #23440; anthropics/anthropic-sdk-python#461), and "messages: final assistant content cannot end with
    trailing whitespace" for a prefill (tailcallhq/forgecode#1872, an api.anthropic.com 400)."""
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        prefill = i == len(messages) - 1 and isinstance(message, dict) and message.get("role") == "assistant"
        if content == "" or content == []:
            if prefill:
                continue
            return f"messages.{i}: all messages must have non-empty content except for the optional final assistant message"
        blocks = [content] if isinstance(content, str) else [b.get("text") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
        for text in blocks:
            if not isinstance(text, str):
                continue
            if prefill and text != text.rstrip():
                return "messages: final assistant content cannot end with trailing whitespace"
            if not text.strip():
                return "messages: text content blocks must " + ("be non-empty" if text == "" else "contain non-whitespace text")
    return None


def batch_create_refusal(body: Any) -> str | None:
    """Why ``POST /v1/messages/batches`` is refused on create (its shape; the params wait)."""
    if not isinstance(body, dict):
        return "body: Input should be a valid dictionary"
    unknown = [k for k in body if k != "requests"]
    if unknown:
        return f"{unknown[0]}: Extra inputs are not permitted"
    requests = body.get("requests")
    if requests is None:
        return "requests: Field required"
    if not isinstance(requests, list):
        return "requests: Input should be a valid list"
    if not requests:
        return "requests: List should have at least 1 item after validation, not 0"
    if len(requests) > MAX_BATCH_REQUESTS:
        return f"requests: List should have at most {MAX_BATCH_REQUESTS} items after validation, not {len(requests)}"
    for i, item in enumerate(requests):
        if not isinstance(item, dict):
            return f"requests.{i}: Input should be a valid dictionary"
        for v in check({k: x for k, x in item.items() if k != "params"}, request_type()):
            if v.path != ("params",):
                return describe(v, f"requests.{i}.")
        if not isinstance(item.get("params"), dict):
            return f"requests.{i}.params: " + ("Field required" if "params" not in item else "Input should be a valid dictionary")
    return None
