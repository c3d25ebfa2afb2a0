"""What the OpenAI API refuses, and how it says so (the emulator's ``openai.py`` calls these at the
entry of its handlers; ``dashscope_rules.py`` adapts them to DashScope's compatible mode).

Field sets are the installed openai SDK's request types, generated from OpenAI's API spec:
``CompletionCreateParamsNonStreaming`` (types/chat/completion_create_params.py),
``ResponseCreateParamsNonStreaming`` (types/responses/response_create_params.py) and
``BatchCreateParams`` (types/batch_create_params.py), checked by ``schema.check``. How each
refusal is worded (all 400 ``invalid_request_error`` unless said):

* an unknown top-level argument of Chat Completions: "Unrecognized request argument supplied:
  foo" (plural with several: "Unrecognized request arguments supplied: maxTokens,
  responseFormat"), param and code null (openai/openai-python#1354,
  davidmigloz/langchain_dart#712, namankhurpia/Easy-open-ai#38);
* an unknown key anywhere else (nested, and any level of the Responses API): "Unknown
  parameter: 'input[0].bogus'.", param the path, code ``unknown_parameter`` (public captures of
  ``messages[0].tool_calls`` and ``input[0].namespace`` refusals);
* a wrong type: "Invalid type for 'messages[0].content': expected one of a string or array of
  objects, but got an object instead.", code ``invalid_type``;
* a value outside an enum: "Invalid value: 'usr'. Supported values are: 'system', 'user' ...",
  code ``invalid_value``;
* a missing field: "Missing required parameter: 'messages'.", code ``missing_required_parameter``;
* out of range: "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16,
  but got 1 instead.", code ``integer_below_min_value`` (and ``decimal_above_max_value`` ...);
  the ranges are the API reference's: temperature 0-2, top_p 0-1, frequency/presence penalty
  -2..2 (developers.openai.com/api/reference, chat/create and responses/create);
* an unknown model: 404 "The model `gpt-x` does not exist or you do not have access to it.",
  code ``model_not_found`` (Aider-AI/aider#2030, shobrook/wut#14);
* ``max_tokens`` on a reasoning model (gpt-5 and later, the o-series): "Unsupported parameter:
  'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", param
  ``max_tokens``, code ``unsupported_parameter`` (gpt-5: griptape-ai/ComfyUI-Griptape#312,
  FoundationAgents/MetaGPT#1880; gpt-5.1: fish2018/YPrompt#26; gpt-5.4 at api.openai.com:
  agentscope-ai/AgentTeams#334; gpt-5.5: Netw0rkNoob/VulnClaw#6; the SDK's own docstring says
  max_tokens "is not compatible with o-series models", types/chat/completion_create_params.py);
* a wrong key: 401 "Incorrect API key provided: sk-proj-****MxYA. You can find your API key at
  https://platform.openai.com/account/api-keys.", code ``invalid_api_key`` (the key masked to its
  first 8 and last 4 characters; continuedev/continue#9634, chatanywhere/GPT_API_free#62).

Batches (developers.openai.com/api/docs/guides/batch): ``completion_window`` is ``Literal["24h"]``;
a line's ``url`` must equal the batch's ``endpoint`` and each file holds one model, else the batch
fails validation with ``errors.data`` entries ``{code, line, message, param}`` whose codes are
``invalid_json_line``, ``duplicate_custom_id``, ``url_mismatch``, ``model_mismatch``,
``empty_file``, ``too_many_tasks`` (stdapi-ai/stdapi.ai#240 lists the documented codes); a body the
endpoint refuses comes back per line in the error file (ProjectTech4DevAI/kaapi-backend#723: a
batch whose 9 requests all failed ends ``completed`` with an error file).

Where only the class of a refusal is documented (the codes above, ``empty_array``, the metadata
limits of the SDK docstring), the message text is modelled on OpenAI's own phrasing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from ..protocol.caps import normalise_model
from .schema import Violation, check, dotted, json_type
from .wire import Outcome, rejects_temperature

MAX_REQUESTS = 50_000  # per batch (Batch API guide, "Rate limits")


def chat_type() -> Any:
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

    return CompletionCreateParamsNonStreaming


def responses_type() -> Any:
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

    return ResponseCreateParamsNonStreaming


def batch_create_type() -> Any:
    from openai.types.batch_create_params import BatchCreateParams

    return BatchCreateParams


# Ranges from the API reference: (field, minimum, maximum, integer?). A budget below 16 is
# refused by the Responses API (a 1-token probe must ask for 16).
CHAT_RANGES = (("temperature", 0, 2, False), ("top_p", 0, 1, False), ("frequency_penalty", -2, 2, False),
               ("presence_penalty", -2, 2, False), ("max_completion_tokens", 1, None, True), ("max_tokens", 1, None, True),
               ("n", 1, 128, True), ("top_logprobs", 0, 20, True))
RESPONSES_RANGES = (("temperature", 0, 2, False), ("top_p", 0, 1, False), ("max_output_tokens", 16, None, True),
                    ("top_logprobs", 0, 20, True))


def describe_violation(v: Violation, *, top_level_unrecognized: bool) -> Outcome:
    """One schema violation as OpenAI words it."""
    where = dotted(v.path)
    if v.kind == "unknown":
        if top_level_unrecognized and len(v.path) == 1:
            return Outcome.error(400, f"Unrecognized request argument supplied: {where}")
        return Outcome.error(400, f"Unknown parameter: '{where}'.", param=where, code="unknown_parameter")
    if v.kind == "missing":
        return Outcome.error(400, f"Missing required parameter: '{where}'.", param=where, code="missing_required_parameter")
    if v.kind == "value":
        allowed = v.expected.removeprefix("one of ")
        return Outcome.error(400, f"Invalid value: {v.got}. Supported values are: {allowed}.", param=where, code="invalid_value")
    return Outcome.error(400, f"Invalid type for '{where}': expected {v.expected}, but got {article(v.got)} instead.",
                         param=where, code="invalid_type")


def article(json_type: str) -> str:
    return f"an {json_type}" if json_type[:1] in "aeiou" else f"a {json_type}"


def schema_refusal(body: dict, tp: Any, *, top_level_unrecognized: bool) -> Outcome | None:
    """The first refusal of a body against its SDK type; unknown top-level arguments first, all named."""
    found = check(body, tp)
    if not found:
        return None
    unknown_top = sorted(v.key for v in found if v.kind == "unknown" and len(v.path) == 1)
    if top_level_unrecognized and len(unknown_top) > 1:
        return Outcome.error(400, "Unrecognized request arguments supplied: " + ", ".join(unknown_top))
    first = next((v for v in found if v.kind == "unknown" and len(v.path) == 1), found[0])
    return describe_violation(first, top_level_unrecognized=top_level_unrecognized)


def range_refusal(body: dict, ranges: tuple) -> Outcome | None:
    """A number outside the API reference's range, as OpenAI words it."""
    for name, low, high, integer in ranges:
        value = body.get(name)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        kind = "integer" if integer else "decimal"
        if low is not None and value < low:
            return Outcome.error(400, f"Invalid '{name}': {kind} below minimum value. Expected a value >= {low}, but got {value} instead.",
                                 param=name, code=f"{kind}_below_min_value")
        if high is not None and value > high:
            return Outcome.error(400, f"Invalid '{name}': {kind} above maximum value. Expected a value <= {high}, but got {value} instead.",
                                 param=name, code=f"{kind}_above_max_value")
    return None


