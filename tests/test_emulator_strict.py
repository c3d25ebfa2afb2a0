"""The emulator refuses what the real APIs refuse, in each provider's own envelope, status and
wording, online and in batches (issue 25, item 1). Every request goes through the official SDK
(or, where the SDK would not send it, plain HTTP) to the emulator; the rules and their sources
are in batchrun/emulator/*_rules.py, dashscope.py and models.py."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from click.testing import CliRunner
from google import genai
from google.genai import errors as genai_errors

from batchrun.emulator import Emulator

PROMPT = "Question: who?\n\nDocument:\nMara Quist ran the crane."
USER = [{"role": "user", "content": PROMPT}]


@pytest.fixture(scope="module")
def emu() -> Any:
    with Emulator(latency=0.0) as emulator:
        yield emulator


def oai(emu: Emulator, prefix: str = "/v1", key: str = "sk-test") -> openai.OpenAI:
    return openai.OpenAI(base_url=emu.url + prefix, api_key=key, max_retries=0)


def ant(emu: Emulator, version: str = "2023-06-01", key: str = "sk-ant-test") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=emu.url, api_key=key, max_retries=0, default_headers={"anthropic-version": version})


def gem(emu: Emulator, key: str = "g-test") -> genai.Client:
    return genai.Client(api_key=key, http_options={"base_url": emu.url})


def post(url: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.split("\n") if line]


def openai_batch(client: openai.OpenAI, tmp_path: Path, rows: list[dict], endpoint: str = "/v1/chat/completions", window: str = "24h") -> Any:
    path = tmp_path / f"in-{time.monotonic_ns()}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with open(path, "rb") as f:
        uploaded = client.files.create(file=f, purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=endpoint, completion_window=window)
    return client.batches.retrieve(batch.id)


def chat_line(custom_id: str, url: str = "/v1/chat/completions", **body: Any) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": {"model": "gpt-4.1", "messages": USER, **body}}


# ============================================================================ OpenAI


@pytest.mark.parametrize("call, status, message, param, code", [
    (dict(extra_body={"foo": 1}), 400, "Unrecognized request argument supplied: foo", None, None),
    (dict(extra_body={"foo": 1, "bar": 2}), 400, "Unrecognized request arguments supplied: bar, foo", None, None),
    (dict(messages=[{"role": "user", "content": "x", "foo": 1}]), 400, "Unknown parameter: 'messages[0].foo'.", "messages[0].foo", "unknown_parameter"),
    (dict(temperature=3), 400, "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 3 instead.",
     "temperature", "decimal_above_max_value"),
    (dict(extra_body={"max_completion_tokens": "5"}), 400, "Invalid type for 'max_completion_tokens': expected an integer, but got a string instead.",
     "max_completion_tokens", "invalid_type"),
    (dict(messages=[{"role": "usr", "content": "x"}]), 400, "Invalid value: 'usr'. Supported values are:", "messages[0].role", "invalid_value"),
    (dict(model="gpt-x"), 404, "The model `gpt-x` does not exist or you do not have access to it.", None, "model_not_found"),
    # Reasoning models take only max_completion_tokens (openai_rules: gpt-5 and later, o-series).
    (dict(model="gpt-5.4", max_tokens=16), 400, "Unsupported parameter: 'max_tokens' is not supported with this model. "
     "Use 'max_completion_tokens' instead.", "max_tokens", "unsupported_parameter"),
    (dict(model="o3", max_tokens=16), 400, "Unsupported parameter: 'max_tokens'", "max_tokens", "unsupported_parameter"),
])
def test_openai_chat_refusals_online(emu: Emulator, call: dict, status: int, message: str, param: str | None, code: str | None) -> None:
    kwargs = {"model": "gpt-4.1", "messages": USER, **call}
    with pytest.raises(openai.APIStatusError) as info:
        oai(emu).chat.completions.create(**kwargs)
    err = info.value
    assert err.status_code == status and err.body["message"].startswith(message)
    assert (err.body["type"], err.body["param"], err.body["code"]) == ("invalid_request_error", param, code)


def test_openai_missing_field_and_responses_refusals(emu: Emulator) -> None:
    client = oai(emu)
    with pytest.raises(openai.BadRequestError) as info:
        client.post("/chat/completions", body={"model": "gpt-4.1"}, cast_to=object)
    assert info.value.body["message"] == "Missing required parameter: 'messages'." and info.value.code == "missing_required_parameter"
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="gpt-5.5", input=PROMPT, extra_body={"foo": 1})
    assert info.value.body["message"] == "Unknown parameter: 'foo'." and info.value.code == "unknown_parameter"
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="gpt-5.5", input=[{"role": "user", "content": "x", "bogus": 1}])
    assert info.value.param == "input[0].bogus"
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="gpt-5.5", input=PROMPT, max_output_tokens=1)
    assert info.value.code == "integer_below_min_value"
    # Real ids in their snapshot forms are served (the SDK's ChatModel list).
    assert client.chat.completions.create(model="gpt-4.1-2025-04-14", messages=USER).choices[0].message.content
    assert client.responses.create(model="gpt-5.5-2026-04-23", input=PROMPT).output_text


def test_openai_batch_create_refusals(emu: Emulator, tmp_path: Path) -> None:
    client = oai(emu)
    with pytest.raises(openai.BadRequestError) as info:
        openai_batch(client, tmp_path, [chat_line("a")], window="72h")
    assert info.value.body["message"] == "Invalid value: '72h'. Supported values are: '24h'."
    assert (info.value.param, info.value.code) == ("completion_window", "invalid_value")
    uploaded = client.files.create(file=("x.jsonl", b'{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{}}\n'), purpose="batch")
    with pytest.raises(openai.BadRequestError, match="Unrecognized request argument supplied: foo"):
        client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h", extra_body={"foo": 1})
    with pytest.raises(openai.BadRequestError) as info:
        client.batches.create(input_file_id=uploaded.id, endpoint="/v4/chat/completions", completion_window="24h")  # type: ignore[arg-type]
    assert info.value.param == "endpoint" and info.value.code == "invalid_value"


def test_openai_expiration_policies_are_checked_and_kept(emu: Emulator, tmp_path: Path) -> None:
    """files.create's expires_after and batches.create's output_expires_after: anchor is required
    and only 'created_at', seconds 3600..2592000 (openai types/file_create_params.py ExpiresAfter,
    types/batch_create_params.py OutputExpiresAfter); a batch's output file expires by its policy."""
    client = oai(emu)
    line = json.dumps(chat_line("a")).encode() + b"\n"
    for policy, param, code in [
        ({"anchor": "created_at", "seconds": 10}, "expires_after.seconds", "integer_below_min_value"),
        ({"anchor": "created_at", "seconds": 2592001}, "expires_after.seconds", "integer_above_max_value"),
        ({"anchor": "expires_at", "seconds": 7200}, "expires_after.anchor", "invalid_value"),
        ({"seconds": 7200}, "expires_after.anchor", "missing_required_parameter"),
    ]:
        with pytest.raises(openai.BadRequestError) as info:
            client.files.create(file=("x.jsonl", line), purpose="batch", expires_after=policy)  # type: ignore[arg-type]
        assert (info.value.param, info.value.code) == (param, code), policy
    kept = client.files.create(file=("x.jsonl", line), purpose="batch", expires_after={"anchor": "created_at", "seconds": 3600})
    assert kept.expires_at == kept.created_at + 3600
    with pytest.raises(openai.BadRequestError) as info:
        client.batches.create(input_file_id=kept.id, endpoint="/v1/chat/completions", completion_window="24h",
                              output_expires_after={"anchor": "created_at", "seconds": 60})
    assert (info.value.param, info.value.code) == ("output_expires_after.seconds", "integer_below_min_value")
    batch = client.batches.create(input_file_id=kept.id, endpoint="/v1/chat/completions", completion_window="24h",
                                  output_expires_after={"anchor": "created_at", "seconds": 7200})
    output = client.files.retrieve(client.batches.retrieve(batch.id).output_file_id or "")
    assert output.expires_at == output.created_at + 7200


