"""An adversarial audit of main (session 12): what a hostile provider, a clumsy user and a broken
disk could still break, each finding with its reproducer. Through the CLI, the real SDKs over HTTP
and the emulator, with test_hardening_net's hostile proxy in front of it where a provider must
misbehave in a way the emulator's faults cannot express."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchrun.emulator import Emulator
from conftest import Project
from test_hardening_net import (ANTHROPIC, GEMINI, OPENAI, SECRET, HostileProxy, _loopback_only, board, emu, proxy,  # noqa: F401 - fixtures
                                recorder, setup)


@pytest.mark.parametrize("value", ["-5", "nan"])
def test_a_retry_after_that_is_no_delay_is_ignored_not_a_traceback(value: str, project: Project, proxy: HostileProxy) -> None:
    """RFC 9110 section 10.2.3: Retry-After is an HTTP-date or delay-seconds, a non-negative
    integer. A provider answering `Retry-After: -5` (or `nan`, which float() reads) made
    time.sleep raise ValueError out of clients.call: a traceback, the run stopped."""
    setup(project, {"bad": OPENAI, "control": ANTHROPIC})
    assert project.run("preflight", emulator=proxy).exit_code == 0
    assert project.run("submit", emulator=proxy).exit_code == 0
    proxy.rule("answer", "GET", r"^/v1/batches/batch_", status=429, headers={"Retry-After": value}, count=-1)
    result = project.run("poll", emulator=proxy)
    assert proxy.fired
    assert result.exit_code == 0, result.output
    assert "failed (HTTP 429): slow down; will try again" in result.output
    assert "Traceback" not in result.output and SECRET not in result.output


@pytest.mark.parametrize("status", ["active", "cancelled"])
def test_a_gemini_upload_never_finalized_is_the_providers_failure_not_a_traceback(status: str, project: Project,
                                                                                  proxy: HostileProxy) -> None:
    """google-genai's resumable upload (_api_client._upload_fd) raises a bare ValueError when the
    last chunk is answered with an X-Goog-Upload-Status other than "final" ("All content has been
    uploaded, but the upload status is not finalized." / "Failed to upload file: Upload status is
    not finalized."): a broken endpoint or a proxy, not a bug of batchrun, and not a traceback."""
    setup(project, {"bad": GEMINI, "control": ANTHROPIC})
    proxy.rule("answer", "POST", r"^/upload/", header=("X-Goog-Upload-Command", "finalize"), status=200,
               headers={"X-Goog-Upload-Status": status}, body=b"{}", count=-1)
    result = project.run("submit", "--no-preflight", emulator=proxy)
    assert proxy.fired
    assert result.exit_code == 2, result.output
    assert "the upload was not finalized by the provider" in result.output
    assert "Traceback" not in result.output and SECRET not in result.output


def _files_holding(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.parametrize("bad", ["openai", "anthropic"])
def test_a_result_download_cut_short_leaves_no_echoed_key_on_disk(bad: str, project: Project, proxy: HostileProxy,
                                                                  emu: Emulator) -> None:
    """The OpenAI and Anthropic adapters stream a result file to jobs/ and redact it once it is
    whole (poll._download): a download cut mid-way (a dropped connection, the run's time limit)
    left the part already written on disk, an echoed key in it, unredacted."""
    routes = {"openai": OPENAI, "anthropic": ANTHROPIC}
    setup(project, {"bad": routes[bad], "control": GEMINI})
    emu.add_fault({"kind": "echo_key_request", "model": routes[bad]["model"], "count": -1})  # every answer quotes the key
    download = {"openai": r"^/v1/files/[^/]+/content$", "anthropic": r"/results$"}[bad]
    assert project.run("submit", emulator=proxy).exit_code == 0
    proxy.rule("cut", "GET", download, count=-1)
    result = project.run("poll", emulator=proxy)
    assert proxy.fired
    assert "Downloading" in result.output and "will try again" in result.output, result.output
    assert "Traceback" not in result.output and SECRET not in result.output
    assert _files_holding(project.root, SECRET) == []


# A clumsy user pastes the key itself where the config wants the name of its variable. Key shapes:
# OpenAI's and the OpenAI-compatible providers' keys begin "sk-" (Anthropic's "sk-ant-"), Google's
# API keys "AIza"; the second has no "-" here, so it is a valid variable name too.
PASTED_KEYS = ["sk-proj-Abc123def456ghi789jklMNO", "AIzaSyD4x9Qm2Lk7Pw8Rt5Vb3Nc6Zh1Jg0Fe2Ud"]


@pytest.mark.parametrize("pasted", PASTED_KEYS)
def test_a_key_pasted_as_api_key_env_is_refused_and_never_shown_or_stored(pasted: str, project: Project) -> None:
    """Before: "`api_key_env` is 'sk-proj-…', which is not the name of an environment variable"
    printed the key on stderr (and cron mail); the "AIza…" key, a valid name, was recorded as the
    route's key variable in state.db and results/manifest.json and printed as a variable not set."""
    from test_bad_values import edit_config, set_route

    from conftest import small_project

    small_project(project)
    edit_config(project, set_route("gpt", api_key_env=pasted))
    result = project.run("plan")
    assert result.exit_code == 1, result.output
    assert 'routes."gpt".api_key_env' in result.output and "looks like an API key" in result.output
    assert pasted not in result.output and "Traceback" not in result.output
    assert not project.state_path.exists()


def test_a_provider_error_that_is_not_utf8_is_a_failed_call_not_a_traceback(project: Project, proxy: HostileProxy) -> None:
    """httpx's Response.json() hands json.loads the body's bytes, which it decodes strictly (RFC
    8259 section 8.1: JSON is UTF-8): a status answer of invalid UTF-8 made the OpenAI and
    Anthropic SDKs raise UnicodeDecodeError, which clients.classify did not know: a traceback."""
    setup(project, {"bad": OPENAI, "online": {**ANTHROPIC, "transport": "sync"}})
    assert project.run("submit", emulator=proxy).exit_code == 0
    proxy.rule("answer", "GET", r"^/v1/batches/batch_", status=200, body=b'{"id":"batch_\xff","status":"in_progress"}', count=-1)
    proxy.rule("answer", "POST", r"^/v1/messages$", status=200, body=b'{"id":"msg_\xff"}', count=-1)
    result = project.run("poll", emulator=proxy)
    assert len({path for _, _, path in proxy.fired}) == 2
    assert "Traceback" not in result.output and SECRET not in result.output
    assert "could not be read as JSON (UnicodeDecodeError" in result.output


@pytest.mark.parametrize("body", [b'{"candidates":"x"}', b'{"candidates":[1,2]}'])
def test_a_gemini_online_answer_with_garbage_candidates_is_never_an_empty_answer(body: bytes, project: Project,
                                                                                 proxy: HostileProxy) -> None:
    """google-genai converts a generateContent answer field by field (models._GenerateContentResponse
    _from_mldev): it iterates whatever `candidates` holds and keeps no unknown field, so a string, a
    list of numbers or of unknown objects came out as candidates `[{}]`, which parse_line read as
    the model's empty output: a model failure, scored 0, the route "complete". The Gemini API's
    Candidate.finishReason: "If empty, the model has not stopped generating tokens"
    (ai.google.dev/api/generate-content#candidate): no text and no finish reason is no answer."""
    setup(project, {"bad": {**GEMINI, "transport": "sync"}, "control": ANTHROPIC})
    assert project.run("preflight", emulator=proxy).exit_code == 0
    proxy.rule("answer", "POST", r":generateContent$", status=200, body=body, count=-1)
    result = project.run("refresh", "--interval", "0.01", "--timeout", "20s", emulator=proxy)
    assert proxy.fired
    assert "Traceback" not in result.output
    kinds = {r["kind"] for r in project.sql("SELECT r.kind FROM results r JOIN requests q USING (custom_id) WHERE q.route = 'bad'")}
    assert "empty" not in kinds and kinds <= {"transient"}, kinds
    rows = board(project)
    assert rows["bad"]["failed_n"] == 0 and rows["bad"]["complete"] == 0
    assert result.exit_code == 2, result.output


NO_ANSWER = {
    # A chat completion whose choice has neither text nor the finish_reason every choice carries.
    "openai": '{"id":"batch_req_x","custom_id":"$CUSTOM_ID","response":{"status_code":200,"request_id":"r",'
              '"body":{"id":"chatcmpl-x","object":"chat.completion","choices":[{}]}},"error":null}',
    # A succeeded result whose message has neither content nor the stop_reason it always has.
    "anthropic": '{"custom_id":"$CUSTOM_ID","result":{"type":"succeeded","message":{}}}',
    # A Responses object without the output every one has.
    "openai-responses": '{"id":"batch_req_x","custom_id":"$CUSTOM_ID","response":{"status_code":200,"request_id":"r",'
                        '"body":{"id":"resp_x","object":"response","status":"completed"}},"error":null}',
}


@pytest.mark.parametrize("provider", list(NO_ANSWER))
def test_a_result_without_text_or_finish_reason_is_retried_never_an_empty_answer(provider: str, project: Project,
                                                                                  emu: Emulator) -> None:
    """`choices: [{}]` and `message: {}` were read as the model's empty output: a model failure,
    scored 0 and never sent again (the protocol: only a real refusal or an empty output is the
    model's; anything else is infrastructure). Without the finish reason every real answer has,
    they are malformed: retried, and the retry's answer is the cell's."""
    routes = {"openai": OPENAI, "anthropic": ANTHROPIC, "openai-responses": {**OPENAI, "endpoint": "responses"}}
    setup(project, {"r": routes[provider]}, tasks=1)
    emu.add_fault({"kind": "corrupt_line", "model": routes[provider]["model"], "line": NO_ANSWER[provider]})
    result = project.run("refresh", "--interval", "0.01", "--timeout", "20s", emulator=emu)
    assert result.exit_code == 0, result.output
    kinds = [r["kind"] for r in project.sql("SELECT kind FROM results ORDER BY id")]
    assert kinds == ["transient", "ok"], kinds
    assert board(project)["r"]["failed_n"] == 0


@pytest.mark.parametrize("damage", ["DROP TABLE batches", "DROP VIEW leaderboard", "DROP VIEW cell_status"])
@pytest.mark.parametrize("command", ["status", "collect"])
def test_a_state_db_missing_a_table_or_view_is_named_damaged_not_a_traceback(damage: str, command: str, project: Project,
                                                                             emu: Emulator) -> None:
    """A state.db whose schema lost a table or a view (a hand-run `sqlite-utils drop-table`, a bad
    restore) raised sqlite3.OperationalError "no such table: batches", or RuntimeError "state.db
    has no view 'leaderboard' of the expected form", out of the commands: a traceback."""
    import sqlite3

    setup(project, {"r": OPENAI}, tasks=1)
    assert project.run("refresh", "--interval", "0.01", emulator=emu).exit_code == 0
    conn = sqlite3.connect(project.state_path)
    conn.execute(damage)
    conn.commit()
    conn.close()
    result = project.run(command, emulator=emu)
    assert "Traceback" not in result.output
    if result.exit_code == 0:
        return  # the command does not read what was dropped
    assert result.exit_code == 1, result.output
    assert "is damaged" in result.output and str(project.state_path) in result.output, result.output


# --- the emulator refuses what the real API refuses ----------------------------------------------


@pytest.mark.parametrize("messages, message", [
    ([{"role": "user", "content": ""}],
     "messages.0: all messages must have non-empty content except for the optional final assistant message"),
    ([{"role": "user", "content": [{"type": "text", "text": ""}]}], "messages: text content blocks must be non-empty"),
    ([{"role": "user", "content": [{"type": "text", "text": " \n"}]}], "messages: text content blocks must contain non-whitespace text"),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "The answer is "}],
     "messages: final assistant content cannot end with trailing whitespace"),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": ""}], None),  # an empty prefill is allowed
])
def test_the_emulator_refuses_an_anthropic_message_with_blank_text(messages: object, message: str | None, emu: Emulator) -> None:
    """The Messages API answers 400 invalid_request_error to an empty or whitespace-only text
    (anthropics/claude-code#3196, #59812, #23440): the emulator accepted them and answered "OK".
    The optional final assistant message (a prefill) may be empty, not end in whitespace (review)."""
    import anthropic

    client = anthropic.Anthropic(api_key="emulator-key-0123456789", base_url=emu.url, max_retries=0)
    if message is None:
        assert client.messages.create(model="claude-opus-4-8", max_tokens=16, messages=messages).content  # type: ignore[arg-type]
        return
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="claude-opus-4-8", max_tokens=16, messages=messages)  # type: ignore[arg-type]
    assert refused.value.body["error"] == {"type": "invalid_request_error", "message": message}  # type: ignore[index]


