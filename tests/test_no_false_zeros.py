"""Only a model's real refusal or empty answer is its zero: provider garbage that arrives with a
200, and judge replies that hold no usable total, are infrastructure failures that the next round
retries. Each case goes through the real SDKs to the emulator and `batchrun refresh`.

Found by an adversarial review: before these fixes each case below put a wrong number on the
leaderboard (a zero-filled task, one judge silently dropped from a mean, a cut verdict scored) or
stopped every later collect.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from conftest import Project, route, task

from batchrun.emulator import Emulator

DOC = ("The harbor crane failed at 03:14 on Tuesday. The operator was Mara Quist. "
       "Wind speed reached 41 knots before the failure. Repairs took nine days.\n") * 3
TASKS = ["p1", "p2", "p3"]
GOOD_VERDICT = '{"points_awarded":[60,40],"total":100}'
JUDGES = {"judge-a": route("anthropic", "claude-sonnet-4-6"), "judge-o": route("openai", "gpt-4.1")}


class Responder:
    """Good answers and verdicts, except judge-o's (gpt-4.1) verdict on p1 when overridden."""

    def __init__(self) -> None:
        self.judge_o_on_p1: str | None = None
        self.lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> Any:
        prompt = request["prompt"]
        if prompt.startswith("STRICT grader"):
            if self.judge_o_on_p1 is not None and "Question p1" in prompt and request["model"] == "gpt-4.1":
                return self.judge_o_on_p1
            return GOOD_VERDICT
        return "The crane failed at 03:14 on Tuesday; the operator was Mara Quist."


@pytest.fixture
def responder() -> Responder:
    return Responder()


@pytest.fixture
def emu(responder: Responder) -> Any:
    e = Emulator(host="127.0.0.1", port=0, latency=0.0, responder=responder).start()
    yield e
    e.stop()


def setup(project: Project, contestant: dict[str, Any]) -> None:
    project.doc("harbor.txt", DOC)
    project.tasks([task(t, f"Question {t}: when did the crane fail?", "harbor.txt") for t in TASKS])
    project.config(routes={"r": contestant, **JUDGES}, panel=list(JUDGES))


def refresh(project: Project, emu: Any) -> Any:
    return project.run("refresh", "--interval", "0.01", "--timeout", "60s", emulator=emu)


def gen_id(project: Project, t: str) -> str:
    return project.sql("SELECT custom_id FROM requests WHERE stage = 'gen' AND task_id = ?", [t])[0]["custom_id"]


def kinds(project: Project, stage: str, route_name: str, task_id: str) -> list[str]:
    return [r["kind"] for r in project.sql(
        """SELECT r.kind FROM results r JOIN requests q ON q.custom_id = r.custom_id
           WHERE q.stage = ? AND q.route = ? AND q.task_id = ? ORDER BY r.id""", [stage, route_name, task_id])]


# Provider-native result lines with status 200 (or "succeeded") that are not an answer.
NOT_AN_ANSWER = {
    "openai-error-in-200": (route("openai", "gpt-5.5"),
        '{"id":"batch_req_1","custom_id":"$CUSTOM_ID","response":{"status_code":200,"request_id":"r","body":'
        '{"error":{"message":"upstream overloaded, try again","type":"server_error","code":"overloaded"}}},"error":null}'),
    "openai-empty-body": (route("openai", "gpt-5.5"),
        '{"id":"batch_req_1","custom_id":"$CUSTOM_ID","response":{"status_code":200,"request_id":"r","body":{}},"error":null}'),
    "openai-responses-failed": (route("openai", "gpt-5.5", endpoint="responses"),
        '{"id":"batch_req_1","custom_id":"$CUSTOM_ID","response":{"status_code":200,"request_id":"r","body":'
        '{"id":"resp_1","object":"response","status":"failed","error":{"code":"server_error","message":"The model failed"},'
        '"output":[],"model":"gpt-5.5"}},"error":null}'),
    "anthropic-no-message": (route("anthropic", "claude-opus-4-8"), '{"custom_id":"$CUSTOM_ID","result":{"type":"succeeded"}}'),
    "gemini-no-candidates": (route("gemini", "gemini-2.5-pro"),
        '{"key":"$CUSTOM_ID","response":{"usageMetadata":{"promptTokenCount":120,"totalTokenCount":120},"modelVersion":"gemini-2.5-pro"}}'),
}