def body_refusal(body: Any, endpoint: str, model_known: Any) -> Outcome | None:
    """Why OpenAI refuses a Chat Completions or Responses body (online, or a batch line); None: accepted.

    ``model_known(model) -> bool`` says whether the provider serves the model."""
    if not isinstance(body, dict):
        return Outcome.error(400, "We could not parse the JSON body of your request: expected an object.", code="invalid_request_body")
    if body.get("stream") is True:
        # An emulator limitation, not an API rule: it answers whole bodies only.
        return Outcome.error(400, "The emulator does not support stream=true.", param="stream", code="unsupported_value")
    responses = endpoint.endswith("/responses")
    if not responses and not endpoint.endswith("/chat/completions"):
        return Outcome.error(400, f"Invalid URL (POST {endpoint})", code="invalid_url")
    tp = responses_type() if responses else chat_type()
    refused = schema_refusal(body, tp, top_level_unrecognized=not responses)
    if refused is not None:
        return refused
    if not responses and not body["messages"]:
        return Outcome.error(400, "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
                             param="messages", code="empty_array")
    if responses and body.get("input") in (None, "", []):
        return Outcome.error(400, "Missing required parameter: 'input'.", param="input", code="missing_required_parameter")
    refused = range_refusal(body, RESPONSES_RANGES if responses else CHAT_RANGES)
    if refused is not None:
        return refused
    model = str(body.get("model") or "")
    if not model:
        return Outcome.error(400, "you must provide a model parameter", param="model", code="missing_required_parameter")
    if not model_known(model):
        return Outcome.error(404, f"The model `{model}` does not exist or you do not have access to it.", code="model_not_found")
    if not responses and "max_tokens" in body and rejects_max_tokens(model):
        return Outcome.error(400, "Unsupported parameter: 'max_tokens' is not supported with this model. "
                             "Use 'max_completion_tokens' instead.", param="max_tokens", code="unsupported_parameter")
    # Reasoning models reject temperature with this 400 (type invalid_request_error, code
    # unsupported_value, param "temperature"); only the default value 1 is accepted.
    if "temperature" in body and rejects_temperature(model):
        return Outcome.error(400, f"Unsupported value: 'temperature' does not support {body['temperature']} with this model. "
                             "Only the default (1) value is supported.", param="temperature", code="unsupported_value")
    return None


