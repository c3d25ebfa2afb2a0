"""What `status`, refresh and the report say about a failed or held batch, from a newcomer's walk
through the README on the emulator: a batch refused line by line says each distinct error once
with its lines as ranges (not one copy per line), and a held batch's reason is the latest
preflight's own words and fix from state.db, never a stale "refused" once the route has passed.

Through the CLI, the real SDKs and the emulator, on real state.db files.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from typing import Any

import pytest

from batchrun.emulator import Emulator
from conftest import Project, route, task

DOC = "The harbor crane failed at 03:14 on Tuesday. The operator was Mara Quist.\n" * 3
TASKS = ["t1", "t2", "t3", "t4"]
NOT_IN_BATCH = "model_not_found: The model `kimi-k2.6` is not supported by the Batch API."


@pytest.fixture
def emu(emulator: Emulator) -> Emulator:
    return emulator  # conftest's, under this file's short name


def setup(project: Project, routes: dict[str, Any]) -> Project:
    project.doc("harbor.txt", DOC)
    project.tasks([task(t, f"Question {t}: when did the crane fail?", "harbor.txt", [(100, "failed at 03:14 on Tuesday")]) for t in TASKS])
    project.config(routes={**routes, "judge": route("gemini", "gemini-2.5-flash")}, panel=["judge"])
    return project


def run(project: Project, emu: Any, *args: str, code: int) -> Any:
    result = project.run(*args, emulator=emu)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def test_a_batch_refused_on_every_line_says_its_error_once_with_the_lines(project: Project, emu: Any) -> None:
    # DashScope's compatible mode serves kimi-k2.6 online but not in its Batch API: the batch
    # fails validation with one errors.data entry per line (emulator/dashscope.py).
    setup(project, {"kimi": route("openai-compatible", "kimi-k2.6", send_temperature=False)})
    run(project, emu, "submit", "--no-preflight", "--route", "kimi", code=0)
    r = run(project, emu, "poll", code=0)
    grouped = f"{NOT_IN_BATCH} (lines 1–{len(TASKS)})"
    assert f"ended: failed: {grouped}" in r.output and "(line 1)" not in r.output
    (batch,) = project.sql("SELECT error, last_seen_json FROM batches WHERE route = 'kimi' AND stage = 'gen'")
    assert batch["error"] == grouped
    # state.db keeps every line's error as the provider listed it.
    assert [e["line"] for e in json.loads(batch["last_seen_json"])["errors"]["data"]] == list(range(1, len(TASKS) + 1))
    out = run(project, emu, "status", "--route", "kimi", code=0).output
    assert grouped in out and out.count("not supported by the Batch API") == 1

    # refresh sends the requests again, the provider fails that batch too: the route is blocked,
    # and the block (refresh's stderr, status, the report) quotes the grouped error.
    r = run(project, emu, "refresh", "--no-preflight", "--interval", "0.01", "--timeout", "60s", code=2)
    assert "failed the batch at validation, twice" in r.output and grouped in r.output and "(line 1)" not in r.output
    for command in ("status", "report"):
        out = run(project, emu, command, code=0).output
        assert grouped in out and "(line 1)" not in out, command


def test_a_batch_error_message_groups_its_lines_and_caps_what_it_lists() -> None:
    from batchrun.providers.reading import batch_errors_message

    def error(code: str, line: Any = None) -> dict[str, Any]:
        return {"code": code, "message": f"{code} happened.", **({"line": line} if line is not None else {})}

    assert batch_errors_message([]) is None
    assert batch_errors_message([error("a", n) for n in (1, 2, 3, 5, 7, 8)] + [error("b", 4), error("c")]) == (
        "a: a happened. (lines 1–3, 5, 7–8); b: b happened. (line 4); c: c happened.")
    # Every other line of 40: the ranges named are capped, the count says how many lines.
    assert batch_errors_message([error("a", n) for n in range(1, 40, 2)]) == (
        "a: a happened. (20 lines: 1, 3, 5, 7, 9, 11, 13, 15 and 12 more range(s))")
    # Eight distinct errors: five named, the rest counted.
    assert batch_errors_message([error(f"e{n}", n) for n in range(1, 9)]) == (
        "; ".join(f"e{n}: e{n} happened. (line {n})" for n in range(1, 6)) + "; and 3 more distinct error(s)")


def held_lines(project: Project, emu: Any, batch_route: str) -> list[str]:
    out = run(project, emu, "status", code=0).output
    return [line for line in out.splitlines() if f"-{batch_route}-" in line and "planned" in line]


def test_status_says_a_preflight_hold_with_the_latest_preflights_words_and_drops_it_once_the_route_passed(project: Project, emu: Any) -> None:
    setup(project, {"chat": route("openai", "gpt-5.5")})
    # What OpenAI answers for a model id it does not know (404, code model_not_found).
    first = "The model `gpt-5.5` does not exist or you do not have access to it."
    emu.add_fault({"kind": "request_error", "status": 404, "model": "gpt-5.5", "message": first, "count": -1})
    r = run(project, emu, "submit", "--route", "chat", code=2)
    assert "preflight of route 'chat' refused" in r.output  # submit's own output: the words are on its stderr
    (line,) = held_lines(project, emu, "chat")
    # status, in a later process: the stored preflight's message and fix, not "on stderr".
    (p,) = project.sql("SELECT message, fix, started_at_utc FROM preflights_log WHERE route = 'chat'")
    at = p["started_at_utc"].replace("Z", "+00:00")
    assert "held since " in line and f"preflight of route 'chat' refused at {at}: {first} Fix: {p['fix']}" in line
    assert "on stderr" not in line and 'Correct model under [routes."chat"]' in p["fix"]

    # A later preflight refused for another reason: status says the latest one's words.
    emu.clear_faults()
    second = "Project does not have access to model `gpt-5.5`."
    emu.add_fault({"kind": "request_error", "status": 403, "model": "gpt-5.5", "message": second, "count": -1})
    run(project, emu, "preflight", "--route", "chat", code=1)
    (line,) = held_lines(project, emu, "chat")
    assert second in line and first not in line

    # The route passes a preflight (nothing submitted yet): the hold is no longer current.
    emu.clear_faults()
    run(project, emu, "preflight", "--route", "chat", code=0)
    (line,) = held_lines(project, emu, "chat")
    assert line.endswith(f": planned (not sent) ({len(TASKS)} requests)")

    # Sent: a batch created at the provider is no longer planned, and no hold is said of it.
    run(project, emu, "submit", "--route", "chat", code=0)
    out = run(project, emu, "status", code=0).output
    assert "held" not in out and "preflight" not in out


def test_status_says_which_unsent_cells_back_off_and_until_when(project: Project, emu: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch that expired half-run leaves its other requests backing off before they are sent
    again: status says so and when the first is due (a newcomer's status read only "pending
    (unsent)", with nothing to say it waits, or till when), in its JSON too."""
    monkeypatch.setenv("BATCHRUN_RETRY_BASE", "1")  # a batch retry's backoff: 60-90 s
    setup(project, {"chat": route("openai", "gpt-5.5")})
    emu.add_fault({"kind": "expire", "complete_fraction": 0.5, "model": "gpt-5.5"})  # t3, t4 never run
    run(project, emu, "submit", "--route", "chat", code=0)
    run(project, emu, "poll", code=0)
    run(project, emu, "collect", code=2)
    line = next(ln for ln in run(project, emu, "status", code=0).output.splitlines() if ln.startswith("chat: "))
    assert re.search(r"pending \(unsent\) 2 \(2 back off after a failure, the first due \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00\)",
                     line), line
    data = json.loads(run(project, emu, "status", "--json", code=0).stdout)
    assert data["pending"]["chat"]["unsent"] == 2 and data["pending"]["chat"]["backing_off"] == 2
    due = datetime.fromisoformat(data["pending"]["chat"]["next_attempt_at"]).timestamp()
    assert time.time() + 30 < due < time.time() + 120  # 60-90 s after the failure was collected