@pytest.mark.parametrize("case", list(NOT_AN_ANSWER))
def test_a_200_that_is_not_an_answer_is_retried_never_a_zero(project: Project, emu: Any, case: str) -> None:
    contestant, line = NOT_AN_ANSWER[case]
    setup(project, contestant)
    assert project.run("plan", emulator=emu).exit_code == 0
    emu.add_fault({"kind": "corrupt_line", "custom_id": gen_id(project, "p1"), "line": line, "times": 1})
    r = refresh(project, emu)
    assert r.exit_code == 0, r.output
    # The garbage line is a transient (malformed) result; the retry got the real answer.
    assert kinds(project, "gen", "r", "p1") == ["transient", "ok"]
    cells = project.sql("SELECT task_id, status FROM cell_status WHERE route = 'r' ORDER BY task_id")
    assert [c["status"] for c in cells] == ["ok", "ok", "ok"]
    assert project.sql("SELECT complete, failed_n FROM leaderboard WHERE route = 'r'") == [{"complete": 1, "failed_n": 0}]


@pytest.mark.parametrize("verdict", [
    '{"points_awarded":[0,0],"total":NaN}',
    '{"points_awarded":[60,40],"total":Infinity}',
    '{"points_awarded":[1],"total":1' + "0" * 400 + "}",
], ids=["nan", "infinity", "overflows-a-float"])
def test_a_judge_total_that_is_not_a_finite_number_is_unparseable(project: Project, emu: Any, responder: Responder,
                                                                  verdict: str) -> None:
    """NaN was stored as NULL and dropped that judge from the mean (the task scored by one judge of
    two); Infinity clamped to full marks; a 400-digit total raised OverflowError in every collect."""
    setup(project, route("openai", "gpt-5.5"))
    responder.judge_o_on_p1 = verdict
    r = refresh(project, emu)
    assert r.exit_code == 2, r.output  # p1 waits for judge-o: incomplete, run again later
    assert set(kinds(project, "judge", "judge-o", "p1")) == {"unparseable"}
    p1 = project.sql("SELECT status, score FROM cell_status WHERE route = 'r' AND task_id = 'p1'")
    assert p1 == [{"status": "waiting", "score": None}]  # waiting for a judge verdict, never a score
    responder.judge_o_on_p1 = None  # the judge answers properly: the next rounds complete the task
    r = refresh(project, emu)
    assert r.exit_code == 0, r.output
    assert project.sql("SELECT status, score FROM cell_status WHERE route = 'r' AND task_id = 'p1'") == [{"status": "ok", "score": 1.0}]


def test_a_judge_reply_cut_at_its_budget_is_not_read_for_a_total(project: Project, emu: Any) -> None:
    """`..."total":1` cut by max_tokens (finish_reason "length") may have been 100: unparseable and
    retried, not a score of 0.01."""
    import json

    setup(project, route("openai", "gpt-5.5"))
    for command in ("submit", "poll", "collect"):
        project.run(command, emulator=emu)
    jid = project.sql("SELECT custom_id FROM requests WHERE stage = 'judge' AND route = 'judge-o' AND task_id = 'p1'")[0]["custom_id"]
    content = json.dumps('I will grade each rubric point carefully... {"points_awarded":[60,40],"total":1')
    line = ('{"id":"batch_req_1","custom_id":"$CUSTOM_ID","response":{"status_code":200,"request_id":"r","body":'
            '{"id":"c","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"message":'
            '{"role":"assistant","content":' + content + ',"refusal":null},"finish_reason":"length"}],'
            '"usage":{"prompt_tokens":100,"completion_tokens":16384,"total_tokens":16484}}},"error":null}')
    emu.add_fault({"kind": "corrupt_line", "custom_id": jid, "line": line, "times": 1})
    r = refresh(project, emu)
    assert r.exit_code == 0, r.output
    assert kinds(project, "judge", "judge-o", "p1") == ["unparseable", "ok"]
    assert project.sql("SELECT status, score FROM cell_status WHERE route = 'r' AND task_id = 'p1'") == [{"status": "ok", "score": 1.0}]


