"""End to end through the CLI: submit → poll → collect with the real SDKs against the emulator.

Each test builds its own in-process emulator (latency 0 unless the test is about waiting) with a
scripted responder, so that every result kind is produced on purpose: the question of a task
carries a marker ([[REFUSE]], [[EMPTY]], [[INVALID]], [[FLAKY]]) that the responder reacts to.
state.db is then checked row by row, and the emulator's accepted-requests log proves that only the
requests that had to be retried were sent more than once.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from batchrun.emulator import Emulator
from conftest import PREFLIGHT_ID, batch_requests, Project, route, small_project, task

JUDGE_JSON = '{"points_awarded":[60,40],"total":100}'
MARKERS = ("[[REFUSE]]", "[[EMPTY]]", "[[INVALID]]", "[[FLAKY]]")
DOC = ("The harbor crane failed at 03:14 on Tuesday. The operator was Mara Quist. "
       "Wind speed reached 41 knots before the failure. Repairs took nine days.\n") * 3


class Script:
    """A responder: answers by the marker in the prompt, and remembers what it was asked."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: Counter[tuple[str, str, str]] = Counter()
        self.log: list[tuple[str, str, str | None, str]] = []  # (provider, model, custom_id, marker)

    def __call__(self, request: dict[str, Any]) -> Any:
        prompt = request["prompt"]
        if prompt.startswith("STRICT grader"):
            return JUDGE_JSON
        # A route's preflight (submit sends one before the route's first upload under a policy).
        marker = "preflight" if request.get("custom_id") == PREFLIGHT_ID else next((m for m in MARKERS if m in prompt), "ok")
        key = (request["provider"], request["model"], marker)
        with self.lock:
            self.seen[key] += 1
            n = self.seen[key]
            self.log.append((request["provider"], request["model"], request.get("custom_id"), marker))
        if marker == "[[REFUSE]]":
            return {"refusal": "I can't help with that (scripted)."}
        if marker == "[[EMPTY]]":
            return ""
        if marker == "[[INVALID]]":
            return {"error": {"status": 400, "message": "scripted invalid request"}}
        if marker == "[[FLAKY]]" and n == 1:
            return {"error": {"status": 429, "message": "scripted 429 rate limit"}}
        return f"ANSWER from {request['model']}: the crane failed at 03:14 on Tuesday; Mara Quist."

    def count(self, marker: str) -> int:
        with self.lock:
            return sum(1 for entry in self.log if entry[3] == marker)


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def emu(script: Script) -> Any:
    e = Emulator(host="127.0.0.1", port=0, latency=0.0, responder=script).start()
    yield e
    e.stop()


TASKS = {
    "t-ok": "When did the harbor crane fail?",
    "t-refuse": "[[REFUSE]] Who operated the crane?",
    "t-empty": "[[EMPTY]] What was the wind speed?",
    "t-invalid": "[[INVALID]] How long did repairs take?",
    "t-flaky": "[[FLAKY]] On which day did the crane fail?",
}


def setup(project: Project, routes: dict[str, Any], task_ids: list[str] | None = None, panel: list[str] | None = None,
          **sections: Any) -> Project:
    project.doc("harbor.txt", DOC)
    ids = task_ids or list(TASKS)
    project.tasks([task(t, TASKS.get(t, f"Plain question {t}: when did the crane fail?"), "harbor.txt") for t in ids])
    project.config(routes=routes, panel=[] if panel is None else panel, **sections)
    return project


def ok(result: Any, code: int = 0) -> Any:
    assert result.exit_code == code, result.output
    return result


def cycle(project: Project, emu: Any, *, collect_code: int) -> None:
    ok(project.run("submit", emulator=emu))
    ok(project.run("poll", emulator=emu))
    ok(project.run("collect", emulator=emu), collect_code)


def ids_by_task(project: Project, stage: str = "gen") -> dict[str, str]:
    return {r["task_id"]: r["custom_id"] for r in project.sql("SELECT task_id, custom_id FROM requests WHERE stage = ?", [stage])}


def kinds_by_task(project: Project) -> dict[str, list[str]]:
    rows = project.sql("SELECT q.task_id, r.kind FROM results r JOIN requests q ON q.custom_id = r.custom_id "
                       "WHERE q.stage = 'gen' ORDER BY r.id")
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r["task_id"], []).append(r["kind"])
    return out


