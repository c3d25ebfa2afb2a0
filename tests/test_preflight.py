"""`batchrun preflight`, and the preflight submit and refresh run first (issue 25 item 5).

Through the CLI, the real SDKs and the emulator. Each route's preflight is one tiny online request
built by the same code as its real requests (its own model id, temperature or its absence, budget
parameter, endpoint shape, key, base URL, API version) plus a one-entry listing of its batch API.
The refusals are the emulator's fault injection (request_error / http_error with the provider's
status and message) and what the emulator already refuses (temperature on a model that rejects it).
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import pytest

from batchrun.emulator import Emulator, builtin_responder
from batchrun.run.preflight import MAX_TOKENS, PROMPT
from conftest import KEY_ENV, PREFLIGHT_ID, Project, batch_requests, preflight_requests, route, small_project


class Recorder:
    """The built-in responder, keeping the body of every preflight request by model."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.preflights: dict[str, list[dict[str, Any]]] = {}

    def __call__(self, request: dict[str, Any]) -> Any:
        if request.get("custom_id") == PREFLIGHT_ID:
            with self.lock:
                self.preflights.setdefault(request["model"], []).append(request["params"])
        return builtin_responder(request)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def emu(recorder: Recorder) -> Any:
    e = Emulator(host="127.0.0.1", port=0, latency=0.0, responder=recorder).start()
    yield e
    e.stop()


# Every kind of route: the budget under each provider's parameter, temperature sent or omitted
# (by the built-in list, by the config), a judge's own temperature, a sync route, an idle judge.
ROUTES = {
    "chat": route("openai", "gpt-5.5"),
    "responses": route("openai", "gpt-5.4", endpoint="responses", reasoning=True),  # rejects temperature: omitted
    "opus": route("anthropic", "claude-opus-4-8"),  # rejects temperature: omitted
    "gemini": route("gemini", "gemini-2.5-pro", reasoning=True),
    "compat": route("openai-compatible", "qwen3.7-plus"),
    "kimi-sync": route("openai-compatible", "kimi-k2.6", transport="sync", send_temperature=False),
    "judge-a": route("anthropic", "claude-sonnet-4-6", send_temperature=True),
    "judge-g": route("gemini", "gemini-2.5-flash", send_temperature=True),
    "retired": route("openai", "gpt-4.1", role="judge"),  # out of the panel: idle, sends nothing
}


def setup(project: Project, routes: dict[str, Any] | None = None, **sections: Any) -> Project:
    small_project(project, routes=routes or ROUTES, judging={"panel": ["judge-a", "judge-g"], "temperature": 0.2}, **sections)
    return project


def ok(result: Any, code: int = 0) -> Any:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def preflight_rows(project: Project) -> list[dict[str, Any]]:
    return project.sql("SELECT * FROM preflights ORDER BY id")


def first_line(project: Project, route_name: str) -> dict[str, Any]:
    (path,) = [b["request_file"] for b in project.sql("SELECT request_file FROM batches WHERE route = ? AND stage = 'gen'", [route_name])]
    with open(path, encoding="utf-8") as f:
        return json.loads(f.readline())


def body_of(line: dict[str, Any]) -> dict[str, Any]:
    """The request body in a batch line (OpenAI `body`, Anthropic `params`, Gemini `request`)."""
    return line.get("body") or line.get("params") or line["request"]