def test_status_says_when_judge_requests_back_off(project: Project, emu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The judge stage too: the judge batch expires (a Gemini job that expires returns no results),
    its requests back off; the answers' cells read "judging", and the judge route's line says how
    many wait and until when (the review found them unsaid)."""
    monkeypatch.setenv("BATCHRUN_RETRY_BASE", "1")  # a batch retry's backoff: 60-90 s
    setup(project, {"chat": route("openai", "gpt-5.5")})
    for command in (("submit", "--no-preflight"), ("poll",), ("collect",)):
        project.run(*command, emulator=emu)  # the answers in, the judge requests queued
    emu.add_fault({"kind": "expire", "complete_fraction": 0.5, "model": "gemini-2.5-flash"})
    for command in (("submit", "--no-preflight"), ("poll",), ("collect",)):
        project.run(*command, emulator=emu)
    out = run(project, emu, "status", code=0).output
    assert re.search(r"^judge: 4 judge request\(s\) back off after a failure, the first due \d{4}-\d\d-\d\dT", out, re.M), out
    data = json.loads(run(project, emu, "status", "--json", code=0).stdout)
    assert data["judges_backing_off"]["judge"]["requests"] == 4
    # Asked for the contestant alone, its lines say the judge of its answers waits, and till when.
    out = run(project, emu, "status", "--route", "chat", code=0).output
    assert re.search(r"^chat: judge route 'judge' backs off after a failure \(4 judge request\(s\) in all\), the first due \d{4}-", out, re.M), out
    data = json.loads(run(project, emu, "status", "--route", "chat", "--json", code=0).stdout)
    assert [w["judge"] for w in data["judges_held"]["chat"]] == ["judge"]


def test_status_of_one_route_says_when_the_judges_of_its_answers_are_held(project: Project, emu: Any) -> None:
    """`status --route chat` printed only chat's own line ("judging 4") while the judge route that
    grades those answers was held for its preflight (the walk-through): the route's lines and
    JSON say which judge route holds them up, why and since when."""
    setup(project, {"chat": route("openai", "gpt-5.5")})
    for command in (("submit", "--no-preflight"), ("poll",), ("collect",)):
        project.run(*command, emulator=emu)  # the answers in, the judge requests queued
    refused = "models/gemini-2.5-flash is not found for API version v1beta."
    emu.add_fault({"kind": "request_error", "status": 404, "model": "gemini-2.5-flash", "message": refused, "count": -1})
    run(project, emu, "submit", code=2)  # the judge route's preflight is refused: its batch is held
    out = run(project, emu, "status", "--route", "chat", code=0).output
    line = next(ln for ln in out.splitlines() if ln.startswith("chat: judge route"))
    assert re.match(r"chat: judge route 'judge', grading 4 of its answers, held since \d{4}-\d\d-\d\dT", line), out
    assert "preflight of route 'judge' refused" in line and refused in line
    data = json.loads(run(project, emu, "status", "--route", "chat", "--json", code=0).stdout)
    (held,) = data["judges_held"]["chat"]
    assert held["judge"] == "judge" and held["requests"] == 4 and refused in held["held"] and held["held_at"]