def status_by_task(project: Project) -> dict[str, dict[str, Any]]:
    return {r["task_id"]: r for r in project.sql("SELECT * FROM request_status WHERE stage = 'gen'")}


def ids_by_task_all(project: Project) -> list[str]:
    return [r["custom_id"] for r in project.sql("SELECT custom_id FROM requests")]


def sent_per_task(project: Project, emu: Any) -> Counter[str]:
    """How many times the emulator accepted each generation request (batch transports)."""
    by_id = {v: k for k, v in ids_by_task(project).items()}
    return Counter(by_id[r["custom_id"]] for r in batch_requests(emu) if r["custom_id"] in by_id)


# --- every result kind, for every provider, endpoint and transport ----------------------------------

PROVIDER_ROUTES = {
    "openai-chat": route("openai", "gpt-5.5"),
    "openai-responses": route("openai", "gpt-5.5", endpoint="responses"),
    "anthropic": route("anthropic", "claude-sonnet-4-6"),
    "gemini": route("gemini", "gemini-2.5-pro"),
    "compat-batch": route("openai-compatible", "deepseek-v3.2", completion_window="72h"),
    "compat-sync": route("openai-compatible", "qwen-plus", transport="sync"),
    "anthropic-sync": route("anthropic", "claude-sonnet-4-6", transport="sync"),
    "gemini-sync": route("gemini", "gemini-2.5-flash", transport="sync"),
}


@pytest.mark.parametrize("name", list(PROVIDER_ROUTES))
def test_every_result_kind_end_to_end(project: Project, emu: Any, script: Script, name: str) -> None:
    spec = PROVIDER_ROUTES[name]
    sync = spec.get("transport") == "sync"
    setup(project, {name: spec})

    # Round 1: everything is sent once; the flaky request fails transiently and is queued again.
    cycle(project, emu, collect_code=2)
    assert kinds_by_task(project) == {
        "t-ok": ["ok"], "t-refuse": ["refusal"], "t-empty": ["empty"], "t-invalid": ["invalid"], "t-flaky": ["transient"],
    }
    st = status_by_task(project)
    # An invalid request is the config's fault, not the model's answer: blocked, never a zero.
    assert {t: s["state"] for t, s in st.items()} == {
        "t-ok": "ok", "t-refuse": "failed", "t-empty": "failed", "t-invalid": "blocked", "t-flaky": "pending",
    }
    assert (st["t-flaky"]["transient_n"], st["t-flaky"]["resubmit_n"]) == (1, 0)

    # Round 2: only the flaky request goes out again, and succeeds.
    ok(project.run("submit", emulator=emu))
    second = project.sql("SELECT * FROM batches ORDER BY seq")[-1]
    assert second["n_requests"] == 1
    assert [r["custom_id"] for r in project.sql("SELECT custom_id FROM batch_requests WHERE batch_id = ?", [second["id"]])] == [ids_by_task(project)["t-flaky"]]
    ok(project.run("poll", emulator=emu))
    blocked = ok(project.run("collect", emulator=emu), 2)  # the blocked request keeps the route open
    assert f"blocked: route {name!r}: 1 cell(s) [t-invalid] blocked" in blocked.output

    assert kinds_by_task(project) == {
        "t-ok": ["ok"], "t-refuse": ["refusal"], "t-empty": ["empty"], "t-invalid": ["invalid"], "t-flaky": ["transient", "ok"],
    }
    st = status_by_task(project)
    assert {t: s["state"] for t, s in st.items()} == {
        "t-ok": "ok", "t-refuse": "failed", "t-empty": "failed", "t-invalid": "blocked", "t-flaky": "ok",
    }
    assert (st["t-flaky"]["transient_n"], st["t-flaky"]["ok_n"]) == (1, 1)
    cells = {r["task_id"]: r["status"] for r in project.sql("SELECT task_id, status FROM cell_status")}
    assert cells == {"t-ok": "ok", "t-refuse": "refusal", "t-empty": "empty", "t-invalid": "blocked", "t-flaky": "ok"}

    batches = project.sql("SELECT * FROM batches ORDER BY seq")
    assert [b["status"] for b in batches] == ["collected", "collected"]
    assert {b["transport"] for b in batches} == {"sync" if sync else "batch"}
    assert all(b["provider_batch_id"] for b in batches)
    assert all(b["provider_batch_id"].startswith("sync-") == sync for b in batches)

    # Row contents: text, usage and the raw line kept; failures carry the provider's message.
    rows = {(r["task_id"], r["kind"]): r for r in project.sql(
        "SELECT q.task_id, r.* FROM results r JOIN requests q ON q.custom_id = r.custom_id")}
    model = spec["model"]
    for key in (("t-ok", "ok"), ("t-flaky", "ok")):
        r = rows[key]
        assert r["text"] == f"ANSWER from {model}: the crane failed at 03:14 on Tuesday; Mara Quist."
        assert r["input_tokens"] > 0 and r["output_tokens"] > 0
        assert r["finish_reason"]
        raw = json.loads(r["raw_json"])
        assert (raw.get("custom_id") or raw.get("key")) == ids_by_task(project)[key[0]]
    refusal = rows[("t-refuse", "refusal")]
    if spec["provider"] == "gemini":
        assert refusal["finish_reason"] == "SAFETY"  # blocked candidate, no text
    else:
        assert refusal["text"] == "I can't help with that (scripted)."
    assert "scripted invalid request" in rows[("t-invalid", "invalid")]["error_message"]
    assert "scripted 429" in rows[("t-flaky", "transient")]["error_message"]
    assert rows[("t-empty", "empty")]["text"] in ("", None)

    # Only the retried request reached the provider twice.
    assert script.count("[[FLAKY]]") == 2
    assert all(script.count(m) == 1 for m in ("ok", "[[REFUSE]]", "[[EMPTY]]", "[[INVALID]]"))
    assert len(batch_requests(emu)) == 6
    # One preflight, before round 1's upload; round 2 sent none (the policy had passed).
    assert script.count("preflight") == 1 and emu.requests[0]["custom_id"] == PREFLIGHT_ID
    if sync:
        assert {r["batch"] for r in emu.requests} == {"online"}
    if not sync or any(r["custom_id"] for r in emu.requests):
        assert sent_per_task(project, emu) == Counter({"t-ok": 1, "t-refuse": 1, "t-empty": 1, "t-invalid": 1, "t-flaky": 2})

    # Collecting again changes nothing.
    before = project.sql("SELECT count(*) AS n FROM results")[0]["n"]
    ok(project.run("collect", emulator=emu), 2)
    assert project.sql("SELECT count(*) AS n FROM results")[0]["n"] == before


