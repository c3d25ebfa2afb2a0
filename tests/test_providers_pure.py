"""Golden tests of the adapters' pure halves: request lines built, result lines classified.

Every expected value here is a literal written from the providers' documented wire formats
(provider-apis.md): no emulator, no SDK, no network. Routes come from the real config parser so
that defaults (endpoint paths, api_version) are the ones users get.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from batchrun.protocol.config import Route
from batchrun.protocol.config_file import parse_config
from batchrun.base.errors import ConfigError
from batchrun.providers import LineResult, RequestSpec, Usage, error_kind_for_status, get_adapter
from batchrun.providers.gemini import state_of

PROMPT = "Answer using ONLY the document below. Include every specific detail from the text.\n\nQuestion: Who?\n\nDocument:\nMara Quist ran the crane."


def make_route(provider: str, model: str, **extra: Any) -> Route:
    raw: dict[str, Any] = {"provider": provider, "model": model, **extra}
    if provider == "openai-compatible":
        raw.setdefault("base_url", "https://compat.example/v1")
        raw.setdefault("api_key_env", "COMPAT_KEY")
    config = parse_config({"protocol": "custom", "routes": {"r": raw}}, Path("/nonexistent/batchrun.json"))  # no panel
    return config.routes["r"]


def spec(temperature: float | None = 0.1, max_tokens: int = 8192, model: str = "m") -> RequestSpec:
    return RequestSpec(custom_id="g-abc123", model=model, prompt=PROMPT, max_tokens=max_tokens, temperature=temperature)


# --- build_line --------------------------------------------------------------------------------


def test_openai_chat_line_uses_max_completion_tokens_and_the_batch_endpoint() -> None:
    route = make_route("openai", "gpt-5.5")
    line = get_adapter("openai").build_line(route, spec(model="gpt-5.5"))
    assert line == {
        "custom_id": "g-abc123",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": "gpt-5.5",
            "messages": [{"role": "user", "content": PROMPT}],
            "max_completion_tokens": 8192,
            "temperature": 0.1,
        },
    }


def test_openai_line_without_temperature_has_no_temperature_key() -> None:
    route = make_route("openai", "gpt-5.5", send_temperature=False)
    line = get_adapter("openai").build_line(route, spec(temperature=None, max_tokens=32768, model="gpt-5.5"))
    assert "temperature" not in line["body"]
    assert line["body"]["max_completion_tokens"] == 32768
    assert set(line["body"]) == {"model", "messages", "max_completion_tokens"}


def test_openai_responses_line_uses_input_and_max_output_tokens() -> None:
    route = make_route("openai", "gpt-5.5", endpoint="responses")
    line = get_adapter("openai").build_line(route, spec(model="gpt-5.5"))
    assert line == {
        "custom_id": "g-abc123",
        "method": "POST",
        "url": "/v1/responses",
        "body": {"model": "gpt-5.5", "input": PROMPT, "max_output_tokens": 8192, "temperature": 0.1},
    }


def test_openai_compatible_line_uses_max_tokens_and_the_route_endpoint_path() -> None:
    route = make_route("openai-compatible", "glm-4.6", endpoint_path="/v4/chat/completions")
    line = get_adapter("openai-compatible").build_line(route, spec(model="glm-4.6"))
    assert line == {
        "custom_id": "g-abc123",
        "method": "POST",
        "url": "/v4/chat/completions",
        "body": {
            "model": "glm-4.6",
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 8192,
            "temperature": 0.1,
        },
    }


def test_anthropic_line_is_custom_id_and_params() -> None:
    route = make_route("anthropic", "claude-sonnet-4-6")
    line = get_adapter("anthropic").build_line(route, spec(max_tokens=16384, model="claude-sonnet-4-6"))
    assert line == {
        "custom_id": "g-abc123",
        "params": {
            "model": "claude-sonnet-4-6",
            "max_tokens": 16384,
            "messages": [{"role": "user", "content": PROMPT}],
            "temperature": 0.1,
        },
    }
    no_temp = get_adapter("anthropic").build_line(route, spec(temperature=None, model="claude-sonnet-4-6"))
    assert "temperature" not in no_temp["params"]


def test_gemini_line_is_key_and_generate_content_request() -> None:
    route = make_route("gemini", "gemini-2.5-pro")
    line = get_adapter("gemini").build_line(route, spec(model="gemini-2.5-pro"))
    assert line == {
        "key": "g-abc123",
        "request": {
            "contents": [{"role": "user", "parts": [{"text": PROMPT}]}],
            "generationConfig": {"maxOutputTokens": 8192, "temperature": 0.1},
        },
    }
    no_temp = get_adapter("gemini").build_line(route, spec(temperature=None))
    assert no_temp["request"]["generationConfig"] == {"maxOutputTokens": 8192}


def test_built_lines_are_json_serialisable_and_carry_only_the_prompt() -> None:
    """Nothing but the spec's fields reach a line (the gold answer structurally cannot)."""
    for provider, model in (("openai", "gpt-5.5"), ("anthropic", "claude-sonnet-4-6"), ("gemini", "gemini-2.5-pro"),
                            ("openai-compatible", "qwen-plus")):
        route = make_route(provider, model)
        text = json.dumps(get_adapter(provider).build_line(route, spec(model=model)))
        assert PROMPT.replace("\n", "\\n") in text
        assert "GOLD" not in text


