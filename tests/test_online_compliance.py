"""The online endpoints as a compliance suite sees them: plain, system-prompt, multi-turn and error
cases for OpenAI chat, OpenAI Responses, Anthropic Messages and Gemini generateContent, through
the real SDKs.

Each answer must be well formed for its SDK and valid against the provider's published schema
(tests/sdk_conformance.py, unknown fields counted as violations), and must answer the *last* user
turn: the built-in responder answers a batchrun generation prompt from its document and anything
else with "OK", so a conversation that opens with "Hello." and ends with the generation prompt is
answered from the document. Errors come in each provider's exact envelope and status code:
OpenAI ``{"error": {message, type, param, code}}``, Anthropic
``{"type": "error", "error": {type, message}, "request_id"}``, Google
``{"error": {code, message, status}}``.
"""

from __future__ import annotations

import re
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as gt

from batchrun.emulator import Emulator
from answers import Recorder, report

DOCUMENT = ("The Harbor Bridge opened in 1932 after six years of construction. It was designed by engineer Ruth Calder. "
            "Seagulls nest under the eastern span every spring.")
PROMPT = ("Answer using ONLY the document below. Include every specific detail from the text.\n\n"
          f"Question: Who designed the Harbor Bridge?\n\nDocument:\n{DOCUMENT}")
SYSTEM = "You are a careful assistant. Answer briefly."
CASES = ["plain", "system", "multi-turn"]


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture(scope="module")
def emu() -> Any:
    with Emulator(latency=0.0).start() as emulator:
        yield emulator


@pytest.fixture
def rec(emu: Emulator, monkeypatch: pytest.MonkeyPatch) -> Any:
    emu.clear_faults()
    recorder = Recorder(emu, monkeypatch)
    yield recorder
    answers = recorder.take()
    assert answers, "the emulator answered nothing"
    found = report(answers)
    assert not found, "\n".join(found)


def answers_the_document(text: str | None) -> None:
    """An extractive answer from DOCUMENT (the built-in answer to the generation prompt), not "OK"."""
    words = re.findall(r"[A-Za-z]{4,}", text or "")
    assert words and all(w in DOCUMENT for w in words), text


# --------------------------------------------------------------------------- OpenAI chat


def chat_messages(case: str) -> list[dict]:
    if case == "plain":
        return [{"role": "user", "content": PROMPT}]
    if case == "system":
        return [{"role": "system", "content": SYSTEM}, {"role": "developer", "content": [{"type": "text", "text": "Be exact."}]},
                {"role": "user", "content": PROMPT}]
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Hello."},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": [{"type": "text", "text": "Here is a document."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Thanks, I have read it."}]},
            {"role": "user", "content": [{"type": "text", "text": PROMPT}]}]


@pytest.mark.parametrize("case", CASES)
def test_openai_chat(emu: Emulator, rec: Recorder, case: str) -> None:
    client = openai.OpenAI(base_url=f"{emu.url}/v1", api_key="sk-test", max_retries=0)
    completion = client.chat.completions.create(model="gpt-5.5", messages=chat_messages(case))  # type: ignore[arg-type]
    choice = completion.choices[0]
    assert completion.object == "chat.completion" and choice.message.role == "assistant" and choice.finish_reason == "stop"
    answers_the_document(choice.message.content)
    assert completion._request_id  # the x-request-id header
    assert completion.usage and completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens


def openai_error(exc: openai.APIStatusError) -> dict:
    body = exc.response.json()
    assert list(body) == ["error"] and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


def test_openai_chat_errors(emu: Emulator, rec: Recorder) -> None:
    client = openai.OpenAI(base_url=f"{emu.url}/v1", api_key="sk-test", max_retries=0)
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="gpt-5.5", messages=[])
    assert bad.value.status_code == 400
    assert openai_error(bad.value) == {"message": "Invalid 'messages': empty array. Expected an array with minimum length 1, but got "
                                                  "an empty array instead.", "type": "invalid_request_error",
                                       "param": "messages", "code": "empty_array"}
    emu.add_fault({"kind": "request_error", "status": 429, "provider": "openai"})
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="gpt-5.5", messages=chat_messages("plain"))
    assert limited.value.status_code == 429 and openai_error(limited.value)["type"] == "requests"