def test_openai_a_batch_file_must_be_named_jsonl(emu: Emulator) -> None:
    """OpenAI refuses a purpose=batch upload whose name is not .jsonl at upload: 400 "Invalid file
    format for Batch API. Must be .jsonl", param and code null (BerriAI/litellm#37527's capture)."""
    line = json.dumps(chat_line("a")).encode() + b"\n"
    with pytest.raises(openai.BadRequestError) as info:
        oai(emu).files.create(file=("requests.txt", line), purpose="batch")
    assert info.value.body == {"message": "Invalid file format for Batch API. Must be .jsonl", "type": "invalid_request_error",
                               "param": None, "code": None}
    assert oai(emu).files.create(file=("requests.txt", line), purpose="user_data").filename == "requests.txt"


@pytest.mark.parametrize("second, code", [
    (chat_line("b", url="/v1/responses"), "url_mismatch"),  # it used to be routed by its own url
    ({**chat_line("b"), "body": {"model": "gpt-5.5", "messages": USER}}, "model_mismatch"),
])
def test_openai_batch_fails_validation_on_a_mismatched_line(emu: Emulator, tmp_path: Path, second: dict, code: str) -> None:
    batch = openai_batch(oai(emu), tmp_path, [chat_line("a"), second])
    assert batch.status == "failed" and batch.output_file_id is None
    [error] = batch.errors.data
    assert (error.code, error.line) == (code, 2)