@pytest.mark.parametrize("provider,model,body_key", [
    ("openai", "gpt-5.5", "messages"),
    ("openai-compatible", "qwen-plus", "messages"),
    ("anthropic", "claude-sonnet-4-6", "messages"),
    ("gemini", "gemini-2.5-pro", "contents"),
])
def test_online_body_is_the_line_body(provider: str, model: str, body_key: str) -> None:
    adapter = get_adapter(provider)
    line = adapter.build_line(make_route(provider, model), spec(model=model))
    custom_id, body = adapter.online_body(line)
    assert custom_id == "g-abc123"
    assert body_key in body
    assert body == (line.get("body") or line.get("params") or line.get("request"))


def test_anthropic_route_defaults_to_api_version_2023_06_01() -> None:
    assert make_route("anthropic", "claude-sonnet-4-6").api_version == "2023-06-01"
    assert make_route("anthropic", "claude-sonnet-4-6", api_version="2026-10-21", send_temperature=False).api_version == "2026-10-21"
    with pytest.raises(ConfigError, match="2026-10-21.*temperature"):
        make_route("anthropic", "claude-sonnet-4-6", api_version="2026-10-21")
    with pytest.raises(ConfigError, match="api_version"):
        make_route("openai", "gpt-5.5", api_version="2023-06-01")


# --- parse_line: OpenAI ------------------------------------------------------------------------

OPENAI = get_adapter("openai")


def openai_ok(body: dict[str, Any], custom_id: str = "g-1") -> dict[str, Any]:
    return {"id": "batch_req_1", "custom_id": custom_id, "response": {"status_code": 200, "request_id": "req_1", "body": body}, "error": None}


def openai_err(status: int, code: str | None, message: str, type_: str = "invalid_request_error") -> dict[str, Any]:
    return {"id": "batch_req_2", "custom_id": "g-2", "response": {"status_code": status, "request_id": "req_2", "body": {
        "error": {"message": message, "type": type_, "param": None, "code": code}}}, "error": None}


def chat_body(message: dict[str, Any], finish: str = "stop", usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1767225600, "model": "gpt-5.5",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "logprobs": None, "finish_reason": finish}],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }


