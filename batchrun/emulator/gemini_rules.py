"""What the Gemini Developer API refuses, and how it says so (``gemini.py`` calls these at the entry
of its handlers, and per line while a batch is processed).

The body of ``models/{m}:generateContent`` is a ``GenerateContentRequest`` in proto-JSON:
``contents``, ``systemInstruction``, ``generationConfig``, ``safetySettings``, ``tools``,
``toolConfig``, ``cachedContent``, ``labels``, ``serviceTier``, ``store`` (what google-genai's
``_GenerateContentParameters_to_mldev`` / ``_GenerateContentConfig_to_mldev`` in
google/genai/models.py put in a Gemini API request), each field also under its snake_case name
(proto-JSON accepts both). The nested messages are google-genai's own pydantic types
(``types.Content``, ``types.GenerationConfig``, ``types.SafetySetting``, ``types.Tool`` ...,
``extra="forbid"``), except what the same converter refuses for the Gemini API
(``routing_config``, ``model_selection_config``, ``audio_timestamp``: Vertex only).

Wording (400 ``INVALID_ARGUMENT`` unless said), from real answers:

* an unknown field: 'Invalid JSON payload received. Unknown name "foo": Cannot find field.',
  nested 'Invalid JSON payload received. Unknown name "responseModalities" at
  \\'generation_config\\': Cannot find field.' (the path in proto field names), one line per
  unknown field, with ``google.rpc.BadRequest`` ``fieldViolations`` in ``details``
  (fishjar/kiss-translator#256, Laisky/one-api#272, musistudio/claude-code-router#187);
* a wrong type: "Invalid value at 'generation_config.max_output_tokens' (TYPE_INT32), \\"abc\\""
  (proto-JSON's parse error);
* out of range or missing: "* GenerateContentRequest.contents: contents is not specified" (the
  API's field-validation form); temperature is 0.0-2.0 (ai.google.dev/api/generate-content
  GenerationConfig; langchain-ai/langchain-google#781), topP 0-1, maxOutputTokens and
  candidateCount at least 1 (a count of tokens or candidates to generate; the range messages
  are modelled on the field-validation form above);
* a content's role other than "user" or "model" (an OpenAI-style "assistant" or "system"): "Please
  use a valid role: user, model." (ai.google.dev/api/caching#Content: "Must be either 'user' or
  'model'"; the answer in langbot-app/LangBot#1486, langgenius/dify-official-plugins#566,
  router-for-me/CLIProxyAPI#2791). A role left out is accepted (the docs' own curl examples send
  none);
* an unknown model: 404 ``NOT_FOUND`` "models/gemini-x is not found for API version v1beta, or is
  not supported for generateContent. Call ListModels to see the list of available models and
  their supported methods." (found in many public logs);
* a wrong key: 400 ``INVALID_ARGUMENT`` "API key not valid. Please pass a valid API key." with an
  ``ErrorInfo`` detail, reason ``API_KEY_INVALID`` (can1357/oh-my-pi#449, continuedev/continue#10290).

In a batch with file input each line is its own request: a line the API refuses comes back as that
line's error (``google.rpc.Status``), the others run (ai.google.dev/gemini-api/docs/batch-mode);
inline requests are part of the create body, so one that does not parse fails the create.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from .schema import Violation, check, json_type
from .wire import Outcome

VERTEX_ONLY = ("routing_config", "routingConfig", "model_selection_config", "modelSelectionConfig", "audio_timestamp", "audioTimestamp")
RANGES = (("temperature", 0, 2), ("topP", 0, 1), ("top_p", 0, 1), ("maxOutputTokens", 1, None), ("max_output_tokens", 1, None),
          ("candidateCount", 1, None), ("candidate_count", 1, None))
_PROTO_TYPES = {"an integer": "TYPE_INT32", "a number": "TYPE_FLOAT", "a string": "TYPE_STRING", "a boolean": "TYPE_BOOL"}
LINE_KEYS = ("key", "request", "metadata")


@functools.cache
def request_fields() -> dict[str, Any]:
    """The GenerateContentRequest fields the Gemini API takes, by wire name (camel and snake)."""
    from google.genai import types

    fields: dict[str, Any] = {
        "contents": list[types.Content], "systemInstruction": types.Content, "generationConfig": dict,
        "safetySettings": list[types.SafetySetting], "tools": list[types.Tool], "toolConfig": types.ToolConfig,
        "cachedContent": str, "labels": dict[str, str], "serviceTier": str, "store": bool, "model": str,
    }
    return {**fields, **{snake(k): v for k, v in fields.items()}}


def get_field(d: dict, camel: str) -> Any:
    """Proto-JSON accepts camelCase and snake_case field names; so does the emulator."""
    if camel in d:
        return d[camel]
    snake = re.sub(r"(?<!^)([A-Z])", r"_\1", camel).lower()
    return d.get(snake)


def snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def proto_path(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{snake(part)}" if out else snake(part))
    return out


def parse_violations(request: Any, where: tuple[str | int, ...] = ()) -> list[Violation]:
    """What proto-JSON parsing of a GenerateContentRequest refuses: unknown names, wrong types."""
    if not isinstance(request, dict):
        return [Violation("type", where, "an object", json_type(request))]
    from google.genai import types

    fields = request_fields()
    found: list[Violation] = []
    for key, value in request.items():
        tp = fields.get(key)
        if tp is None:
            found.append(Violation("unknown", (*where, key)))
        elif value is None:
            continue
        elif key in ("generationConfig", "generation_config"):
            if not isinstance(value, dict):
                found.append(Violation("type", (*where, key), "an object", json_type(value)))
                continue
            for name, item in value.items():
                path = (*where, key, name)
                if name in VERTEX_ONLY:
                    found.append(Violation("unknown", path))
                elif name in ("imageConfig", "image_config"):
                    found.extend(check(item, types.ImageConfig, path))
                else:
                    found.extend(v for v in check({name: item}, types.GenerationConfig, (*where, key)))
        else:
            found.extend(check(value, tp, (*where, key)))
    return [v for v in found if v.kind in ("unknown", "type", "value")]


def describe_parse(found: list[Violation]) -> Outcome:
    """Proto-JSON's refusal of the first violations: unknown names (all of them) or a bad value."""
    unknown = [v for v in found if v.kind == "unknown"]
    if unknown:
        lines, violations = [], []
        for v in unknown:
            container = proto_path(v.path[:-1])
            text = f'Invalid JSON payload received. Unknown name "{v.key}"' + (f" at '{container}'" if container else "") + ": Cannot find field."
            lines.append(text)
            violations.append({"field": container, "description": text} if container else {"description": text})
        details = [{"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": violations}]
        return Outcome.error(400, "\n".join(lines), details=details)
    v = found[0]
    proto = _PROTO_TYPES.get(v.expected, "TYPE_MESSAGE")
    return Outcome.error(400, f"Invalid value at '{proto_path(v.path)}' ({proto}), {v.got}")


