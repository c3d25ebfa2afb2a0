"""Every object the emulator answers with, checked against the official SDKs' own types and the
providers' published schemas (tests/sdk_conformance.py), unknown fields counted as violations.

The answers are recorded as the emulator sends them (``Recorder``) while the real SDKs, and
batchrun's own flows, drive it through every route kind batchrun supports (OpenAI chat and
Responses batches and online, OpenAI-compatible, Anthropic batches and online Messages, Gemini
batches with file input, inline batches and online generateContent) and every state: batches
validating / running / completed / failed / expired / cancelled, files, listings, deletions, and
result lines of every kind (success, refusal, per-line error, expired, cancelled). Zero violations;
and a deliberately broken object (a field removed, an unknown field added) is caught.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import Counter
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors

from batchrun.emulator import Emulator, builtin_responder
from conftest import Project, route, task
from answers import Answer, Recorder, report, violations

MARKERS = {
    "[[REFUSE]]": {"refusal": "I can't help with that."},
    "[[INVALID]]": {"error": {"status": 400, "message": "scripted invalid request"}},
    "[[BUSY]]": {"error": {"status": 429, "message": "scripted rate limit"}},
    "[[BROKEN]]": {"error": {"status": 500, "message": "scripted server error"}},
    "[[DOWN]]": {"error": {"status": 503, "message": "scripted unavailable"}},
    "[[EMPTY]]": "",
}
PROMPTS = ["Say hello.", *MARKERS]  # one request per result kind


def responder(request: dict) -> Any:
    for marker, reply in MARKERS.items():
        if marker in request["prompt"]:
            return reply
    return builtin_responder(request)


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def emu() -> Any:
    with Emulator(latency=0.0, responder=responder).start() as emulator:
        yield emulator


@pytest.fixture
def rec(emu: Emulator, monkeypatch: pytest.MonkeyPatch) -> Recorder:
    return Recorder(emu, monkeypatch)


def assert_clean(answers: list[Answer]) -> None:
    assert answers, "nothing was recorded"
    found = report(answers)
    assert not found, "\n".join(found)


def http(method: str, url: str, headers: dict | None = None, body: Any = None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- OpenAI


def chat_body(prompt: str, model: str = "gpt-5.5") -> dict:
    return {"model": model, "messages": [{"role": "user", "content": prompt}], "max_completion_tokens": 64}


def responses_body(prompt: str, model: str = "gpt-5.5") -> dict:
    return {"model": model, "input": prompt, "max_output_tokens": 64}


def openai_batch(client: openai.OpenAI, tmp_path: Path, endpoint: str, bodies: list[dict], window: str = "24h") -> Any:
    rows = [{"custom_id": f"r{i}", "method": "POST", "url": endpoint, "body": b} for i, b in enumerate(bodies)]
    uploaded = client.files.create(file=jsonl(tmp_path / f"in-{time.monotonic_ns()}.jsonl", rows).open("rb"), purpose="batch")
    return client.batches.create(input_file_id=uploaded.id, endpoint=endpoint, completion_window=window)  # type: ignore[arg-type]


def read_results(client: openai.OpenAI, batch: Any) -> list[dict]:
    lines = []
    for file_id in (batch.output_file_id, batch.error_file_id):
        if file_id:
            lines += [json.loads(x) for x in client.files.content(file_id).text.split("\n") if x]
    return lines


@pytest.mark.parametrize("base, endpoint, make", [
    ("/v1", "/v1/chat/completions", chat_body),
    ("/v1", "/v1/responses", responses_body),
    # The OpenAI-compatible provider the emulator models: DashScope's compatible mode.
    ("/compatible-mode/v1", "/v1/chat/completions", lambda p: chat_body(p, "qwen3.5-plus")),
], ids=["chat", "responses", "dashscope"])
def test_openai_batch_objects_in_every_state(emu: Emulator, rec: Recorder, tmp_path: Path, base: str, endpoint: str, make: Any) -> None:
    client = openai.OpenAI(base_url=emu.url + base, api_key="sk-test", max_retries=0)
    body = make
    statuses: Counter[str] = Counter()
    # completed, with a line of every kind (success, refusal, empty, per-line errors 400/429/500/503)
    batch = openai_batch(client, tmp_path, endpoint, [body(p) for p in PROMPTS])
    statuses[batch.status] += 1
    batch = client.batches.retrieve(batch.id)
    statuses[batch.status] += 1
    lines = read_results(client, batch)
    assert len(lines) == len(PROMPTS) and {line["response"]["status_code"] for line in lines} == {200, 400, 429, 500, 503}
    assert '"refusal": "I can\'t help with that."' in json.dumps(lines)
    # running: a slow batch is validating, then in_progress
    emu.add_fault({"kind": "slow", "latency": 60})
    slow = openai_batch(client, tmp_path, endpoint, [body("Say hello.")])
    statuses[client.batches.retrieve(slow.id).status] += 1
    statuses[client.batches.retrieve(slow.id).status] += 1
    # cancelled by the user: cancelling, then cancelled
    statuses[client.batches.cancel(slow.id).status] += 1
    statuses[client.batches.retrieve(slow.id).status] += 1
    # failed as a whole (validation, quota), expired with partial results, cancelled by the provider
    for fault in ({"kind": "fail_validation"}, {"kind": "quota"}, {"kind": "expire", "complete_fraction": 0.5},
                  {"kind": "cancel", "complete_fraction": 0.5}):
        emu.add_fault(fault)
        ended = client.batches.retrieve(openai_batch(client, tmp_path, endpoint, [body(p) for p in PROMPTS[:4]]).id)
        statuses[ended.status] += 1
        read_results(client, ended)
    assert set(statuses) == {"validating", "in_progress", "cancelling", "completed", "failed", "expired", "cancelled"}
    # listings, file objects (uploads and results), deletion, refusals
    list(client.batches.list(limit=2))
    client.files.retrieve(batch.output_file_id)
    for file in client.files.list().data[:2]:
        client.files.delete(file.id)
    with pytest.raises(openai.ConflictError):
        client.batches.cancel(batch.id)  # already completed
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve("file-missing")
    assert_clean(rec.take())


def test_openai_batch_lifecycle_values(emu: Emulator, rec: Recorder, tmp_path: Path) -> None:
    """The values a batch shows on its way (types/batch.py Batch.status; the Batch guide's status
    table; the API reference's create example): while validating its request_counts are all 0 (the
    file is not counted yet), then in_progress, then finalizing (every request done, the results
    being prepared: finalizing_at set, no output file yet), then completed (the emulator's batch is
    finalizing in the last tenth of its latency)."""
    client = openai.OpenAI(base_url=emu.url + "/v1", api_key="sk-test", max_retries=0)
    emu.add_fault({"kind": "slow", "latency": 60})
    created = openai_batch(client, tmp_path, "/v1/chat/completions", [chat_body("Say hello."), chat_body("[[INVALID]]")])
    for batch in (created, client.batches.retrieve(created.id)):
        assert batch.status == "validating" and batch.request_counts.model_dump() == {"total": 0, "completed": 0, "failed": 0}
    running = client.batches.retrieve(created.id)
    assert running.status == "in_progress" and running.request_counts.total == 2
    batch_rec = emu._core.batches[created.id]  # its last tenth of the emulator's latency: finalizing
    now = time.time()
    batch_rec.created, batch_rec.ready_at = now - 57, now + 3
    finalizing = client.batches.retrieve(created.id)
    assert finalizing.status == "finalizing" and finalizing.finalizing_at and finalizing.in_progress_at
    assert (finalizing.output_file_id, finalizing.error_file_id, finalizing.completed_at) == (None, None, None)
    assert finalizing.request_counts.model_dump() == {"total": 2, "completed": 1, "failed": 1}
    batch_rec.ready_at = now
    completed = client.batches.retrieve(created.id)
    assert completed.status == "completed" and completed.finalizing_at == finalizing.finalizing_at
    assert completed.output_file_id and completed.error_file_id and completed.completed_at
    with pytest.raises(openai.ConflictError) as info:  # an ended batch is not cancellable: 409, code null
        client.batches.cancel(created.id)
    assert info.value.body == {"message": "Cannot cancel a batch with status 'completed'.", "type": "invalid_request_error",
                               "param": None, "code": None}
    assert_clean(rec.take())


def test_openai_online_objects(emu: Emulator, rec: Recorder) -> None:
    client = openai.OpenAI(base_url=emu.url + "/v1", api_key="sk-test", max_retries=0)
    for prompt in ("Say hello.", "[[REFUSE]]", "[[EMPTY]]"):
        client.chat.completions.create(**chat_body(prompt))
        client.responses.create(**responses_body(prompt))
    for prompt in ("[[INVALID]]", "[[BUSY]]", "[[BROKEN]]"):
        with pytest.raises(openai.APIStatusError):
            client.chat.completions.create(**chat_body(prompt))
        with pytest.raises(openai.APIStatusError):
            client.responses.create(**responses_body(prompt))
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_missing")
    emu.add_fault({"kind": "http_error", "status": 503, "provider": "openai"})
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(**chat_body("Say hello."))
    assert http("GET", emu.url + "/v1/batches") == 401  # no key
    assert_clean(rec.take())


# --------------------------------------------------------------------------- Anthropic


def anthropic_request(custom_id: str, prompt: str, **params: Any) -> dict:
    return {"custom_id": custom_id, "params": {"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": [{"role": "user", "content": prompt}], **params}}


def test_anthropic_batch_objects_in_every_state(emu: Emulator, rec: Recorder) -> None:
    client = anthropic.Anthropic(base_url=emu.url, api_key="sk-ant-test", max_retries=0)
    requests = [anthropic_request(f"r{i}", p) for i, p in enumerate(PROMPTS)]
    requests.append({"custom_id": "nomax", "params": {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "x"}]}})
    statuses: Counter[str] = Counter()
    results: Counter[str] = Counter()
    batch = client.messages.batches.create(requests=requests)
    statuses[batch.processing_status] += 1
    statuses[client.messages.batches.retrieve(batch.id).processing_status] += 1
    results.update(r.result.type for r in client.messages.batches.results(batch.id))
    # canceling, then ended with canceled requests; expired requests
    emu.add_fault({"kind": "slow", "latency": 60})
    slow = client.messages.batches.create(requests=requests[:2])
    statuses[client.messages.batches.cancel(slow.id).processing_status] += 1
    results.update(r.result.type for r in client.messages.batches.results(slow.id))
    emu.add_fault({"kind": "expire", "complete_fraction": 0.5})
    expired = client.messages.batches.create(requests=requests[:2])
    results.update(r.result.type for r in client.messages.batches.results(expired.id))
    assert set(statuses) == {"in_progress", "canceling", "ended"}
    assert set(results) == {"succeeded", "errored", "canceled", "expired"}
    list(client.messages.batches.list(limit=2))
    client.messages.batches.delete(batch.id)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(batch.id)
    emu.add_fault({"kind": "fail_validation"})
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.create(requests=requests[:1])
    assert_clean(rec.take())


def test_anthropic_online_objects(emu: Emulator, rec: Recorder) -> None:
    client = anthropic.Anthropic(base_url=emu.url, api_key="sk-ant-test", max_retries=0)
    for prompt in ("Say hello.", "[[REFUSE]]", "[[EMPTY]]"):
        client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=[{"role": "user", "content": prompt}])
    for prompt in ("[[INVALID]]", "[[BUSY]]", "[[BROKEN]]"):
        with pytest.raises(anthropic.APIStatusError):
            client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=[{"role": "user", "content": prompt}])
    client.messages.count_tokens(model="claude-sonnet-4-6", messages=[{"role": "user", "content": "Say hello."}])
    client.models.retrieve("claude-sonnet-4-6")
    emu.add_fault({"kind": "http_error", "status": 529, "provider": "anthropic"})
    with pytest.raises(anthropic.APIStatusError):
        client.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=[{"role": "user", "content": "x"}])
    assert http("GET", emu.url + "/v1/messages/batches", {"x-api-key": "k"}) == 400  # no anthropic-version
    assert_clean(rec.take())


# --------------------------------------------------------------------------- Gemini


def gemini_line(key: str, prompt: str) -> dict:
    return {"key": key, "request": {"contents": [{"role": "user", "parts": [{"text": prompt}]}], "generationConfig": {"maxOutputTokens": 64}}}


def test_gemini_batch_objects_in_every_state(emu: Emulator, rec: Recorder, tmp_path: Path) -> None:
    client = genai.Client(api_key="g-test", http_options={"base_url": emu.url})
    path = jsonl(tmp_path / "req.jsonl", [gemini_line(f"k{i}", p) for i, p in enumerate(PROMPTS)])
    name = client.files.upload(file=str(path), config={"mime_type": "jsonl", "display_name": "req"}).name
    client.files.get(name=name)
    states: Counter[str] = Counter()

    def create(**faults: Any) -> Any:
        if faults:
            emu.add_fault(faults)
        job = client.batches.create(model="gemini-2.5-flash", src=name, config={"display_name": "job"})
        states[job.state.name] += 1
        return job

    job = client.batches.get(name=create().name)
    states[job.state.name] += 1
    client.files.download(file=job.dest.file_name)
    client.files.get(name=job.dest.file_name)
    slow = create(kind="slow", latency=60)
    for _ in range(2):  # pending at the first look, running after
        states[client.batches.get(name=slow.name).state.name] += 1
    client.batches.cancel(name=slow.name)
    states[client.batches.get(name=slow.name).state.name] += 1
    # failed as a whole, expired (no results), cancelled by the provider half-way (partial results)
    for fault in ({"kind": "fail_validation"}, {"kind": "expire", "complete_fraction": 0.5}, {"kind": "cancel", "complete_fraction": 0.5}):
        ended = client.batches.get(name=create(**fault).name)
        states[ended.state.name] += 1
        if ended.dest and ended.dest.file_name:
            client.files.download(file=ended.dest.file_name)
    inline = client.batches.create(model="gemini-2.5-flash", src=[{"contents": [{"parts": [{"text": p}], "role": "user"}]} for p in PROMPTS])
    client.batches.get(name=inline.name)
    assert set(states) == {"JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED",
                           "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"}
    list(client.batches.list(config={"page_size": 2}))
    list(client.files.list())
    client.batches.delete(name=job.name)
    client.files.delete(name=name)
    with pytest.raises(genai_errors.ClientError):
        client.batches.get(name=job.name)
    assert_clean(rec.take())


def test_gemini_empty_listings_omit_their_list(emu: Emulator, rec: Recorder) -> None:
    """proto3 JSON omits a repeated field that is empty (https://protobuf.dev/programming-guides/json/,
    "If a field has the default value ... it will be omitted"): an empty listing is {} on the wire,
    and google-genai reads it as an empty page."""
    client = genai.Client(api_key="g-test", http_options={"base_url": emu.url})
    assert list(client.batches.list()) == [] and list(client.files.list()) == []
    bodies = {a.path: json.loads(a.body) for a in rec.take()}
    assert list(bodies.values()) == [{}, {}], bodies


def test_gemini_usage_omits_zero_counts(emu: Emulator, rec: Recorder) -> None:
    """proto3 JSON omits an int32 at 0: an empty answer's usageMetadata has no candidatesTokenCount,
    a model that did not think no thoughtsTokenCount (captured: adcontextprotocol/adcp#7359, a
    MAX_TOKENS answer without candidatesTokenCount; neuron-core/neuron-ai#443)."""
    client = genai.Client(api_key="g-test", http_options={"base_url": emu.url, "retry_options": {"attempts": 1}})
    for prompt in ("Say hello.", "[[EMPTY]]"):
        client.models.generate_content(model="gemini-2.5-flash", contents=prompt)
    said, empty = [json.loads(a.body)["usageMetadata"] for a in rec.take()]
    assert said["candidatesTokenCount"] > 0 and "thoughtsTokenCount" not in said
    assert "candidatesTokenCount" not in empty and empty["totalTokenCount"] == empty["promptTokenCount"]


def test_gemini_online_objects(emu: Emulator, rec: Recorder) -> None:
    client = genai.Client(api_key="g-test", http_options={"base_url": emu.url, "retry_options": {"attempts": 1}})
    for prompt in ("Say hello.", "[[REFUSE]]", "[[EMPTY]]"):
        client.models.generate_content(model="gemini-2.5-flash", contents=prompt)
    for prompt in ("[[INVALID]]", "[[BUSY]]", "[[BROKEN]]"):
        with pytest.raises(genai_errors.APIError):
            client.models.generate_content(model="gemini-2.5-flash", contents=prompt)
    client.models.count_tokens(model="gemini-2.5-flash", contents="Say hello.")
    client.models.get(model="gemini-2.5-flash")
    emu.add_fault({"kind": "http_error", "status": 503, "provider": "gemini"})
    with pytest.raises(genai_errors.ServerError):
        client.models.generate_content(model="gemini-2.5-flash", contents="Say hello.")
    assert http("GET", emu.url + "/v1beta/batches") == 403  # no key
    assert_clean(rec.take())


@pytest.mark.parametrize("provider, path, headers", [
    ("openai", "/v1/chat/completions", {"Authorization": "Bearer sk-test"}),
    ("anthropic", "/v1/messages", {"x-api-key": "k", "anthropic-version": "2023-06-01"}),
    ("gemini", "/v1/models/gemini-2.5-flash:generateContent", {"x-goog-api-key": "k"}),
])
def test_an_unreadable_request_gets_the_provider_error_envelope(emu: Emulator, provider: str, path: str, headers: dict) -> None:
    """A request whose body cannot be framed (a bad Content-Length) is refused in the envelope of
    the API it was sent to, like every other error."""
    conn = HTTPConnection(emu.host, emu.port, timeout=5)
    try:
        conn.putrequest("POST", path)
        for name, value in {**headers, "Content-Length": "abc"}.items():
            conn.putheader(name, value)
        conn.endheaders()
        resp = conn.getresponse()
        status, body = resp.status, resp.read()
    finally:
        conn.close()
    answer = Answer(provider, "POST", path, status, body)
    assert status == 400 and answer.kind == "error" and violations(answer) == [], body


# --------------------------------------------------------------------------- batchrun's own flows


ROUTES = {
    "oai-chat": route("openai", "gpt-5.5"),
    "oai-responses": route("openai", "gpt-5.5", endpoint="responses"),
    "oai-chat-sync": route("openai", "gpt-5.5", transport="sync"),
    "oai-responses-sync": route("openai", "gpt-5.5", endpoint="responses", transport="sync"),
    "compat": route("openai-compatible", "qwen3.5-plus"),
    "compat-sync": route("openai-compatible", "qwen3.5-plus", transport="sync"),
    "claude": route("anthropic", "claude-sonnet-4-6"),
    "claude-sync": route("anthropic", "claude-sonnet-4-6", transport="sync"),
    "gemini": route("gemini", "gemini-2.5-flash"),
    "gemini-sync": route("gemini", "gemini-2.5-flash", transport="sync"),
}


def test_batchrun_flows_get_only_valid_objects(project: Project, emu: Emulator, rec: Recorder) -> None:
    """submit / poll / collect / status for every route kind batchrun supports, with a task per
    result kind: every answer the emulator sent them is valid."""
    project.doc("harbor.txt", "The harbor crane failed at 03:14 on Tuesday. The operator was Mara Quist.\n" * 3)
    project.tasks([task(f"t{i}", f"{marker} When did the crane fail?", "harbor.txt") for i, marker in enumerate(["", *MARKERS])])
    project.config(routes=ROUTES, panel=[])
    for command in ("submit", "poll", "collect", "status"):
        result = project.run(command, emulator=emu)
        assert result.exit_code in (0, 2), result.output
    answers = rec.take()
    kinds = {(a.provider, a.kind) for a in answers}
    assert {("openai", k) for k in ("file", "batch", "file_content", "chat", "response")} <= kinds
    assert {("anthropic", k) for k in ("batch", "results", "message")} <= kinds
    assert {("gemini", k) for k in ("upload", "batch", "download", "generate")} <= kinds
    assert any(a.status >= 400 for a in answers)  # the online per-request errors
    assert_clean(answers)


# --------------------------------------------------------------------------- what a compliance suite sends


def test_system_prompts_and_multi_turn_conversations_on_every_online_endpoint(emu: Emulator, rec: Recorder) -> None:
    """The cases an outside compliance suite runs against the online endpoints (plain, system
    prompt, multi-turn, error): each provider's own way of saying them is answered with a valid
    object, and an OpenAI-style role sent to Gemini is refused as Gemini refuses it."""
    oa = openai.OpenAI(base_url=emu.url + "/v1", api_key="sk-test", max_retries=0)
    turns = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "And?"}]
    for system in ("system", "developer"):
        oa.chat.completions.create(model="gpt-4.1", messages=[{"role": system, "content": "Be terse."}, *turns])
    oa.responses.create(model="gpt-4.1", instructions="Be terse.", input="Hi")
    oa.responses.create(model="gpt-4.1", input=[{"role": "developer", "content": "Be terse."}, *turns[:2],
                                                {"role": "user", "content": [{"type": "input_text", "text": "And?"}]}])
    an = anthropic.Anthropic(base_url=emu.url, api_key="sk-ant-test", max_retries=0)
    an.messages.create(model="claude-sonnet-4-6", max_tokens=64, system="Be terse.", messages=turns)
    an.messages.create(model="claude-sonnet-4-6", max_tokens=64, system=[{"type": "text", "text": "Be terse."}],
                       messages=[*turns[:2], {"role": "user", "content": [{"type": "text", "text": "And?"}]}])
    ge = genai.Client(api_key="g-test", http_options={"base_url": emu.url, "retry_options": {"attempts": 1}})
    history = [genai.types.Content(role="user", parts=[genai.types.Part(text="Hi")]),
               genai.types.Content(role="model", parts=[genai.types.Part(text="Hello.")]),
               genai.types.Content(role="user", parts=[genai.types.Part(text="And?")])]
    ge.models.generate_content(model="gemini-2.5-flash", contents=history,
                               config=genai.types.GenerateContentConfig(system_instruction="Be terse."))
    with pytest.raises(genai_errors.ClientError, match="Please use a valid role: user, model."):
        ge.models.generate_content(model="gemini-2.5-flash", contents=[genai.types.Content(role="assistant", parts=[genai.types.Part(text="Hi")])])
    answers = rec.take()
    assert Counter(a.provider for a in answers if a.status == 200) == {"openai": 4, "anthropic": 2, "gemini": 1}
    assert_clean(answers)