def test_openai_chat_success_with_reasoning_and_cached_tokens() -> None:
    line = openai_ok(chat_body(
        {"content": "The crane failed at 03:14 on Tuesday.", "refusal": None},
        usage={"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500,
               "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
               "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0}},
    ))
    assert OPENAI.parse_line(line) == LineResult(
        "g-1", "ok", text="The crane failed at 03:14 on Tuesday.", finish_reason="stop",
        usage=Usage(input_tokens=1200, output_tokens=300, reasoning_tokens=256, cached_tokens=1024),
    )


def test_openai_chat_success_without_usage_details() -> None:
    r = OPENAI.parse_line(openai_ok(chat_body({"content": "Nine days."}, finish="length")))
    assert (r.kind, r.text, r.finish_reason) == ("ok", "Nine days.", "length")
    assert r.usage == Usage(input_tokens=10, output_tokens=2, reasoning_tokens=None, cached_tokens=None)


def test_openai_chat_content_parts_are_joined() -> None:
    """Some OpenAI-compatible servers return content as a list of parts."""
    r = OPENAI.parse_line(openai_ok(chat_body({"content": [{"type": "text", "text": "Mara "}, {"type": "text", "text": "Quist"}]})))
    assert (r.kind, r.text) == ("ok", "Mara Quist")


def test_openai_chat_refusal() -> None:
    r = OPENAI.parse_line(openai_ok(chat_body({"content": None, "refusal": "I'm sorry, I can't help with that."})))
    assert r.kind == "refusal"
    assert r.text == "I'm sorry, I can't help with that."
    assert r.finish_reason == "stop"


@pytest.mark.parametrize("message", [{"content": ""}, {"content": None, "refusal": None}, {"content": "  \n\t"}, {"content": []}])
def test_openai_chat_empty_content(message: dict[str, Any]) -> None:
    r = OPENAI.parse_line(openai_ok(chat_body(message)))
    assert r.kind == "empty"
    assert r.usage.input_tokens == 10


# A 200 whose body is not an answer is the provider's failure, retried: never an "empty" (a 0
# on the leaderboard). Some OpenAI-compatible servers and proxies send errors with status 200.
@pytest.mark.parametrize("body", [
    {**chat_body({"content": "x"}), "choices": []},
    {"usage": {"prompt_tokens": 3}},
    {},
], ids=["no-choices", "no-choices-key", "empty-body"])
def test_openai_chat_body_that_is_not_an_answer_is_transient(body: dict[str, Any]) -> None:
    r = OPENAI.parse_line(openai_ok(body))
    assert (r.kind, r.error_type) == ("transient", "malformed")


@pytest.mark.parametrize("error,kind", [
    ({"message": "upstream overloaded", "type": "server_error"}, "transient"),
    ({"message": "The model `gpt-9` does not exist", "type": "invalid_request_error", "code": "model_not_found"}, "invalid"),
    ({"message": "Incorrect API key provided", "type": "authentication_error"}, "auth"),
    ("quota exceeded", "transient"),
], ids=["server-error", "invalid-request", "bad-key", "a-string"])
def test_openai_chat_error_sent_with_status_200_is_read_as_that_error(error: Any, kind: str) -> None:
    """Some OpenAI-compatible servers and proxies send errors with status 200: a config error
    blocks the route with its diagnosis, anything else is retried; never an "empty" answer."""
    for body in ({"error": error}, {**chat_body({"content": ""}), "error": error}):
        assert OPENAI.parse_line(openai_ok(body)).kind == kind
    # An answer beside an error field is still the answer.
    assert OPENAI.parse_line(openai_ok({**chat_body({"content": "The crane failed."}), "error": error})).kind == "ok"


@pytest.mark.parametrize("status", ["cancelled", "queued", "in_progress"])
def test_openai_responses_body_that_did_not_end_is_transient(status: str) -> None:
    body = responses_body([], status=status)
    r = OPENAI.parse_line(openai_ok(body))
    assert (r.kind, r.error_type) == ("transient", "malformed")


@pytest.mark.parametrize("code,kind", [("server_error", "transient"), ("invalid_prompt", "invalid"), ("rate_limit_exceeded", "transient")])
def test_openai_responses_that_failed_is_its_error(code: str, kind: str) -> None:
    body = {**responses_body([], status="failed"), "error": {"code": code, "message": "The response failed."}}
    r = OPENAI.parse_line(openai_ok(body))
    assert (r.kind, r.error_type) == (kind, code)


def test_openai_responses_content_filter_is_a_refusal_as_on_chat() -> None:
    body = responses_body([{"type": "output_text", "text": "The first half"}], status="incomplete", incomplete="content_filter")
    assert OPENAI.parse_line(openai_ok(body)).kind == "refusal"
    assert OPENAI.parse_line(openai_ok(responses_body([], status="incomplete", incomplete="content_filter"))).kind == "refusal"


def responses_body(content: list[dict[str, Any]], status: str = "completed", incomplete: str | None = None) -> dict[str, Any]:
    return {
        "id": "resp_1", "object": "response", "created_at": 1767225600, "status": status,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "content": content},
        ],
        "usage": {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 512},
                  "output_tokens": 140, "output_tokens_details": {"reasoning_tokens": 100}, "total_tokens": 1040},
    }