# --------------------------------------------------------------------------- OpenAI Responses


def responses_kwargs(case: str) -> dict:
    if case == "plain":
        return {"input": PROMPT}
    if case == "system":
        return {"instructions": SYSTEM,
                "input": [{"role": "developer", "content": "Be exact."},
                          {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}]}
    return {"instructions": SYSTEM,
            "input": [{"role": "user", "content": "Hello."},
                      {"role": "assistant", "content": "Hello! How can I help?"},
                      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}]}


@pytest.mark.parametrize("case", CASES)
def test_openai_responses(emu: Emulator, rec: Recorder, case: str) -> None:
    client = openai.OpenAI(base_url=f"{emu.url}/v1", api_key="sk-test", max_retries=0)
    response = client.responses.create(model="gpt-5.5", max_output_tokens=256, **responses_kwargs(case))
    assert response.object == "response" and response.status == "completed"
    assert response.output[0].type == "message" and response.output[0].role == "assistant"
    answers_the_document(response.output_text)
    if case != "plain":
        assert response.instructions == SYSTEM
    assert response.usage and response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens


def test_openai_responses_errors(emu: Emulator, rec: Recorder) -> None:
    client = openai.OpenAI(base_url=f"{emu.url}/v1", api_key="sk-test", max_retries=0)
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="gpt-5.5", input=PROMPT, max_output_tokens=8)
    assert bad.value.status_code == 400
    error = openai_error(bad.value)
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", "max_output_tokens", "integer_below_min_value")
    emu.add_fault({"kind": "request_error", "status": 503, "provider": "openai"})
    with pytest.raises(openai.InternalServerError) as down:
        client.responses.create(model="gpt-5.5", input=PROMPT)
    assert down.value.status_code == 503 and openai_error(down.value)["type"] == "server_error"


# --------------------------------------------------------------------------- Anthropic Messages


def anthropic_kwargs(case: str) -> dict:
    if case == "plain":
        return {"messages": [{"role": "user", "content": PROMPT}]}
    if case == "system":
        return {"system": SYSTEM, "messages": [{"role": "user", "content": PROMPT}]}
    return {"system": [{"type": "text", "text": SYSTEM}, {"type": "text", "text": "Be exact."}],
            "messages": [{"role": "user", "content": "Hello."},
                         {"role": "assistant", "content": "Hello! How can I help?"},
                         {"role": "user", "content": [{"type": "text", "text": "Here is a document."}]},
                         {"role": "assistant", "content": [{"type": "text", "text": "Thanks, I have read it."}]},
                         {"role": "user", "content": [{"type": "text", "text": PROMPT}]}]}


@pytest.mark.parametrize("case", [*CASES, "system-blocks"])
def test_anthropic_messages(emu: Emulator, rec: Recorder, case: str) -> None:
    client = anthropic.Anthropic(base_url=emu.url, api_key="sk-ant-test", max_retries=0)
    kwargs = anthropic_kwargs("multi-turn" if case == "system-blocks" else case)
    if case == "system-blocks":  # a system prompt as text blocks, one user turn
        kwargs["messages"] = [{"role": "user", "content": PROMPT}]
    message = client.messages.create(model="claude-sonnet-4-6", max_tokens=256, **kwargs)
    assert message.type == "message" and message.role == "assistant" and message.stop_reason == "end_turn"
    assert message.content[0].type == "text"
    answers_the_document(message.content[0].text)
    assert message._request_id  # the request-id header
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0


def anthropic_error(exc: anthropic.APIStatusError) -> dict:
    body = exc.response.json()
    assert set(body) == {"type", "error", "request_id"} and body["type"] == "error", body
    assert set(body["error"]) == {"type", "message"} and body["request_id"] == exc.response.headers["request-id"]
    return body["error"]