def test_the_emulator_refuses_an_openai_upload_with_an_unknown_purpose(emu: Emulator) -> None:
    """The Files API answers 400 "'answers' is not one of ['fine-tune', 'assistants', 'batch', ...]
    - 'purpose'" (irudnyts/openai#66); the emulator kept such a file."""
    import io

    import openai

    client = openai.OpenAI(api_key="emulator-key-0123456789", base_url=emu.url + "/v1", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="is not one of"):
        client.files.create(file=("x.jsonl", io.BytesIO(b"{}\n")), purpose="bogus")  # type: ignore[arg-type]
    assert client.files.create(file=("x.jsonl", io.BytesIO(b"{}\n")), purpose="batch").purpose == "batch"


def _percent(text: str, every: bool) -> str:
    return "".join(f"%{ord(c):02X}" if every or not c.isalnum() else c for c in text)


def test_a_percent_encoded_key_a_provider_echoes_is_redacted_everywhere(project: Project, proxy: HostileProxy,
                                                                        emu: Emulator) -> None:
    """A provider that echoes a request URL writes the key percent-encoded (`?key=sk%2DNET…`, or
    every character `%73%6B…`; RFC 3986 section 2.1: the same key). It reached results.text,
    raw_json, the responses file and jobs/, the batch's error in state.db and stderr."""
    from test_hostile_results import openai_line

    setup(project, {"bad": OPENAI, "control": ANTHROPIC}, tasks=2)
    assert project.run("preflight", emulator=proxy).exit_code == 0
    echoes = [_percent(SECRET, every=True), _percent(SECRET, every=False)]
    emu.add_fault({"kind": "corrupt_line", "model": "gpt-5.5", "count": 1,
                   "line": openai_line(f"The crane failed at 03:14. GET /v1/x?key={echoes[0]}")})
    emu.add_fault({"kind": "corrupt_line", "model": "claude-opus-4-8", "count": 1,
                   "line": '{"custom_id":"$CUSTOM_ID","result":{"type":"errored","error":{"type":"error","error":'
                           f'{{"type":"invalid_request_error","message":"bad url /v1/x?key={echoes[1]}"}}}}}}'})
    result = project.run("refresh", "--interval", "0.01", "--timeout", "20s", emulator=proxy)
    assert "Traceback" not in result.output
    texts = [result.output] + [p.read_text("utf-8", "replace") for p in project.root.rglob("*") if p.is_file()
                                     and not p.name.startswith("state.db")]
    import sqlite3

    conn = sqlite3.connect(project.state_path)
    texts += ["\n".join(conn.iterdump())]
    conn.close()
    held = [t for t in texts if SECRET in t or any(e in t or e.lower() in t for e in echoes)]
    assert held == [], [t[:200] for t in held]
    assert any("[REDACTED]" in r["text"] for r in project.sql("SELECT text FROM results WHERE text IS NOT NULL"))


