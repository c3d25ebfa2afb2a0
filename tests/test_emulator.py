"""The emulator driven by the real, unmodified SDKs (openai, anthropic, google-genai) over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import anthropic
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors

from batchrun.emulator import REJECTS_TEMPERATURE, Emulator, builtin_responder
from batchrun.emulator.responder import content_tokens, model_quality

REPO = Path(__file__).resolve().parents[1]
GEN_HEAD = "Answer using ONLY the document below. Include every specific detail from the text.\n\n"
DOCUMENT = (
    "The Harbor Bridge opened in 1932 after six years of construction. "
    "It was designed by engineer Ruth Calder. "
    "The city council approved a toll of 20 cents in 1931! "
    "Seagulls nest under the eastern span every spring.\n"
    "Local bakeries sell bridge-shaped bread on weekends."
)
QUESTION = "Who designed the Harbor Bridge and when did it open?"
# Models whose built-in answers keep every word and take >= 3 sentences (see model_quality).
OPENAI_MODEL, ANTHROPIC_MODEL, GEMINI_MODEL = "gpt-5.1", "claude-sonnet-4-6", "gemini-2.5-pro"


def gen_prompt(question: str = QUESTION, document: str = DOCUMENT) -> str:
    return f"{GEN_HEAD}Question: {question}\n\nDocument:\n{document}"


def judge_prompt(rubric: list[tuple[object, str]], response: str) -> str:
    lines = [
        "STRICT grader. Only award points for SPECIFIC details present.",
        f"QUESTION: {QUESTION}",
        "RUBRIC:",
        *[f"P{i} ({pts}pts): {crit}" for i, (pts, crit) in enumerate(rubric, start=1)],
        "RESPONSE:",
        response,
        'Reply JSON: {"points_awarded":[<pts>],"total":<sum>}',
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch):
    """No provider env var (base URLs, keys, profiles, API versions, Vertex mode) or proxy leaks in."""
    for name in list(os.environ):
        upper = name.upper()
        if upper.startswith(("OPENAI_", "ANTHROPIC_", "GOOGLE_", "GEMINI_")) or upper in (
            "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"
        ):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def emu():
    with Emulator(latency=0.0).start() as emulator:
        yield emulator


def oai(emu: Emulator, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{emu.url}/v1", api_key="sk-test", **kw)


def ant(emu: Emulator, **kw) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=emu.url, api_key="sk-ant-test", **kw)


def gem(emu: Emulator, **http) -> genai.Client:
    return genai.Client(api_key="g-test", http_options={"base_url": emu.url, **http})


def chat_line(custom_id: str, content: str, model: str = OPENAI_MODEL, url: str = "/v1/chat/completions", **body) -> dict:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": url,
        "body": {"model": model, "messages": [{"role": "user", "content": content}], **body},
    }


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def openai_batch(client, tmp_path, rows, endpoint="/v1/chat/completions", **kw):
    path = write_jsonl(tmp_path / f"in-{time.monotonic_ns()}.jsonl", rows)
    with open(path, "rb") as f:
        uploaded = client.files.create(file=f, purpose="batch")
    return client.batches.create(input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h", **kw)


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.split("\n") if line]


def anthropic_req(custom_id: str, content: str = "hi", model: str = ANTHROPIC_MODEL, **params) -> dict:
    return {
        "custom_id": custom_id,
        "params": {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": content}], **params},
    }


def gemini_upload(client, tmp_path, rows) -> str:
    path = write_jsonl(tmp_path / f"g-{time.monotonic_ns()}.jsonl", rows)
    return client.files.upload(file=str(path), config={"mime_type": "jsonl"}).name


def gemini_line(key: str, text: str) -> dict:
    return {"key": key, "request": {"contents": [{"parts": [{"text": text}], "role": "user"}]}}


def http_json(method: str, url: str, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, json.loads(resp.read() or b"null")


# ----------------------------------------------------------------------------- OpenAI


def test_openai_files_and_batch_roundtrip(emu, tmp_path):
    client = oai(emu)
    rows = [chat_line(f"r{i}", gen_prompt()) for i in range(3)]
    batch = openai_batch(client, tmp_path, rows, metadata={"run": "t1"})
    assert batch.status == "validating"
    assert batch.metadata == {"run": "t1"} and batch.completion_window == "24h"

    input_file = client.files.retrieve(batch.input_file_id)
    assert input_file.purpose == "batch" and input_file.bytes > 0 and input_file.expires_at

    batch = client.batches.retrieve(batch.id)  # latency 0: done on the first retrieve
    assert batch.status == "completed"
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (3, 3, 0)
    assert batch.error_file_id is None and batch.completed_at and batch.model == OPENAI_MODEL
    assert batch.usage.input_tokens > 0 and batch.usage.total_tokens == batch.usage.input_tokens + batch.usage.output_tokens

    lines = jsonl(client.files.content(batch.output_file_id).text)
    assert [line["custom_id"] for line in lines] == ["r0", "r1", "r2"]
    body = lines[0]["response"]["body"]
    assert lines[0]["response"]["status_code"] == 200 and lines[0]["error"] is None
    assert "Ruth Calder" in body["choices"][0]["message"]["content"]
    usage = body["usage"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 0
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert usage["prompt_tokens"] == -(-len(gen_prompt()) // 4)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]

    output_file = client.files.retrieve(batch.output_file_id)
    assert output_file.purpose == "batch_output"
    assert {f.id for f in client.files.list()} >= {batch.input_file_id, batch.output_file_id}
    assert client.files.delete(batch.input_file_id).deleted is True
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(batch.input_file_id)


def test_openai_batch_list_pagination_newest_first(emu, tmp_path):
    client = oai(emu)
    ids = [openai_batch(client, tmp_path, [chat_line("a", "x")]).id for _ in range(3)]
    page = client.batches.list(limit=2)
    assert [b.id for b in page.data] == [ids[2], ids[1]] and page.has_more is True
    assert [b.id for b in client.batches.list(limit=2)] == ids[::-1]  # auto-paging via after=
    raw = http_json("GET", f"{emu.url}/v1/batches?limit=1", headers={"Authorization": "Bearer x"})[1]
    assert raw["object"] == "list" and raw["first_id"] == raw["last_id"] == ids[2]


def ready_now(emu: Emulator, batch_id: str) -> None:
    """The batch's latency is over from now on: the test moves its clock instead of sleeping it out
    (a create and two looks within a short latency were not a given on a loaded machine)."""
    emu._core.batches[batch_id].ready_at = time.time()


def test_openai_status_sequence_with_latency(tmp_path):
    with Emulator(latency=3600).start() as emu:
        client = oai(emu)
        batch = openai_batch(client, tmp_path, [chat_line("a", "x")])
        seen = [batch.status, client.batches.retrieve(batch.id).status, client.batches.retrieve(batch.id).status]
        assert seen == ["validating", "validating", "in_progress"]
        ready_now(emu, batch.id)
        assert client.batches.retrieve(batch.id).status == "completed"


def test_openai_cancel_before_ready(tmp_path):
    with Emulator(latency=30).start() as emu:
        client = oai(emu)
        batch = openai_batch(client, tmp_path, [chat_line(f"c{i}", "x") for i in range(2)])
        cancelled = client.batches.cancel(batch.id)
        assert cancelled.status == "cancelling" and cancelled.cancelling_at
        final = client.batches.retrieve(batch.id)
        assert final.status == "cancelled" and final.cancelled_at
        assert final.output_file_id is None and final.request_counts.completed == 0
        with pytest.raises(openai.ConflictError):  # an ended batch is not cancellable (409)
            client.batches.cancel(batch.id)


def test_batch_processed_once_under_concurrent_polls(tmp_path):
    import threading

    calls = []
    lock = threading.Lock()

    def counting(request):
        with lock:
            calls.append(request["custom_id"])
        return "x"

    with Emulator(latency=3600, responder=counting).start() as emu:
        client = oai(emu)
        batch = openai_batch(client, tmp_path, [chat_line(f"r{i}", "x") for i in range(20)])
        ready_now(emu, batch.id)  # ready, not yet looked at: the eight looks race to process it
        statuses = []
        threads = [threading.Thread(target=lambda: statuses.append(client.batches.retrieve(batch.id).status)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert statuses == ["completed"] * 8
        assert sorted(calls) == sorted(f"r{i}" for i in range(20))


def test_openai_request_counts_move_truthfully_while_the_batch_runs(tmp_path):
    """OpenAI's request_counts move while a batch is in_progress: the emulator answers requests as
    time passes and reports exactly those, never taking one back, each answered once."""
    calls = []

    def counting(request):
        calls.append(request["custom_id"])
        return "x"

    with Emulator(latency=3600, responder=counting).start() as emu:
        emu.add_fault({"kind": "request_error", "status": 500, "custom_id": "r1"})
        client = oai(emu)
        batch = openai_batch(client, tmp_path, [chat_line(f"r{i}", "x") for i in range(8)])
        rec = emu._core.batches[batch.id]
        seen = []
        for tenth in range(11):  # before each look a tenth more of the batch's hour is gone (the test moves its clock)
            now = time.time()
            rec.created, rec.ready_at = now - 360 * tenth, now + 360 * (10 - tenth)
            batch = client.batches.retrieve(batch.id)
            c = batch.request_counts
            seen.append((c.completed, c.failed))
            # total is 0 while validating (the API reference's create example), then 8.
            assert c.total == (0 if batch.status == "validating" else 8) and c.completed + c.failed <= 8
            # What the counts say is done was answered by then, and nothing more (the faulted r1
            # fails before the responder is asked).
            assert len(calls) == c.completed
        assert batch.status == "completed"
        assert seen == sorted(seen) and all(b[0] >= a[0] and b[1] >= a[1] for a, b in zip(seen, seen[1:]))
        assert any(0 < done + failed < 8 for done, failed in seen), seen  # seen part-way, not only 0 then all
        assert seen[-1] == (7, 1) and sorted(calls) == sorted(f"r{i}" for i in range(8) if i != 1)
        assert len(jsonl(client.files.content(batch.output_file_id).text)) == 7
        assert [line["custom_id"] for line in jsonl(client.files.content(batch.error_file_id).text)] == ["r1"]


def test_openai_online_chat_and_responses(emu):
    client = oai(emu)
    chat = client.chat.completions.create(model=OPENAI_MODEL, messages=[{"role": "user", "content": gen_prompt()}])
    assert "1932" in chat.choices[0].message.content and chat.choices[0].finish_reason == "stop"
    assert chat.usage.prompt_tokens > 0 and chat.usage.completion_tokens_details.reasoning_tokens == 0

    resp = client.responses.create(model=OPENAI_MODEL, input=gen_prompt(), max_output_tokens=100)
    assert "Ruth Calder" in resp.output_text and resp.usage.input_tokens == chat.usage.prompt_tokens
    resp2 = client.responses.create(
        model=OPENAI_MODEL, input=[{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}]
    )
    assert resp2.output_text == "OK"

    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gpt-5.4", temperature=0.1, messages=[{"role": "user", "content": "x"}])
    assert info.value.code == "unsupported_value" and info.value.param == "temperature"
    assert "o3" in REJECTS_TEMPERATURE


def test_temperature_rule_is_per_line_on_the_compatible_provider(emu, tmp_path):
    """DashScope's compatible mode (the OpenAI-compatible provider modelled): its own base path,
    its 24h-336h windows, its models; a line the model refuses fails alone."""
    client = openai.OpenAI(base_url=f"{emu.url}/compatible-mode/v1", api_key="sk-test")
    rows = [
        chat_line("ok", "x", model="qwen3.7-plus"),
        chat_line("hot", "x", model="qwen3.7-plus", temperature=2.5),
    ]
    path = write_jsonl(tmp_path / "qwen.jsonl", rows)
    uploaded = client.files.create(file=path.open("rb"), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="14d")
    batch = client.batches.retrieve(batch.id)
    assert batch.status == "completed" and batch.request_counts.failed == 1
    assert batch.expires_at - batch.created_at == 14 * 86400
    [error] = jsonl(client.files.content(batch.error_file_id).text)
    assert error["custom_id"] == "hot" and error["response"]["status_code"] == 400
    assert error["response"]["body"]["error"]["code"] == "invalid_parameter_error"
    assert "Range of temperature should be [0, 2)" in error["response"]["body"]["error"]["message"]
    # The same window on OpenAI itself is refused: its only window is 24h.
    with pytest.raises(openai.BadRequestError, match="Supported values are: '24h'"):
        oai(emu, max_retries=0).batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="14d")


# ----------------------------------------------------------------------------- Anthropic


def test_anthropic_batch_lifecycle_default_version(emu):
    client = ant(emu)  # SDK 2.x: Authorization: Bearer + anthropic-version 2026-10-21
    batch = client.messages.batches.create(
        requests=[
            anthropic_req("good", gen_prompt()),
            anthropic_req("temp", "x", temperature=0.1),  # rejected by 2026-10-21
            {"custom_id": "nomax", "params": {"model": ANTHROPIC_MODEL, "messages": [{"role": "user", "content": "x"}]}},
        ]
    )
    assert batch.processing_status == "in_progress" and batch.request_counts.processing == 3
    batch = client.messages.batches.retrieve(batch.id)
    assert batch.processing_status == "ended" and batch.ended_at is not None
    counts = batch.request_counts
    assert (counts.succeeded, counts.errored, counts.processing) == (1, 2, 0)
    results = {r.custom_id: r.result for r in client.messages.batches.results(batch.id)}
    assert results["good"].type == "succeeded"
    assert "Ruth Calder" in results["good"].message.content[0].text
    assert results["good"].message.usage.input_tokens > 0
    assert results["temp"].type == "errored"
    assert results["temp"].error.error.type == "invalid_request_error"
    assert results["temp"].error.error.message == "temperature: Extra inputs are not permitted"
    assert results["nomax"].error.error.message == "max_tokens: Field required"
    assert client.messages.batches.delete(batch.id).type == "message_batch_deleted"


def test_anthropic_old_version_x_api_key_list_and_cancel(tmp_path):
    with Emulator(latency=30).start() as emu:
        client = ant(emu, default_headers={"anthropic-version": "2023-06-01"})
        ids = [client.messages.batches.create(requests=[anthropic_req("a", "x", temperature=0.1)]).id for _ in range(3)]
        page = client.messages.batches.list(limit=2)
        assert [b.id for b in page.data] == [ids[2], ids[1]] and page.has_more
        assert [b.id for b in client.messages.batches.list(limit=2)] == ids[::-1]

        cancelled = client.messages.batches.cancel(ids[0])
        assert cancelled.processing_status == "canceling" and cancelled.cancel_initiated_at
        ended = client.messages.batches.retrieve(ids[0])
        assert ended.processing_status == "ended" and ended.request_counts.canceled == 1
        assert [r.result.type for r in client.messages.batches.results(ids[0])] == ["canceled"]

        # Older SDKs authenticate with x-api-key; the raw results endpoint is JSONL, one \n per record.
        headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
        raw = urllib.request.urlopen(urllib.request.Request(ended.results_url, headers=headers), timeout=5).read()
        assert raw.endswith(b"}\n") and b"\n\n" not in raw
    with Emulator(latency=0).start() as emu:
        client = ant(emu, default_headers={"anthropic-version": "2023-06-01"})
        batch = client.messages.batches.create(requests=[anthropic_req("t", "x", temperature=0.1)])
        [result] = client.messages.batches.results(batch.id)
        assert result.result.type == "succeeded"  # 2023-06-01 still accepts temperature here


def test_anthropic_online_messages(emu):
    client = ant(emu)
    message = client.messages.create(model=ANTHROPIC_MODEL, max_tokens=100, messages=[{"role": "user", "content": gen_prompt()}])
    assert message.stop_reason == "end_turn" and "1932" in message.content[0].text
    blocks = client.messages.create(
        model=ANTHROPIC_MODEL, max_tokens=10, messages=[{"role": "user", "content": [{"type": "text", "text": "hey"}]}]
    )
    assert blocks.content[0].text == "OK" and blocks.usage.input_tokens == 1
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model=ANTHROPIC_MODEL, max_tokens=10, messages=[{"role": "user", "content": "x"}], extra_body={"top_p": 0.5})
    assert "top_p: Extra inputs are not permitted" in str(info.value)
    old = ant(emu, default_headers={"anthropic-version": "2023-06-01"})
    with pytest.raises(anthropic.BadRequestError):
        old.messages.create(model="claude-opus-4-8", max_tokens=10, messages=[{"role": "user", "content": "x"}], extra_body={"temperature": 0.1})
    assert old.messages.create(model=ANTHROPIC_MODEL, max_tokens=10, messages=[{"role": "user", "content": "x"}], extra_body={"temperature": 0.1})


# ----------------------------------------------------------------------------- Gemini


def test_gemini_file_batch_roundtrip(emu, tmp_path):
    client = gem(emu)
    name = gemini_upload(client, tmp_path, [gemini_line("k1", gen_prompt()), gemini_line("k2", "hi")])
    assert name.startswith("files/") and client.files.get(name=name).size_bytes > 0
    job = client.batches.create(model=GEMINI_MODEL, src=name, config={"display_name": "file-job"})
    assert job.state.name == "JOB_STATE_PENDING" and job.display_name == "file-job"
    assert job.model == f"models/{GEMINI_MODEL}"
    job = client.batches.get(name=job.name)
    assert job.state.name == "JOB_STATE_SUCCEEDED" and job.end_time is not None
    lines = jsonl(client.files.download(file=job.dest.file_name).decode())
    assert [line["key"] for line in lines] == ["k1", "k2"]
    candidate = lines[0]["response"]["candidates"][0]
    assert candidate["finishReason"] == "STOP" and "Ruth Calder" in candidate["content"]["parts"][0]["text"]
    meta = lines[0]["response"]["usageMetadata"]
    assert meta["totalTokenCount"] == meta["promptTokenCount"] + meta["candidatesTokenCount"]
    assert job.name in [j.name for j in client.batches.list()]

    # REST shape: an Operation with int64 stats as strings, output duplicated under `response`.
    raw = http_json("GET", f"{emu.url}/v1/{job.name}", headers={"x-goog-api-key": "k"})[1]
    assert raw["done"] is True and raw["metadata"]["state"] == "BATCH_STATE_SUCCEEDED"
    assert raw["metadata"]["batchStats"] == {"requestCount": "2", "successfulRequestCount": "2"}
    assert raw["response"]["responsesFile"] == job.dest.file_name
    # The REST docs download under a /download/ prefix; the SDK does not. Both work.
    with urllib.request.urlopen(
        urllib.request.Request(f"{emu.url}/download/v1beta/{job.dest.file_name}:download?alt=media", headers={"x-goog-api-key": "k"})
    ) as resp:
        assert jsonl(resp.read().decode())[1]["key"] == "k2"
    client.batches.delete(name=job.name)
    with pytest.raises(genai_errors.APIError):
        client.batches.get(name=job.name)


def test_gemini_inline_v1beta_cancel_and_online(tmp_path):
    with Emulator(latency=30).start() as emu:
        client = gem(emu, api_version="v1beta")  # older SDKs default to v1beta
        src = [{"contents": [{"parts": [{"text": "hi"}], "role": "user"}], "metadata": {"key": "a"}}]
        job = client.batches.create(model=GEMINI_MODEL, src=src)
        client.batches.cancel(name=job.name)
        job = client.batches.get(name=job.name)
        assert job.state.name == "JOB_STATE_CANCELLED" and job.dest is None
        assert any(c["path"].startswith("/v1beta/models/") for c in emu.calls)

        reply = client.models.generate_content(model=GEMINI_MODEL, contents=gen_prompt())
        assert "1932" in reply.text and reply.usage_metadata.prompt_token_count > 0
    with Emulator(latency=0).start() as emu:
        client = gem(emu)
        job = client.batches.create(model=GEMINI_MODEL, src=src + [{"contents": [{"parts": [{"text": gen_prompt()}]}]}])
        job = client.batches.get(name=job.name)
        responses = job.dest.inlined_responses
        assert responses[0].response.text == "OK" and responses[0].metadata == {"key": "a"}
        assert "Ruth Calder" in responses[1].response.text


def test_gemini_multi_chunk_upload(emu, tmp_path):
    client = gem(emu)
    line = json.dumps(gemini_line("k", "x" * 1000)) + "\n"
    path = tmp_path / "big.jsonl"
    path.write_text(line * 17000)  # ~17.5 MB: three 8 MiB chunks ("active", "active", "final")
    uploaded = client.files.upload(file=str(path), config={"mime_type": "jsonl"})
    assert uploaded.size_bytes == path.stat().st_size
    commands = [c for c in emu.calls if c["path"] == "/upload/v1/files"]
    assert len(commands) == 4  # start + three chunks


def test_gemini_rest_snake_case_and_auth(emu):
    # The REST docs use snake_case field names and ?key=; proto-JSON accepts both spellings.
    body = {"batch": {"display_name": "rest-job", "input_config": {"requests": {"requests": [
        {"request": {"contents": [{"parts": [{"text": gen_prompt()}], "role": "user"}],
                     "generation_config": {"temperature": 0.2}}, "metadata": {"key": "s1"}},
    ]}}}}
    status, op = http_json("POST", f"{emu.url}/v1beta/models/{GEMINI_MODEL}:batchGenerateContent?key=k", body)
    assert status == 200 and op["metadata"]["state"] == "BATCH_STATE_PENDING"
    assert op["metadata"]["batchStats"] == {"requestCount": "1", "pendingRequestCount": "1"}
    op = http_json("GET", f"{emu.url}/v1beta/{op['name']}?key=k")[1]
    [item] = op["metadata"]["output"]["inlinedResponses"]["inlinedResponses"]
    assert item["metadata"] == {"key": "s1"} and "Ruth Calder" in item["response"]["candidates"][0]["content"]["parts"][0]["text"]
    assert op["response"]["inlinedResponses"] == op["metadata"]["output"]["inlinedResponses"]

    for url, headers, code in [
        (f"{emu.url}/v1beta/batches", {}, 403),  # Gemini without a key
        (f"{emu.url}/v1/batches", {}, 401),  # OpenAI without a bearer token
        (f"{emu.url}/v1/messages/batches", {"x-api-key": "k"}, 400),  # Anthropic without anthropic-version
    ]:
        with pytest.raises(urllib.error.HTTPError) as info:
            http_json("GET", url, headers=headers)
        assert info.value.code == code
    err = json.loads(info.value.read())
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error" and err["request_id"]


# ----------------------------------------------------------------------------- responder


def test_builtin_responder_extractive_and_deterministic():
    request = {"provider": "openai", "model": "m", "prompt": gen_prompt(), "params": {}, "custom_id": None}
    answer = builtin_responder(request)
    assert answer == builtin_responder(dict(request))
    assert "Calder" in answer or "1932" in answer
    k, _ = model_quality("m")
    assert 1 <= k <= 5
    assert [model_quality(m) for m in (OPENAI_MODEL, ANTHROPIC_MODEL, GEMINI_MODEL)] == [(5, False), (3, False), (4, False)]
    # How a model id is spelled does not change its answers (caps.normalise_model).
    assert model_quality("claude-opus-4-8") == model_quality("claude-opus-4.8") == model_quality("claude-opus-4-8-20260101")
    # Different model names extract different amounts: the leaderboard is not flat.
    answers = {builtin_responder({**request, "model": f"model-{i}"}) for i in range(12)}
    assert len(answers) > 2
    chinese = gen_prompt("大桥是谁设计的？", "天气很好。大桥由工程师露丝设计。猫喜欢睡觉。")
    assert "露丝设计" in builtin_responder({**request, "model": "m", "prompt": chinese})
    assert builtin_responder({**request, "prompt": "hello"}) == "OK"
    big = ("Filler sentence about nothing in particular. " * 70000) + "The secret code is 7781 for the vault."
    started = time.perf_counter()
    assert "7781" in builtin_responder({**request, "prompt": gen_prompt("What is the secret vault code?", big)})
    assert time.perf_counter() - started < 3


def test_builtin_judge_scores_rubric():
    response = "The Harbor Bridge was designed by engineer Ruth Calder and opened in 1932."
    prompt = judge_prompt(
        [(40, "Names engineer Ruth Calder as designer"), (12.5, "Gives the year it opened: 1932"), (10, "Mentions the toll of 20 cents approved in 1931")],
        response,
    )
    reply = json.loads(builtin_responder({"provider": "anthropic", "model": "j", "prompt": prompt, "params": {}, "custom_id": None}))
    # P2: 2 of its 3 content tokens (year, opened, 1932) appear -> 67 % >= 60 %; P3: none do.
    assert reply == {"points_awarded": [40, 12.5, 0], "total": 52.5}
    strict = judge_prompt([(10, "States the opening year 1932")], response)  # opening != opened: 1/2 < 60 %
    assert json.loads(builtin_responder({"prompt": strict, "model": "j"})) == {"points_awarded": [0], "total": 0}
    assert content_tokens("大桥设计") == {"大桥", "桥设", "设计"}


def test_user_responder_renders_refusal_error_and_empty(tmp_path):
    module = tmp_path / "my_responder.py"
    module.write_text(
        "def answer(req):\n"
        "    p = req['prompt']\n"
        "    if 'REFUSE' in p: return {'refusal': 'I cannot help with that.'}\n"
        "    if 'FAIL' in p: return {'error': {'status': 500, 'message': 'boom'}}\n"
        "    if 'EMPTY' in p: return ''\n"
        "    return f\"{req['provider']}:{req['model']}:{req['custom_id']}\"\n"
    )
    with Emulator(responder=f"{module}:answer").start() as emu:
        client = oai(emu, max_retries=0)
        refusal = client.chat.completions.create(model=OPENAI_MODEL, messages=[{"role": "user", "content": "REFUSE"}]).choices[0]
        assert refusal.message.content is None and refusal.message.refusal and refusal.finish_reason == "stop"
        assert client.chat.completions.create(model=OPENAI_MODEL, messages=[{"role": "user", "content": "EMPTY"}]).choices[0].message.content == ""
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model=OPENAI_MODEL, messages=[{"role": "user", "content": "FAIL"}])

        a = ant(emu, max_retries=0)
        batch = a.messages.batches.create(requests=[anthropic_req("r", "REFUSE"), anthropic_req("f", "FAIL"), anthropic_req("e", "EMPTY"), anthropic_req("ok")])
        results = {r.custom_id: r.result for r in a.messages.batches.results(batch.id)}
        assert results["r"].message.stop_reason == "refusal"
        assert results["f"].error.error.type == "api_error"
        assert results["e"].message.content == []
        assert results["ok"].message.content[0].text == f"anthropic:{ANTHROPIC_MODEL}:ok"

        g = gem(emu)
        job = g.batches.create(model=GEMINI_MODEL, src=[
            {"contents": [{"parts": [{"text": t}], "role": "user"}], "metadata": {"key": t}} for t in ("REFUSE", "FAIL", "EMPTY")
        ])
        inl = g.batches.get(name=job.name).dest.inlined_responses
        assert inl[0].response.candidates[0].finish_reason.name == "SAFETY" and inl[0].response.candidates[0].content is None
        assert inl[1].error.code == 13  # a google.rpc.Status: HTTP 500 is 13 INTERNAL
        assert inl[2].response.candidates[0].finish_reason.name == "STOP" and not inl[2].response.candidates[0].content.parts


# ----------------------------------------------------------------------------- faults


def test_fault_http_error_and_retries(emu, tmp_path):
    client = oai(emu)
    emu.add_fault({"kind": "http_error", "status": 429, "method": "POST", "path": "/batches$"})
    started = time.perf_counter()
    batch = openai_batch(client, tmp_path, [chat_line("a", "x")])  # the SDK retries the 429
    assert time.perf_counter() - started < 1.0  # retry-after-ms avoids the SDK's backoff sleep
    statuses = [c["status"] for c in emu.calls if c["path"] == "/v1/batches"]
    assert statuses == [429, 200]
    assert len([r for r in emu.requests if r["batch"] == batch.id]) == 1

    emu.add_fault({"kind": "http_error", "status": 503, "count": -1, "path": r"/v1/messages$"})
    with pytest.raises(anthropic.InternalServerError) as info:
        ant(emu, max_retries=0).messages.create(model=ANTHROPIC_MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert info.value.response.headers["retry-after"] == "0"
    emu.clear_faults()
    emu.add_fault({"kind": "http_error", "status": 500, "path": "batchGenerateContent"})
    g = gem(emu)  # keep the Client referenced: a collected genai.Client closes its HTTP client
    with pytest.raises(genai_errors.APIError) as ginfo:
        g.batches.create(model=GEMINI_MODEL, src=[{"contents": [{"parts": [{"text": "x"}]}]}])
    assert ginfo.value.code == 500
    assert not [r for r in emu.requests if r["provider"] == "gemini"]  # not processed


def test_fault_echo_key_quotes_the_credential(emu, tmp_path):
    """A provider that repeats the caller's key: in a call's error, a request's error, an answer."""
    emu.add_fault({"kind": "echo_key", "method": "POST", "path": "/v1/batches$"})
    client = oai(emu, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        openai_batch(client, tmp_path, [chat_line("a", "x")])
    assert "Bearer sk-test" in str(info.value)
    emu.add_fault({"kind": "echo_key_request", "custom_id": "r1"})
    emu.add_fault({"kind": "echo_key_request", "status": 500, "custom_id": "r2"})
    batch = client.batches.retrieve(openai_batch(client, tmp_path, [chat_line("r1", "x"), chat_line("r2", "x")]).id)
    [out] = jsonl(client.files.content(batch.output_file_id).text)
    assert "Bearer sk-test" in out["response"]["body"]["choices"][0]["message"]["content"]
    [err] = jsonl(client.files.content(batch.error_file_id).text)
    assert err["response"]["status_code"] == 500 and "Bearer sk-test" in err["response"]["body"]["error"]["message"]
    emu.add_fault({"kind": "echo_key", "status": 403, "path": ":generateContent$"})
    g = gem(emu)
    with pytest.raises(genai_errors.APIError) as ginfo:
        g.models.generate_content(model=GEMINI_MODEL, contents="hi")
    assert ginfo.value.code == 403 and "g-test" in str(ginfo.value)


def test_fault_drop_before_and_after(emu, tmp_path):
    client = oai(emu)
    emu.add_fault({"kind": "drop", "when": "before", "method": "POST", "path": "/v1/batches$"})
    openai_batch(client, tmp_path, [chat_line("a", "x")])
    assert len(client.batches.list().data) == 1  # dropped before processing, then retried
    emu.add_fault({"kind": "drop", "when": "after", "method": "POST", "path": "/v1/batches$"})
    openai_batch(client, tmp_path, [chat_line("b", "x")])
    # Processed, answer lost, SDK retried without an idempotency key: a duplicate batch.
    assert len(client.batches.list().data) == 3
    assert [c["status"] for c in emu.calls if c["path"] == "/v1/batches" and c["method"] == "POST"] == [0, 200, 0, 200]


def test_fault_request_error_and_garbage(emu, tmp_path):
    emu.add_fault({"kind": "request_error", "status": 429, "custom_id": "r1"})
    emu.add_fault({"kind": "garbage", "prompt_contains": "Harbor", "count": 2})
    client = oai(emu)
    batch = client.batches.retrieve(openai_batch(client, tmp_path, [chat_line("r0", "x"), chat_line("r1", "x"), chat_line("r2", gen_prompt())]).id)
    assert batch.request_counts.failed == 1
    [err] = jsonl(client.files.content(batch.error_file_id).text)
    assert err["custom_id"] == "r1" and err["response"]["status_code"] == 429
    assert err["response"]["body"]["error"]["code"] == "rate_limit_exceeded"
    out = jsonl(client.files.content(batch.output_file_id).text)
    assert out[1]["response"]["body"]["choices"][0]["message"]["content"] == "I think it is fine."

    emu.add_fault({"kind": "request_error", "status": 529, "model": "claude-haiku-4-5"})
    a = ant(emu)
    res = list(a.messages.batches.results(a.messages.batches.create(requests=[anthropic_req("x", model="claude-haiku-4-5")]).id))
    assert res[0].result.error.error.type == "overloaded_error"

    emu.add_fault({"kind": "request_error", "status": 429, "prompt_contains": "hi"})
    g = gem(emu)
    name = gemini_upload(g, tmp_path, [gemini_line("k", "hi"), gemini_line("k2", gen_prompt())])
    job = g.batches.get(name=g.batches.create(model=GEMINI_MODEL, src=name).name)
    lines = jsonl(g.files.download(file=job.dest.file_name).decode())
    # google.rpc.Status: the 429 a request would get online is 8 RESOURCE_EXHAUSTED in a result line.
    assert lines[0] == {"key": "k", "error": {"code": 8, "message": "Rate limit reached (emulator fault)."}}
    assert lines[1]["response"]["candidates"][0]["content"]["parts"][0]["text"] == "I think it is fine."

    # Online: the SDK retries the transient 429 and the second attempt succeeds.
    emu.add_fault({"kind": "request_error", "status": 429, "provider": "openai"})
    assert client.chat.completions.create(model=OPENAI_MODEL, messages=[{"role": "user", "content": "x"}]).choices[0].message.content == "OK"
    assert [c["status"] for c in emu.calls if c["path"] == "/v1/chat/completions"] == [429, 200]


def test_fault_expire(emu, tmp_path):
    emu.add_fault({"kind": "expire", "provider": "openai", "complete_fraction": 0.5})
    client = oai(emu)
    batch = client.batches.retrieve(openai_batch(client, tmp_path, [chat_line(f"r{i}", "x") for i in range(4)]).id)
    assert batch.status == "expired" and batch.expired_at
    assert len(jsonl(client.files.content(batch.output_file_id).text)) == 2
    errors = jsonl(client.files.content(batch.error_file_id).text)
    assert [e["custom_id"] for e in errors] == ["r2", "r3"]
    assert errors[0]["response"] is None and errors[0]["error"]["code"] == "batch_expired"

    emu.add_fault({"kind": "expire", "provider": "anthropic", "complete_fraction": 0.5})
    a = ant(emu)
    mb = a.messages.batches.create(requests=[anthropic_req(f"a{i}") for i in range(2)])
    assert [r.result.type for r in a.messages.batches.results(mb.id)] == ["succeeded", "expired"]
    assert a.messages.batches.retrieve(mb.id).request_counts.expired == 1

    emu.add_fault({"kind": "expire", "model": GEMINI_MODEL})
    g = gem(emu)
    job = g.batches.get(name=g.batches.create(model=GEMINI_MODEL, src=[{"contents": [{"parts": [{"text": "x"}]}]}]).name)
    assert job.state.name == "JOB_STATE_EXPIRED" and job.dest is None


def test_fault_cancel_by_provider(emu, tmp_path):
    emu.add_fault({"kind": "cancel", "complete_fraction": 0.5, "count": 3})
    client = oai(emu)
    batch = client.batches.retrieve(openai_batch(client, tmp_path, [chat_line(f"r{i}", "x") for i in range(4)]).id)
    assert batch.status == "cancelled" and batch.request_counts.completed == 2
    assert [line["custom_id"] for line in jsonl(client.files.content(batch.output_file_id).text)] == ["r0", "r1"]
    a = ant(emu)
    mb = a.messages.batches.create(requests=[anthropic_req(f"a{i}") for i in range(2)])
    assert [r.result.type for r in a.messages.batches.results(mb.id)] == ["succeeded", "canceled"]
    g = gem(emu)
    name = gemini_upload(g, tmp_path, [gemini_line("k1", "x"), gemini_line("k2", "y")])
    job = g.batches.get(name=g.batches.create(model=GEMINI_MODEL, src=name).name)
    assert job.state.name == "JOB_STATE_CANCELLED"
    assert [line["key"] for line in jsonl(g.files.download(file=job.dest.file_name).decode())] == ["k1"]


def test_fault_fail_validation(emu, tmp_path):
    emu.add_fault({"kind": "fail_validation", "provider": "openai"})
    client = oai(emu)
    batch = client.batches.retrieve(openai_batch(client, tmp_path, [chat_line("r", "x")]).id)
    assert batch.status == "failed" and batch.output_file_id is None and batch.failed_at
    assert batch.errors.data[0].code == "invalid_request" and batch.errors.data[0].line == 1

    emu.add_fault({"kind": "fail_validation", "provider": "anthropic"})
    with pytest.raises(anthropic.BadRequestError):
        ant(emu).messages.batches.create(requests=[anthropic_req("refused")])
    assert "refused" not in [r["custom_id"] for r in emu.requests]

    emu.add_fault({"kind": "fail_validation", "provider": "gemini"})
    g = gem(emu)
    job = g.batches.get(name=g.batches.create(model=GEMINI_MODEL, src=[{"contents": [{"parts": [{"text": "x"}]}]}]).name)
    assert job.state.name == "JOB_STATE_FAILED"
    raw = http_json("GET", f"{emu.url}/v1/{job.name}", headers={"x-goog-api-key": "k"})[1]
    assert raw["error"]["code"] == 3 and raw["done"] is True


def test_fault_slow(emu, tmp_path):
    emu.add_fault({"kind": "slow", "latency": 3600, "model": "gpt-4.1"})
    client = oai(emu)
    slow = openai_batch(client, tmp_path, [chat_line("s", "x", model="gpt-4.1")])
    fast = openai_batch(client, tmp_path, [chat_line("f", "x", model="gpt-5.5")])
    assert emu._core.batches[slow.id].ready_at - emu._core.batches[slow.id].created == 3600  # the fault's latency
    assert client.batches.retrieve(fast.id).status == "completed"
    assert client.batches.retrieve(slow.id).status == "validating"
    ready_now(emu, slow.id)
    assert client.batches.retrieve(slow.id).status == "completed"


def test_fault_truncate(emu, tmp_path):
    client = oai(emu)
    batch = client.batches.retrieve(openai_batch(client, tmp_path, [chat_line(f"r{i}", "x") for i in range(3)]).id)
    emu.add_fault({"kind": "truncate", "count": 3})
    text = client.files.content(batch.output_file_id).text
    assert not text.endswith("\n") and len(jsonl(text.rsplit("\n", 1)[0])) == 2
    with pytest.raises(json.JSONDecodeError):
        json.loads(text.rsplit("\n", 1)[1])
    a = ant(emu)
    mb = a.messages.batches.create(requests=[anthropic_req("a"), anthropic_req("b")])
    with pytest.raises(json.JSONDecodeError):
        list(a.messages.batches.results(mb.id))
    g = gem(emu)
    job = g.batches.get(name=g.batches.create(model=GEMINI_MODEL, src=gemini_upload(g, tmp_path, [gemini_line("k", "x")])).name)
    assert not g.files.download(file=job.dest.file_name).endswith(b"\n")
    # Fault used up: the next download is whole.
    assert client.files.content(batch.output_file_id).text.endswith("\n")


def test_fault_quota(emu, tmp_path):
    emu.add_fault({"kind": "quota", "count": 3})
    client = oai(emu)
    batch = openai_batch(client, tmp_path, [chat_line("q", "x", model="gpt-4.1")])
    batch = client.batches.retrieve(batch.id)
    assert batch.status == "failed" and batch.errors.data[0].code == "token_limit_exceeded"
    assert "gpt-4.1" in batch.errors.data[0].message
    with pytest.raises(anthropic.RateLimitError):
        ant(emu, max_retries=0).messages.batches.create(requests=[anthropic_req("q")])
    g = gem(emu)
    with pytest.raises(genai_errors.APIError) as info:
        g.batches.create(model=GEMINI_MODEL, src=[{"contents": [{"parts": [{"text": "x"}]}]}])
    assert info.value.code == 429 and info.value.status == "RESOURCE_EXHAUSTED"
    assert emu.requests == []  # nothing accepted


def test_faults_over_http_control_api(emu):
    base = f"{emu.url}/_emulator"
    assert http_json("GET", f"{base}/health") == (200, {"ok": True})
    status, added = http_json("POST", f"{base}/faults", {"kind": "http_error", "status": 500, "path": "/v1/chat", "count": 2})
    assert status == 200 and added["faults"][0]["count"] == 2
    assert len(http_json("GET", f"{base}/faults")[1]["faults"]) == 1
    with pytest.raises(urllib.error.HTTPError) as info:
        http_json("POST", f"{base}/faults", {"kind": "nope"})
    assert info.value.code == 400
    http_json("DELETE", f"{base}/faults")
    assert emu.faults == []
    with pytest.raises(urllib.error.HTTPError) as info:
        http_json("GET", f"{emu.url}/v2/nowhere")
    assert info.value.code == 404 and "/v2/nowhere" in info.value.read().decode()


# ----------------------------------------------------------------------------- request log and CLI


def test_requests_log(emu, tmp_path):
    client = oai(emu)
    batch = openai_batch(client, tmp_path, [chat_line("o1", "x"), chat_line("o2", "y", model="gpt-4.1")])
    client.chat.completions.create(model=OPENAI_MODEL, messages=[{"role": "user", "content": "x"}])
    # batchrun's sync transport names online calls with a header.
    client.chat.completions.create(model=OPENAI_MODEL, messages=[{"role": "user", "content": "x"}], extra_headers={"X-Batchrun-Custom-Id": "s1"})
    mb = ant(emu).messages.batches.create(requests=[anthropic_req("a1")])
    g = gem(emu)
    job = g.batches.create(model=GEMINI_MODEL, src=gemini_upload(g, tmp_path, [gemini_line("g1", "x")]))
    status, log = http_json("GET", f"{emu.url}/_emulator/requests")
    rows = [(r["seq"], r["provider"], r["model"], r["custom_id"], r["batch"], r["endpoint"]) for r in log["requests"]]
    assert rows == [
        (1, "openai", OPENAI_MODEL, "o1", batch.id, "/v1/chat/completions"),
        (2, "openai", "gpt-4.1", "o2", batch.id, "/v1/chat/completions"),
        (3, "openai", OPENAI_MODEL, None, "online", "/v1/chat/completions"),
        (4, "openai", OPENAI_MODEL, "s1", "online", "/v1/chat/completions"),
        (5, "anthropic", ANTHROPIC_MODEL, "a1", mb.id, "/v1/messages"),
        (6, "gemini", GEMINI_MODEL, "g1", job.name.split("/")[1], "/v1/models/gemini-2.5-pro:generateContent"),
    ]
    assert emu.requests == log["requests"]
    http_json("POST", f"{emu.url}/_emulator/reset")
    # The reset call itself is the first call of the new log.
    assert emu.requests == [] and [c["path"] for c in http_json("GET", f"{emu.url}/_emulator/calls")[1]["calls"]] == ["/_emulator/reset"]


def test_cli_subprocess(tmp_path):
    env = {k: v for k, v in os.environ.items()}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen(
        [sys.executable, "-m", "batchrun.emulator", "--port", "0", "--latency", "0.5", "--fault", '{"kind":"garbage","count":-1}'],
        cwd=tmp_path, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    try:
        line = proc.stderr.readline()
        assert line.startswith("listening on http://127.0.0.1:"), line
        url = line.split("listening on ", 1)[1].strip()
        assert http_json("GET", f"{url}/_emulator/health") == (200, {"ok": True})
        assert http_json("GET", f"{url}/_emulator/faults")[1]["faults"][0]["kind"] == "garbage"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