def test_anthropic_messages_errors(emu: Emulator, rec: Recorder) -> None:
    client = anthropic.Anthropic(base_url=emu.url, api_key="sk-ant-test", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as bad:
        # anthropic-version 2026-10-21 (the SDK's default) has no top_p: an unknown field.
        client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=[{"role": "user", "content": "x"}],
                               extra_body={"top_p": 0.5})
    assert bad.value.status_code == 400
    assert anthropic_error(bad.value) == {"type": "invalid_request_error", "message": "top_p: Extra inputs are not permitted"}
    emu.add_fault({"kind": "request_error", "status": 529, "provider": "anthropic"})
    with pytest.raises(anthropic.APIStatusError) as overloaded:
        client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=[{"role": "user", "content": PROMPT}])
    assert overloaded.value.status_code == 529 and anthropic_error(overloaded.value)["type"] == "overloaded_error"


# --------------------------------------------------------------------------- Gemini generateContent


def gemini_kwargs(case: str) -> dict:
    if case == "plain":
        return {"contents": PROMPT}
    if case == "system":
        return {"contents": [gt.Content(role="user", parts=[gt.Part(text=PROMPT)])],
                "config": gt.GenerateContentConfig(system_instruction=SYSTEM, max_output_tokens=256)}
    return {"contents": [{"role": "user", "parts": [{"text": "Hello."}, {"text": "Here is a document."}]},
                         {"role": "model", "parts": [{"text": "Hello! How can I help?"}]},
                         {"role": "user", "parts": [{"text": PROMPT}]}],
            "config": {"system_instruction": {"parts": [{"text": SYSTEM}]}}}


@pytest.mark.parametrize("case", CASES)
def test_gemini_generate_content(emu: Emulator, rec: Recorder, case: str) -> None:
    client = genai.Client(api_key="g-test", http_options={"base_url": emu.url})
    response = client.models.generate_content(model="gemini-2.5-flash", **gemini_kwargs(case))
    candidate = response.candidates[0]
    assert candidate.finish_reason == gt.FinishReason.STOP and candidate.content.role == "model"
    answers_the_document(response.text)
    usage = response.usage_metadata
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count


def google_error(exc: genai_errors.APIError) -> dict:
    body = exc.response.json()
    assert list(body) == ["error"] and set(body["error"]) <= {"code", "message", "status", "details"}, body
    assert {"code", "message", "status"} <= set(body["error"]) and body["error"]["code"] == exc.code
    return body["error"]


def test_gemini_generate_content_errors(emu: Emulator, rec: Recorder) -> None:
    client = genai.Client(api_key="g-test", http_options={"base_url": emu.url, "retry_options": {"attempts": 1}})
    emu.set_windows({"gemini-2.5-flash": 10})  # a prompt over the model's context window
    try:
        with pytest.raises(genai_errors.ClientError) as bad:
            client.models.generate_content(model="gemini-2.5-flash", contents=PROMPT)
    finally:
        emu.clear_windows()
    assert bad.value.code == 400 and google_error(bad.value)["status"] == "INVALID_ARGUMENT"
    assert "exceeds the maximum number of tokens allowed (10)" in bad.value.message
    emu.add_fault({"kind": "request_error", "status": 429, "provider": "gemini"})
    with pytest.raises(genai_errors.ClientError) as limited:
        client.models.generate_content(model="gemini-2.5-flash", contents=PROMPT)
    assert limited.value.code == 429 and google_error(limited.value)["status"] == "RESOURCE_EXHAUSTED"


def test_the_answer_is_to_the_last_user_turn(emu: Emulator, rec: Recorder) -> None:
    """The other way round: a conversation that ends with "Hello." is answered "OK" (the built-in
    answer to anything but batchrun's prompts), though it began with a generation prompt."""
    client = openai.OpenAI(base_url=f"{emu.url}/v1", api_key="sk-test", max_retries=0)
    completion = client.chat.completions.create(model="gpt-5.5", messages=[
        {"role": "user", "content": PROMPT}, {"role": "assistant", "content": "Ruth Calder."}, {"role": "user", "content": "Hello."}])
    assert completion.choices[0].message.content == "OK"
