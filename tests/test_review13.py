"""Session 13's adversarial review of what merged since 57d2c5e: each finding's repro."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest


@pytest.mark.parametrize(("theirs", "sent", "code"), [(signal.SIGTERM, signal.SIGHUP, 129), (signal.SIGHUP, signal.SIGTERM, 143)],
                         ids=["own-SIGTERM", "own-SIGHUP"])
def test_a_stop_leaves_a_library_callers_own_signal_handler_in_place(theirs: int, sent: int, code: int) -> None:
    """handle_errors puts back the handlers it replaced; one it did not replace (a library caller's
    or a test runner's own SIGTERM or SIGHUP handler) is not its to touch. A SIGHUP set the
    caller's SIGTERM handler to SIG_IGN for the rest of the process (and a SIGTERM its SIGHUP's)."""
    from batchrun.cli.support import handle_errors

    def theirs_handler(*_: Any) -> None:
        pass

    before = signal.signal(theirs, theirs_handler)
    try:
        @handle_errors
        def command() -> None:
            os.kill(os.getpid(), sent)

        with pytest.raises(SystemExit) as ended:
            command()
        assert ended.value.code == code
        assert signal.getsignal(theirs) is theirs_handler
    finally:
        signal.signal(theirs, before)


def test_poll_wait_whose_stop_was_swallowed_ends_at_its_next_round(project: Any) -> None:
    """`poll --wait` loops until every batch ends (a day, for a slow provider) as refresh does: a
    stop recorded but swallowed where it landed (base/stop.py) ends it at its next round, not when
    the last batch ends. Before: it polled on to its --timeout."""
    from batchrun.base import stop
    from batchrun.emulator import Emulator
    from batchrun.run.poll import poll
    from conftest import route, small_project

    small_project(project, routes={"g": route("openai", "gpt-5.5")}, panel=[])
    emu = Emulator(port=0, latency=30.0).start()
    try:
        assert project.run("submit", emulator=emu).exit_code == 0
        store = project.store()
        before = stop.record(signal.SIGTERM)
        try:
            with pytest.raises(stop.Stopped):
                poll(store, project.load(emu), wait=True, interval=0.05, timeout=1.0)
        finally:
            stop.record(before)
            store.close()
    finally:
        emu.stop()


def test_wait_lock_whose_stop_was_swallowed_stops_waiting(tmp_path: Any) -> None:
    """--wait-lock waits for another writer (a whole night's refresh) in a loop: a stop recorded but
    swallowed ends the wait. Before: it waited on until the lock came free or its time limit."""
    import time

    from batchrun.base import stop
    from batchrun.ledger.lock import WriterLock

    db = tmp_path / "state.db"
    holder = WriterLock(db, "refresh").acquire()
    before = stop.record(signal.SIGTERM)
    try:
        with pytest.raises(stop.Stopped):
            WriterLock(db, "poll").acquire(wait=True, until=time.time() + 1.0)
    finally:
        stop.record(before)
        holder.release()


def test_a_sync_routes_sends_stop_at_a_stop_swallowed_where_it_landed(project: Any, emulator: Any) -> None:
    """A sync route's batch is sent one online request at a time by worker threads (hours for a
    slow model, each request paid): a stop recorded but swallowed where it landed sends no more.
    Before: every request went out and the batch completed."""
    from batchrun.base import stop
    from batchrun.run.poll import poll
    from conftest import batch_requests, route, small_project

    small_project(project, routes={"s": route("anthropic", "claude-sonnet-4-6", transport="sync")}, panel=[])
    assert project.run("submit", emulator=emulator).exit_code == 0
    assert batch_requests(emulator) == []  # (submit sends a sync route's lines from poll)
    store = project.store()
    before = stop.record(signal.SIGTERM)
    try:
        with pytest.raises(stop.Stopped):
            poll(store, project.load(emulator))
    finally:
        stop.record(before)
        store.close()
    assert batch_requests(emulator) == []


_FSIZE_LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
from batchrun.cli import cli
sys.argv = ["batchrun", "--config", sys.argv[2], "submit", "--dry-run"]
cli()
"""