def test_openai_responses_success() -> None:
    line = openai_ok(responses_body([
        {"type": "output_text", "text": "Repairs took ", "annotations": []},
        {"type": "output_text", "text": "nine days.", "annotations": []},
    ]))
    assert OPENAI.parse_line(line) == LineResult(
        "g-1", "ok", text="Repairs took nine days.", finish_reason="completed",
        usage=Usage(input_tokens=900, output_tokens=140, reasoning_tokens=100, cached_tokens=512),
    )


def test_openai_responses_refusal() -> None:
    r = OPENAI.parse_line(openai_ok(responses_body([{"type": "refusal", "refusal": "I can't assist with that."}])))
    assert (r.kind, r.text) == ("refusal", "I can't assist with that.")


def test_openai_responses_incomplete_without_text_is_empty_with_the_reason() -> None:
    r = OPENAI.parse_line(openai_ok(responses_body([], status="incomplete", incomplete="max_output_tokens")))
    assert (r.kind, r.finish_reason) == ("empty", "max_output_tokens")
    assert r.usage.reasoning_tokens == 100


def test_openai_error_file_400_is_invalid() -> None:
    line = openai_err(400, "unsupported_value", "Unsupported value: 'temperature' does not support 0.1 with this model.")
    r = OPENAI.parse_line(line)
    assert r == LineResult("g-2", "invalid", error_type="unsupported_value",
                           error_message="Unsupported value: 'temperature' does not support 0.1 with this model.")


def test_openai_error_file_400_without_code_uses_the_type() -> None:
    r = OPENAI.parse_line(openai_err(400, None, "Invalid 'messages'."))
    assert (r.kind, r.error_type) == ("invalid", "invalid_request_error")


@pytest.mark.parametrize("status,code,type_", [
    (429, "rate_limit_exceeded", "requests"),
    (500, "server_error", "server_error"),
    (503, None, "server_error"),
])
def test_openai_error_file_429_and_5xx_are_transient(status: int, code: str | None, type_: str) -> None:
    r = OPENAI.parse_line(openai_err(status, code, "try again", type_))
    assert r.kind == "transient"
    assert r.error_type == (code or type_)
    assert r.error_message == "try again"


def test_openai_batch_expired_line_is_expired() -> None:
    line = {"id": "batch_req_3", "custom_id": "g-3", "response": None, "error": {
        "code": "batch_expired", "message": "This request could not be executed before the completion window expired."}}
    r = OPENAI.parse_line(line)
    assert (r.custom_id, r.kind, r.error_type) == ("g-3", "expired", "batch_expired")
    assert "completion window" in (r.error_message or "")


def test_openai_batch_cancelled_line_is_cancelled() -> None:
    line = {"id": "batch_req_4", "custom_id": "g-4", "response": None, "error": {"code": "batch_cancelled", "message": "cancelled"}}
    assert OPENAI.parse_line(line).kind == "cancelled"


def test_openai_string_error_and_malformed_lines_are_transient_not_raised() -> None:
    vllm = OPENAI.parse_line({"id": "x", "custom_id": "g-5", "response": None, "error": "engine died"})
    assert (vllm.kind, vllm.error_message) == ("transient", "engine died")
    malformed = OPENAI.parse_line({"custom_id": "g-6"})
    assert (malformed.kind, malformed.error_type) == ("transient", "malformed")


# --- parse_line: Anthropic ---------------------------------------------------------------------

ANTHROPIC = get_adapter("anthropic")


def anthropic_succeeded(content: list[dict[str, Any]], stop: str = "end_turn", custom_id: str = "g-10") -> dict[str, Any]:
    return {"custom_id": custom_id, "result": {"type": "succeeded", "message": {
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
        "content": content, "stop_reason": stop, "stop_sequence": None,
        "usage": {"input_tokens": 2000, "output_tokens": 150, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 1800, "service_tier": "batch"},
    }}}


@pytest.mark.parametrize("result", [
    {"type": "succeeded"},
    {"type": "succeeded", "message": None},
    {"type": "succeeded", "message": "text"},
    {"type": "succeeded", "message": {"type": "error", "error": {"type": "overloaded_error"}}},
])
def test_anthropic_succeeded_without_a_message_is_transient(result: dict[str, Any]) -> None:
    r = ANTHROPIC.parse_line({"custom_id": "g-10", "result": result})
    assert (r.kind, r.error_type) == ("transient", "malformed")


def anthropic_errored(error_type: str, message: str) -> dict[str, Any]:
    return {"custom_id": "g-11", "result": {"type": "errored", "error": {
        "type": "error", "error": {"type": error_type, "message": message}, "request_id": "req_011C"}}}