def test_openai_batch_input_needs_method_post_and_purpose_batch(emu: Emulator, tmp_path: Path) -> None:
    """A line without "method" fails the batch's validation ("missing required 'method'" from the
    API: 567-labs/instructor#1119, #1120), and so does a method other than POST ("Currently only
    POST is supported", the batch input's reference); an input file not uploaded with purpose
    "batch" is refused at create (BatchCreateParams.input_file_id: "must be uploaded with the
    purpose `batch`"; llm-d/llm-d-batch-gateway#152)."""
    client = oai(emu)
    no_method = {k: v for k, v in chat_line("b").items() if k != "method"}
    for second, param in ((no_method, "method"), ({**chat_line("b"), "method": "GET"}, "method")):
        batch = openai_batch(client, tmp_path, [chat_line("a"), second])
        assert batch.status == "failed", second
        [error] = batch.errors.data
        assert (error.line, error.param) == (2, param)
    user_data = client.files.create(file=("in.jsonl", json.dumps(chat_line("a")).encode() + b"\n"), purpose="user_data")
    with pytest.raises(openai.BadRequestError) as info:
        client.batches.create(input_file_id=user_data.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert (info.value.param, info.value.code) == ("input_file_id", "invalid_value")


def test_openai_batch_refuses_bad_lines_one_by_one(emu: Emulator, tmp_path: Path) -> None:
    client = oai(emu)
    rows = [chat_line("ok"), chat_line("foo", foo=1), chat_line("hot", temperature=3), chat_line("typed", max_completion_tokens="8"),
            {**chat_line("model"), "body": {"model": "gpt-4.1", "messages": [{"role": "user", "content": "x", "name": 5}]}},
            chat_line("budget", max_tokens=8)]
    batch = openai_batch(client, tmp_path, rows)
    assert batch.status == "completed" and (batch.request_counts.completed, batch.request_counts.failed) == (2, 4)
    # gpt-4.1 is no reasoning model: max_tokens (deprecated) is still taken.
    assert {r["custom_id"] for r in jsonl(client.files.content(batch.output_file_id).text)} == {"ok", "budget"}
    errors = {e["custom_id"]: e["response"] for e in jsonl(client.files.content(batch.error_file_id).text)}
    assert errors["foo"]["status_code"] == 400
    assert errors["foo"]["body"]["error"]["message"] == "Unrecognized request argument supplied: foo"
    assert errors["hot"]["body"]["error"]["code"] == "decimal_above_max_value"
    assert errors["typed"]["body"]["error"]["code"] == "invalid_type"
    assert errors["model"]["body"]["error"]["param"] == "messages[0].name"


def test_openai_routes_are_not_lenient_about_the_prefix(emu: Emulator) -> None:
    """The OpenAI endpoint serves /v1 only: an OpenAI-compatible provider has its own (DashScope's)."""
    with pytest.raises(openai.NotFoundError):
        oai(emu, "/v4").chat.completions.create(model="gpt-4.1", messages=USER)


# ============================================================================ DashScope (OpenAI-compatible)


def test_dashscope_compatible_mode_rules(emu: Emulator, tmp_path: Path) -> None:
    client = oai(emu, "/compatible-mode/v1")
    assert client.chat.completions.create(model="qwen3.5-plus", messages=USER, extra_body={"enable_thinking": False}).choices
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-5.5", messages=USER)  # OpenAI's model is not DashScope's
    assert info.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="qwen3.5-plus", messages=USER, extra_body={"foo": 1})
    assert info.value.code == "invalid_parameter_error" and "foo" in info.value.body["message"]
    row = {**chat_line("a"), "body": {"model": "qwen3.7-plus", "messages": USER}}
    for window in ("24h", "72h", "14d", "336h"):
        assert openai_batch(client, tmp_path, [row], window=window).status == "completed"
    for window in ("12h", "337h", "15d", "72x"):
        with pytest.raises(openai.BadRequestError) as info:
            openai_batch(client, tmp_path, [row], window=window)
        assert info.value.code == "invalid_parameter_error" and info.value.param == "completion_window"
    # kimi-k2.6 is served online, but DashScope's Batch File API batches only the models it lists.
    batch = openai_batch(client, tmp_path, [{**row, "body": {"model": "kimi-k2.6", "messages": USER}}])
    assert batch.status == "failed" and batch.errors.data[0].code == "model_not_found"