def rejects_max_tokens(model: str) -> bool:
    """OpenAI's reasoning models (gpt-5 and later, o1, o3, o4...) take only max_completion_tokens
    (see the module docstring); dated snapshots too."""
    return re.match(r"(gpt-([5-9]|\d\d)|o\d)([.-]|$)", normalise_model(model)) is not None


def batch_create_refusal(body: Any) -> Outcome | None:
    """Why ``POST /v1/batches`` is refused (BatchCreateParams: endpoint and completion_window are
    Literals; metadata at most 16 pairs, keys <= 64 and values <= 512 characters)."""
    if not isinstance(body, dict):
        return Outcome.error(400, "We could not parse the JSON body of your request: expected an object.", code="invalid_request_body")
    refused = schema_refusal(body, batch_create_type(), top_level_unrecognized=True)
    if refused is not None:
        return refused
    endpoint = body["endpoint"]
    if not (endpoint.endswith("/chat/completions") or endpoint.endswith("/responses")):
        # An emulator limitation: the other endpoints exist on the real API.
        return Outcome.error(400, f"Invalid value for 'endpoint': {endpoint!r}. The emulator supports /v1/chat/completions and /v1/responses.",
                             param="endpoint", code="invalid_value")
    if isinstance(body.get("output_expires_after"), dict):
        refused = expires_after_refusal(body["output_expires_after"], "output_expires_after")
        if refused is not None:
            return refused
    return metadata_refusal(body.get("metadata"))


def expires_after_refusal(policy: dict, name: str) -> Outcome | None:
    """An expiration policy (files.create's ``expires_after``, batches.create's
    ``output_expires_after``): ``anchor`` is Required and only "created_at", ``seconds`` Required and
    "between 3600 (1 hour) and 2592000 (30 days)" (openai-python types/file_create_params.py
    ExpiresAfter, types/batch_create_params.py OutputExpiresAfter; the API reference gives "format:
    int64, minimum: 3600, maximum: 2592000")."""
    for key in ("anchor", "seconds"):
        if key not in policy:
            return Outcome.error(400, f"Missing required parameter: '{name}.{key}'.", param=f"{name}.{key}", code="missing_required_parameter")
    if policy["anchor"] != "created_at":
        return Outcome.error(400, f"Invalid value: {policy['anchor']!r}. Supported values are: 'created_at'.", param=f"{name}.anchor",
                             code="invalid_value")
    seconds = policy["seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        return Outcome.error(400, f"Invalid type for '{name}.seconds': expected an integer, but got {article(json_type(seconds))} instead.",
                             param=f"{name}.seconds", code="invalid_type")
    return range_refusal({f"{name}.seconds": seconds}, ((f"{name}.seconds", 3600, 2592000, True),))


