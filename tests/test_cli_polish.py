"""The CLI as a new user and a cron wrapper meet it: exit codes that mean what the README says,
no silent minutes, nothing that needs an activated venv to work as printed."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import cliproc
from batchrun.cli import cli
from batchrun.emulator import Emulator
from conftest import KEY_ENV, Project, route, small_project


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("args", [
    ["--bogus", "status"],
    ["report", "--format", "nope"],
    ["retry"],  # --route is required
    ["nosuchcommand"],
])
def test_usage_errors_exit_1_not_2(args: list[str]) -> None:
    """2 means "incomplete, run again later": a typo in a cron line must not read as that forever."""
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert "Usage:" in result.output or "Error" in result.output


def test_help_and_version_exit_0() -> None:
    assert CliRunner().invoke(cli, ["--help"]).exit_code == 0
    assert CliRunner().invoke(cli, ["report", "--help"]).exit_code == 0
    assert CliRunner().invoke(cli, ["--version"]).exit_code == 0


def test_poll_wait_that_times_out_with_work_in_flight_exits_2(project: Project) -> None:
    small_project(project)
    emu = Emulator(port=0, latency=30.0).start()
    try:
        assert project.run("submit", emulator=emu).exit_code == 0
        r = project.run("poll", "--wait", "--interval", "0.1", "--timeout", "0.5", emulator=emu)
        assert r.exit_code == 2, r.output
        assert "still in flight" in r.output
    finally:
        emu.stop()


def test_cancel_names_unknown_routes_and_says_when_nothing_is_live(project: Project, emulator: Emulator) -> None:
    small_project(project)
    r = project.run("cancel", "--route", "gtp", emulator=emulator)
    assert r.exit_code == 1 and "--route 'gtp' is not a route" in r.output and "Known routes" in r.output
    r = project.run("cancel", "--all", emulator=emulator)
    assert r.exit_code == 0 and "Nothing to cancel" in r.output


@pytest.mark.parametrize("since", ["yesterday", "2026-13-45", "2026-1-5"])
def test_cost_since_must_be_a_date(project: Project, emulator: Emulator, since: str) -> None:
    small_project(project)
    assert project.run("plan", emulator=emulator).exit_code == 0
    r = project.run("cost", "--since", since, emulator=emulator)
    assert r.exit_code == 1 and "is not a date" in r.output and "YYYY-MM-DD" in r.output
    assert project.run("cost", "--since", "2026-01-05", emulator=emulator).exit_code == 0


@pytest.mark.parametrize("command", ["submit", "refresh"])
def test_a_refused_loopback_connection_fails_fast_with_a_clear_error(project: Project, command: str) -> None:
    small_project(project)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    # refresh too: a refused connection on this machine is not an outage to wait out round after round.
    r = CliRunner().invoke(cli, ["--config", str(project.config_path), "--emulator", url, command, *(["--interval", "30"] if command == "refresh" else [])])
    assert r.exit_code == 1, r.output
    assert time.monotonic() - started < 60  # not minutes of retries (it was 97 s): one failed connect per route
    assert url.split("//")[1] in r.output and "Nothing is listening" in r.output and "Traceback" not in r.output


def test_every_retry_is_logged_with_its_reason_and_wait(project: Project, emulator: Emulator) -> None:
    small_project(project)
    assert project.run("submit", emulator=emulator).exit_code == 0
    emulator.add_fault({"kind": "http_error", "status": 503, "method": "GET", "count": 2})
    r = project.run("poll", emulator=emulator)
    assert r.exit_code == 0, r.output
    assert "retry 1/7 in 0 s:" in r.output and "retry 2/7" in r.output and "Checking a batch" in r.output
    quiet = project.run("-q", "poll", emulator=emulator)
    assert "retry" not in quiet.output


def test_missing_keys_are_named_all_at_once_and_a_rehearsal_needs_none(project: Project, emulator: Emulator) -> None:
    routes = {
        "a": route("openai", "gpt-5.5", api_key_env="BATCHRUN_TEST_UNSET_A"),
        "b": route("anthropic", "claude-opus-4-8", api_key_env="BATCHRUN_TEST_UNSET_B"),
        "judge-a": route("gemini", "gemini-2.5-flash"),
    }
    small_project(project, routes=routes, panel=["judge-a"])
    project.point_at(emulator)
    r = project.run("submit")
    assert r.exit_code == 1
    assert "BATCHRUN_TEST_UNSET_A" in r.output and "BATCHRUN_TEST_UNSET_B" in r.output
    assert "2 API key variable(s) not set" in r.output
    assert emulator.calls == []
    rehearsal = project.run("refresh", "--interval", "0.01", emulator=emulator)
    assert rehearsal.exit_code == 0, rehearsal.output


def test_a_missing_key_on_a_resume_names_every_route_in_flight_that_reads_it(project: Project, emulator: Emulator,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A newcomer's refresh with the key unset while 5 routes had batches in flight was told of
    one route only (the first batch polled): every route that needs the variable is named."""
    small_project(project, panel=[])
    project.point_at(emulator)
    assert project.run("submit").exit_code == 0
    monkeypatch.delenv(KEY_ENV)
    r = project.run("refresh", "--interval", "0.01")
    assert r.exit_code == 1, r.output
    assert f"1 API key variable(s) not set: {KEY_ENV} (routes 'gpt', 'claude', 'gemini', 'judge-a', 'judge-g')" in r.output