# ============================================================================ Anthropic


@pytest.mark.parametrize("version, call, status, kind, message", [
    ("2023-06-01", dict(extra_body={"foo": 1}), 400, "invalid_request_error", "foo: Extra inputs are not permitted"),
    ("2023-06-01", dict(messages=[{"role": "user", "content": [{"type": "text", "text": "x", "x": 1}]}]), 400, "invalid_request_error",
     "messages.0.content.0.x: Extra inputs are not permitted"),
    ("2023-06-01", dict(extra_body={"temperature": 1.5}), 400, "invalid_request_error", "temperature: Input should be less than or equal to 1"),
    ("2026-10-21", dict(extra_body={"temperature": 0.1}), 400, "invalid_request_error", "temperature: Extra inputs are not permitted"),
    ("2023-06-01", dict(max_tokens=0), 400, "invalid_request_error", "max_tokens: Input should be greater than or equal to 1"),
    ("2023-06-01", dict(messages=[{"role": "robot", "content": "x"}]), 400, "invalid_request_error",
     "messages.0.role: Input should be 'user', 'assistant' or 'system'"),
    ("2023-06-01", dict(model="claude-opus-4.8"), 404, "not_found_error", "model: claude-opus-4.8"),  # Anthropic's ids are hyphenated
])
def test_anthropic_refusals_online(emu: Emulator, version: str, call: dict, status: int, kind: str, message: str) -> None:
    kwargs = {"model": "claude-sonnet-4-6", "max_tokens": 16, "messages": USER, **call}
    with pytest.raises(anthropic.APIStatusError) as info:
        ant(emu, version).messages.create(**kwargs)
    assert info.value.status_code == status
    assert info.value.body["error"] == {"type": kind, "message": message}