# --------------------------------------------------------------------------- the check catches a broken object


def test_a_broken_object_fails_the_check(emu: Emulator, rec: Recorder, tmp_path: Path) -> None:
    """A field removed or an unknown field added (the mangle_json / corrupt_line faults) is reported,
    and for OpenAI also what only the published spec forbids: a field it requires that the SDK types
    Optional, a field the SDK defines and the spec does not, a value outside the spec's enum, an
    unknown field in a listing envelope the SDK has no type for."""
    oai = openai.OpenAI(base_url=emu.url + "/v1", api_key="sk-test", max_retries=0)
    ant = anthropic.Anthropic(base_url=emu.url, api_key="sk-ant-test", max_retries=0)
    gem = genai.Client(api_key="g-test", http_options={"base_url": emu.url})
    emu.add_fault({"kind": "mangle_json", "path": "/batches", "provider": "openai", "remove": ["created_at"]})
    emu.add_fault({"kind": "mangle_json", "path": "/responses", "remove": ["error"],
                   "set": {"usage.input_tokens_details.surprise": 1, "incomplete_details": {"reason": "steered"},
                           "usage.input_tokens_details.cache_write_tokens_details": {"ttl_12h_tokens": 0, "ttl_30m_tokens": 0}}})
    emu.add_fault({"kind": "mangle_json", "path": "/chat/completions", "remove": ["message.refusal"]})
    emu.add_fault({"kind": "mangle_json", "method": "GET", "path": "/files$", "set": {"surprise": 1}})
    emu.add_fault({"kind": "mangle_json", "path": "/v1/messages$", "remove": ["usage.cache_read_input_tokens"]})
    emu.add_fault({"kind": "mangle_json", "path": ":generateContent", "set": {"usageMetadata.surprise": 1}})
    emu.add_fault({"kind": "corrupt_line", "provider": "anthropic",
                   "line": json.dumps({"custom_id": "$CUSTOM_ID", "result": {"type": "canceled"}, "surprise": True})})
    openai_batch(oai, tmp_path, "/v1/chat/completions", [chat_body("Say hello.")])
    oai.responses.create(**responses_body("Say hello."))
    oai.chat.completions.create(**chat_body("Say hello."))
    list(oai.files.list())
    ant.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=[{"role": "user", "content": "Say hello."}])
    list(ant.messages.batches.results(ant.messages.batches.create(requests=[anthropic_request("r0", "Say hello.")]).id))
    gem.models.generate_content(model="gemini-2.5-flash", contents="Say hello.")
    answers = rec.take()
    with pytest.raises(AssertionError) as info:
        assert_clean(answers)
    found = str(info.value)
    assert "openai POST /v1/batches [200]: Batch.created_at: Field required" in found
    assert "Response.usage.input_tokens_details.surprise: not a field of InputTokensDetails" in found
    # the published spec's own rules, which the SDK types do not carry
    assert "Response.error: missing (required by the published schema)" in found
    assert "Response.usage.input_tokens_details.cache_write_tokens_details: not defined by the published schema" in found
    assert "Response.incomplete_details.reason: 'steered' is not one of the published schema's" in found
    assert "ChatCompletion.choices[0].message.refusal: missing (required by the published schema)" in found
    assert "openai GET /v1/files [200]: ListFilesResponse.surprise: Extra inputs are not permitted" in found
    assert "Message.usage.cache_read_input_tokens: missing (required by the published schema)" in found
    assert "MessageBatchIndividualResponse.surprise: not a field of MessageBatchIndividualResponse" in found
    assert "GenerateContentResponse.usageMetadata.surprise: Extra inputs are not permitted" in found
    # and nothing else: every answer the faults left alone is clean
    broken = {(a.provider, a.kind) for a in answers if violations(a)}
    assert broken == {("openai", "batch"), ("openai", "response"), ("openai", "chat"), ("openai", "file_list"),
                      ("anthropic", "message"), ("anthropic", "results"), ("gemini", "generate")}