def test_a_provider_batch_id_holding_the_key_never_names_a_file(project: Project, emu: Emulator) -> None:
    """safe_component makes a provider's batch id a safe path component, but kept every character
    of a key in it: an adopted Anthropic batch listed as `msgbatch_<key>` got its results under
    jobs/<batch>/candidate-msgbatch_<key>/: the key in a folder name."""
    setup(project, {"r": ANTHROPIC}, tasks=2)
    emu.add_fault({"kind": "drop", "when": "after", "method": "POST", "path": "^/v1/messages/batches$"})
    emu.add_fault({"kind": "alias_batch", "id": f"msgbatch_{SECRET}"})
    result = project.run("refresh", "--interval", "0.01", "--timeout", "20s", emulator=emu)
    assert "Traceback" not in result.output
    assert [p for p in project.root.rglob("*") if SECRET in p.name] == []
    assert _files_holding(project.root, SECRET) == []  # nor in state.db, jobs/ or results/


def test_a_route_name_too_long_for_a_file_name_is_refused_before_anything_is_sent(project: Project, emu: Emulator) -> None:
    """A 300-character route name passed the config, was sent and paid for, and then collect
    raised OSError "File name too long" writing results/<route>.responses.json (NAME_MAX is 255
    bytes): a traceback at the end of every later run too."""
    long_name = "r" * 300
    setup(project, {long_name: OPENAI}, tasks=1)
    result = project.run("refresh", "--interval", "0.01", emulator=emu)
    assert result.exit_code == 1, result.output
    assert "300 bytes long" in result.output and "Traceback" not in result.output
    assert emu.calls == []