def test_anthropic_missing_field_and_real_ids(emu: Emulator) -> None:
    client = ant(emu)
    with pytest.raises(anthropic.BadRequestError) as info:
        client.post("/v1/messages", body={"model": "claude-sonnet-4-6", "messages": USER}, cast_to=object)
    assert info.value.body["error"]["message"] == "max_tokens: Field required"
    with pytest.raises(anthropic.BadRequestError) as info:  # (the SDK would do arithmetic on a str max_tokens itself)
        client.post("/v1/messages", body={"model": "claude-sonnet-4-6", "max_tokens": "5", "messages": USER}, cast_to=object)
    assert info.value.body["error"]["message"] == "max_tokens: Input should be a valid integer"
    for model in ("claude-opus-4-6", "claude-opus-4-8", "claude-sonnet-4-6", "claude-haiku-4-5-20251001"):
        assert client.messages.create(model=model, max_tokens=16, messages=USER).content
    assert client.messages.create(model="claude-sonnet-4-6", max_tokens=16, messages=USER, extra_body={"temperature": 0.1}).content


def test_anthropic_batch_validates_params_per_request(emu: Emulator) -> None:
    client = ant(emu)
    base = {"model": "claude-sonnet-4-6", "max_tokens": 16, "messages": USER}
    batch = client.messages.batches.create(requests=[
        {"custom_id": "ok", "params": base},
        {"custom_id": "foo", "params": {**base, "foo": 1}},  # type: ignore[typeddict-unknown-key]
        {"custom_id": "hot", "params": {**base, "temperature": 1.5}},  # type: ignore[typeddict-unknown-key]
        {"custom_id": "model", "params": {**base, "model": "claude-opus-4.6"}},
    ])
    results = {r.custom_id: r.result for r in client.messages.batches.results(batch.id)}
    assert results["ok"].type == "succeeded"
    assert results["foo"].error.error.message == "foo: Extra inputs are not permitted"
    assert results["hot"].error.error.message == "temperature: Input should be less than or equal to 1"
    assert (results["model"].error.error.type, results["model"].error.error.message) == ("not_found_error", "model: claude-opus-4.6")
    # The batch body's own shape is refused on create.
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.batches.create(requests=[{"custom_id": "x", "params": base, "foo": 1}])  # type: ignore[list-item]
    assert info.value.body["error"]["message"] == "requests.0.foo: Extra inputs are not permitted"


# ============================================================================ Gemini


def gemini_post(emu: Emulator, body: Any, model: str = "gemini-2.5-flash", key: str = "g-test") -> tuple[int, Any]:
    return post(f"{emu.url}/v1beta/models/{model}:generateContent", body, {"x-goog-api-key": key})


CONTENTS = [{"role": "user", "parts": [{"text": PROMPT}]}]


@pytest.mark.parametrize("body, message", [
    ({"contents": CONTENTS, "foo": 1}, 'Invalid JSON payload received. Unknown name "foo": Cannot find field.'),
    ({"contents": CONTENTS, "generationConfig": {"responseModalities2": ["TEXT"]}},
     "Invalid JSON payload received. Unknown name \"responseModalities2\" at 'generation_config': Cannot find field."),
    ({"contents": [{"role": "user", "parts": [{"text": "x", "foo": 1}]}]},
     "Invalid JSON payload received. Unknown name \"foo\" at 'contents[0].parts[0]': Cannot find field."),
    ({"contents": CONTENTS, "generationConfig": {"maxOutputTokens": -3}},
     "* GenerateContentRequest.generation_config.max_output_tokens: max_output_tokens must be positive."),
    ({"contents": CONTENTS, "generationConfig": {"temperature": 2.5}},
     "* GenerateContentRequest.generation_config.temperature: temperature must be in the range [0.0, 2.0]."),
    ({"contents": CONTENTS, "generationConfig": {"maxOutputTokens": "many"}},
     "Invalid value at 'generation_config.max_output_tokens' (TYPE_INT32), string"),
    ({"generationConfig": {"maxOutputTokens": 5}}, "* GenerateContentRequest.contents: contents is not specified"),
    ({"contents": [*CONTENTS, {"role": "assistant", "parts": [{"text": "Hello"}]}]}, "Please use a valid role: user, model."),
])
def test_gemini_refusals_online(emu: Emulator, body: dict, message: str) -> None:
    status, err = gemini_post(emu, body)
    assert status == 400 and err["error"]["status"] == "INVALID_ARGUMENT" and err["error"]["code"] == 400
    assert err["error"]["message"] == message
    if "Unknown name" in message:
        [detail] = err["error"]["details"]
        assert detail["@type"] == "type.googleapis.com/google.rpc.BadRequest" and detail["fieldViolations"][0]["description"] == message


