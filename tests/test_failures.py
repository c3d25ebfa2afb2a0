"""Only a real refusal or an empty answer is the model's failure (spec 001 §2, §5).

Through the CLI, the real SDKs and the emulator: a constant 429, a 400 temperature rejection, a
batch that expires forever, a rejected key. None of them may publish a zero: the route's headline
stays null, `collect`/`refresh` exit 2 naming the cells, the last error and the fix, and the next
run resumes. `retry` and `accept-failures` are the maintainer's explicit ways out. And a change to
what a judge grades (rubric criteria or points) re-judges exactly the affected cells.

These are about requests that fail once they are in a batch or an online line, so submit and
refresh run with --no-preflight: a route's preflight would catch several of these problems
before anything is uploaded (tests/test_preflight.py shows that), and the requests would never
reach the batch path under test.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest

from batchrun.base.backoff import round_backoff
from batchrun.emulator import Emulator, builtin_responder
from batchrun.ledger.pending import scan_pending
from conftest import KEY_ENV, Project, route, task

DOC = ("The harbor crane failed at 03:14 on Tuesday. The operator was Mara Quist. "
       "Wind speed reached 41 knots before the failure. Repairs took nine days.\n") * 3
TASKS = ["t1", "t2", "t3"]
JUDGE = {"judge": route("gemini", "gemini-2.5-flash")}


class Recorder:
    """The built-in responder, remembering every prompt by custom_id."""

    def __init__(self) -> None:
        self.prompts: dict[str, str] = {}

    def __call__(self, request: dict[str, Any]) -> Any:
        self.prompts[str(request.get("custom_id"))] = request["prompt"]
        return builtin_responder(request)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def emu(recorder: Recorder) -> Any:
    e = Emulator(host="127.0.0.1", port=0, latency=0.0, responder=recorder).start()
    yield e
    e.stop()


def setup(project: Project, routes: dict[str, Any], **sections: Any) -> Project:
    project.doc("harbor.txt", DOC)
    project.tasks([task(t, f"Question {t}: when did the crane fail and who operated it?", "harbor.txt",
                        [(60, "failed at 03:14 on Tuesday"), (40, "operator was Mara Quist")]) for t in TASKS])
    project.config(routes={**routes, **JUDGE}, panel=["judge"], **sections)
    return project


def run(project: Project, emu: Any, *args: str, code: int) -> Any:
    if args[0] in ("submit", "refresh"):
        args = (*args, "--no-preflight")  # see the module's docstring
    result = project.run(*args, emulator=emu)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def refresh(project: Project, emu: Any, code: int) -> Any:
    return run(project, emu, "refresh", "--interval", "0.01", "--timeout", "60s", code=code)


def board(project: Project) -> dict[str, dict[str, Any]]:
    return {r["route"]: r for r in project.sql("SELECT * FROM leaderboard")}


def attempts(project: Project, route_name: str) -> Counter[int]:
    """Generation attempts of a route per run (every attempt is a results row)."""
    rows = project.sql("SELECT r.run_id FROM results r JOIN requests q ON q.custom_id = r.custom_id "
                       "WHERE q.route = ? AND q.stage = 'gen'", [route_name])
    return Counter(r["run_id"] for r in rows)


@pytest.mark.parametrize("transport", ["batch", "sync"])
def test_constant_429_waits_for_the_next_run_never_a_zero(project: Project, emu: Any, transport: str) -> None:
    setup(project, {"good": route("openai", "gpt-5.5"), "limited": route("anthropic", "claude-sonnet-4-6", transport=transport)})
    emu.add_fault({"kind": "request_error", "status": 429, "model": "claude-sonnet-4-6", "count": -1})

    r = refresh(project, emu, 2)
    b = board(project)
    assert b["good"]["complete"] == 1 and b["good"]["all_tasks_overall"] is not None
    # 1 attempt + 5 retries per request in this run, then the cells wait: no zero, no headline.
    assert attempts(project, "limited") == Counter({1: 6 * len(TASKS)})
    assert (b["limited"]["all_tasks_overall"], b["limited"]["scored_overall"], b["limited"]["failed_n"]) == (None, None, 0)
    assert b["limited"]["waiting_n"] == len(TASKS) and b["limited"]["pending_n"] == len(TASKS)
    assert {c["status"] for c in project.sql("SELECT status FROM cell_status WHERE route = 'limited'")} == {"waiting"}
    assert f"waiting: route 'limited': {len(TASKS)} cell(s) [t1, t2, t3] used this run's retries" in r.output
    assert "Rate limit reached" in r.output and "next run" in r.output
    status = run(project, emu, "status", code=0)
    assert "waiting: route 'limited'" in status.output
    report = run(project, emu, "report", code=0)
    assert "Waiting for the next run: route limited" in report.output

    # The next run resumes them with a fresh budget (and still publishes nothing for the route).
    refresh(project, emu, 2)
    assert sorted(attempts(project, "limited").values()) == [6 * len(TASKS)] * 2
    # Once the provider recovers, the next run completes the route.
    emu.clear_faults()
    refresh(project, emu, 0)
    b = board(project)
    assert b["limited"]["complete"] == 1 and b["limited"]["failed_n"] == 0 and b["limited"]["scored_n"] == len(TASKS)


def test_batch_retries_back_off_at_least_a_minute_and_honour_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHRUN_RETRY_BASE", "1.0")
    firsts = [round_backoff("batch", 1, retry_after=None, jitter_key=f"r:{i}") for i in range(50)]
    assert all(60 <= d <= 90 for d in firsts) and len(set(firsts)) > 1  # jittered, never in the same minute
    assert all(120 <= round_backoff("batch", 2, retry_after=None, jitter_key=f"r:{i}") <= 180 for i in range(50))
    assert round_backoff("batch", 1, retry_after=None, jitter_key="same") == round_backoff("batch", 1, retry_after=None, jitter_key="same")
    assert round_backoff("batch", 20, retry_after=None, jitter_key="x") == 1800  # capped
    assert 1 <= round_backoff("sync", 1, retry_after=None, jitter_key="x") <= 1.5
    assert round_backoff("sync", 1, retry_after=30.0, jitter_key="x") == 30.0  # Retry-After wins when longer


def test_a_failed_batch_request_is_not_due_in_the_same_minute(project: Project, emu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    setup(project, {"limited": route("openai", "gpt-5.5")})
    emu.add_fault({"kind": "request_error", "status": 500, "model": "gpt-5.5", "count": 1})
    run(project, emu, "submit", code=0)
    run(project, emu, "poll", code=0)
    run(project, emu, "collect", code=2)
    monkeypatch.setenv("BATCHRUN_RETRY_BASE", "1.0")
    store = project.store()
    try:
        failed_at = store.scalar("SELECT max(collected_at) FROM results WHERE kind = 'transient'")
        scan = scan_pending(store, project.load(emu), now=failed_at + 59)
        assert scan.backing_off == 1 and not [p for p in scan.due if p.stage == "gen"]
        assert 60 <= scan.next_retry_at - failed_at <= 90
        later = scan_pending(store, project.load(emu), now=failed_at + 91)
        assert [p.task_id for p in later.due if p.stage == "gen"] == ["t1"]
    finally:
        store.close()


def test_temperature_rejection_blocks_the_route_with_the_fix_then_the_fixed_policy_completes(project: Project, emu: Any) -> None:
    # gpt-5.4 rejects temperature (spec §2); the config insists on sending it.
    routes = {"good": route("openai", "gpt-5.5"), "strict": route("openai", "gpt-5.4", send_temperature=True)}
    setup(project, routes)
    r = refresh(project, emu, 2)
    b = board(project)
    assert (b["strict"]["all_tasks_overall"], b["strict"]["failed_n"], b["strict"]["blocked_n"]) == (None, 0, len(TASKS))
    assert attempts(project, "strict") == Counter({1: len(TASKS)})  # an invalid request is not retried
    expected = f"blocked: route 'strict': {len(TASKS)} cell(s) [t1, t2, t3] blocked: the model rejects temperature"
    assert expected in r.output and "send_temperature = false" in r.output and "Unsupported value" in r.output
    assert "nothing more can move in this run" in r.output
    for command in (["status"], ["report"], ["report", "--format", "json"]):
        out = run(project, emu, *command, code=0).output
        assert "strict" in out and "send_temperature = false" in out
    collect = run(project, emu, "collect", code=2)
    assert expected in collect.output
    # Refreshing again sends nothing for the blocked route: it needs a config change.
    refresh(project, emu, 2)
    assert attempts(project, "strict") == Counter({1: len(TASKS)})

    # The fix changes the policy fingerprint: the cells are planned afresh and sent once each.
    routes["strict"] = route("openai", "gpt-5.4", send_temperature=False)
    project.config(routes={**routes, **JUDGE}, panel=["judge"])
    refresh(project, emu, 0)
    b = board(project)
    assert b["strict"]["complete"] == 1 and b["strict"]["scored_n"] == len(TASKS) and b["strict"]["failed_n"] == 0
    policies = {r["policy_fp"] for r in project.sql("SELECT policy_fp FROM requests WHERE route = 'strict' AND stage = 'gen'")}
    assert len(policies) == 2
    sent = Counter(r["custom_id"] for r in project.sql(
        "SELECT br.custom_id FROM batch_requests br JOIN requests q ON q.custom_id = br.custom_id "
        "JOIN batches b ON b.id = br.batch_id WHERE q.route = 'strict' AND b.status = 'collected'"))
    assert len(sent) == 2 * len(TASKS) and set(sent.values()) == {1}  # nothing paid twice under one policy


@pytest.mark.parametrize("message,cause,fix", [
    ("This model's maximum context length is 1047576 tokens. However, your messages resulted in 2000000 tokens.",
     "longer than the model's context window", "lower caps"),
    ("prompt is too long: 1200000 tokens > 1000000 maximum", "longer than the model's context window", "lower caps"),
    ("The model `gpt-9` does not exist or you do not have access to it.", "does not know the model", "correct model"),
    ("max_tokens: 65536 > 32000, which is the maximum allowed number of output tokens for claude-x",
     "completion budget", "set max_tokens"),
    ("Unsupported value: 'temperature' does not support 0.1 with this model.", "rejects temperature", "send_temperature = false"),
    ("something else entirely", "rejected the request as invalid", "batchrun retry --route r"),
    ("API key not valid. Please pass a valid API key.", "refused the API key", "check the key in"),
    ("Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
     "does not take a parameter", "set provider (and base_url)"),
    ("messages.0.cache: Extra inputs are not permitted", "does not take a parameter", "set provider (and base_url)"),
    ('Invalid JSON payload received. Unknown name "foo": Cannot find field.', "does not take a parameter", "set provider"),
    ("temperature: Extra inputs are not permitted", "rejects temperature", "send_temperature = false"),
])
def test_diagnosis_recognises_the_common_config_problems(message: str, cause: str, fix: str) -> None:
    from batchrun.ledger.diagnosis import diagnose

    d = diagnose("r", "invalid", message)
    assert cause in d.cause and fix in d.fix


def test_expired_forever_waits_for_the_next_run(project: Project, emu: Any) -> None:
    setup(project, {"slowpoke": route("gemini", "gemini-2.5-pro")})
    emu.add_fault({"kind": "expire", "complete_fraction": 0.0, "model": "gemini-2.5-pro", "count": -1})
    r = refresh(project, emu, 2)
    # 1 send + max_resubmits (3) per run, then waiting: never failed, never zero.
    assert attempts(project, "slowpoke") == Counter({1: 4 * len(TASKS)})
    assert {c["status"] for c in project.sql("SELECT status FROM cell_status")} == {"waiting"}
    assert board(project)["slowpoke"]["all_tasks_overall"] is None
    assert "waiting: route 'slowpoke'" in r.output
    emu.clear_faults()
    refresh(project, emu, 0)
    assert board(project)["slowpoke"]["complete"] == 1


def test_bad_key_blocks_the_route_and_retry_reopens_it_after_the_fix(project: Project, emu: Any) -> None:
    setup(project, {"online": route("openai-compatible", "qwen-plus", transport="sync")})
    emu.add_fault({"kind": "http_error", "status": 401, "path": "/chat/completions", "count": -1})
    r = refresh(project, emu, 2)
    assert f"check the key in {KEY_ENV} for route 'online'" in r.output
    assert {c["status"] for c in project.sql("SELECT status FROM cell_status")} == {"blocked"}
    assert board(project)["online"]["all_tasks_overall"] is None
    assert attempts(project, "online") == Counter({1: len(TASKS)})

    emu.clear_faults()  # the key is fixed
    refresh(project, emu, 2)  # blocked stays blocked until the maintainer says so
    assert attempts(project, "online") == Counter({1: len(TASKS)})
    out = run(project, emu, "retry", "--route", "online", "--reason", "rotated the key", code=0).output
    assert f"reopened {len(TASKS)} request(s)" in out
    assert [r["reason"] for r in project.sql("SELECT reason FROM reopens")] == ["rotated the key"] * len(TASKS)
    refresh(project, emu, 0)
    assert board(project)["online"]["scored_n"] == len(TASKS)


def test_retry_refuses_final_failures_and_unknown_names(project: Project, emu: Any) -> None:
    setup(project, {"good": route("openai", "gpt-5.5")})
    refresh(project, emu, 0)
    assert "no content retry" in run(project, emu, "retry", "--route", "good", "--status", "refusal", code=1).output
    assert "Nothing to retry for route 'good'" in run(project, emu, "retry", "--route", "good", code=1).output
    assert "is not a route" in run(project, emu, "retry", "--route", "nope", code=1).output
    assert "no infrastructure failures" in run(project, emu, "accept-failures", "--route", "good", "--reason", "x", code=1).output
    assert project.sql("SELECT count(*) AS n FROM accepted_failures")[0]["n"] == 0


def test_accept_failures_zero_fills_publishes_the_reason_and_is_undone_by_a_policy_change(project: Project, emu: Any) -> None:
    setup(project, {"good": route("openai", "gpt-5.5"), "down": route("anthropic", "claude-sonnet-4-6")})
    emu.add_fault({"kind": "request_error", "status": 529, "model": "claude-sonnet-4-6", "count": -1})
    refresh(project, emu, 2)
    before = len(project.sql("SELECT * FROM results"))

    out = run(project, emu, "accept-failures", "--route", "down", "--reason", "provider outage all week", code=0).output
    assert f"accepted {len(TASKS)} cell(s)" in out
    b = board(project)["down"]
    # Not the model's failures, and no protocol All-tasks (spec 001 §5): the decision's figure is apart.
    assert (b["complete"], b["all_tasks_overall"], b["failed_n"], b["accepted_n"], b["accepted_overall"]) == (
        1, None, 0, len(TASKS), 0.0)
    refresh(project, emu, 0)  # complete now, and the accepted cells are not sent again
    assert len(project.sql("SELECT * FROM results")) == before
    report = run(project, emu, "report", code=0).output
    assert "Accepted failures" in report and "provider outage all week" in report
    scores = json.loads((project.results_dir / "down.scores.json").read_text())
    assert scores["provenance"]["accepted_failures"][0]["reason"] == "provider outage all week"
    assert {t["score"] for t in scores["tasks"]} == {0.0}

    # A changed policy is a new evaluation: the decision does not carry over.
    emu.clear_faults()
    routes = {"good": route("openai", "gpt-5.5"), "down": route("anthropic", "claude-sonnet-4-6", max_tokens=4000)}
    project.config(routes={**routes, **JUDGE}, panel=["judge"])
    refresh(project, emu, 0)
    b = board(project)["down"]
    assert (b["accepted_n"], b["scored_n"]) == (0, len(TASKS))
    assert "accepted_failures" in json.loads((project.results_dir / "down.scores.json").read_text())["provenance"]
    assert json.loads((project.results_dir / "down.scores.json").read_text())["provenance"]["accepted_failures"] == []


def test_content_filter_is_a_refusal_not_a_retry() -> None:
    from batchrun.providers.openai import OpenAIAdapter

    line = {"custom_id": "g-1", "response": {"status_code": 200, "body": {"choices": [
        {"message": {"role": "assistant", "content": None}, "finish_reason": "content_filter"}]}}}
    assert OpenAIAdapter().parse_line(line).kind == "refusal"


# --- any change to what a judge grades re-judges (spec §5: do not mix) -------------------------------


def test_rubric_edit_rejudges_exactly_the_affected_cells_and_rescores_by_the_current_sum(project: Project, emu: Any,
                                                                                         recorder: Recorder) -> None:
    setup(project, {"a": route("openai", "gpt-5.5"), "b": route("anthropic", "claude-sonnet-4-6")})
    refresh(project, emu, 0)
    gen_before = project.sql("SELECT count(*) AS n FROM batch_requests br JOIN requests q ON q.custom_id = br.custom_id "
                             "WHERE q.stage = 'gen'")[0]["n"]
    judged_before = {(r["route"], r["task_id"]): r["custom_id"] for r in project.sql(
        "SELECT g.route, g.task_id, j.custom_id FROM requests j JOIN requests g ON g.custom_id = j.parent_custom_id WHERE j.stage = 'judge'")}
    assert len(judged_before) == 2 * len(TASKS)

    # Edit one criterion of t1 and one points value of t3 (t3's sum goes from 100 to 80).
    records = json.loads(project.dataset_path.read_text())
    records[0]["ground_truth"]["scoring_rubric"][1]["correct_criterion"] = "operator was Mara Quist on duty"
    records[2]["ground_truth"]["scoring_rubric"][1]["points"] = 20
    records[1]["ground_truth"]["answer"] = "a new gold answer (never graded: no re-judging)"
    project.dataset_path.write_text(json.dumps(records))
    refresh(project, emu, 0)

    judge_requests = project.sql(
        "SELECT g.route, g.task_id, j.custom_id FROM requests j JOIN requests g ON g.custom_id = j.parent_custom_id WHERE j.stage = 'judge'")
    per_cell = Counter((r["route"], r["task_id"]) for r in judge_requests)
    assert per_cell == Counter({(ro, t): (2 if t in ("t1", "t3") else 1) for ro in ("a", "b") for t in TASKS})
    # No generation request was sent again: the rubric never reaches the model.
    assert project.sql("SELECT count(*) AS n FROM batch_requests br JOIN requests q ON q.custom_id = br.custom_id "
                       "WHERE q.stage = 'gen'")[0]["n"] == gen_before
    # The new judgments saw the edited rubric; the old ones stay for audit and never count.
    new_ids = {r["custom_id"] for r in judge_requests} - set(judged_before.values())
    assert len(new_ids) == 4
    prompts = {recorder.prompts[cid] for cid in new_ids}
    assert len(prompts) == 4 and all(("on duty" in p) != ("P2 (20pts)" in p) for p in prompts)
    for r in project.sql("SELECT cs.route, cs.task_id, cs.score, t.rubric_total FROM cell_status cs JOIN tasks t USING (task_id)"):
        jm = project.sql(
            """SELECT jm.total FROM requests j JOIN request_status s ON s.custom_id = j.custom_id
               JOIN judgments jm ON jm.result_id = s.ok_result_id JOIN requests g ON g.custom_id = j.parent_custom_id
               JOIN tasks t ON t.task_id = g.task_id AND t.graded_sha256 = j.graded_sha256
               WHERE g.route = ? AND g.task_id = ?""", [r["route"], r["task_id"]])
        assert len(jm) == 1
        assert r["score"] == pytest.approx(min(max(jm[0]["total"] / r["rubric_total"], 0), 1))
    assert project.sql("SELECT rubric_total FROM tasks WHERE task_id = 't3'")[0]["rubric_total"] == 80


def test_judge_custom_id_carries_what_the_judge_grades() -> None:
    from batchrun.protocol.dataset import RubricItem
    from batchrun.ledger.ids import judge_custom_id
    from batchrun.protocol.prompts import judge_graded_sha256

    rubric = (RubricItem(60, "a"), RubricItem(40, "b"))
    base = judge_graded_sha256("q?", rubric)
    assert judge_graded_sha256("q?", (RubricItem(60, "a"), RubricItem(40, "b"))) == base
    assert judge_graded_sha256("q?", (RubricItem(60, "a"), RubricItem(41, "b"))) != base
    assert judge_graded_sha256("q?", (RubricItem(60, "a"), RubricItem(40, "b!"))) != base
    assert judge_graded_sha256("q" * 600 + "tail", rubric) == judge_graded_sha256("q" * 600, rubric)  # [:600] as the judge sees it
    assert judge_custom_id("fp", "g-1", "answer", base) != judge_custom_id("fp", "g-1", "answer", judge_graded_sha256("q!", rubric))


def test_refresh_does_not_spin_on_blocked_work(project: Project, emu: Any) -> None:
    setup(project, {"strict": route("openai", "gpt-5.4", send_temperature=True)})
    started = time.monotonic()
    r = run(project, emu, "refresh", "--interval", "0.2", "--timeout", "120s", code=2)
    assert time.monotonic() - started < 30
    assert "nothing more can move in this run" in r.output


# --- a state.db written by the previous version keeps working --------------------------------------


def test_a_state_db_from_the_previous_version_is_upgraded_in_place_without_rejudging(tmp_path: Any) -> None:
    """tests/fixtures/v0.1-project: a finished project written by batchrun 0.1.0 (schema m001-m006),
    where t2's invalid request was published as a zero. After the upgrade every old row is still
    there, t1 and t3 keep their judgments and scores (nothing re-judged, nothing re-sent), and t2 is
    blocked until the maintainer accepts it, which gives back exactly the old numbers."""
    import shutil
    import sqlite3
    from pathlib import Path

    src = Path(__file__).parent / "fixtures" / "v0.1-project"
    shutil.copytree(src, tmp_path / "proj")
    project = Project(tmp_path / "proj")
    before_board = json.loads((project.root / "leaderboard-before.json").read_text())
    conn = sqlite3.connect(project.state_path)
    old_scores = {(r[0], r[1]): r[2] for r in conn.execute("SELECT route, task_id, score FROM cell_status WHERE status = 'ok'")}
    counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("requests", "results", "judgments", "batches")}
    conn.close()
    assert len(old_scores) == 4

    report = project.run("report")
    assert report.exit_code == 1 and "needs its schema upgraded" in report.output  # a reader never writes
    assert "Run `batchrun plan` once" in report.output  # the writer that sends nothing, on either kind of state.db

    c = project.run("collect")
    assert c.exit_code == 2, c.output
    assert "route 'gpt': 1 cell(s) [t2] blocked" in c.output and "scripted invalid request" in c.output
    assert {t: project.sql(f"SELECT count(*) AS n FROM {t}")[0]["n"] for t in counts} == counts  # nothing re-queued
    assert not project.sql("SELECT * FROM requests WHERE stage = 'judge' AND graded_sha256 IS NULL")
    new_scores = {(r["route"], r["task_id"]): r["score"] for r in project.sql("SELECT * FROM cell_status WHERE status = 'ok'")}
    assert new_scores == old_scores
    assert {(r["route"], r["task_id"]) for r in project.sql("SELECT * FROM cell_status WHERE status = 'blocked'")} == {
        ("gpt", "t2"), ("claude", "t2")}

    plan = project.run("plan")
    assert plan.exit_code == 0 and project.jobs_files() == []  # nothing to send: the answers are all there
    for name in ("gpt", "claude"):
        assert project.run("accept-failures", "--route", name, "--reason", "t2 invalid since 0.1").exit_code == 0
    board = {r["route"]: r for r in project.sql("SELECT * FROM leaderboard")}
    for row in before_board:
        for key in ("scored_n", "complete", "scored_overall"):
            assert board[row["route"]][key] == row[key], (row["route"], key)
        # 0.1 published t2 as the model's failure and counted it in All-tasks; accepted now, it is
        # neither (issue 26: spec 001 §5 leaves All-tasks null), and the old figure is the
        # route's non-protocol accepted_overall.
        b = board[row["route"]]
        assert (b["failed_n"], b["accepted_n"], b["all_tasks_overall"]) == (row["failed_n"] - 1, 1, None)
        assert b["accepted_overall"] == row["all_tasks_overall"]