def test_a_missing_key_in_a_refresh_with_work_to_send_names_the_routes_in_flight_too(project: Project, emulator: Emulator,
                                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The submit a refresh starts with named only the routes it was about to send, not gpt, in
    flight and reading the same variable, which the poll after it names: submit (in a refresh or
    alone) names the routes about to send, then those in flight that read it."""
    small_project(project, panel=[])
    project.point_at(emulator)
    assert project.run("submit", "--route", "gpt").exit_code == 0
    monkeypatch.delenv(KEY_ENV)
    for command in (("refresh", "--interval", "0.01"), ("submit",)):
        r = project.run(*command)
        assert r.exit_code == 1, r.output
        assert f"1 API key variable(s) not set: {KEY_ENV} (routes 'claude', 'gemini', 'judge-a', 'judge-g', 'gpt')" in r.output, r.output


def test_demo_refuses_a_folder_holding_another_projects_files(tmp_path: Path) -> None:
    """`demo --dir` on a real project overwrote its data/dataset.json and same-named documents
    (found by a review): refused, naming them, with nothing changed."""
    folder = tmp_path / "project"
    (folder / "data").mkdir(parents=True)
    (folder / "corpus").mkdir()
    (folder / "data" / "dataset.json").write_text('[{"task_id": "mine"}]')
    (folder / "corpus" / "freight_yard_ops_log.txt").write_text("my own document")
    (folder / "batchrun.toml").write_text('[paths]\ndataset = "data/dataset.json"\n')
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    r = CliRunner().invoke(cli, ["demo", "--dir", str(folder)])
    assert r.exit_code == 1, r.output
    assert "its own batchrun.toml, which the demo would run" in r.output
    assert "data/dataset.json, corpus/freight_yard_ops_log.txt, which the demo would overwrite" in r.output
    assert "--dir demo-run`" in r.output
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before


def test_a_demo_folder_stays_the_demos_after_its_config_changes(tmp_path: Path) -> None:
    """An upgrade may ship another demo config, and a user may edit theirs and delete state.db:
    the folder's marker keeps it the demo's to refresh (a review found it locked out)."""
    folder = tmp_path / "demo-run"
    assert CliRunner().invoke(cli, ["demo", "--dir", str(folder)]).exit_code == 0
    assert (folder / ".batchrun-demo").is_file()
    config = folder / "batchrun.toml"
    config.write_text(config.read_text().replace("Prices are illustrative", "Prices are made up"))
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (folder / name).unlink(missing_ok=True)
    r = CliRunner().invoke(cli, ["demo", "--dir", str(folder)])
    assert r.exit_code == 0, r.output


def test_demo_hint_is_a_command_that_works_as_printed(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["demo", "--dir", str(tmp_path / "d")])
    assert r.exit_code == 0, r.output
    hint = next(line for line in r.output.splitlines() if line.startswith("Try: "))
    command = hint.split()[1]
    assert Path(command).exists() or command == "sqlite-utils" and __import__("shutil").which(command)


def test_emulator_busy_port_and_bad_responder_are_clear_errors(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = CliRunner().invoke(cli, ["emulator", "--port", str(port)])
        assert r.exit_code == 1 and f"Port {port} on 127.0.0.1 is already in use" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(cli, ["emulator", "--port", "0", "--responder", "nope.py:fn"])
    assert r.exit_code == 1 and "--responder 'nope.py:fn' cannot be loaded" in r.output
    bad = tmp_path / "resp.py"
    bad.write_text("raise RuntimeError('broken at import')\n")
    r = CliRunner().invoke(cli, ["emulator", "--port", "0", "--responder", f"{bad}:fn"])
    assert r.exit_code == 1 and "broken at import" in r.output and "Traceback" not in r.output


def test_usage_error_exit_code_in_a_real_process() -> None:
    env = {**os.environ, KEY_ENV: "x"}
    p = subprocess.run([sys.executable, "-m", "batchrun", "--no-such-flag"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 1 and "No such option" in p.stderr


@pytest.mark.parametrize("command", [["cost"], ["status", "--json"]])
def test_a_reader_closing_the_pipe_early_ends_batchrun_as_it_ends_cat(project: Project, tmp_path: Path, command: list[str]) -> None:
    """`batchrun cost | head -1`: the reader leaving is neither the user's error nor state.db's.
    batchrun used to exit 1 (click's default), which a cron wrapper reads as a user error; now it
    ends as cat or grep do, by SIGPIPE, saying nothing, with state.db untouched. A real child
    process whose stdout is a FIFO: the reader opens it and closes it before reading a byte, so
    the child's first write finds no reader (what `head -1` does to a longer output)."""
    small_project(project)
    assert project.run("plan").exit_code == 0
    assert project.run(*command).exit_code == 0  # a reader's visit leaves state.db-wal and -shm (empty) behind

    def state() -> list[tuple[str, str]]:
        return [(p.name, hashlib.sha256(p.read_bytes()).hexdigest()) for p in sorted(project.root.glob("state.db*"))]

    before = state()
    fifo = tmp_path / "stdout.fifo"
    os.mkfifo(fifo)
    proc = cliproc.start(["--config", str(project.config_path), *command], stdout=fifo, cwd=project.root)
    os.close(os.open(fifo, os.O_RDONLY))  # returns once the child has opened its end; closed at once
    code = proc.wait(60)
    _, err = proc.outputs()
    assert (code, err) == (-signal.SIGPIPE, "")
    assert state() == before


def test_a_dry_run_after_plan_lists_the_planned_batches_it_would_send(project: Project, emulator: Emulator) -> None:
    """`plan` then `submit --dry-run` used to say "Nothing new to write" though the next submit uploads."""
    small_project(project)
    assert project.run("plan", emulator=emulator).exit_code == 0
    planned = project.sql("SELECT id, n_requests FROM batches WHERE status = 'planned'")
    assert planned
    r = project.run("submit", "--dry-run", emulator=emulator)
    assert r.exit_code == 0, r.output
    assert f"{len(planned)} batch(es) planned and not sent yet" in r.output and "the next submit will send them" in r.output
    for b in planned:
        assert b["id"] in r.output
    assert f"{sum(b['n_requests'] for b in planned)} request(s)" in r.output
    assert "Nothing new to write" not in r.output
    assert emulator.calls == []
    assert project.run("submit", emulator=emulator).exit_code == 0
    r = project.run("submit", "--dry-run", emulator=emulator)
    assert "planned and not sent yet" not in r.output and "Nothing new to write" in r.output


def test_status_words_say_planned_unsent_in_flight_and_cancelling(project: Project) -> None:
    """Planned batches are not "live"; a pending cell says whether it was sent; a cancel shows at once."""
    small_project(project)
    emu = Emulator(port=0, latency=30.0).start()
    try:
        assert project.run("plan", emulator=emu).exit_code == 0
        n_planned = len(project.sql("SELECT id FROM batches WHERE status = 'planned'"))
        r = project.run("status", emulator=emu)
        assert r.exit_code == 0, r.output
        assert "0 batch(es) live" in r.output and f"{n_planned} batch(es) planned (not sent)" in r.output
        assert "pending (unsent)" in r.output and "in flight" not in r.output and "pending 4" not in r.output
        assert project.run("submit", emulator=emu).exit_code == 0
        r = project.run("status", emulator=emu)
        assert f"{n_planned} batch(es) live" in r.output and "planned (not sent)" not in r.output
        assert "in flight 4" in r.output and "pending (unsent)" not in r.output
        assert project.run("cancel", "--all", emulator=emu).exit_code == 0
        r = project.run("status", emulator=emu)
        assert r.output.count("cancelling (requested)") == n_planned, r.output
    finally:
        emu.stop()


def test_event_lines_show_batchruns_state_word_not_the_providers_raw_one(project: Project, emulator: Emulator) -> None:
    small_project(project)  # an OpenAI, an Anthropic and a Gemini route
    assert project.run("submit", emulator=emulator).exit_code == 0
    r = project.run("poll", "--wait", "--interval", "0.05", "--timeout", "60", emulator=emulator)
    assert r.exit_code == 0, r.output
    ended = [line for line in r.output.splitlines() if " ended: " in line]
    assert len(ended) == 3, r.output
    assert all(line.split(" ended: ")[1].startswith("done") for line in ended), ended
    assert "JOB_STATE_" not in r.output and "ended: ended" not in r.output and "ended: completed" not in r.output


def test_state_words_keep_the_providers_word_where_it_says_more() -> None:
    from batchrun.run.poll import state_words
    from batchrun.providers import BatchStatus

    def words(state: str, raw: str) -> str:
        return state_words(BatchStatus(provider_batch_id="b", state=state, raw_status=raw))

    assert words("done", "JOB_STATE_SUCCEEDED") == "done"
    assert words("done", "ended") == "done" and words("cancelled", "canceled") == "cancelled"
    assert words("failed", "JOB_STATE_PARTIALLY_SUCCEEDED") == "failed (provider: JOB_STATE_PARTIALLY_SUCCEEDED)"


@pytest.mark.parametrize("command", [["plan"], ["submit", "--dry-run"]])
def test_quiet_silences_nothing_new_to_write(project: Project, emulator: Emulator, command: list[str]) -> None:
    small_project(project)
    assert project.run("submit", emulator=emulator).exit_code == 0
    assert "Nothing new to write." in project.run(*command, emulator=emulator).output
    r = project.run("-q", *command, emulator=emulator)
    assert r.exit_code == 0 and "Nothing new to write" not in r.output


def test_runs_and_batches_times_read_as_iso_8601_utc(project: Project, emulator: Emulator) -> None:
    import re

    small_project(project)
    assert project.run("submit", emulator=emulator).exit_code == 0
    iso = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
    runs = project.sql("SELECT r.started_at, l.started_at_utc, l.ended_at_utc FROM runs r JOIN runs_log l ON l.id = r.id")
    assert runs and all(iso.match(r["started_at_utc"]) and iso.match(r["ended_at_utc"]) for r in runs)
    first = runs[0]
    import calendar
    parsed = calendar.timegm(time.strptime(first["started_at_utc"], "%Y-%m-%dT%H:%M:%SZ"))
    assert abs(parsed - first["started_at"]) <= 1
    batches = project.sql("SELECT created_at_utc, submitted_at_utc, ended_at_utc FROM batches_log")
    assert batches and all(iso.match(b["created_at_utc"]) and iso.match(b["submitted_at_utc"]) for b in batches)
    assert all(b["ended_at_utc"] is None for b in batches)