@pytest.mark.parametrize("names", [("q/x", "q_x"), ("GPT", "gpt")])
def test_two_routes_writing_the_same_results_files_are_refused(names: tuple[str, str], project: Project, emu: Emulator) -> None:
    """Routes "q/x" and "q_x" both published results/q_x.scores.json: one route's results silently
    overwrote the other's (verify then failed on them); "GPT" and "gpt" do so on macOS and Windows."""
    setup(project, {names[0]: OPENAI, names[1]: ANTHROPIC}, tasks=1)
    result = project.run("refresh", "--interval", "0.01", emulator=emu)
    assert result.exit_code == 1, result.output
    assert "would write the same results files" in result.output and "Traceback" not in result.output
    assert emu.calls == []


@pytest.mark.parametrize("field", ["question_text", "criterion"])
def test_a_lone_surrogate_in_the_dataset_is_a_named_error_not_a_traceback(field: str, project: Project) -> None:
    """JSON may spell half a surrogate pair ("\\ud800"); json.loads gives a lone surrogate, which
    UTF-8 cannot encode: `plan` raised UnicodeEncodeError hashing the record."""
    import json

    from conftest import task

    project.doc("harbor.txt", "The harbor crane failed at 03:14 on Tuesday.\n")
    record = task("t1", "When did the crane fail?", "harbor.txt")
    if field == "question_text":
        record["question_text"] = "When did the crane fail? \ud800"
    else:
        record["ground_truth"]["scoring_rubric"][0]["correct_criterion"] = "failed at 03:14 \udc00"
    project.config(routes={"r": OPENAI}, panel=[])
    project.dataset_path.write_text(json.dumps([record]), encoding="ascii")  # ensure_ascii: the escape as written
    result = project.run("plan")
    assert result.exit_code == 1, result.output
    assert "record 1 (task t1)" in result.output and "half of a UTF-16 surrogate pair" in result.output
    assert "Traceback" not in result.output and not project.state_path.exists()


