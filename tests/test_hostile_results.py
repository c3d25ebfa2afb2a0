"""Issue 24, items 2, 3 and 11 (duplicates): what a provider's answers may hide or repeat.

Through the CLI, the real SDKs and the emulator (in process, latency 0, a scripted responder that
keeps every judge prompt), as in test_hostile_provider:

- a key echoed behind JSON escapes (`\\u0073k-…`, `\\/`, every character escaped, a JSON text
  inside an answer that escapes it twice) never reaches results.text, raw_json, the responses
  files, the site's task pages, the judges' prompts, jobs/ or the output;
- a key of fewer than 8 characters is redacted too (1-3 characters only where it stands alone,
  said once at start-up);
- a result file that answers one request with two different lines: neither is used, both are
  kept, the request is asked again, and collect says so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from batchrun.base import redaction
from conftest import KEY_ENV, Project, route
from test_hostile_provider import Responder, emu, ok, responder, setup  # noqa: F401 (emu, responder: fixtures)

SECRET = "sk-ESCAPED/7f3a9c2e41-SECRET"
REDACTED = "[REDACTED]"


def cids(project: Project) -> dict[tuple[str, str], str]:
    """(route, task) -> the custom_id of its generation request."""
    return {(r["route"], r["task_id"]): r["custom_id"]
            for r in project.sql("SELECT route, task_id, custom_id FROM requests WHERE stage = 'gen'")}


def escape_all(text: str) -> str:
    """Every character as a \\uXXXX escape (valid inside a JSON string)."""
    return "".join(f"\\u{ord(c):04x}" for c in text)


def unescaped_views(text: str) -> list[str]:
    """`text` and what it reads as once JSON escapes are undone, at every depth: the ways a
    reader (or a judge, or json.loads) could still recover a key from it."""
    views = [text]
    for _ in range(4):
        text = re.sub(r"\\+u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)
        text = re.sub(r"\\+/", "/", text)
        views.append(text)
    return views


def assert_nowhere(project: Project, secret: str, outputs: list[str], prompts: list[str]) -> None:
    """The key, in any spelling, is in no output, no judge prompt and no file of the project."""
    import sqlite3

    conn = sqlite3.connect(project.state_path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    for where, text in [("output", o) for o in outputs] + [("judge prompt", p) for p in prompts]:
        assert not any(secret in v for v in unescaped_views(text)), (where, text[-2000:])
    files = [p for p in project.root.rglob("*") if p.is_file()]
    assert any(p.suffix == ".html" for p in files) and any(p.name.endswith("responses.json") for p in files)
    for path in files:
        text = path.read_bytes().decode("utf-8", "replace")
        assert not any(secret in v for v in unescaped_views(text)), path


def openai_line(content_json: str) -> str:
    """An OpenAI batch output line answering $CUSTOM_ID; `content_json` is the raw JSON text of
    the answer inside its quotes (escapes as given)."""
    return ('{"id":"batch_req_x","custom_id":"$CUSTOM_ID","response":{"status_code":200,"request_id":"req_x","body":'
            '{"id":"chatcmpl-x","object":"chat.completion","created":1,"model":"gpt-5.5","choices":[{"index":0,'
            f'"message":{{"role":"assistant","content":"{content_json}"}},"finish_reason":"stop"}}],'
            '"usage":{"prompt_tokens":5,"completion_tokens":5,"total_tokens":10}}},"error":null}')


def anthropic_line(text_json: str) -> str:
    return ('{"custom_id":"$CUSTOM_ID","result":{"type":"succeeded","message":{"id":"msg_x","type":"message","role":"assistant",'
            f'"model":"claude-opus-4-8","content":[{{"type":"text","text":"{text_json}"}}],"stop_reason":"end_turn",'
            '"usage":{"input_tokens":5,"output_tokens":5}}}}')


def gemini_line(text_json: str) -> str:
    return ('{"key":"$CUSTOM_ID","response":{"candidates":[{"content":{"parts":[{"text":"' + text_json + '"}],"role":"model"},'
            '"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":5,"totalTokenCount":10}}}')


def online_body(content_json: str) -> str:
    return ('{"id":"chatcmpl-x","object":"chat.completion","created":1,"model":"kimi-k2.6","choices":[{"index":0,'
            f'"message":{{"role":"assistant","content":"{content_json}"}},"finish_reason":"stop"}}],'
            '"usage":{"prompt_tokens":5,"completion_tokens":5,"total_tokens":10}}')


ROUTES = {
    "gpt": route("openai", "gpt-5.5"),
    "claude": route("anthropic", "claude-opus-4-8"),
    "gem": route("gemini", "gemini-2.5-pro"),
    "kimi": route("openai-compatible", "kimi-k2.6", transport="sync", sync_concurrency=1, send_temperature=False),
    "judge": route("anthropic", "claude-sonnet-4-6"),
}


# --- item 2: a key behind JSON escapes ---------------------------------------------------------------


def test_a_key_behind_json_escapes_is_redacted_everywhere(project: Project, emu: Any, responder: Responder,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    setup(project, ROUTES, panel=["judge"], tasks=["p1", "p2", "p3"])
    ok(project.run("plan", emulator=emu))
    # The routes' preflights (one online request each, sent before their first upload) are sent
    # before the faults are armed: the online fault below matches any chat completion, and is
    # meant for the sync route's real request, not for a preflight.
    ok(project.run("preflight", emulator=emu))
    cid = cids(project)
    prefix = "ANSWER: the crane failed at 03:14 on Tuesday; Mara Quist. The key: "
    first_s = "\\u0073" + SECRET[1:].replace("/", "\\/")  # \u0073k-ESCAPED\/7f3a...
    double = "\\\\u0073" + SECRET[1:]  # a JSON text inside the answer: {\"k\": \"\\u0073k-...\"}
    faults = [
        ("gpt", "p1", openai_line(prefix + first_s)),
        ("gpt", "p2", openai_line(prefix + '{\\"k\\": \\"' + double + '\\"}')),
        ("gpt", "p3", openai_line(prefix + escape_all(SECRET))),
        ("claude", "p1", anthropic_line(prefix + SECRET.replace("/", "\\/"))),
        ("claude", "p2", anthropic_line(prefix + escape_all(SECRET[:9]) + SECRET[9:])),
        ("gem", "p1", gemini_line(prefix + escape_all(SECRET))),
    ]
    for name, task_id, line in faults:
        emu.add_fault({"kind": "corrupt_line", "custom_id": cid[(name, task_id)], "line": line})
    # Online: the SDK decodes the body once; what it decodes to still holds the key escaped once.
    emu.add_fault({"kind": "mangle_json", "path": "/v1/chat/completions$", "count": 1,
                   "raw": online_body(prefix + double)})

    outputs = []
    r = ok(project.run("refresh", "--interval", "0.01", emulator=emu))
    outputs += [r.output]
    for args in (["report", "--format", "json"], ["status", "--json"]):
        outputs.append(ok(project.run(*args, emulator=emu)).output)

    # The answers were taken (not refused as malformed), with the key replaced where it stood.
    rows = project.sql("SELECT q.route, q.task_id, r.kind, r.text, r.raw_json FROM results r JOIN requests q ON q.custom_id = r.custom_id "
                       "WHERE q.stage = 'gen' AND r.text LIKE '%[REDACTED]%'")
    assert {(x["route"], x["task_id"]) for x in rows} == {("gpt", "p1"), ("gpt", "p2"), ("gpt", "p3"), ("claude", "p1"),
                                                           ("claude", "p2"), ("gem", "p1"), ("kimi", "p1")}
    for x in rows:
        assert x["kind"] == "ok" and x["text"].startswith(prefix), x
        assert REDACTED in x["raw_json"] and isinstance(json.loads(x["raw_json"]), dict), x  # still the provider's line, as JSON
    # The judges graded the redacted answers.
    assert any(REDACTED in p for p in responder.judge_prompts)
    assert_nowhere(project, SECRET, outputs, responder.judge_prompts)


def test_redaction_keeps_the_text_around_the_key_byte_for_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHRUN_TEST_REDACT", SECRET)
    redaction.know_key_variables(["BATCHRUN_TEST_REDACT"])
    line = '{"a":"caf\\u00e9 \\u003cb\\u003e x\\/y \\n","b":1.50e3,"c":"\\u0073' + SECRET[1:] + '","a":2}'
    out = redaction.redact(line)
    # Only the key's span changed: the other escapes, the number as written and the repeated key stay.
    assert out == '{"a":"caf\\u00e9 \\u003cb\\u003e x\\/y \\n","b":1.50e3,"c":"[REDACTED]","a":2}'
    untouched = '{"a":"caf\\u00e9 \\u003cb\\u003e x\\/y"}'
    assert redaction.redact(untouched) is untouched or redaction.redact(untouched) == untouched


def test_a_bearer_token_is_redacted_whatever_the_case_of_bearer() -> None:
    """HTTP's auth scheme is case-insensitive (RFC 9110 §11.1), and so is the pattern: the quick
    test before it must be too (it let "BeArEr <token>" through)."""
    token, no_keys = "abcdefghij0123456789xyz", redaction.Keys((), None, None, None, None, ())  # a token no variable holds
    for scheme in ("Bearer", "bearer", "BEARER", "BeArEr", "bEARer", "BEARer"):
        text = f"the header was {scheme} {token}, refused"
        assert redaction.redact(text, no_keys) == "the header was Bearer [REDACTED], refused", scheme
        line = json.dumps({"error": {"message": text}})
        assert token not in redaction.redact_json_line(line, no_keys) and json.loads(redaction.redact_json_line(line, no_keys)), scheme
        assert redaction.needs_redaction(line.encode(), no_keys), scheme  # a downloaded file is rewritten for it
    assert redaction.redact("Bearer bonds and BeArEr authentication", no_keys) == "Bearer bonds and BeArEr authentication"


def test_a_masked_echo_of_a_key_is_redacted_with_its_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenAI's 401 quotes a wrong key masked, its first 8 and last 4 characters around asterisks
    (the emulator's openai_rules.masked_key); gateways mask it their own way. The visible parts
    are a part of the key: gone with the mask. What only looks like one stays."""
    key = "sk-proj-Q2xZ9abcdefghijklmnopMxYA"
    monkeypatch.setenv("BATCHRUN_TEST_REDACT", key)
    redaction.know_key_variables(["BATCHRUN_TEST_REDACT"])
    from batchrun.emulator.openai_rules import masked_key

    echoed = f"Incorrect API key provided: {masked_key(key)}. You can find your API key at https://platform.openai.com/account/api-keys."
    assert redaction.redact(echoed) == ("Incorrect API key provided: [REDACTED]. You can find your API key at "
                                        "https://platform.openai.com/account/api-keys.")
    for masked in ("sk-proj-****MxYA", "sk-proj-Q2x***...MxYA", "••••MxYA", "sk-proj-Q…nopMxYA", "***pMxYA"):
        assert redaction.redact(f"key {masked}, refused") == "key [REDACTED], refused", masked
    # In a provider's JSON line too (an error file, an online answer kept as raw JSON).
    line = json.dumps({"error": {"message": f"Incorrect API key provided: {masked_key(key)}.", "code": "invalid_api_key"}})
    assert masked_key(key) not in redaction.redact_json_line(line) and json.loads(redaction.redact_json_line(line))
    assert redaction.needs_redaction(line.encode(), redaction.known_keys())
    # A prefix alone is the provider's public part; another key's tail, prose and markdown stay.
    for kept in ("keys look like sk-proj-****", "sk-proj-****WXYZ", "Wait... MxYA?", "**MxYA**", "****A", "sk-proj-****MxYAB"):
        assert redaction.redact(kept) == kept, kept