def test_gemini_unknown_model_and_snake_case(emu: Emulator) -> None:
    status, err = gemini_post(emu, {"contents": CONTENTS}, model="gemini-3.1")  # the real id is gemini-3.1-pro-preview
    assert status == 404 and err["error"]["status"] == "NOT_FOUND"
    assert err["error"]["message"].startswith("models/gemini-3.1 is not found for API version v1beta, or is not supported for generateContent.")
    client = gem(emu)  # (kept in a name: google-genai closes its HTTP client when the Client is collected)
    with pytest.raises(genai_errors.APIError) as info:
        client.models.generate_content(model="gemini-3.1", contents="hi")
    assert info.value.code == 404
    assert client.models.generate_content(model="gemini-3.1-pro-preview", contents="hi").text
    # proto-JSON takes snake_case field names too.
    status, _ = gemini_post(emu, {"contents": CONTENTS, "generation_config": {"max_output_tokens": 5, "thinking_config": {"thinking_budget": 0}}})
    assert status == 200


def test_gemini_batch_refusals(emu: Emulator, tmp_path: Path) -> None:
    client = gem(emu)
    with pytest.raises(genai_errors.APIError) as info:
        client.batches.create(model="gemini-x", src=[{"contents": CONTENTS}])
    assert info.value.code == 404
    # Inline requests are part of the create body: one that does not parse fails the create.
    status, err = post(f"{emu.url}/v1beta/models/gemini-2.5-flash:batchGenerateContent",
                       {"batch": {"inputConfig": {"requests": {"requests": [{"request": {"contents": CONTENTS, "foo": 1}}]}}}},
                       {"x-goog-api-key": "g-test"})
    assert status == 400 and "Unknown name \"foo\" at 'batch.input_config.requests.requests[0].request'" in err["error"]["message"]
    # File input: each line is its own request; a bad one fails alone.
    path = tmp_path / "g.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in [
        {"key": "ok", "request": {"contents": CONTENTS}},
        {"key": "foo", "request": {"contents": CONTENTS, "foo": 1}},
        {"key": "neg", "request": {"contents": CONTENTS, "generationConfig": {"maxOutputTokens": -3}}},
    ]), encoding="utf-8")
    name = client.files.upload(file=str(path), config={"mime_type": "jsonl"}).name
    job = client.batches.get(name=client.batches.create(model="gemini-2.5-flash", src=name).name)
    lines = {x["key"]: x for x in jsonl(client.files.download(file=job.dest.file_name).decode())}
    assert "response" in lines["ok"]
    assert lines["foo"]["error"]["message"] == 'Invalid JSON payload received. Unknown name "foo": Cannot find field.'
    assert "max_output_tokens must be positive" in lines["neg"]["error"]["message"]


# ============================================================================ keys and added models


@pytest.fixture(scope="module")
def keyed() -> Any:
    with Emulator(latency=0.0, keys=["sk-right-key-0123456789", "g-right"], models=["my-fine-tune"]) as emulator:
        yield emulator