def test_the_same_judge_reply_whole_and_cut_at_its_budget_is_read_both_ways(project: Project, emu: Any) -> None:
    """collect reads each distinct short reply once per batch (by its text, whether it is whole,
    and the rubric): the same text whole in one line and cut at the budget in another of the same
    batch gives a total and an unparseable reply."""
    import json

    setup(project, route("openai", "gpt-5.5"))
    for command in ("submit", "poll", "collect"):
        project.run(command, emulator=emu)
    jids = {t: project.sql("SELECT custom_id FROM requests WHERE stage = 'judge' AND route = 'judge-o' AND task_id = ?",
                           [t])[0]["custom_id"] for t in ("p1", "p2")}
    content = json.dumps('I will grade each rubric point carefully... {"points_awarded":[60,40],"total":1')
    for task_id, finish in (("p1", "length"), ("p2", "stop")):
        line = ('{"id":"batch_req_1","custom_id":"$CUSTOM_ID","response":{"status_code":200,"request_id":"r","body":'
                '{"id":"c","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"message":'
                '{"role":"assistant","content":' + content + ',"refusal":null},"finish_reason":"' + finish + '"}],'
                '"usage":{"prompt_tokens":100,"completion_tokens":16384,"total_tokens":16484}}},"error":null}')
        emu.add_fault({"kind": "corrupt_line", "custom_id": jids[task_id], "line": line, "times": 1})
    for command in ("submit", "poll", "collect"):
        project.run(command, emulator=emu)
    assert kinds(project, "judge", "judge-o", "p1") == ["unparseable"]
    assert kinds(project, "judge", "judge-o", "p2") == ["ok"]
    assert [j["total"] for j in project.sql("SELECT total FROM judgments WHERE custom_id = ?", [jids["p2"]])] == [1]


def test_rows_read_wrongly_before_are_read_again_on_upgrade(project: Project, emu: Any, responder: Responder) -> None:
    """m019_reread_false_zeros: a state.db collected by the readings before these fixes holds an
    'empty' answer that was a 200 error body, and a judgment whose NaN total was stored as NULL.
    The upgrade reads those lines again; their requests go out again and the leaderboard
    completes with real answers."""
    import sqlite3

    from batchrun.protocol import grading
    from batchrun.providers import LineResult

    setup(project, route("openai", "gpt-5.5"))
    assert project.run("plan", emulator=emu).exit_code == 0
    error_line = ('{"id":"batch_req_1","custom_id":"$CUSTOM_ID","response":{"status_code":200,"request_id":"r","body":'
                  '{"error":{"message":"upstream overloaded","type":"server_error"}}},"error":null}')
    emu.add_fault({"kind": "corrupt_line", "custom_id": gen_id(project, "p2"), "line": error_line, "times": 1})
    responder.judge_o_on_p1 = '{"points_awarded":[0,0],"total":NaN}'
    # The readings before the fixes: an error body with status 200 was an empty answer, and any number was a total.
    with pytest.MonkeyPatch.context() as old:
        old.setattr("batchrun.providers.openai._error_in_200", lambda custom_id, error: LineResult(custom_id, "empty"))
        old.setattr(grading, "_number", lambda value: float(value) if isinstance(value, (int, float)) else None)
        refresh(project, emu)
    responder.judge_o_on_p1 = None
    cells = {c["task_id"]: (c["status"], c["judged_n"]) for c in project.sql("SELECT task_id, status, judged_n FROM cell_status WHERE route = 'r'")}
    assert cells["p1"] == ("ok", 2) and cells["p2"][0] == "empty"  # a zero, and a task scored by one judge of two
    conn = sqlite3.connect(project.state_path)
    with conn:
        conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm019_reread_false_zeros'")
    conn.close()
    r = refresh(project, emu)  # the writer applies m019 first
    assert r.exit_code == 0, r.output
    kinds_p2 = kinds(project, "gen", "r", "p2")
    assert kinds_p2[0] == "transient" and kinds_p2[-1] == "ok"
    assert kinds(project, "judge", "judge-o", "p1")[0] == "unparseable"
    cells_after = project.sql("SELECT task_id, status, score FROM cell_status WHERE route = 'r' ORDER BY task_id")
    assert cells_after == [{"task_id": t, "status": "ok", "score": 1.0} for t in TASKS]
    assert project.sql("SELECT complete, failed_n FROM leaderboard WHERE route = 'r'") == [{"complete": 1, "failed_n": 0}]