def test_request_files_are_provider_native(project: Project, emu: Any) -> None:
    """What each route wrote under jobs/ is what its provider expects (and what the emulator accepted)."""
    routes = {k: PROVIDER_ROUTES[k] for k in ("openai-chat", "openai-responses", "anthropic", "gemini", "compat-batch")}
    setup(project, routes, task_ids=["t-ok"])
    cycle(project, emu, collect_code=0)
    by_route = {}
    for b in project.sql("SELECT route, request_file, last_seen_json FROM batches"):
        by_route[b["route"]] = (json.loads(Path(b["request_file"]).read_text(encoding="utf-8")), json.loads(b["last_seen_json"]))
    chat, _ = by_route["openai-chat"]
    assert chat["url"] == "/v1/chat/completions" and chat["body"]["max_completion_tokens"] == 8192 and chat["body"]["temperature"] == 0.1
    resp, seen = by_route["openai-responses"]
    assert resp["url"] == "/v1/responses" and "input" in resp["body"] and resp["body"]["max_output_tokens"] == 8192
    assert seen["endpoint"] == "/v1/responses"
    compat, seen = by_route["compat-batch"]
    # DashScope's compatible mode (the OpenAI-compatible provider the emulator models) takes 24h-336h windows.
    assert compat["url"] == "/v1/chat/completions" and compat["body"]["max_tokens"] == 8192
    assert (seen["endpoint"], seen["completion_window"]) == ("/v1/chat/completions", "72h")
    ant, _ = by_route["anthropic"]
    assert set(ant) == {"custom_id", "params"} and ant["params"]["temperature"] == 0.1
    gem, seen = by_route["gemini"]
    assert set(gem) == {"key", "request"} and gem["request"]["generationConfig"] == {"maxOutputTokens": 8192, "temperature": 0.1}
    assert seen["display_name"].startswith("batchrun-")
    assert {r["kind"] for r in project.sql("SELECT kind FROM results")} == {"ok"}


# --- the Anthropic API version rule -------------------------------------------------------------