def test_each_route_gets_its_own_request_and_a_batch_listing(project: Project, emu: Any, recorder: Recorder) -> None:
    setup(project)
    r = ok(project.run("preflight", "--json", emulator=emu))
    data = json.loads(r.stdout)
    checks = {c["route"]: c for c in data["routes"]}
    assert data["ok"] is True and data["skipped_idle"] == ["retired"]
    assert set(checks) == set(ROUTES) - {"retired"}
    assert all(c["outcome"] == "ok" and c["online"] == "ok" for c in checks.values())
    assert {name: c["batch_api"] for name, c in checks.items()} == {**{n: "ok" for n in checks}, "kimi-sync": None}
    assert all(c["input_tokens"] > 0 for c in checks.values())
    # One online request per route, with the route's own model; one listing per batch route.
    assert sorted(r["model"] for r in preflight_requests(emu)) == sorted(ROUTES[n]["model"] for n in checks)
    listings = [c for c in emu.calls if c["method"] == "GET" and c["path"].endswith("/batches") and c["status"] == 200]
    assert len(listings) == len(checks) - 1
    assert batch_requests(emu) == []  # nothing else
    # Recorded, passed or not; the log view shows them.
    rows = preflight_rows(project)
    assert sorted(p["route"] for p in rows) == sorted(checks) and {p["outcome"] for p in rows} == {"ok"}
    assert {p["stage"] for p in rows if p["route"].startswith("judge")} == {"judge"}
    assert len(project.sql("SELECT * FROM preflights_log")) == len(checks)

    # The body is the one the route's real requests carry, but for the prompt and the budget.
    ok(project.run("plan", emulator=emu))
    for name in ("chat", "responses", "opus", "gemini", "compat"):
        real, sent = body_of(first_line(project, name)), recorder.preflights[ROUTES[name]["model"]][0]
        if name == "gemini":
            # The online call goes through google-genai's generate_content: the same fields.
            assert sent["generationConfig"] == {**real["generationConfig"], "maxOutputTokens": MAX_TOKENS}, name
            assert sent["contents"][0]["parts"][0]["text"] == PROMPT
            continue
        assert set(sent) == set(real), name
        assert sent["model"] == real["model"] == ROUTES[name]["model"]
        assert ("temperature" in sent) is ("temperature" in real), name
        assert sent.get("temperature") == real.get("temperature"), name
        budget = {"chat": "max_completion_tokens", "responses": "max_output_tokens", "opus": "max_tokens", "compat": "max_tokens"}[name]
        assert sent[budget] == MAX_TOKENS and real[budget] > MAX_TOKENS
    assert "temperature" not in recorder.preflights["gpt-5.4"][0] and "temperature" not in recorder.preflights["claude-opus-4-8"][0]
    assert "temperature" not in recorder.preflights["kimi-k2.6"][0]
    # A judge is checked with the judges' temperature ([judging], 0.2), not the contestants' (0.1).
    assert recorder.preflights["claude-sonnet-4-6"][0]["temperature"] == 0.2
    assert recorder.preflights["gemini-2.5-flash"][0]["generationConfig"]["temperature"] == 0.2
    assert recorder.preflights["gpt-5.5"][0]["temperature"] == 0.1


def test_submit_preflights_each_new_policy_once_before_its_upload(project: Project, emu: Any) -> None:
    setup(project, {n: ROUTES[n] for n in ("chat", "opus", "judge-a", "judge-g")})
    ok(project.run("refresh", "--interval", "0.05", emulator=emu))
    # Every route that sent something was preflighted once, before anything of it was uploaded.
    assert sorted(r["model"] for r in preflight_requests(emu)) == sorted(
        ["gpt-5.5", "claude-opus-4-8", "claude-sonnet-4-6", "gemini-2.5-flash"])
    first_batch = min(r["seq"] for r in batch_requests(emu))
    first_gen = {r["model"]: r["seq"] for r in preflight_requests(emu)}
    assert first_gen["gpt-5.5"] < first_batch and first_gen["claude-opus-4-8"] < first_batch
    assert {p["outcome"] for p in preflight_rows(project)} == {"ok"}

    # A night with nothing new sends no preflight (and nothing else).
    sent = len(emu.requests)
    again = ok(project.run("refresh", "--interval", "0.05", emulator=emu))
    assert "nothing to do" in again.output and len(emu.requests) == sent

    # A route whose policy changed is checked again before its new requests; the others are not.
    cfg = json.loads(project.config_path.read_text())
    cfg["routes"]["chat"]["max_tokens"] = 4000
    project.config_path.write_text(json.dumps(cfg))
    ok(project.run("refresh", "--interval", "0.05", emulator=emu))
    new = preflight_requests(emu)[4:]
    assert [r["model"] for r in new] == ["gpt-5.5"]
    assert len(preflight_rows(project)) == 5

    # --no-preflight sends none.
    cfg["routes"]["chat"]["max_tokens"] = 3000
    project.config_path.write_text(json.dumps(cfg))
    ok(project.run("refresh", "--no-preflight", "--interval", "0.05", emulator=emu))
    assert len(preflight_requests(emu)) == 5


