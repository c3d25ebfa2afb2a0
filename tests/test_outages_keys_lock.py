"""Issue 13: transient outages are not fatal, keys are never stored, one writer really.

Through the CLI as subprocesses, the real SDKs and the emulator in its own process (as in
test_reliability): a 503 burst on a batch create, a provider that echoes the caller's key in its
errors and answers, a key refused on every online call or on an upload/create, the writer lock
file deleted or reached through a symlink, and a sync request file edited after planning.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import cliproc
from conftest import KEY_ENV, Project, batch_requests, route, small_project
from test_reliability import EmulatorProcess, emu, emu_proc, hold_writer_lock, integrity_ok, run_batchrun  # noqa: F401 (emu, emu_proc: its fixtures)

SECRET = "sk-DISTINCTIVE-4c8e2a9f71-SECRET"


def calls(emu: EmulatorProcess) -> list[dict[str, Any]]:
    return emu._call("GET", "/_emulator/calls")["calls"]


def leaderboard(project: Project) -> dict[str, dict[str, Any]]:
    return {r["route"]: r for r in project.sql("SELECT * FROM leaderboard")}


def assert_no_secret(project: Project, outputs: list[str]) -> None:
    """The key is in no CLI output and in no file under the project (state.db checkpointed)."""
    conn = sqlite3.connect(project.state_path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    for text in outputs:
        assert SECRET not in text, text[-3000:]
    needle = SECRET.encode()
    files = [p for p in project.root.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert needle not in path.read_bytes(), path
        assert not path.name.endswith(".redacting"), path


# --- 5. a 503 burst on create --------------------------------------------------------------------


def test_503_burst_on_create_holds_that_batch_and_the_other_routes_go_on(project: Project, emu: EmulatorProcess) -> None:
    small_project(project, routes={"gpt": route("openai", "gpt-5.5"), "claude": route("anthropic", "claude-opus-4-8"),
                                   "judge-a": route("anthropic", "claude-sonnet-4-6"), "judge-g": route("gemini", "gemini-2.5-flash")})
    # Four 503s in a row on the Anthropic create: every attempt of the first round fails.
    emu.fault({"kind": "http_error", "status": 503, "method": "POST", "path": "/v1/messages/batches$", "count": 4})
    r = run_batchrun(project, "refresh", "--interval", "0.05", "--timeout", "90s", emu=emu)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert "will retry" in r.stderr and "HTTP 503" in r.stderr
    creates = [c["status"] for c in calls(emu) if c["method"] == "POST" and c["path"] == "/v1/messages/batches"]
    assert creates[:4] == [503] * 4 and set(creates[4:]) == {200}
    # The OpenAI route was created in the round the Anthropic batch was held (not after it).
    first_ok = next(i for i, c in enumerate(calls(emu))
                    if c["method"] == "POST" and c["path"] == "/v1/messages/batches" and c["status"] == 200)
    assert any(c["path"] == "/v1/batches" and c["method"] == "POST" and c["status"] == 200 for c in calls(emu)[:first_ok])
    counts = Counter(x["custom_id"] for x in batch_requests(emu))
    assert counts and set(counts.values()) == {1}  # nothing paid twice
    board = leaderboard(project)
    assert all(row["complete"] == 1 and row["all_tasks_overall"] is not None for row in board.values())
    integrity_ok(project)


# --- 6. a provider that echoes the key -----------------------------------------------------------


def test_a_key_echoed_by_the_provider_is_never_stored_or_printed(project: Project, emu: EmulatorProcess) -> None:
    small_project(project, routes={
        "gpt": route("openai", "gpt-5.5"),
        "claude": route("anthropic", "claude-opus-4-8"),
        "kimi-sync": route("openai-compatible", "kimi-k2.6", transport="sync", sync_concurrency=1, send_temperature=False),
        "judge-a": route("anthropic", "claude-sonnet-4-6"), "judge-g": route("gemini", "gemini-2.5-flash"),
    })
    env = {KEY_ENV: SECRET}
    # The routes' preflights pass first: the echoes below are for batch and online lines (a
    # preflight's own echo is redacted too: tests/test_preflight.py).
    outputs = [run_batchrun(project, "preflight", emu=emu, env=env).stdout]
    for fault in (
        # An error on a batch create quoting "Bearer <key>" (transient: adopted or retried).
        {"kind": "echo_key", "status": 503, "method": "POST", "path": "/v1/batches$", "count": 1},
        # Batch answers and a batch error line quoting it.
        {"kind": "echo_key_request", "model": "gpt-5.5", "count": 2},
        {"kind": "echo_key_request", "status": 500, "model": "gpt-5.5", "count": 1},
        {"kind": "echo_key_request", "model": "claude-opus-4-8", "count": 1},
        # Online (sync) answers and an online error quoting it.
        {"kind": "echo_key_request", "model": "kimi-k2.6", "count": 2},
        {"kind": "echo_key_request", "status": 503, "model": "kimi-k2.6", "count": 1},
    ):
        emu.fault(fault)
    r = run_batchrun(project, "refresh", "--interval", "0.05", "--timeout", "90s", emu=emu, env=env)
    outputs += [r.stdout, r.stderr]
    if r.returncode == 2:  # a retry held for the next run
        r = run_batchrun(project, "refresh", "--interval", "0.05", "--timeout", "90s", emu=emu, env=env)
        outputs += [r.stdout, r.stderr]
    assert r.returncode == 0, r.stderr[-3000:]
    for args in (["report", "--format", "json"], ["status", "--json"], ["cost", "--json"], ["report"]):
        out = run_batchrun(project, *args, emu=emu, env=env)
        assert out.returncode == 0, out.stderr
        outputs += [out.stdout, out.stderr]
    # The echoes happened, and what is kept says where the key was.
    assert "[REDACTED]" in "".join(outputs)
    redacted = project.sql("SELECT q.route, r.kind FROM results r JOIN requests q ON q.custom_id = r.custom_id "
                           "WHERE r.text LIKE '%[REDACTED]%' OR r.error_message LIKE '%[REDACTED]%'")
    assert {x["route"] for x in redacted} == {"gpt", "claude", "kimi-sync"}
    assert {x["kind"] for x in redacted} == {"ok", "transient"}
    assert_no_secret(project, outputs)
    integrity_ok(project)


# --- 7. a refused key blocks its route, never zeros ---------------------------------------------------


def test_a_key_refused_on_every_online_call_blocks_each_sync_route_never_a_zero(project: Project, emu: EmulatorProcess) -> None:
    sync_routes = {
        "oai-sync": route("openai", "gpt-5.4", transport="sync"),
        "ant-sync": route("anthropic", "claude-opus-4-8", transport="sync"),
        "gem-sync": route("gemini", "gemini-2.5-pro", transport="sync"),
    }
    small_project(project, routes={**sync_routes, "gpt": route("openai", "gpt-5.5"),
                                   "judge-a": route("anthropic", "claude-sonnet-4-6"), "judge-g": route("gemini", "gemini-2.5-flash")})
    # Each provider's online endpoint refuses the key (and quotes it back); batch endpoints work.
    for path, status in (("/chat/completions$", 401), ("/v1/messages$", 401), (":generateContent$", 403)):
        emu.fault({"kind": "echo_key", "status": status, "path": path, "count": -1})
    # About the sync transport's own calls: the routes' preflights (online calls too, which would
    # stop each route before anything is sent: tests/test_preflight.py) are skipped.
    r = run_batchrun(project, "refresh", "--no-preflight", "--interval", "0.05", "--timeout", "90s", emu=emu, env={KEY_ENV: SECRET})
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    board = leaderboard(project)
    for name in sync_routes:
        assert f"check the key in {KEY_ENV} for route '{name}'" in r.stderr
        assert board[name]["all_tasks_overall"] is None and board[name]["scored_overall"] is None
        assert board[name]["blocked_n"] == 4 and board[name]["failed_n"] == 0
    assert board["gpt"]["complete"] == 1 and board["gpt"]["all_tasks_overall"] is not None
    # One attempt per request: a refused key is not retried.
    online = Counter(c["path"] for c in calls(emu) if c["status"] in (401, 403))
    assert sorted(online.values()) == [4, 4, 4], online
    report = run_batchrun(project, "report", "--format", "json", emu=emu)
    published = {row["route"]: row for row in json.loads(report.stdout)["routes"]}
    for name in sync_routes:
        assert published[name]["all_tasks_overall"] is None
    assert_no_secret(project, [r.stdout, r.stderr, report.stdout, report.stderr])


BATCH_KEY_CASES = {
    # bad route, control route, judge panel, the call that refuses the key
    "openai-upload": (route("openai", "gpt-5.5"), route("anthropic", "claude-opus-4-8"), ["judge-a", "judge-g"],
                      {"method": "POST", "path": "/v1/files$", "provider": "openai"}),
    "anthropic-create": (route("anthropic", "claude-opus-4-8"), route("openai", "gpt-5.5"), ["judge-g"],
                         {"method": "POST", "path": "/v1/messages/batches$"}),
    "gemini-create": (route("gemini", "gemini-2.5-pro"), route("openai", "gpt-5.5"), ["judge-a"],
                      {"method": "POST", "path": ":batchGenerateContent$"}),
}


@pytest.mark.parametrize("case", sorted(BATCH_KEY_CASES))
def test_a_key_refused_on_upload_or_create_blocks_that_route_and_the_others_finish(case: str, project: Project, emu: EmulatorProcess) -> None:
    bad, control, panel, where = BATCH_KEY_CASES[case]
    judges = {"judge-a": route("anthropic", "claude-sonnet-4-6"), "judge-g": route("gemini", "gemini-2.5-flash")}
    small_project(project, routes={"bad": bad, "control": control, **{j: judges[j] for j in panel}}, panel=panel)
    emu.fault({"kind": "echo_key", "status": 401, "count": -1, **where})
    r = run_batchrun(project, "refresh", "--interval", "0.05", "--timeout", "90s", emu=emu, env={KEY_ENV: SECRET})
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert "blocked: route 'bad'" in r.stderr and f"check the key in {KEY_ENV} for route 'bad'" in r.stderr
    board = leaderboard(project)
    assert board["bad"]["all_tasks_overall"] is None and board["bad"]["blocked_n"] == 4
    assert board["control"]["complete"] == 1 and board["control"]["all_tasks_overall"] is not None
    assert_no_secret(project, [r.stdout, r.stderr])
    # The key is fixed: retry reopens the route, and it completes.
    emu._call("DELETE", "/_emulator/faults")
    assert run_batchrun(project, "retry", "--route", "bad", emu=emu).returncode == 0
    again = run_batchrun(project, "refresh", "--interval", "0.05", "--timeout", "90s", emu=emu)
    assert again.returncode == 0, again.stderr[-3000:]
    assert leaderboard(project)["bad"]["complete"] == 1
    integrity_ok(project)


# --- 8. one writer, really ---------------------------------------------------------------------------


def in_flight(project: Project) -> bool:
    try:
        return bool(project.sql("SELECT id FROM batches WHERE status = 'in_flight'"))
    except sqlite3.OperationalError:  # the writer has yet to create the tables
        return False


def test_deleting_the_lock_file_does_not_let_a_second_writer_in(project: Project, emu: EmulatorProcess) -> None:
    small_project(project)
    project.point_at(emu)  # real runs (the rehearsal paths aside), answered by the emulator
    emu.fault({"kind": "slow", "latency": 60, "count": -1})  # the first writer stays in flight
    cmd = ["--config", str(project.config_path), "refresh", "--interval", "0.2", "--timeout", "60s"]
    first = cliproc.start(cmd, env={**os.environ, KEY_ENV: "test-key-not-secret", "BATCHRUN_RETRY_BASE": "0.0001"})
    try:
        note = Path(str(project.state_path) + ".lock")
        deadline = time.monotonic() + 30
        while not (note.exists() and str(first.pid) in note.read_text()):
            assert time.monotonic() < deadline and first.poll() is None, "the first writer never took the lock"
            time.sleep(0.05)
        while not in_flight(project):
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        note.unlink()
        second = run_batchrun(project, "submit")
        assert second.returncode == 1, second.stderr
        assert "Another batchrun process is writing" in second.stderr
        assert f"pid {first.pid}" in second.stderr and "batchrun refresh" in second.stderr
        assert "Traceback" not in second.stderr
        # It never started: the only run is the first writer's, and every batch is its.
        assert [r["pid"] for r in project.sql("SELECT pid FROM runs")] == [first.pid]
        assert {b["run_id"] for b in project.sql("SELECT run_id FROM batches WHERE run_id IS NOT NULL")} == {1}
        assert first.poll() is None  # the first writer is still the one writing
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    integrity_ok(project)


@pytest.mark.parametrize("alias", ["file", "folder"])
def test_a_symlinked_path_to_state_db_takes_the_same_lock(alias: str, project: Project, emu: EmulatorProcess, tmp_path: Path) -> None:
    small_project(project)
    project.point_at(emu)  # real runs: a rehearsal would use its own state.db
    assert run_batchrun(project, "plan").returncode == 0
    # A second config reaching the same state.db through a symlink (to the file, or to its folder).
    if alias == "file":
        link = project.root / "alias.db"
        link.symlink_to(project.state_path)
    else:
        (tmp_path / "elsewhere").symlink_to(project.root, target_is_directory=True)
        link = tmp_path / "elsewhere" / "state.db"
    cfg = json.loads(project.config_path.read_text())
    cfg["paths"]["state"] = str(link)
    other = Project(project.root)
    other.config_path = project.root / "other.json"
    other.config_path.write_text(json.dumps(cfg))
    holder = hold_writer_lock(project, seconds=30)
    try:
        second = run_batchrun(other, "submit")
        assert second.returncode == 1, second.stderr
        assert f"pid {holder.pid}" in second.stderr and "batchrun refresh" in second.stderr
        assert "Traceback" not in second.stderr
        assert emu.requests == [] and {b["status"] for b in project.sql("SELECT status FROM batches")} == {"planned"}
    finally:
        holder.kill()
        holder.wait()
    assert run_batchrun(other, "submit", emu=emu).returncode == 0  # once it is free, either path writes
    integrity_ok(project)


# --- 9. an edited sync request file ------------------------------------------------------------------


def sync_project(project: Project) -> Project:
    return small_project(project, routes={
        "online": route("openai-compatible", "qwen3.7-plus", transport="sync", sync_concurrency=1),
        "judge-a": route("anthropic", "claude-sonnet-4-6"), "judge-g": route("gemini", "gemini-2.5-flash"),
    })


def edit_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    i = data.rindex(b"crane")
    data[i] = ord("C")
    path.write_bytes(bytes(data))


def test_an_edited_sync_request_file_is_refused_before_any_line_is_sent(project: Project, emu: EmulatorProcess) -> None:
    sync_project(project)
    r = run_batchrun(project, "submit", emu=emu)  # starts the sync batch; poll sends its lines
    assert r.returncode == 0, r.stderr
    [path] = project.jobs_files()
    assert project.sql("SELECT status FROM batches")[0]["status"] == "in_flight"
    edit_one_byte(path)
    for command in (["poll"], ["refresh", "--interval", "0.05", "--timeout", "30s"]):
        r = run_batchrun(project, *command, emu=emu)
        assert r.returncode == 1, r.stderr
        assert "was changed after it was planned" in r.stderr and str(path) in r.stderr and "Refusing to send it" in r.stderr
        assert "batchrun cancel --batch" in r.stderr and "Traceback" not in r.stderr
        assert batch_requests(emu) == []  # (the route's preflight went with submit)
    integrity_ok(project)


def test_an_edited_sync_request_file_is_refused_when_a_crashed_run_resumes(project: Project, emu: EmulatorProcess) -> None:
    sync_project(project)
    assert run_batchrun(project, "submit", emu=emu).returncode == 0
    killed = run_batchrun(project, "poll", emu=emu, env={"BATCHRUN_DIE_AT": "poll.sync_line:2"})
    assert killed.returncode == -signal.SIGKILL
    sent = len(batch_requests(emu))
    assert 2 <= sent < 4
    [path] = project.jobs_files()
    edit_one_byte(path)
    r = run_batchrun(project, "poll", emu=emu)
    assert r.returncode == 1 and "was changed after it was planned" in r.stderr and "Traceback" not in r.stderr
    assert len(batch_requests(emu)) == sent
    integrity_ok(project)