def test_anthropic_api_version_header(project: Project, emu: Any) -> None:
    import anthropic

    # The SDK's own default rejects temperature: a temperature-bearing request that succeeds proves
    # batchrun sent anthropic-version 2023-06-01 itself.
    assert anthropic.Anthropic(api_key="x").default_headers["anthropic-version"] == "2026-10-21"
    routes = {
        "claude-default": route("anthropic", "claude-sonnet-4-6"),
        "claude-new-api": route("anthropic", "claude-opus-4-6", api_version="2026-10-21", send_temperature=False),
        "claude-sync": route("anthropic", "claude-sonnet-4-6", transport="sync"),
    }
    setup(project, routes, task_ids=["t-ok"])
    cycle(project, emu, collect_code=0)
    lines = {b["route"]: json.loads(Path(b["request_file"]).read_text(encoding="utf-8"))
             for b in project.sql("SELECT route, request_file FROM batches")}
    assert lines["claude-default"]["params"]["temperature"] == 0.1
    assert lines["claude-sync"]["params"]["temperature"] == 0.1
    assert "temperature" not in lines["claude-new-api"]["params"]
    kinds = {r["route"]: r["kind"] for r in project.sql("SELECT q.route, r.kind FROM results r JOIN requests q USING (custom_id)")}
    assert kinds == {"claude-default": "ok", "claude-new-api": "ok", "claude-sync": "ok"}
    # The version is part of each route's policy (and so of its fingerprint).
    policies = {r["route"]: json.loads(r["policy_json"]) for r in project.sql("SELECT route, policy_json FROM policies")}
    assert policies["claude-default"]["api_version"] == "2023-06-01"
    assert policies["claude-new-api"]["api_version"] == "2026-10-21"


def test_anthropic_new_api_version_with_temperature_is_a_config_error(project: Project, emu: Any) -> None:
    setup(project, {"c": route("anthropic", "claude-sonnet-4-6", api_version="2026-10-21")}, task_ids=["t-ok"])
    r = ok(project.run("submit", emulator=emu), 1)
    assert "2026-10-21" in r.output and "temperature" in r.output
    assert not project.state_path.exists()
    assert emu.calls == []


# --- batch-level outcomes: expired, cancelled, failed at validation -----------------------------------

BATCH_ROUTES = {
    "openai": route("openai", "gpt-5.5"),
    "anthropic": route("anthropic", "claude-sonnet-4-6"),
    "gemini": route("gemini", "gemini-2.5-pro"),
}
PLAIN = ["p1", "p2", "p3", "p4"]


@pytest.mark.parametrize("fault,kind", [("expire", "expired"), ("cancel", "cancelled")])
@pytest.mark.parametrize("provider", list(BATCH_ROUTES))
def test_expired_or_cancelled_batch_keeps_partial_results(project: Project, emu: Any, provider: str, fault: str, kind: str) -> None:
    spec = BATCH_ROUTES[provider]
    setup(project, {"r": spec}, task_ids=PLAIN, generation={"max_retries": 0})
    emu.add_fault({"kind": fault, "complete_fraction": 0.5, "model": spec["model"]})

    cycle(project, emu, collect_code=2)
    first = project.sql("SELECT * FROM batches")[0]
    # Message Batches have no expired state: the batch "ended" and each line says "expired".
    assert first["provider_state"] == ("done" if (provider, fault) == ("anthropic", "expire") else kind)
    kinds = kinds_by_task(project)
    if provider == "gemini" and fault == "expire":
        done = []  # a Gemini job that expires returns no results at all
    else:
        done = ["p1", "p2"]  # the emulator processed the first half, in file order
    assert kinds == {t: (["ok"] if t in done else [kind]) for t in PLAIN}
    st = status_by_task(project)
    for t in PLAIN:
        if t in done:
            assert st[t]["state"] == "ok"
        else:
            # Resubmitted without using the transient allowance (max_retries is 0 here).
            assert (st[t]["state"], st[t]["resubmit_n"], st[t]["transient_n"]) == ("pending", 1, 0)

    ok(project.run("submit", emulator=emu))
    resub = project.sql("SELECT * FROM batches ORDER BY seq")[-1]
    assert resub["n_requests"] == len(PLAIN) - len(done)
    ok(project.run("poll", emulator=emu))
    ok(project.run("collect", emulator=emu), 0)
    assert kinds_by_task(project) == {t: (["ok"] if t in done else [kind, "ok"]) for t in PLAIN}
    assert {s["state"] for s in status_by_task(project).values()} == {"ok"}
    assert sent_per_task(project, emu) == Counter({t: (1 if t in done else 2) for t in PLAIN})