# --- item 3: keys shorter than 8 characters --------------------------------------------------------------


def test_a_seven_character_key_echoed_by_the_provider_is_redacted(project: Project, emu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "k7Q2xZ9"
    monkeypatch.setenv(KEY_ENV, key)
    monkeypatch.setattr(redaction, "_warned", set(), raising=False)
    setup(project, {"gpt": ROUTES["gpt"], "kimi": ROUTES["kimi"]}, tasks=["p1", "p2"])
    # Preflight first: the faults below (one request per model) are meant for the routes' real
    # requests, and would otherwise be taken by their preflights (sent first, same model).
    pre = ok(project.run("preflight", emulator=emu))
    emu.add_fault({"kind": "echo_key_request", "model": "gpt-5.5", "count": 1})
    emu.add_fault({"kind": "echo_key_request", "model": "kimi-k2.6", "count": 1})
    r = ok(project.run("refresh", "--interval", "0.01", emulator=emu))
    echoed = project.sql("SELECT text FROM results WHERE text LIKE '%The key you sent%'")
    assert len(echoed) == 2 and all("Bearer [REDACTED]" in x["text"] for x in echoed), echoed
    assert_nowhere(project, key, [pre.output, r.output], [])
    # Said once per process (both commands ran in this one): at the first, the preflight.
    assert (pre.stderr + r.stderr).count(f"the key in {KEY_ENV} is only 7 character(s) long") == 1


def test_a_two_character_key_is_redacted_where_it_stands_alone_and_said_once(project: Project, emu: Any,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    key = "Q7"
    monkeypatch.setenv(KEY_ENV, key)
    monkeypatch.setattr(redaction, "_warned", set(), raising=False)
    setup(project, {"gpt": ROUTES["gpt"]}, tasks=["p1", "p2"])
    planned = ok(project.run("plan", emulator=emu))
    # One answer quotes the key on its own (and escaped); the other holds the two letters inside words.
    emu.add_fault({"kind": "corrupt_line", "custom_id": cids(project)[("gpt", "p1")], "line": openai_line("key: Q7 and \\u0051\\u0037.")})
    emu.add_fault({"kind": "corrupt_line", "custom_id": cids(project)[("gpt", "p2")], "line": openai_line("Part AQ7B and Q7x, model Q77.")})
    r = ok(project.run("refresh", "--interval", "0.01", emulator=emu))
    texts = {x["task_id"]: x["text"] for x in project.sql(
        "SELECT q.task_id, r.text FROM results r JOIN requests q ON q.custom_id = r.custom_id WHERE q.stage = 'gen'")}
    assert texts == {"p1": "key: [REDACTED] and [REDACTED].", "p2": "Part AQ7B and Q7x, model Q77."}
    warning = f"the key in {KEY_ENV} is only 2 character(s) long"
    assert planned.stderr.count(warning) == 1 and "where it stands alone" in planned.stderr
    assert warning not in r.stderr  # said once per process
    lone = re.compile(r"(?<![A-Za-z0-9])Q7(?![A-Za-z0-9])")
    for x in project.sql("SELECT text, raw_json, error_message FROM results"):
        assert not any(lone.search(v or "") for v in x.values()), x
    for path in project.area.joinpath("jobs").rglob("output.jsonl"):
        assert not any(lone.search(v) for v in unescaped_views(path.read_text(encoding="utf-8"))), path


# --- item 11: one request answered twice ----------------------------------------------------------------


def test_different_lines_for_one_request_are_kept_neither_used_and_asked_again(project: Project, emu: Any,
                                                                               responder: Responder) -> None:
    setup(project, {"gpt": ROUTES["gpt"], "claude": ROUTES["claude"], "judge": ROUTES["judge"]}, panel=["judge"], tasks=["p1", "p2"])
    ok(project.run("plan", emulator=emu))
    cid = cids(project)
    one, two = openai_line("ANSWER-ONE: the crane failed at 03:14."), openai_line("ANSWER-TWO: it never failed.")
    emu.add_fault({"kind": "corrupt_line", "custom_id": cid[("gpt", "p1")], "line": one + "\n" + two})
    same = anthropic_line("ANSWER-SAME: the crane failed at 03:14.")
    emu.add_fault({"kind": "corrupt_line", "custom_id": cid[("claude", "p1")], "line": same + "\n" + same})

    first = ok(project.run("submit", emulator=emu))
    ok(project.run("poll", emulator=emu))
    collected = ok(project.run("collect", emulator=emu), 2)
    assert "1 request(s) answered by different lines in the result file" in collected.stderr
    assert "1 result line(s) repeated byte for byte: read once" in collected.stderr
    rows = project.sql("SELECT r.* FROM results r JOIN requests q ON q.custom_id = r.custom_id WHERE q.route = 'gpt' AND q.task_id = 'p1'")
    assert len(rows) == 1
    row = rows[0]
    assert (row["kind"], row["error_type"], row["text"]) == ("transient", "duplicate", None)
    assert "2 different lines" in row["error_message"] and "sent again" in row["error_message"]
    evidence = json.loads(row["raw_json"])["batchrun_duplicates"]
    assert [json.loads(e["raw"])["response"]["body"]["choices"][0]["message"]["content"] for e in evidence] == [
        "ANSWER-ONE: the crane failed at 03:14.", "ANSWER-TWO: it never failed."]
    assert [e["line"] for e in evidence] == [1, 2] and all(Path(e["file"]).name == "output.jsonl" for e in evidence)
    assert project.sql("SELECT count(*) n FROM judgments WHERE result_id = ?", [row["id"]]) == [{"n": 0}]
    # The same line twice is simply that answer.
    claude = project.sql("SELECT r.kind, r.text FROM results r JOIN requests q ON q.custom_id = r.custom_id "
                         "WHERE q.route = 'claude' AND q.task_id = 'p1'")
    assert claude == [{"kind": "ok", "text": "ANSWER-SAME: the crane failed at 03:14."}]
    assert first.exit_code == 0

    # The request is asked again; the route completes on the new answer, never on either of the two.
    ok(project.run("refresh", "--interval", "0.01", emulator=emu))
    final = project.sql("SELECT cs.status, r.text FROM cell_status cs JOIN results r ON r.id = cs.result_id "
                        "WHERE cs.route = 'gpt' AND cs.task_id = 'p1'")
    assert len(final) == 1 and final[0]["status"] == "ok"
    assert "ANSWER-ONE" not in final[0]["text"] and "ANSWER-TWO" not in final[0]["text"]
    assert not any("ANSWER-ONE" in p or "ANSWER-TWO" in p for p in responder.judge_prompts)


@pytest.mark.parametrize("kind", ["our id prefix g", "json key text", "json literal null", "hex of a custom_id"])
def test_a_short_key_that_is_also_json_structure_never_breaks_a_line(project: Project, emu: Any, kind: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A placeholder key may be "g" (every generation id starts "g-"), "text" (a field of
    Anthropic's and Gemini's lines), "null", or 4 hex digits that one of our ids holds: redacted
    where a provider echoes it, never where it is the line's structure or our id."""
    setup(project, {n: ROUTES[n] for n in ("gpt", "claude", "gem", "judge")}, panel=["judge"], tasks=["p1", "p2"])
    ok(project.run("plan", emulator=emu))
    key = {"our id prefix g": "g", "json key text": "text", "json literal null": "null",
           "hex of a custom_id": cids(project)[("claude", "p1")][2:6]}[kind]
    monkeypatch.setenv(KEY_ENV, key)
    monkeypatch.setattr(redaction, "_warned", set(), raising=False)
    # Preflight first (with this key): the faults below (one request per model) are meant for the
    # routes' real requests, and would otherwise be taken by their preflights (sent first).
    ok(project.run("preflight", emulator=emu))
    for model in ("gpt-5.5", "claude-opus-4-8", "gemini-2.5-pro"):
        emu.add_fault({"kind": "echo_key_request", "model": model, "count": 1})
    ok(project.run("refresh", "--interval", "0.01", emulator=emu))
    rows = project.sql("SELECT r.kind, r.text, r.raw_json, q.stage FROM results r JOIN requests q ON q.custom_id = r.custom_id")
    assert rows and {r["kind"] for r in rows} == {"ok"}, rows  # every line read, none malformed or missing
    assert all(isinstance(json.loads(r["raw_json"]), dict) for r in rows)
    echoed = [r["text"] for r in rows if "The key you sent" in (r["text"] or "")]
    assert len(echoed) == 3 and all(t.endswith(REDACTED) for t in echoed), echoed
    assert all(r["complete"] == 1 for r in project.sql("SELECT complete FROM leaderboard"))