def test_a_dry_run_whose_temporary_copy_cannot_be_written_names_the_copy_not_state_db(project: Any) -> None:
    """`submit --dry-run` works on a copy of state.db in the temporary folder (TMPDIR): when that
    disk is full, the error names it and TMPDIR. Before: "The disk failed while reading or writing
    <project>/state.db", sending the user to check a disk that was only read. Real child process,
    its file size limited (RLIMIT_FSIZE) below the size of state.db."""
    import subprocess
    import sys

    from conftest import small_project

    small_project(project)
    assert project.run("plan").exit_code == 0
    size = project.state_path.stat().st_size
    p = subprocess.run([sys.executable, "-c", _FSIZE_LIMITED, str(size // 2), str(project.config_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    assert "TMPDIR" in p.stderr and "batchrun-dry-run-" in p.stderr, p.stderr
    assert f"writing {project.state_path} " not in p.stderr, p.stderr


KEY = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx"


@pytest.mark.parametrize("base_url", [KEY, f"http://gw.example.com/v1/{KEY}", f"https://gw.example.com/v1/{KEY}/openai"],
                         ids=["the-key-itself", "plain-http-with-a-key", "a-key-in-the-path"])
def test_a_key_in_base_url_is_refused_and_never_repeated(project: Any, base_url: str) -> None:
    """A key pasted where the URL belongs, or inside it (a gateway path): never repeated in the
    error (stderr ends up in cron mail and logs; api_key_env already keeps to this), and refused,
    as base_url is recorded in state.db and published in the manifest. Before: the first two
    errors quoted the URL, key and all, and the third was accepted."""
    from conftest import route, small_project

    small_project(project, routes={"c": route("openai-compatible", "qwen-plus", base_url=base_url)}, panel=[])
    r = project.run("plan")
    assert r.exit_code == 1, r.output
    assert "base_url" in r.output and "looks like an API key" in r.output, r.output
    assert KEY not in r.output and KEY[:12] not in r.output, r.output
    assert "Traceback" not in r.output


def test_a_retry_after_of_garbage_size_does_not_break_status(project: Any, emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gateway that sends a reset time in epoch milliseconds as its Retry-After (1733120000000:
    55,000 years) is a finite number of seconds, so it passed the audit's bound, and the request's
    next attempt was dated past year 9999: `batchrun status` then died with a traceback
    (datetime's "year ... is out of range"). The wait a Retry-After is honoured for is bounded (a
    day: base.backoff.MAX_RETRY_AFTER)."""
    import batchrun.emulator.core as core
    from conftest import route, small_project

    small_project(project, routes={"s": route("anthropic", "claude-sonnet-4-6", transport="sync")}, panel=[])
    monkeypatch.setattr(core, "RETRY_HEADERS", [("retry-after", "1733120000000")])
    emulator.add_fault({"kind": "request_error", "status": 429, "model": "claude-sonnet-4-6", "count": -1})
    project.run("refresh", "--no-preflight", "--timeout", "30", emulator=emulator)
    assert project.sql("SELECT max(retry_after) AS m FROM results")[0]["m"] is not None
    r = project.run("status", emulator=emulator)
    assert r.exit_code == 0, r.output
    assert "back off after a failure" in r.output, r.output


def test_a_host_name_that_starts_like_a_key_is_a_host() -> None:
    """The key check of base_url looks after the host: `sk-openai-proxy-prod-eu.example.com` is a
    name, and refusing it would reject a working config."""
    from batchrun.protocol.config import base_url_problem

    assert base_url_problem("https://sk-openai-proxy-prod-eu.example.com/v1", allow_insecure=False) is None
    assert base_url_problem(f"https://gw.example.com/{KEY}/v1", allow_insecure=False) is not None


def test_a_probe_whose_stop_was_swallowed_sends_no_more_steps(project: Any, emulator: Any) -> None:
    """`probe` sends paid requests of up to millions of characters, one step after another: a stop
    recorded but swallowed where it landed (base/stop.py) sends no further step. Before: the search
    went on to its end."""
    from batchrun.base import stop
    from batchrun.run.probe import probe
    from conftest import route, task

    project.doc("harbor.txt", "The harbor crane failed at 03:14 on Tuesday. The operator was Mara Quist.\n" * 40)
    project.tasks([task("t1", "When did the harbor crane fail?", "harbor.txt")])
    project.config(routes={"new": route("openai", "gpt-5.2", price={"input": 1.0, "output": 2.0}),
                           "judge": route("gemini", "gemini-2.5-flash")}, panel=["judge"])
    before = stop.record(signal.SIGTERM)
    try:
        with pytest.raises(stop.Stopped):
            probe(project.load(emulator), "new", max_cost=5.0)
    finally:
        stop.record(before)
    assert emulator.requests == []


def test_a_submit_whose_stop_was_swallowed_uploads_and_creates_no_more_batches(project: Any, emulator: Any) -> None:
    """submit uploads and creates batch after batch (each a paid commitment, GBs of upload): a stop
    recorded but swallowed where it landed (base/stop.py) creates no further batch. Before: every
    planned batch was created (refresh checks at its next round only, after the whole submit)."""
    from batchrun.base import stop
    from batchrun.run.submit import submit
    from conftest import small_project

    from batchrun.ledger.store import Store

    small_project(project)
    config = project.load(emulator)
    store = Store.open(project.state_path, rehearsal=config.rehearsal)
    before = stop.record(signal.SIGTERM)
    try:
        with pytest.raises(stop.Stopped):
            submit(store, config, preflight=False)
    finally:
        stop.record(before)
        store.close()
    assert project.sql("SELECT count(*) AS n FROM batches WHERE provider_batch_id IS NOT NULL")[0]["n"] == 0
    assert emulator.requests == []