@pytest.mark.parametrize("times", [1, 2])
@pytest.mark.parametrize("provider", ["openai", "gemini"])
def test_batch_failed_at_validation_is_requeued_once_then_blocks(project: Project, emu: Any, provider: str, times: int) -> None:
    spec = BATCH_ROUTES[provider]
    setup(project, {"r": spec}, task_ids=["p1", "p2"])
    emu.add_fault({"kind": "fail_validation", "model": spec["model"], "count": times})

    cycle(project, emu, collect_code=2)
    b1 = project.sql("SELECT * FROM batches")[0]
    assert (b1["status"], b1["provider_state"]) == ("collected", "failed")
    assert b1["error"]
    if provider == "openai":
        assert "failed validation" in b1["error"]
    rows = project.sql("SELECT * FROM results ORDER BY id")
    assert [r["kind"] for r in rows] == ["batch_failed", "batch_failed"]
    assert all(r["error_message"] == b1["error"] for r in rows)
    assert {s["state"] for s in status_by_task(project).values()} == {"pending"}

    cycle(project, emu, collect_code=0 if times == 1 else 2)
    st = status_by_task(project)
    if times == 1:
        assert kinds_by_task(project) == {"p1": ["batch_failed", "ok"], "p2": ["batch_failed", "ok"]}
        assert {s["state"] for s in st.values()} == {"ok"}
    else:
        assert kinds_by_task(project) == {"p1": ["batch_failed", "batch_failed"], "p2": ["batch_failed", "batch_failed"]}
        # Twice failed at validation: the route is blocked with the provider's message, never zeros.
        assert {s["state"] for s in st.values()} == {"blocked"}
        assert {r["status"] for r in project.sql("SELECT status FROM cell_status")} == {"blocked"}
        # Blocked: the next submit sends nothing.
        r = ok(project.run("submit", emulator=emu))
        assert "created 0 batch(es)" in r.output
        assert len(project.sql("SELECT * FROM batches")) == 2
    assert sent_per_task(project, emu) == Counter({"p1": 2, "p2": 2})


@pytest.mark.parametrize("times", [1, 2])
def test_anthropic_validation_failure_is_a_batch_failed_as_a_whole(project: Project, emu: Any, times: int) -> None:
    """Message Batches has no failed state: a validation failure is a 400 on create. batchrun records
    it as a batch the provider failed as a whole: re-queued once, then failed with the provider's message."""
    setup(project, {"r": BATCH_ROUTES["anthropic"]}, task_ids=["p1", "p2"])
    emu.add_fault({"kind": "fail_validation", "provider": "anthropic", "count": times})
    r = ok(project.run("submit", emulator=emu))
    assert "failed validation" in r.output
    assert batch_requests(emu) == []
    b = project.sql("SELECT * FROM batches")[0]
    assert (b["status"], b["provider_state"], b["provider_batch_id"]) == ("downloaded", "failed", None)
    assert "failed validation" in b["error"]
    ok(project.run("collect", emulator=emu), 2)
    assert kinds_by_task(project) == {"p1": ["batch_failed"], "p2": ["batch_failed"]}
    assert {s["state"] for s in status_by_task(project).values()} == {"pending"}
    cycle(project, emu, collect_code=0 if times == 1 else 2)
    if times == 1:
        assert kinds_by_task(project) == {"p1": ["batch_failed", "ok"], "p2": ["batch_failed", "ok"]}
        assert sent_per_task(project, emu) == Counter({"p1": 1, "p2": 1})
    else:
        assert kinds_by_task(project) == {"p1": ["batch_failed", "batch_failed"], "p2": ["batch_failed", "batch_failed"]}
        assert {r["status"] for r in project.sql("SELECT status FROM cell_status")} == {"blocked"}
        assert all("failed validation" in (x["error_message"] or "") for x in project.sql("SELECT error_message FROM results"))
        assert batch_requests(emu) == []


# --- sharding ------------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "gemini"])
def test_route_limits_shard_into_several_batches(project: Project, emu: Any, provider: str) -> None:
    setup(project, {"r": {**BATCH_ROUTES[provider], "max_requests_per_file": 2}}, task_ids=["p1", "p2", "p3", "p4", "p5"])
    cycle(project, emu, collect_code=0)
    batches = project.sql("SELECT * FROM batches ORDER BY seq")
    assert [b["n_requests"] for b in batches] == [2, 2, 1]
    assert [b["status"] for b in batches] == ["collected"] * 3
    assert len({b["provider_batch_id"] for b in batches}) == 3
    assert len(project.jobs_files()) == 3
    assert {emu_req["batch"] for emu_req in batch_requests(emu)} == {b["provider_batch_id"].split("/")[-1] for b in batches}
    assert kinds_by_task(project) == {t: ["ok"] for t in ("p1", "p2", "p3", "p4", "p5")}
    assert sent_per_task(project, emu) == Counter({t: 1 for t in ("p1", "p2", "p3", "p4", "p5")})