WRONG_MODEL = "The model `gpt-5.5` does not exist or you do not have access to it."


def test_a_wrong_model_id_stops_its_route_before_any_upload_and_the_others_go_on(project: Project, emu: Any) -> None:
    setup(project, {n: ROUTES[n] for n in ("chat", "opus", "judge-a", "judge-g")})
    # What OpenAI answers for a model id it does not know (404, code model_not_found).
    emu.add_fault({"kind": "request_error", "status": 404, "model": "gpt-5.5", "message": WRONG_MODEL, "count": -1})
    r = ok(project.run("submit", emulator=emu), 2)
    fix = 'Correct model under [routes."chat"]'
    assert f"preflight: chat → refused: {WRONG_MODEL}" in r.stderr and fix in r.stderr
    assert "held" in r.stdout and "preflight of route 'chat' refused" in r.stdout
    # Nothing of the route was uploaded (it is the only OpenAI route); the Anthropic route went.
    assert not [c for c in emu.calls if c["path"] == "/v1/files"]
    assert {b["route"]: b["status"] for b in project.sql("SELECT route, status FROM batches")} == {"chat": "planned", "opus": "in_flight"}
    (row,) = [p for p in preflight_rows(project) if p["route"] == "chat"]
    assert (row["outcome"], row["message"]) == ("refused", WRONG_MODEL) and fix in row["fix"]

    # refresh: the refused route is named again; it is not preflighted again round after round.
    def chat_preflights() -> int:
        return [r["model"] for r in preflight_requests(emu)].count("gpt-5.5")

    before = chat_preflights()
    r = ok(project.run("refresh", "--interval", "0.05", "--timeout", "30s", emulator=emu), 2)
    assert f"preflight: chat → refused: {WRONG_MODEL}" in r.stderr
    assert chat_preflights() == before + 1 and re.search(r"\] held \S+: preflight of route 'chat' refused", r.stderr)
    assert not [c for c in emu.calls if c["path"] == "/v1/files"]

    # Fixed (here: the provider knows the model again): the next run checks it and sends it.
    emu.clear_faults()
    ok(project.run("refresh", "--interval", "0.05", emulator=emu))
    assert [p["outcome"] for p in preflight_rows(project) if p["route"] == "chat"] == ["refused", "refused", "ok"]
    assert {r["route"]: r["complete"] for r in project.sql("SELECT route, complete FROM leaderboard")} == {"chat": 1, "opus": 1}


def test_a_parameter_the_model_rejects_is_caught_with_the_fix(project: Project, emu: Any) -> None:
    # gpt-5.4 rejects temperature (spec §2); the config insists (the emulator answers 400, as OpenAI).
    setup(project, {"strict": route("openai", "gpt-5.4", send_temperature=True), "judge-a": ROUTES["judge-a"],
                    "judge-g": ROUTES["judge-g"]})
    r = ok(project.run("preflight", "--route", "strict", emulator=emu), 1)
    assert r.stdout.startswith("strict → refused: Unsupported value: 'temperature'")
    assert "send_temperature = false" in r.stdout
    r = ok(project.run("submit", emulator=emu), 2)
    assert "preflight: strict → refused" in r.stderr and batch_requests(emu) == []
    assert not [c for c in emu.calls if c["path"] == "/v1/files"]