def test_anthropic_succeeded_joins_text_blocks_and_skips_thinking() -> None:
    line = anthropic_succeeded([
        {"type": "thinking", "thinking": "Let me look.", "signature": "sig"},
        {"type": "text", "text": "Dr. Ilse Varga moved "},
        {"type": "text", "text": "340 samples."},
    ])
    assert ANTHROPIC.parse_line(line) == LineResult(
        "g-10", "ok", text="Dr. Ilse Varga moved 340 samples.", finish_reason="end_turn",
        usage=Usage(input_tokens=2000, output_tokens=150, reasoning_tokens=None, cached_tokens=1800),
    )


def test_anthropic_max_tokens_with_text_is_ok_with_the_reason() -> None:
    r = ANTHROPIC.parse_line(anthropic_succeeded([{"type": "text", "text": "partial"}], stop="max_tokens"))
    assert (r.kind, r.finish_reason) == ("ok", "max_tokens")


def test_anthropic_stop_reason_refusal() -> None:
    r = ANTHROPIC.parse_line(anthropic_succeeded([], stop="refusal"))
    assert (r.kind, r.finish_reason) == ("refusal", "refusal")
    r2 = ANTHROPIC.parse_line(anthropic_succeeded([{"type": "text", "text": "I won't."}], stop="refusal"))
    assert (r2.kind, r2.text) == ("refusal", "I won't.")


@pytest.mark.parametrize("content", [[], [{"type": "text", "text": ""}], [{"type": "text", "text": " \n"}],
                                     [{"type": "thinking", "thinking": "only thoughts"}]])
def test_anthropic_empty_content(content: list[dict[str, Any]]) -> None:
    r = ANTHROPIC.parse_line(anthropic_succeeded(content))
    assert r.kind == "empty"
    assert r.usage.input_tokens == 2000


def test_anthropic_errored_invalid_request_is_invalid() -> None:
    r = ANTHROPIC.parse_line(anthropic_errored("invalid_request_error", "temperature: Extra inputs are not permitted"))
    assert r == LineResult("g-11", "invalid", error_type="invalid_request_error", error_message="temperature: Extra inputs are not permitted")


def test_anthropic_unknown_model_is_recognised_and_diagnosed_as_the_model_id() -> None:
    """Anthropic refuses a model id it does not know with 404 not_found_error "model: <id>" (in a
    batch line, and online: error_line keeps 404 as not_found_error). Diagnosed like OpenAI's
    model_not_found: correct the model id, not "fix what the message names"."""
    from batchrun.ledger.diagnosis import diagnose
    from batchrun.providers import UNKNOWN_MODEL

    for line in (anthropic_errored("not_found_error", "model: claude-opus-4.8"),
                 ANTHROPIC.error_line("g-11", 404, "model: claude-opus-4.8")):
        r = ANTHROPIC.parse_line(line)
        assert (r.kind, r.error_type, r.error_message) == ("invalid", UNKNOWN_MODEL, "model: claude-opus-4.8"), line
        d = diagnose("opus", r.kind, r.error_message or "", None, r.error_type)
        assert d.cause == "the provider does not know the model" and d.fix.startswith('correct model under [routes."opus"]')
    # Another resource not found (a batch, a file) is not a model.
    r = ANTHROPIC.parse_line(anthropic_errored("not_found_error", "Not found: msgbatch_01"))
    assert (r.kind, r.error_type) == ("invalid", "not_found_error")


@pytest.mark.parametrize("error_type", ["api_error", "overloaded_error", "rate_limit_error", "timeout_error"])
def test_anthropic_errored_server_side_is_transient(error_type: str) -> None:
    r = ANTHROPIC.parse_line(anthropic_errored(error_type, "Overloaded"))
    assert (r.kind, r.error_type, r.error_message) == ("transient", error_type, "Overloaded")


def test_anthropic_canceled_and_expired() -> None:
    assert ANTHROPIC.parse_line({"custom_id": "g-12", "result": {"type": "canceled"}}) == LineResult("g-12", "cancelled", error_type="canceled")
    assert ANTHROPIC.parse_line({"custom_id": "g-13", "result": {"type": "expired"}}) == LineResult("g-13", "expired", error_type="expired")