def metadata_refusal(metadata: Any) -> Outcome | None:
    if not isinstance(metadata, dict):
        return None
    if len(metadata) > 16:
        return Outcome.error(400, f"Invalid 'metadata': too many properties. Expected an object with at most 16 properties, but got {len(metadata)} instead.",
                             param="metadata", code="object_above_max_properties")
    for key, value in metadata.items():
        if len(key) > 64:
            return Outcome.error(400, f"Invalid 'metadata': key {key[:20]!r}... is longer than 64 characters.", param="metadata", code="invalid_value")
        if isinstance(value, str) and len(value) > 512:
            return Outcome.error(400, f"Invalid 'metadata.{key}': string too long. Expected a string with maximum length 512, but got {len(value)} instead.",
                                 param=f"metadata.{key}", code="string_above_max_length")
    return None


def line_error(line: Any, number: int, endpoint: str, first_model: str | None) -> dict | None:
    """A batch input line that fails the batch's validation, as an ``errors.data`` entry."""
    # "method": "The HTTP method to be used for the request. Currently only POST is supported" (the
    # batch input's reference); a line without it fails the batch, the API saying "missing
    # required 'method'" (567-labs/instructor#1119, #1120); the wording is OpenAI's usual.
    method = line.get("method")
    if method is None:
        return {"code": "missing_required_parameter", "message": "Missing required parameter: 'method'.", "param": "method", "line": number}
    if method != "POST":
        return {"code": "invalid_value", "message": f"Invalid value: {method!r}. Supported values are: 'POST'.", "param": "method", "line": number}
    if line.get("url") != endpoint:
        return {"code": "url_mismatch", "message": f"The url {line.get('url')!r} of this request does not match the batch's endpoint {endpoint!r}.",
                "param": "url", "line": number}
    model = line["body"].get("model")
    if first_model is not None and model != first_model:
        return {"code": "model_mismatch", "message": f"The model {model!r} of this request differs from {first_model!r}: "
                "each input file can only include requests to a single model.", "param": "body.model", "line": number}
    return None


def scan_lines(lines: Iterable[tuple[int, bytes]], endpoint: str, refuse_line: Callable[[dict, int, str, str | None], dict | None],
               accepted: Callable[[dict, Any, Any], None]) -> tuple[int, list[dict]]:
    """Validate a batch input file in one streaming pass: (requests, ``errors.data`` entries).
    ``accepted(body, custom_id, url)`` is called for each parseable line."""
    invalid: list[dict] = []
    seen: set = set()
    first_model: str | None = None
    n = 0
    for number, raw in lines:
        try:
            line = json.loads(raw)
            if not isinstance(line, dict) or not isinstance(line.get("body"), dict):
                raise ValueError
        except ValueError:
            invalid.append({"code": "invalid_json_line", "message": "This line is not parseable as valid JSON.", "param": None, "line": number})
            continue
        n += 1
        custom_id = line.get("custom_id")
        if custom_id in seen:
            invalid.append({"code": "duplicate_custom_id", "message": f"The custom_id {custom_id!r} is duplicated.", "param": "custom_id", "line": number})
        seen.add(custom_id)
        problem = refuse_line(line, number, endpoint, first_model)
        if problem is not None:
            invalid.append(problem)
        if first_model is None and isinstance(line["body"].get("model"), str):
            first_model = line["body"]["model"]
        accepted(line["body"], custom_id, line.get("url"))
    if not n and not invalid:
        invalid.append({"code": "empty_file", "message": "The input file is empty.", "param": None, "line": None})
    if n > MAX_REQUESTS:
        invalid.append({"code": "too_many_tasks", "message": f"The batch input file holds {n} requests; the limit is {MAX_REQUESTS}.",
                        "param": None, "line": None})
    return n, invalid


def key_refusal(key: str) -> Outcome:
    return Outcome.error(401, f"Incorrect API key provided: {masked_key(key)}. You can find your API key at "
                         "https://platform.openai.com/account/api-keys.", code="invalid_api_key")


def masked_key(key: str) -> str:
    """A key as OpenAI's 401 quotes it: the first 8 and last 4 characters (a short one whole)."""
    return key if len(key) <= 12 else key[:8] + "*" * (len(key) - 12) + key[-4:]