def test_a_wrong_key_is_named_with_its_variable_and_never_printed(project: Project, emu: Any) -> None:
    setup(project, {n: ROUTES[n] for n in ("chat", "opus", "judge-a", "judge-g")})
    # Anthropic refuses the key on its messages endpoint and quotes it back (a careless proxy).
    emu.add_fault({"kind": "echo_key", "status": 401, "method": "POST", "path": "^/v1/messages$", "count": -1})
    # And the OpenAI key may not use the batch API (its online request works).
    emu.add_fault({"kind": "http_error", "status": 403, "method": "GET", "path": "^/v1/batches$", "provider": "openai", "count": -1,
                   "message": "You are not allowed to list batches with this key."})
    r = ok(project.run("preflight", emulator=emu), 1)
    lines = {line.split(" → ")[0]: line for line in r.stdout.splitlines()}
    assert lines["opus"].startswith("opus → refused: ") and f"Check the key in {KEY_ENV} for route 'opus'" in lines["opus"]
    assert lines["judge-a"].startswith("judge-a → refused: ")
    assert lines["chat"].startswith("chat → refused: ") and "not allowed to list batches" in lines["chat"]
    assert f"Check the key in {KEY_ENV}: it may not use the batch API" in lines["chat"]
    assert lines["judge-g"].startswith("judge-g → ok")
    secret = "test-key-not-secret"  # conftest's value of the key variable
    assert "[REDACTED]" in lines["opus"] and secret not in r.output
    assert not [p for p in preflight_rows(project) if secret in json.dumps(p)]
    assert {p["route"]: p["batch_api"] for p in preflight_rows(project)}["chat"] == "refused: the key"


def test_a_provider_that_cannot_answer_now_holds_the_route_and_is_tried_again(project: Project, emu: Any) -> None:
    setup(project, {n: ROUTES[n] for n in ("chat", "opus", "judge-a", "judge-g")})
    # One 429 is retried inside the preflight; a lasting 503 is "could not be checked".
    emu.add_fault({"kind": "request_error", "status": 429, "model": "claude-opus-4-8", "count": 1})
    emu.add_fault({"kind": "request_error", "status": 503, "model": "gpt-5.5", "count": -1})
    r = ok(project.run("submit", emulator=emu), 2)
    assert "preflight: chat → could not be checked" in r.stderr and "run the command again later" in r.stderr
    assert "preflight of route 'chat' could not reach the provider; will retry" in r.stdout
    assert [r["model"] for r in preflight_requests(emu)].count("gpt-5.5") == 3  # the preflight's attempts
    assert [r["model"] for r in preflight_requests(emu)].count("claude-opus-4-8") == 2
    assert {b["route"]: b["status"] for b in project.sql("SELECT route, status FROM batches")} == {"chat": "planned", "opus": "in_flight"}
    # Not a refusal: the next submit checks it again, and sends it once the provider answers.
    emu.clear_faults()
    r = ok(project.run("submit", emulator=emu))
    assert "preflight" not in r.stdout
    assert [p["outcome"] for p in preflight_rows(project) if p["route"] == "chat"] == ["unavailable", "ok"]
    assert {b["route"]: b["status"] for b in project.sql("SELECT route, status FROM batches")} == {"chat": "in_flight", "opus": "in_flight"}


def test_preflight_needs_no_dataset_names_unknown_routes_and_missing_keys(project: Project, emu: Any) -> None:
    routes = {"chat": route("openai", "gpt-5.5"), "nokey": route("anthropic", "claude-opus-4-8", api_key_env="BATCHRUN_TEST_UNSET_KEY")}
    project.config(routes=routes, panel=[])  # no dataset, no corpus yet
    r = ok(project.run("preflight", "--route", "nope", emulator=emu), 1)
    assert "--route 'nope' is not a route" in r.output and "Known routes: chat, nokey" in r.output
    ok(project.run("preflight", "--route", "chat", emulator=emu))
    # A real run (the routes' own base URLs): the route without its key is named, the other checked.
    project.point_at(emu)
    r = ok(project.run("preflight"), 1)
    assert "chat → ok" in r.stdout
    assert "nokey → refused: 1 API key variable(s) not set: BATCHRUN_TEST_UNSET_KEY" in r.stdout and "export BATCHRUN_TEST_UNSET_KEY=" in r.stdout
    assert [m["model"] for m in preflight_requests(emu)] == ["gpt-5.5", "gpt-5.5"]


def test_nothing_listening_at_the_base_url_is_said_at_once(project: Project) -> None:
    project.config(routes={"chat": route("openai", "gpt-5.5", base_url="http://127.0.0.1:9/v1")}, panel=[])
    r = ok(project.run("preflight"), 1)
    assert "chat → could not be checked" in r.stdout and "Nothing is listening at http://127.0.0.1:9/v1" in r.stdout
    rows = preflight_rows(project)
    assert [(p["outcome"], p["online"], p["batch_api"]) for p in rows] == [("unavailable", "not sent: nothing answers at the base URL", None)]