def test_anthropic_unknown_result_type_is_transient_not_raised() -> None:
    r = ANTHROPIC.parse_line({"custom_id": "g-14", "result": {"type": "mystery"}})
    assert (r.kind, r.error_type) == ("transient", "malformed")


# --- parse_line: Gemini ------------------------------------------------------------------------

GEMINI = get_adapter("gemini")


def test_gemini_success_camel_case_skips_thought_parts() -> None:
    line = {"key": "g-20", "response": {
        "candidates": [{"content": {"parts": [{"text": "thinking...", "thought": True}, {"text": "Wind reached "}, {"text": "41 knots."}],
                                    "role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 3000, "candidatesTokenCount": 25, "totalTokenCount": 3125,
                          "thoughtsTokenCount": 100, "cachedContentTokenCount": 2048},
        "modelVersion": "gemini-2.5-pro",
    }}
    assert GEMINI.parse_line(line) == LineResult(
        "g-20", "ok", text="Wind reached 41 knots.", finish_reason="STOP",
        usage=Usage(input_tokens=3000, output_tokens=25, reasoning_tokens=100, cached_tokens=2048),
    )


def test_gemini_success_snake_case() -> None:
    line = {"key": "g-21", "response": {
        "candidates": [{"content": {"parts": [{"text": "Nine days."}], "role": "model"}, "finish_reason": "STOP", "index": 0}],
        "usage_metadata": {"prompt_token_count": 40, "candidates_token_count": 3, "thoughts_token_count": 7,
                           "cached_content_token_count": 16},
    }}
    assert GEMINI.parse_line(line) == LineResult(
        "g-21", "ok", text="Nine days.", finish_reason="STOP",
        usage=Usage(input_tokens=40, output_tokens=3, reasoning_tokens=7, cached_tokens=16),
    )


def test_gemini_inline_response_key_in_metadata() -> None:
    line = {"metadata": {"key": "g-22"}, "response": {"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": "STOP"}]}}
    r = GEMINI.parse_line(line)
    assert (r.custom_id, r.kind) == ("g-22", "ok")


@pytest.mark.parametrize("finish", ["SAFETY", "PROHIBITED_CONTENT", "RECITATION", "BLOCKLIST"])
def test_gemini_blocked_finish_reason_is_refusal(finish: str) -> None:
    line = {"key": "g-23", "response": {"candidates": [{"finishReason": finish, "index": 0,
                                                          "safetyRatings": [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}]}],
                                        "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 0}}}
    r = GEMINI.parse_line(line)
    assert (r.kind, r.finish_reason) == ("refusal", finish)
    assert r.usage.input_tokens == 50


@pytest.mark.parametrize("response", [
    {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 12}},
    {"prompt_feedback": {"block_reason": "OTHER"}, "usage_metadata": {"prompt_token_count": 12}},
])
def test_gemini_prompt_block_is_refusal(response: dict[str, Any]) -> None:
    r = GEMINI.parse_line({"key": "g-24", "response": response})
    assert r.kind == "refusal"
    assert r.finish_reason in ("SAFETY", "OTHER")
    assert r.usage.input_tokens == 12
    assert "blocked" in (r.error_message or "")


@pytest.mark.parametrize("response", [
    {"candidates": [{"content": {"parts": [], "role": "model"}, "finishReason": "STOP"}]},
    {"candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS"}]},
    {"candidates": [{"content": {"parts": [{"text": "hidden", "thought": True}]}, "finishReason": "MAX_TOKENS"}]},
])
def test_gemini_empty_output(response: dict[str, Any]) -> None:
    assert GEMINI.parse_line({"key": "g-25", "response": response}).kind == "empty"