# --- failures before anything is sent ----------------------------------------------------------------


def test_missing_api_key_fails_before_any_upload(project: Project, emu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    routes = {
        "has-key": route("openai", "gpt-5.5"),
        "no-key": route("anthropic", "claude-sonnet-4-6", api_key_env="BATCHRUN_TEST_UNSET_KEY"),
    }
    setup(project, routes, task_ids=["p1", "p2"])
    project.point_at(emu)  # a real run: a rehearsal (--emulator) needs no key at all
    r = ok(project.run("submit"), 1)
    assert "BATCHRUN_TEST_UNSET_KEY" in r.output
    assert emu.calls == []  # not even the route that has its key was uploaded
    statuses = {b["status"] for b in project.sql("SELECT status FROM batches")}
    assert statuses == {"planned"}

    # With the key set, the same batches go out, each request once.
    monkeypatch.setenv("BATCHRUN_TEST_UNSET_KEY", "now-set")
    ok(project.run("submit"))
    ok(project.run("poll"))
    ok(project.run("collect"), 0)
    assert len(project.sql("SELECT * FROM batches")) == 2
    sent = Counter(r["custom_id"] for r in batch_requests(emu))
    assert sorted(sent) == sorted(ids_by_task_all(project)) and set(sent.values()) == {1}


def test_unreachable_base_url_fails_cleanly_then_resumes(project: Project, emu: Any) -> None:
    setup(project, {"compat": route("openai-compatible", "qwen-plus", base_url="http://127.0.0.1:9/v1")}, task_ids=["p1", "p2"])
    r = ok(project.run("submit"), 1)  # no --emulator: the route's own, unreachable, base URL
    assert "http://127.0.0.1:9/v1" in r.output
    statuses = {b["status"] for b in project.sql("SELECT status FROM batches")}
    assert statuses <= {"planned", "uploaded"}, statuses
    assert all(b["provider_batch_id"] is None for b in project.sql("SELECT provider_batch_id FROM batches"))

    # Resumed for real (a rehearsal would keep its own state): the route's URL now works.
    project.point_at(emu)
    cycle(project, None, collect_code=0)
    assert len(project.sql("SELECT * FROM batches")) == 1
    assert kinds_by_task(project) == {"p1": ["ok"], "p2": ["ok"]}
    assert sent_per_task(project, emu) == Counter({"p1": 1, "p2": 1})


@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
def test_unreachable_base_url_other_providers(project: Project, emu: Any, provider: str) -> None:
    spec = {**BATCH_ROUTES[provider], "base_url": "http://127.0.0.1:9"}
    setup(project, {"r": spec}, task_ids=["p1", "p2"])
    # The route's preflight is the first call to fail: nothing is uploaded or created.
    r = ok(project.run("submit"), 1)
    assert "The preflight request for route 'r' at http://127.0.0.1:9" in r.output and "Nothing is listening" in r.output
    assert {b["status"] for b in project.sql("SELECT status FROM batches")} == {"planned"}
    # Without it, the upload or create fails as cleanly.
    r = ok(project.run("submit", "--no-preflight"), 1)
    assert "http://127.0.0.1:9" in r.output
    # Anthropic has no upload: its create is what failed, certainly (the connection was refused).
    assert ("Creating the batch" if provider == "anthropic" else "Uploading the request file") in r.output
    rows = project.sql("SELECT status, provider_batch_id FROM batches")
    assert {b["status"] for b in rows} <= {"planned", "uploaded"}, rows
    assert all(b["provider_batch_id"] is None for b in rows)
    project.point_at(emu)  # resumed for real, as above
    cycle(project, None, collect_code=0)
    assert len(project.sql("SELECT * FROM batches")) == 1
    assert kinds_by_task(project) == {"p1": ["ok"], "p2": ["ok"]}
    assert sent_per_task(project, emu) == Counter({"p1": 1, "p2": 1})


# --- status, cancel, poll --wait ----------------------------------------------------------------------


def test_status_json(project: Project, emu: Any) -> None:
    setup(project, {"gpt": route("openai", "gpt-5.5"), "gem": route("gemini", "gemini-2.5-pro")}, task_ids=["p1", "p2"])
    ok(project.run("submit", emulator=emu))
    data = json.loads(ok(project.run("status", "--json", emulator=emu)).stdout)
    assert data["cells"] == {"gpt": {"pending": 2}, "gem": {"pending": 2}}
    assert sorted((b["route"], b["status"], b["n_requests"]) for b in data["in_flight"]) == [("gem", "in_flight", 2), ("gpt", "in_flight", 2)]
    assert all(b["provider_batch_id"] for b in data["in_flight"])

    ok(project.run("poll", emulator=emu))
    ok(project.run("collect", emulator=emu))
    data = json.loads(ok(project.run("status", "--json", emulator=emu)).stdout)
    assert data["cells"] == {"gpt": {"ok": 2}, "gem": {"ok": 2}}
    assert data["in_flight"] == []
    assert {(b["route"], b["status"], b["n"]) for b in data["batches"]} == {("gem", "collected", 1), ("gpt", "collected", 1)}


def test_cancel_batch_route_all_then_resubmit_without_retries(project: Project, emu: Any) -> None:
    routes = {"gpt": BATCH_ROUTES["openai"], "claude": BATCH_ROUTES["anthropic"], "gem": BATCH_ROUTES["gemini"]}
    setup(project, routes, task_ids=["p1", "p2"], generation={"max_retries": 0})
    for spec in routes.values():
        emu.add_fault({"kind": "slow", "latency": 600, "model": spec["model"]})
    ok(project.run("submit", emulator=emu))
    ids = {b["route"]: b["id"] for b in project.sql("SELECT route, id FROM batches")}

    r = ok(project.run("poll", emulator=emu))
    assert "3 batch(es) in flight" in r.output

    r = ok(project.run("cancel", "--batch", ids["gpt"], emulator=emu))
    assert r.stdout.split() == ["cancelled", ids["gpt"]]
    r = ok(project.run("cancel", "--route", "gem", emulator=emu))
    assert r.stdout.split() == ["cancelled", ids["gem"]]
    r = ok(project.run("cancel", "--all", emulator=emu))
    assert ids["claude"] in r.stdout
    assert ok(project.run("cancel", emulator=emu), 1).output.count("Say what to cancel") == 1
    assert "No live batch" in ok(project.run("cancel", "--batch", "nope", emulator=emu), 1).output

    ok(project.run("poll", emulator=emu))
    ok(project.run("collect", emulator=emu), 2)
    assert {b["provider_state"] for b in project.sql("SELECT provider_state FROM batches")} == {"cancelled"}
    rows = project.sql("SELECT kind FROM results")
    assert len(rows) == 6 and {r["kind"] for r in rows} == {"cancelled"}
    for s in project.sql("SELECT * FROM request_status"):
        assert (s["state"], s["resubmit_n"], s["transient_n"]) == ("pending", 1, 0)

    cycle(project, emu, collect_code=0)  # max_retries = 0: only the separate resubmit allowance lets these through
    assert {s["state"] for s in project.sql("SELECT state FROM request_status")} == {"ok"}
    assert len(project.sql("SELECT * FROM batches")) == 6
    by_cid = Counter(r["custom_id"] for r in batch_requests(emu))
    assert len(by_cid) == 6 and set(by_cid.values()) == {2}


def test_cancel_of_a_batch_that_has_just_ended_is_not_retried(project: Project, emu: Any) -> None:
    """OpenAI answers a cancel of an ended batch 409 "Cannot cancel a batch with status
    'completed'." (BerriAI/litellm's live tests catch openai.ConflictError): the batch ended, so
    nothing is left to cancel. It was taken as transient and retried 8 times (minutes of backoff),
    then exit 1; now the cancel is done at once and the next poll collects the results."""
    import openai

    setup(project, {"gpt": route("openai", "gpt-5.5")}, task_ids=["p1"])
    ok(project.run("submit", emulator=emu))
    [batch] = project.sql("SELECT id, provider_batch_id FROM batches")
    client = openai.OpenAI(base_url=emu.url + "/v1", api_key="sk-test", max_retries=0)
    assert client.batches.retrieve(batch["provider_batch_id"]).status == "completed"  # ended at the provider
    before = len(emu.calls)
    r = ok(project.run("cancel", "--batch", batch["id"], emulator=emu))
    assert "already ended" in r.output
    assert [c["path"] for c in emu.calls[before:]].count(f"/v1/batches/{batch['provider_batch_id']}/cancel") == 1
    ok(project.run("poll", emulator=emu))
    ok(project.run("collect", emulator=emu))
    assert {s["state"] for s in project.sql("SELECT state FROM request_status")} == {"ok"}


def test_cancel_planned_batch_withdraws_it_locally(project: Project, emu: Any) -> None:
    setup(project, {"gpt": route("openai", "gpt-5.5")}, task_ids=["p1"])
    ok(project.run("plan", emulator=emu))
    bid = project.sql("SELECT id FROM batches")[0]["id"]
    r = ok(project.run("cancel", "--all", emulator=emu))
    assert bid in r.stdout
    assert project.sql("SELECT status FROM batches")[0]["status"] == "withdrawn"
    assert emu.calls == []
    cycle(project, emu, collect_code=0)
    assert [b["status"] for b in project.sql("SELECT status FROM batches ORDER BY seq")] == ["withdrawn", "collected"]


def test_poll_wait_blocks_until_nothing_is_in_flight(project: Project, script: Script) -> None:
    slow = Emulator(host="127.0.0.1", port=0, latency=0.5, responder=script).start()
    try:
        setup(project, {"gpt": route("openai", "gpt-5.5"), "claude": route("anthropic", "claude-sonnet-4-6")}, task_ids=["p1"])
        ok(project.run("submit", emulator=slow))
        r = ok(project.run("poll", "--wait", "--interval", "0.1", "--timeout", "5", emulator=slow))
        assert "0 batch(es) in flight, 2 downloaded" in r.output
        assert {b["status"] for b in project.sql("SELECT status FROM batches")} == {"downloaded"}
        ok(project.run("collect", emulator=slow), 0)
    finally:
        slow.stop()


def test_poll_wait_gives_up_at_timeout(project: Project, emu: Any) -> None:
    setup(project, {"gpt": route("openai", "gpt-5.5")}, task_ids=["p1"])
    emu.add_fault({"kind": "slow", "latency": 600})
    ok(project.run("submit", emulator=emu))
    # A wait that ends before the work does is "incomplete, run again later" (exit 2).
    r = ok(project.run("poll", "--wait", "--interval", "0.1", "--timeout", "0.3", emulator=emu), 2)
    assert "1 batch(es) in flight, 0 downloaded" in r.output
    assert project.sql("SELECT status FROM batches")[0]["status"] == "in_flight"


# --- the whole protocol with the default panel ---------------------------------------------------------


def test_refresh_with_the_default_panel(project: Project, emu: Any, script: Script) -> None:
    small_project(project)
    # One transient error for one generation request, retried inside the same refresh.
    emu.add_fault({"kind": "request_error", "status": 500, "model": "gemini-2.5-pro", "prompt_contains": "freezer"})
    r = ok(project.run("refresh", "--interval", "0.1", "--timeout", "60", emulator=emu))
    assert "every route is complete" in r.output
    board = {row["route"]: row for row in project.sql("SELECT * FROM leaderboard")}
    assert set(board) == {"gpt", "claude", "gemini"}
    for row in board.values():
        assert (row["complete"], row["scored_n"], row["failed_n"], row["scored_overall"], row["all_tasks_overall"]) == (1, 4, 0, 1.0, 1.0)
    # 3 contestants x 4 tasks x 2 judges, each parsed to total 100 of 100.
    judgments = project.sql("SELECT * FROM judgments")
    assert len(judgments) == 24 and {(j["total"], j["score"]) for j in judgments} == {(100.0, 1.0)}
    # Only the generation that failed transiently was sent twice; every judge request once.
    sent = Counter(r["custom_id"] for r in batch_requests(emu))
    twice = [cid for cid, n in sent.items() if n == 2]
    assert len(twice) == 1 and max(sent.values()) == 2
    retried = project.sql("SELECT q.route, q.task_id, r.kind FROM results r JOIN requests q USING (custom_id) WHERE r.custom_id = ? ORDER BY r.id", [twice[0]])
    assert [(x["route"], x["task_id"], x["kind"]) for x in retried] == [("gemini", "t3", "transient"), ("gemini", "t3", "ok")]
    assert len(sent) == 12 + 24
    assert sorted(sent) == sorted(r["custom_id"] for r in project.sql("SELECT custom_id FROM requests"))