@pytest.mark.parametrize("key", [SECRET + "\n", "ключ-" + SECRET])
def test_a_key_no_http_header_can_carry_is_a_clear_error_before_anything_is_sent(key: str, project: Project, emu: Emulator,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A key read with its file's line break made httpx refuse every request: reported as
    "Connection error ... check that the host is reachable", retried until the run's limit, exit 2
    every night; a non-ASCII character (a key pasted with a typographic character) raised
    UnicodeEncodeError: a traceback. Neither shows the key."""
    from conftest import KEY_ENV

    monkeypatch.setenv(KEY_ENV, key)
    setup(project, {"r": OPENAI, "s": ANTHROPIC}, tasks=1)
    result = project.run("refresh", "--interval", "0.01", "--timeout", "20s", emulator=emu)
    assert result.exit_code == 1, result.output
    assert f"{KEY_ENV} " in result.output and ("whitespace" in result.output or "non-ASCII" in result.output)
    assert SECRET not in result.output and "Traceback" not in result.output
    assert emu.calls == []


@pytest.mark.parametrize("args", [("refresh", "--timeout", "0.5s"), ("poll", "--wait", "--timeout", "0.5s")])
def test_wait_lock_keeps_to_the_runs_time_limit(args: tuple[str, ...], project: Project, emu: Emulator) -> None:
    """`refresh --timeout 0.5s --wait-lock` (and submit's, poll --wait's) waited for another writer
    without limit: a cron run outlived its time limit for as long as the other writer ran. The
    limit counts from the start, the lock included ("the lock and the inputs count against it")."""
    import subprocess
    import time

    import cliproc
    from batchrun.ledger.lock import WriterLock

    setup(project, {"r": OPENAI}, tasks=1)
    assert project.run("plan", emulator=emu).exit_code == 0
    cliproc.warm()  # the fork server's imports (11-15 s under load) are not the run's time
    held = WriterLock(project.state_path, "another writer").acquire()
    try:
        started = time.monotonic()
        try:
            done = cliproc.run(["--config", str(project.config_path), "--emulator", emu.url, *args, "--wait-lock"], timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail("still waiting for the lock 20 s after a 0.5 s time limit")
        took = time.monotonic() - started
    finally:
        held.release()
    assert done.returncode == 2, done.stderr
    assert "time limit" in done.stderr and "another writer" in done.stderr and "Traceback" not in done.stderr
    assert took < 15, took


def test_a_key_a_provider_echoes_in_a_probe_answer_is_never_stored_or_printed(project: Project, proxy: HostileProxy) -> None:
    """Some OpenAI-compatible servers answer an error with status 200 (`{"error": {...}}`): not a
    failed call, so clients.classify's redaction never saw it, and `probe` wrote its message,
    the key quoted in it, to state.db (`probes.note`) and stdout."""
    import sqlite3

    from conftest import route

    setup(project, {"bad": route("openai-compatible", "kimi-k2.6", transport="sync", send_temperature=False,
                                 price={"input": 1.0, "output": 1.0})})
    body = ('{"error":{"message":"upstream refused key %s","type":"server_error"}}' % SECRET).encode()
    proxy.rule("answer", "POST", r"/chat/completions$", status=200, body=body, count=-1)
    result = project.run("probe", "bad", "--max-cost", "1", emulator=proxy)
    assert proxy.fired and "upstream refused key [REDACTED]" in result.output, result.output
    conn = sqlite3.connect(project.state_path)
    try:
        assert SECRET not in "\n".join(conn.iterdump())
    finally:
        conn.close()
    assert SECRET not in result.output


def test_the_emulator_refuses_a_gemini_content_without_parts(emu: Emulator) -> None:
    """The API answers 400 "* GenerateContentRequest.contents[0].parts: contents.parts must not be
    empty." (egoist/chatwise-releases#250, coze-dev/coze-studio#46); the emulator answered "OK"."""
    from google import genai
    from google.genai import errors, types

    client = genai.Client(api_key="emulator-key-0123456789", http_options=types.HttpOptions(base_url=emu.url))
    with pytest.raises(errors.ClientError, match=r"contents\[0\]\.parts: contents.parts must not be empty"):
        client.models.generate_content(model="gemini-2.5-pro", contents=[{"role": "user", "parts": []}])  # type: ignore[arg-type]


def test_a_full_disk_during_a_download_is_the_full_disk_error_not_a_network_one(tmp_path: Path, emu: Emulator) -> None:
    """ENOSPC while a result file streamed to jobs/ was classified as a connection error: the
    download was fetched 8 times onto the full disk, then reported as "failed (no response) ...;
    will try again", poll exited 0 (refresh: 2, run after run). A full disk is exit 1 with its
    message, and the next run, with room, downloads the file."""
    import os

    from test_bad_input import _mount, _umount
    from test_hostile_results import openai_line

    disk = tmp_path / "disk"
    disk.mkdir()
    _mount("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk))
    try:
        project = Project(disk / "proj")
        setup(project, {"r": OPENAI}, tasks=2)
        emu.add_fault({"kind": "corrupt_line", "model": "gpt-5.5", "count": 1, "line": openai_line("x" * 600_000)})
        assert project.run("submit", emulator=emu).exit_code == 0
        filler = disk / "filler"
        st = os.statvfs(disk)
        filler.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - (100 << 10)))
        full = project.run("poll", emulator=emu)
        assert full.exit_code == 1, full.output
        assert "Error: The disk is full" in full.stderr and "Traceback" not in full.output
        downloads = [c for c in emu.calls if c["path"].endswith("/content")]
        assert len(downloads) == 1, downloads
        filler.unlink()
        assert project.run("poll", emulator=emu).exit_code == 0
        assert project.sql("SELECT status FROM batches") == [{"status": "downloaded"}]
    finally:
        _umount(disk)