def test_gemini_absent_usage_counts_are_zero() -> None:
    """proto3 JSON omits an int32 at 0: a MAX_TOKENS answer that only thought has no
    candidatesTokenCount (adcontextprotocol/adcp#7359) and a model that did not think no
    thoughtsTokenCount. Within a usageMetadata that is there, an absent count is 0, not unknown
    (the cost of an answer that was billed for its thoughts was unknown); a bad value stays unknown."""
    thought_only = {"candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS"}],
                    "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 199, "thoughtsTokenCount": 190}}
    r = GEMINI.parse_line({"key": "g-26", "response": thought_only})
    assert r.kind == "empty" and r.usage == Usage(input_tokens=9, output_tokens=0, reasoning_tokens=190, cached_tokens=0)
    said = {"candidates": [{"content": {"parts": [{"text": "Mara"}], "role": "model"}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": "x", "totalTokenCount": 10}}
    r = GEMINI.parse_line({"key": "g-27", "response": said})
    assert r.usage == Usage(input_tokens=9, output_tokens=None, reasoning_tokens=0, cached_tokens=0)
    no_usage = {"candidates": [{"content": {"parts": [{"text": "Mara"}], "role": "model"}, "finishReason": "STOP"}]}
    assert GEMINI.parse_line({"key": "g-28", "response": no_usage}).usage == Usage(None, None, None, None)


@pytest.mark.parametrize("response", [{"candidates": []}, {}, {"usageMetadata": {"promptTokenCount": 9}}])
def test_gemini_response_without_candidates_or_block_is_transient(response: dict[str, Any]) -> None:
    """Nothing the model answered, and no blocked prompt: the provider's failure, never an "empty"."""
    r = GEMINI.parse_line({"key": "g-25", "response": response})
    assert (r.kind, r.error_type) == ("transient", "malformed")


@pytest.mark.parametrize("code,status,kind", [
    (429, "RESOURCE_EXHAUSTED", "transient"),
    (500, "INTERNAL", "transient"),
    (503, "UNAVAILABLE", "transient"),
    (400, "INVALID_ARGUMENT", "invalid"),
    (3, None, "invalid"),
    (5, None, "invalid"),
])
def test_gemini_error_codes(code: int, status: str | None, kind: str) -> None:
    err: dict[str, Any] = {"code": code, "message": "some problem"}
    if status:
        err["status"] = status
    r = GEMINI.parse_line({"key": "g-26", "error": err})
    assert (r.custom_id, r.kind, r.error_message) == ("g-26", kind, "some problem")
    assert r.error_type == (status or str(code))


# --- error lines written by the sync transport round-trip through parse_line ----------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
@pytest.mark.parametrize("status,kind", [(400, "invalid"), (404, "invalid"), (429, "transient"), (500, "transient"), (None, "transient")])
def test_error_line_round_trips(provider: str, status: int | None, kind: str) -> None:
    adapter = get_adapter(provider)
    line = json.loads(json.dumps(adapter.error_line("g-30", status, "boom")))
    r = adapter.parse_line(line)
    assert (r.custom_id, r.kind) == ("g-30", kind)
    assert r.error_message == "boom"


def test_error_kind_for_status() -> None:
    assert [error_kind_for_status(s) for s in (400, 404, 413, 422)] == ["invalid"] * 4
    assert [error_kind_for_status(s) for s in (408, 409, 429, 500, 502, 503, 529, None)] == ["transient"] * 8


# --- Gemini batch states -----------------------------------------------------------------------


@pytest.mark.parametrize("raw,state", [
    ("BATCH_STATE_PENDING", "pending"), ("JOB_STATE_PENDING", "pending"), ("JOB_STATE_QUEUED", "pending"),
    ("BATCH_STATE_UNSPECIFIED", "pending"), ("JOB_STATE_UNSPECIFIED", "pending"),
    ("BATCH_STATE_RUNNING", "running"), ("JOB_STATE_RUNNING", "running"), ("JOB_STATE_CANCELLING", "running"),
    ("JOB_STATE_PAUSED", "running"), ("JOB_STATE_UPDATING", "running"),
    ("BATCH_STATE_SUCCEEDED", "done"), ("JOB_STATE_SUCCEEDED", "done"), ("JOB_STATE_PARTIALLY_SUCCEEDED", "done"),
    ("BATCH_STATE_FAILED", "failed"), ("JOB_STATE_FAILED", "failed"),
    ("BATCH_STATE_CANCELLED", "cancelled"), ("JOB_STATE_CANCELLED", "cancelled"),
    ("BATCH_STATE_EXPIRED", "expired"), ("JOB_STATE_EXPIRED", "expired"),
    ("JobState.JOB_STATE_SUCCEEDED", "done"),  # str() of the SDK enum
    ("BATCH_STATE_SOMETHING_NEW", "running"), ("", "running"),  # unknown: never treated as finished
])
def test_gemini_state_of(raw: str, state: str) -> None:
    assert state_of(raw) == state


def test_requests_done_is_read_from_each_providers_counts_and_kept_in_range() -> None:
    """Progress comes from the providers' own counts, read by their adapters; a count out of range
    (provider output is untrusted) is clamped, never shown as 9/4."""
    from google.genai import types

    openai = get_adapter("openai")
    base = {"id": "batch_1", "status": "in_progress", "created_at": 1}
    done = openai._status({**base, "request_counts": {"total": 4, "completed": 2, "failed": 1}})  # type: ignore[attr-defined]
    assert (done.requests_done, done.n_requests) == (3, 4)
    assert openai._status({**base, "request_counts": {"total": 0, "completed": 0, "failed": 0}}).requests_done is None  # type: ignore[attr-defined]
    assert openai._status({**base, "request_counts": {"total": 4, "completed": 9, "failed": 0}}).requests_done == 4  # type: ignore[attr-defined]

    anthropic = get_adapter("anthropic")
    counts = {"processing": 4, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
    running = anthropic._status({"id": "msgbatch_1", "processing_status": "in_progress", "request_counts": counts})  # type: ignore[attr-defined]
    assert (running.requests_done, running.n_requests) == (0, 4)  # processing until the whole batch ends
    ended = anthropic._status({"id": "msgbatch_1", "processing_status": "ended",  # type: ignore[attr-defined]
                               "request_counts": {**counts, "processing": 0, "succeeded": 3, "errored": 1}})
    assert (ended.requests_done, ended.n_requests) == (4, 4)

    gemini = get_adapter("gemini")
    plain = gemini._status(types.BatchJob(name="batches/1", state=types.JobState.JOB_STATE_RUNNING))  # type: ignore[attr-defined]
    assert plain.requests_done is None  # the SDK exposes no counts for the Gemini API
    stats = types.CompletionStats(successful_count=5, failed_count=1, incomplete_count=4)
    vertex = gemini._status(types.BatchJob(name="batches/2", state=types.JobState.JOB_STATE_RUNNING, completion_stats=stats))  # type: ignore[attr-defined]
    assert (vertex.requests_done, vertex.n_requests) == (6, 10)


@pytest.mark.parametrize("provider, model, counted", [
    ("anthropic", "claude-new", {"input_tokens": "lots"}),
    ("anthropic", "claude-new", {"input_tokens": -5}),
    ("anthropic", "claude-new", {}),
    ("gemini", "gemini-new", {"total_tokens": None}),
    ("gemini", "gemini-new", {"total_tokens": True}),
])
def test_a_malformed_token_count_is_the_providers_error_not_a_traceback(provider: str, model: str, counted: dict[str, Any]) -> None:
    from types import SimpleNamespace

    from batchrun.base.errors import ProviderError

    calls = []

    def count_tokens(**_: Any) -> Any:
        calls.append(1)
        return SimpleNamespace(**counted)

    # What the probe reads a count from (messages.count_tokens / models.count_tokens), answering garbage.
    client = SimpleNamespace(messages=SimpleNamespace(count_tokens=count_tokens), models=SimpleNamespace(count_tokens=count_tokens))
    with pytest.raises(ProviderError, match="without a token count"):
        get_adapter(provider).count_tokens(client, make_route(provider, model), "prompt")
    assert len(calls) > 1  # retried as a transient fault first


def test_gemini_arguments_google_genai_refuses_are_not_read_as_a_malformed_answer() -> None:
    """google-genai validates our own arguments before it sends anything: a mistake there is
    batchrun's, raised as it is, never taken for a provider's malformed answer (which would be
    retried and held forever, hiding the bug). Found by review. Nothing is sent: each call fails
    before the SDK opens a connection."""
    from google import genai

    from batchrun.providers import MalformedResponse
    from batchrun.providers.gemini import _sdk_parsed

    client = genai.Client(api_key="x", http_options={"base_url": "http://127.0.0.1:9"})
    for call in (lambda: client.batches.create(model="m", src=None, config={"display_name": "x"}),
                 lambda: client.batches.create(model="m", src="files/a", config={"display_nam": "x"}),
                 lambda: client.batches.get(name=""),
                 lambda: list(client.batches.list(config={"page_sze": 100}))):
        with pytest.raises(Exception) as raised:
            _sdk_parsed(call)
        assert not isinstance(raised.value, MalformedResponse), raised.value
        assert isinstance(raised.value, ValueError)  # ValueError or pydantic's ValidationError (a ValueError)