def request_refusal(request: Any) -> Outcome | None:
    """Why the API refuses a GenerateContentRequest (online, or a batch line); None: accepted."""
    found = parse_violations(request)
    if found:
        return describe_parse(found)
    if not request.get("contents"):
        return Outcome.error(400, "* GenerateContentRequest.contents: contents is not specified")
    contents = request["contents"] if isinstance(request["contents"], list) else [request["contents"]]
    if any(isinstance(c, dict) and c.get("role") not in (None, "", "user", "model") for c in contents):
        return Outcome.error(400, "Please use a valid role: user, model.")
    for i, c in enumerate(contents):
        if isinstance(c, dict) and not c.get("parts"):
            # "A Content message must have at least one Part" (Vertex AI REST reference, Content);
            # the API: "* GenerateContentRequest.contents[1].parts: contents.parts must not be
            # empty." (egoist/chatwise-releases#250, coze-dev/coze-studio#46).
            return Outcome.error(400, f"* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty.")
    config = request.get("generationConfig") or request.get("generation_config") or {}
    for name, low, high in RANGES:
        value = config.get(name)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if value < low or (high is not None and value > high):
            field = snake(name)
            bound = f"must be in the range [{float(low)}, {float(high)}]" if high is not None else "must be positive"
            return Outcome.error(400, f"* GenerateContentRequest.generation_config.{field}: {field} {bound}.")
    return None


def model_refusal(model: str, version: str, method: str) -> Outcome:
    return Outcome.error(404, f"models/{model} is not found for API version {version}, or is not supported for {method}. "
                         "Call ListModels to see the list of available models and their supported methods.")


def key_refusal() -> Outcome:
    message = "API key not valid. Please pass a valid API key."
    return Outcome.error(400, message, details=[
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com",
         "metadata": {"service": "generativelanguage.googleapis.com"}},
        {"@type": "type.googleapis.com/google.rpc.LocalizedMessage", "locale": "en-US", "message": message},
    ])


def line_refusal(line: dict) -> Outcome | None:
    """A file-input line (``{"key", "request"}``) with a field the line format does not have."""
    unknown = [Violation("unknown", (k,)) for k in line if k not in LINE_KEYS]
    return describe_parse(unknown) if unknown else None


# The BatchGenerateContentRequest around the requests (ai.google.dev/api/batch-mode): wire name ->
# the names allowed inside (None: a leaf).
_BATCH_SHAPE: dict[str, Any] = {
    "batch": {"displayName": None, "inputConfig": {"fileName": None, "requests": {"requests": None}}, "priority": None,
              "model": None, "name": None, "webhookConfig": None},
}


def batch_body_refusal(body: Any) -> Outcome | None:
    """Why ``models/{m}:batchGenerateContent`` refuses its body (inline requests included)."""
    if not isinstance(body, dict):
        return describe_parse([Violation("type", (), "an object", json_type(body))])
    found: list[Violation] = []

    def walk(value: dict, shape: dict, path: tuple) -> None:
        for key, item in value.items():
            camel = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), key)
            if camel not in shape:
                found.append(Violation("unknown", (*path, key)))
            elif isinstance(shape[camel], dict):
                if not isinstance(item, dict):
                    found.append(Violation("type", (*path, key), "an object", json_type(item)))
                else:
                    walk(item, shape[camel], (*path, key))

    walk(body, _BATCH_SHAPE, ())
    if found:
        return describe_parse(found)
    batch = body.get("batch")
    config = (batch or {}).get("inputConfig") or (batch or {}).get("input_config")
    inline = (config or {}).get("requests")
    items = inline.get("requests") if isinstance(inline, dict) else None
    if inline is not None and not isinstance(items, list):
        return describe_parse([Violation("type", ("batch", "input_config", "requests", "requests"), "an array", json_type(items))])
    for i, item in enumerate(items or []):
        path: tuple = ("batch", "input_config", "requests", "requests", i)
        if not isinstance(item, dict):
            return describe_parse([Violation("type", path, "an object", json_type(item))])
        extra = [Violation("unknown", (*path, k)) for k in item if k not in ("request", "metadata")]
        found = extra + parse_violations(item.get("request", {}), (*path, "request"))
        if found:
            return describe_parse(found)
    return None