@pytest.mark.parametrize("base_url", ["http://proxyuser:Sup3rSecretPw@127.0.0.1:9/v1", "http://127.0.0.1:9/v1?key=Sup3rSecretPw"])
def test_a_credential_written_into_base_url_is_refused_never_published(base_url: str, project: Project) -> None:
    """A password or key written into base_url (user:password@host, ?key=) was recorded 24 times in
    state.db and published in results/*.scores.json, the manifest and the site (provenance names
    the route's host), and printed in the report."""
    setup(project, {"r": {**OPENAI, "base_url": base_url}}, tasks=1)
    result = project.run("plan")
    assert result.exit_code == 1, result.output
    assert 'routes."r".base_url' in result.output and "Sup3rSecretPw" not in result.output
    assert not project.state_path.exists()


def test_a_retry_after_of_a_day_is_left_to_the_next_run_not_slept_through(project: Project, proxy: HostileProxy) -> None:
    """An online 429 with `Retry-After: 86400` made `refresh` (no --timeout) sleep for a day,
    holding the writer lock, so the next nights' cron runs were refused ("1e12": 31,000 years).
    A wait longer than a run ever backs off is left to the next run (exit 2), as submit and
    preflight already leave one."""
    import subprocess

    from conftest import route
    from test_hardening_net import child

    setup(project, {"bad": route("openai-compatible", "kimi-k2.6", transport="sync", send_temperature=False)}, tasks=1)
    first, _ = child(project, "preflight", proxy=proxy)
    assert first.returncode == 0, first.stderr
    proxy.rule("answer", "POST", r"/chat/completions$", status=429, headers={"Retry-After": "86400"}, count=-1)
    try:
        done, _ = child(project, "refresh", "--interval", "0.05", proxy=proxy, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("refresh was still sleeping through the provider's Retry-After of a day")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "longer than a run waits" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("edit", ["drop dataset", "documents not a list", "a results file without a path", "nested too deep",
                                  "state.db's result_files_json"])
def test_verify_of_a_manifest_edited_into_another_shape_is_a_named_error(edit: str, project: Project, emu: Emulator) -> None:
    """`verify` checks a published leaderboard, a document from outside: a manifest edited into
    another shape raised KeyError/TypeError out of it (a traceback) instead of saying so."""
    import json

    setup(project, {"r": OPENAI}, tasks=1)
    assert project.run("refresh", "--interval", "0.01", emulator=emu).exit_code == 0
    path = project.results_dir / "manifest.json"
    m = json.loads(path.read_text())
    if edit == "drop dataset":
        del m["dataset"]
    elif edit == "documents not a list":
        m["documents"] = 5
    elif edit == "a results file without a path":
        m["results_files"] = [{}]
    path.write_text(json.dumps(m) if edit != "nested too deep" else "[" * 100_000 + "]" * 100_000)
    if edit == "state.db's result_files_json":  # (a JSONDecodeError out of manifest.recorded_provider_files)
        import sqlite3

        conn = sqlite3.connect(project.state_path)
        conn.execute("UPDATE batches SET result_files_json = '{bad'")
        conn.commit()
        conn.close()
    result = project.run("verify", emulator=emu)
    assert result.exit_code == 1, result.output
    assert any(words in result.output for words in ("does not have the shape of a manifest", "is not JSON", "is damaged"))
    assert "Traceback" not in result.output


def test_the_emulator_refuses_an_anthropic_batch_of_more_than_100000_requests(emu: Emulator) -> None:
    """"A Message Batch is limited to either 100,000 Message requests or 256 MB in size" (Message
    Batches docs): the emulator created a batch of 100,001, so a sharding bug would go unseen.
    (Plain HTTP: the SDK's per-item transform of 100,001 requests takes seconds; the count is
    refused before any request is read, so their params may be anything.)"""
    import http.client
    import json

    body = json.dumps({"requests": [{"custom_id": str(i), "params": {}} for i in range(100_001)]})
    conn = http.client.HTTPConnection(emu.url.removeprefix("http://"), timeout=30)
    conn.request("POST", "/v1/messages/batches", body=body, headers={
        "x-api-key": "emulator-key-0123456789", "anthropic-version": "2023-06-01", "content-type": "application/json"})
    answer = conn.getresponse()
    error = json.loads(answer.read())["error"]
    conn.close()
    assert answer.status == 400 and error["message"] == "requests: List should have at most 100000 items after validation, not 100001"


@pytest.mark.parametrize("provider", ["openai", "gemini"])
def test_jobs_deleted_while_a_batch_is_in_flight_still_collects_its_results(provider: str, project: Project, emu: Emulator) -> None:
    """jobs/ cleaned up while a batch ran: the OpenAI and Anthropic downloads failed with ENOENT,
    retried as a "connection error" (poll exit 0, refresh exit 2, every run, the results never
    fetched); Gemini's raised FileNotFoundError, a traceback. The provider still holds the
    results: they are fetched into the batch's folder again."""
    import shutil

    setup(project, {"r": {"openai": OPENAI, "gemini": GEMINI}[provider]}, tasks=1)
    assert project.run("submit", emulator=emu).exit_code == 0
    shutil.rmtree(project.area / "jobs")
    result = project.run("refresh", "--interval", "0.01", "--timeout", "20s", emulator=emu)
    assert result.exit_code == 0, result.output
    assert board(project)["r"]["complete"] == 1


def test_a_key_echoed_where_an_sdk_warns_about_it_is_redacted_on_stderr(project: Project, proxy: HostileProxy) -> None:
    """google-genai warns "<value> is not a valid FinishReason" for an enum value it does not
    know: a Gemini answer with the key as its finishReason put the key on stderr through Python's
    warnings, which nothing redacted. A real process, for the real stderr."""
    from test_hardening_net import child

    setup(project, {"bad": {**GEMINI, "transport": "sync"}}, tasks=1)
    first, _ = child(project, "preflight", proxy=proxy)
    assert first.returncode == 0, first.stderr
    body = ('{"candidates":[{"content":{"role":"model","parts":[{"text":"The crane failed at 03:14."}]},"finishReason":"%s",'
            '"index":0}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":5,"totalTokenCount":10}}') % SECRET
    proxy.rule("answer", "POST", r":generateContent$", status=200, body=body.encode(), count=-1)
    done, _ = child(project, "refresh", "--interval", "0.05", "--timeout", "20s", proxy=proxy)
    assert proxy.fired and done.returncode == 0, done.stderr[-2000:]
    assert "[REDACTED] is not a valid FinishReason" in done.stderr
    assert SECRET not in done.stderr and SECRET not in done.stdout
    assert _files_holding(project.root, SECRET) == []


def test_a_result_file_that_starts_with_a_bom_loses_no_line(project: Project, emu: Emulator) -> None:
    """A result file written with a UTF-8 byte order mark (a proxy or gateway on Windows): its first
    line did not parse, so that request was taken as unanswered and sent, and paid for, again.
    RFC 8259 section 8.1: parsers "MAY ignore the presence of a byte order mark"."""
    from test_hostile_results import openai_line

    setup(project, {"r": OPENAI}, tasks=1)
    emu.add_fault({"kind": "corrupt_line", "model": "gpt-5.5", "count": 1,
                   "line": "\ufeff" + openai_line("The crane failed at 03:14 on Tuesday.")})
    result = project.run("refresh", "--interval", "0.01", emulator=emu)
    assert result.exit_code == 0, result.output
    assert [r["kind"] for r in project.sql("SELECT kind FROM results")] == ["ok"]
    assert len(project.sql("SELECT id FROM batches")) == 1  # sent once


def test_a_judge_reply_built_to_be_decoded_at_every_brace_is_read_in_bounded_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """parse_verdict decoded JSON at every '{' of a reply, and each failed decode costs time in
    proportion to its position (json's error counts the lines before it): a judge reply of a
    million '{' took 200 s of collect's CPU (no network call, so no time limit cut it), '{"a":'
    repeated 10 s per MB. Counted in decode attempts, not timed (speed is measured in bench/)."""
    import json

    from batchrun.protocol import grading

    attempts = []

    class Counting(json.JSONDecoder):
        def raw_decode(self, s: str, idx: int = 0) -> tuple[object, int]:
            attempts.append(idx)
            return super().raw_decode(s, idx)

    monkeypatch.setattr(grading, "_DECODER", Counting())
    assert grading.parse_verdict("{" * 100_000).total is None
    assert attempts == []  # no '{' there can start an object
    assert grading.parse_verdict('{"a":' * 5_000).total is None
    assert len(attempts) <= grading.MAX_OBJECT_STARTS
    attempts.clear()
    reply = 'Per item: {"P1": "met"} and {"P2": "not met"}.\nVerdict: {"points_awarded": [60, 0], "total": 60}'
    assert grading.parse_verdict(reply) == grading.Verdict(60.0, [60, 0])
    assert len(attempts) == 3


def test_redaction_tries_a_run_of_backslashes_once_not_at_each_of_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The escape pattern (`\\\\+` then `u0073`) was tried at every backslash of a run, each try
    running to the run's end: quadratic, so an answer of a megabyte of backslashes held collect
    for over a minute (80,000 took 1.9 s; bench: `python -c "from batchrun.base.redaction
    import ...; redact('\\\\\\\\' * 500_000)"`). It is tried at the first backslash of a run only,
    which finds the same escapes (checked structurally, not timed)."""
    from batchrun.base import redaction

    monkeypatch.setenv("BATCHRUN_AUDIT_KEY", SECRET)
    redaction.know_key_variables(["BATCHRUN_AUDIT_KEY"])
    keys = redaction.known_keys()
    assert keys.escapes is not None
    run = "\\" * 5 + "u0073"
    assert keys.escapes.match(run, 0) is not None and keys.escapes.match(run, 1) is None
    escaped = "".join(f"\\u{ord(c):04x}" for c in SECRET)
    for text in (escaped, "\\" + escaped, "\\\\" + escaped, "a \\\\" * 1000 + escaped):
        assert SECRET not in redaction.redact(text) and redaction.redact(text).endswith(redaction.REDACTED), text[-60:]


def test_a_listing_that_serves_the_same_page_for_ever_ends_the_adoption(project: Project, proxy: HostileProxy,
                                                                       emu: Emulator) -> None:
    """After an uncertain create, submit lists the provider's batches newest first until one is
    older than the create. A listing answering `has_more: true` with the same page again and again
    (one batch dated in the future) kept `submit` (no --timeout) paging for ever: 454 pages in 20 s
    and on. A batch named twice is a malformed listing: the batch waits for a later round."""
    import json
    import subprocess

    from test_hardening_net import child

    setup(project, {"r": OPENAI}, tasks=1)
    first, _ = child(project, "preflight", proxy=proxy)
    assert first.returncode == 0, first.stderr
    emu.add_fault({"kind": "drop", "when": "after", "method": "POST", "path": "^/v1/batches$"})  # the create's answer is lost
    entry = {"id": "batch_x", "object": "batch", "endpoint": "/v1/chat/completions", "input_file_id": "file-x",
             "completion_window": "24h", "status": "in_progress", "created_at": 4102444800,
             "request_counts": {"total": 1, "completed": 0, "failed": 0}, "metadata": {}}
    page = {"object": "list", "data": [entry], "first_id": "batch_x", "last_id": "batch_x", "has_more": True}
    proxy.rule("answer", "GET", r"^/v1/batches$", status=200, body=json.dumps(page).encode(), count=-1)
    try:
        done, _ = child(project, "submit", proxy=proxy, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("submit was still paging through the same listing page")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "names batch batch_x twice" in done.stderr and "Traceback" not in done.stderr
    # Never created a second time: whether the lost create happened is still unknown.
    assert [b["status"] for b in project.sql("SELECT status FROM batches")] == ["creating"]


@pytest.mark.parametrize("listing", ["two empty pages, then the batch", "the same empty page for ever"])
def test_a_gemini_listing_page_that_is_empty_but_names_a_next_one(listing: str, project: Project, proxy: HostileProxy,
                                                                  emu: Emulator) -> None:
    """Google APIs "may return fewer results than page_size, including zero results, even if not
    at the end of the collection" (AIP-158): google-genai's pager then raises IndexError
    (pagers.Pager.__next__), so submit's adoption after an uncertain Gemini create ended in a
    traceback. Pages are read one by one; the same next page named twice is a malformed listing."""
    import json

    from test_hardening_net import child

    setup(project, {"r": GEMINI}, tasks=1)
    first, _ = child(project, "preflight", proxy=proxy)
    assert first.returncode == 0, first.stderr
    emu.add_fault({"kind": "drop", "when": "after", "method": "POST", "path": ":batchGenerateContent$"})  # the create's answer is lost
    def empty(token: str) -> bytes:
        return json.dumps({"batches": [], "nextPageToken": token}).encode()  # the emulator's tokens are offsets

    if listing.startswith("two empty"):
        proxy.rule("answer", "GET", r"^/v1(beta)?/batches$", status=200, body=empty("0"), count=1)
        proxy.rule("answer", "GET", r"^/v1(beta)?/batches$", status=200, body=empty("00"), count=1)
    else:
        proxy.rule("answer", "GET", r"^/v1(beta)?/batches$", status=200, body=empty("0"), count=-1)
    done, _ = child(project, "submit", proxy=proxy, timeout=30)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    if listing.startswith("two empty"):
        assert done.returncode == 0 and "adopted 1" in done.stdout + done.stderr, done.stderr[-2000:]
    else:
        assert done.returncode == 2 and "names the same next page twice" in done.stderr, done.stderr[-2000:]
    assert len([c for c in emu.calls if c["method"] == "POST" and c["path"].endswith(":batchGenerateContent")]) == 1


def test_a_gemini_result_file_the_disk_fails_to_write_whole_leaves_no_echoed_key(project: Project, emu: Emulator,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """google-genai hands the whole result file over in memory, and the adapter wrote it with
    write_bytes: a disk failing mid-write (full, an I/O error) left the part written on disk,
    unredacted (poll redacts a file once whole), as a cut stream did for the other two (review13)."""
    import errno

    setup(project, {"bad": GEMINI, "control": ANTHROPIC})
    emu.add_fault({"kind": "echo_key_request", "model": GEMINI["model"], "count": -1})
    assert project.run("submit", emulator=emu).exit_code == 0
    real = Path.write_bytes

    def disk_full_halfway(self: Path, data: bytes) -> int:  # type: ignore[override]
        if "jobs" not in self.parts or SECRET.encode() not in bytes(data):
            return real(self, data)
        real(self, bytes(data)[: len(data) // 2 + len(data) // 4])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", disk_full_halfway)
    result = project.run("poll", emulator=emu)
    assert "Traceback" not in result.output and SECRET not in result.output, result.output
    assert _files_holding(project.root, SECRET) == []