def test_wrong_keys_get_each_providers_refusal(keyed: Emulator) -> None:
    with pytest.raises(openai.AuthenticationError) as oinfo:
        oai(keyed, key="sk-wrong-key-abcdefghijklmnop").chat.completions.create(model="gpt-4.1", messages=USER)
    assert oinfo.value.body["message"] == ("Incorrect API key provided: sk-wrong" + "*" * 17 + "mnop. "
                                           "You can find your API key at https://platform.openai.com/account/api-keys.")
    assert (oinfo.value.body["type"], oinfo.value.code) == ("invalid_request_error", "invalid_api_key")
    with pytest.raises(anthropic.AuthenticationError) as ainfo:
        ant(keyed, key="sk-ant-wrong").messages.create(model="claude-sonnet-4-6", max_tokens=8, messages=USER)
    assert ainfo.value.body["error"] == {"type": "authentication_error", "message": "invalid x-api-key"}
    status, err = gemini_post(keyed, {"contents": CONTENTS}, key="g-wrong")
    assert (status, err["error"]["status"], err["error"]["message"]) == (400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")
    assert err["error"]["details"][0]["reason"] == "API_KEY_INVALID"
    wrong = gem(keyed, key="g-wrong")
    with pytest.raises(genai_errors.APIError) as ginfo:
        wrong.batches.list()
    assert ginfo.value.code == 400
    with pytest.raises(openai.AuthenticationError) as dinfo:
        oai(keyed, "/compatible-mode/v1", key="sk-wrong").chat.completions.create(model="qwen3.5-plus", messages=USER)
    assert dinfo.value.code == "invalid_api_key"
    # The right keys pass; a Gemini upload's chunks carry no key and need none.
    assert oai(keyed, key="sk-right-key-0123456789").chat.completions.create(model="gpt-4.1", messages=USER).choices
    assert ant(keyed, key="sk-right-key-0123456789").messages.create(model="claude-sonnet-4-6", max_tokens=8, messages=USER).content
    right = gem(keyed, key="g-right")
    assert right.models.generate_content(model="gemini-2.5-flash", contents="hi").text


def test_an_added_model_is_served_by_every_provider(keyed: Emulator, emu: Emulator) -> None:
    assert oai(keyed, key="sk-right-key-0123456789").chat.completions.create(model="my-fine-tune", messages=USER).choices
    assert ant(keyed, key="sk-right-key-0123456789").messages.create(model="my-fine-tune", max_tokens=8, messages=USER).content
    right = gem(keyed, key="g-right")
    assert right.models.generate_content(model="my-fine-tune", contents="hi").text
    with pytest.raises(openai.NotFoundError):
        oai(emu).chat.completions.create(model="my-fine-tune", messages=USER)  # not on an emulator that was not told


def test_the_cli_passes_models_and_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from batchrun.cli import cli
    from batchrun.emulator import __main__ as module_main

    seen: list[tuple] = []
    monkeypatch.setattr("batchrun.emulator.run_emulator", lambda *a, **k: seen.append((a, k)))
    r = CliRunner().invoke(cli, ["emulator", "--port", "0", "--model", "my-model", "--model", "other", "--key", "sk-a"])
    assert r.exit_code == 0, r.output
    args = seen[0][0]
    assert tuple(args[-2]) == ("my-model", "other") and tuple(args[-1]) == ("sk-a",)
    r = CliRunner().invoke(cli, ["emulator", "--port", "0", "--model", " "])
    assert r.exit_code == 1 and "--model" in r.output
    monkeypatch.setattr(module_main, "run_emulator", lambda **k: seen.append(((), k)))
    assert module_main.main(["--port", "0", "--model", "m1", "--key", "k1"]) == 0
    assert (seen[-1][1]["models"], seen[-1][1]["keys"]) == (["m1"], ["k1"])


def test_gemini_answers_a_file_it_does_not_hold_403_it_may_not_exist(emu: Emulator, tmp_path: Path) -> None:
    """Files API: a deleted (or never uploaded, or expired) file is 403 PERMISSION_DENIED "... or it
    may not exist", not a 404 (googleapis/python-genai#1218; discuss.ai.google.dev/t/50428)."""
    client = gem(emu)
    path = tmp_path / "f.jsonl"
    path.write_text('{"key": "a", "request": {"contents": [{"parts": [{"text": "hi"}]}]}}\n')
    uploaded = client.files.upload(file=str(path), config={"mime_type": "application/jsonl"})
    client.files.delete(name=uploaded.name)
    for call in (lambda: client.files.get(name=uploaded.name), lambda: client.files.download(file=uploaded.name)):
        with pytest.raises(genai_errors.APIError) as info:
            call()
        assert info.value.code == 403 and info.value.status == "PERMISSION_DENIED"
        assert "You do not have permission to access the File" in info.value.message and "or it may not exist" in info.value.message
