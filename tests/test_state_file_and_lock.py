"""Issue 24, items 6 and 7: the state.db a run writes is the one it opened; the lock note is only a name.

batchrun runs as real processes (tests/cliproc.py) against the emulator in its own process, as in
test_reliability:

- state.db deleted (or replaced by another file) while `refresh` runs: the run notices before its
  next step and stops with exit 1 naming what happened, instead of writing on into a file nobody
  will read and exiting 0 "complete"; put back, the next run finishes without paying twice. Online
  (sync) requests stop being sent at once.
- `state.db.lock` that is a symlink, a hard link or a FIFO: never followed, emptied or blocked
  on; a note that is garbage still names the holder's pid (the kernel's lock table).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import cliproc
from conftest import KEY_ENV, LOCK_GRACE, PREFLIGHT_ID, Project, batch_requests, resent, route, small_project
from test_reliability import EmulatorProcess, emu, emu_proc, integrity_ok, run_batchrun  # noqa: F401 (emu, emu_proc: fixtures)

ENV = {**os.environ, KEY_ENV: "test-key-not-secret", "BATCHRUN_RETRY_BASE": "0.0001", "BATCHRUN_LOCK_GRACE": LOCK_GRACE}


def start_refresh(project: Project, emu: EmulatorProcess, *extra: str) -> cliproc.BatchrunProcess:
    return cliproc.start(["--config", str(project.config_path), "--emulator", emu.url, "refresh", "--interval", "0.05",
                          "--timeout", "60s", *extra], env=ENV)


def wait_for(condition: Any, proc: cliproc.BatchrunProcess, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            out, err = proc.outputs()
            raise AssertionError(f"batchrun ended (exit {proc.returncode}) before {what}:\n{err[-3000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def in_flight(project: Project) -> bool:
    try:
        return bool(project.sql("SELECT 1 FROM batches WHERE status = 'in_flight'"))
    except sqlite3.OperationalError:  # not created yet
        return False


def paid_once(emu: EmulatorProcess, routes: int) -> None:
    """Every batch request was sent once, and so was each of the `routes` routes' preflight (they
    share one custom_id: counted by model, one route per model here)."""
    twice, preflights = resent(emu.requests)
    assert batch_requests(emu) and twice == 0, emu.requests
    assert len(preflights) == routes and set(preflights.values()) == {1}, preflights


# --- item 6: state.db deleted or replaced mid-run ------------------------------------------------------


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_state_db_deleted_or_replaced_mid_run_stops_the_run(how: str, project: Project, emu: EmulatorProcess) -> None:
    small_project(project)
    project.rehearsing = True
    emu.fault({"kind": "slow", "latency": 1.0, "count": 3})  # the three generation batches stay in flight a while
    proc = start_refresh(project, emu)
    try:
        wait_for(lambda: in_flight(project), proc, "a batch was in flight")
        state = project.state_path
        kept = state.with_name("state.db.kept")
        if how == "deleted":
            os.link(state, kept)  # the trash: the file lives on under another name, as it would in a trash folder
            state.unlink()
        else:
            # A consistent copy (the backup API reads through the WAL), renamed over state.db: a
            # copy of what state.db holds at that moment, not an older one. The run is stopped
            # (SIGSTOP) from the copy to the rename, so no batch it creates meanwhile is missing
            # from the copy: on a loaded machine one was, and its requests were rightly sent again
            # by the next refresh (an older state.db cannot know of a batch created after it).
            proc.send_signal(signal.SIGSTOP)
            try:
                src, dst = sqlite3.connect(state), sqlite3.connect(kept)
                try:
                    src.backup(dst)
                finally:
                    src.close()
                    dst.close()
                os.replace(kept, state)
            finally:
                proc.send_signal(signal.SIGCONT)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out, err = proc.outputs()
    assert code == 1, err[-3000:]
    assert "Traceback" not in err
    assert f"The state database {state} was {how}" in err and "stopped before doing more work" in err
    assert "Hint:" in err
    if how == "deleted":
        assert not state.exists()
        os.replace(kept, state)  # put back, as the hint says
    integrity_ok(project)
    again = run_batchrun(project, "refresh", "--interval", "0.05", emu=emu)
    assert again.returncode == 0, again.stderr[-3000:]
    paid_once(emu, routes=5)  # the batches sent before the stop were followed up, never sent again
    integrity_ok(project)


def test_state_db_deleted_while_sending_online_stops_the_sends(project: Project, tmp_path: Path) -> None:
    # The route's online requests are held until the test lets them go (its preflight's is not):
    # the first is in flight when state.db goes, however slow the machine is (a 0.4 s answer was
    # the window before, and a test process late by two of them would have seen three sent).
    release = tmp_path / "release"
    responder = tmp_path / "held_responder.py"
    responder.write_text("import os, time\n\ndef answer(request):\n"
                         f"    deadline = time.monotonic() + 60\n"
                         f"    while request['custom_id'] != {PREFLIGHT_ID!r} and not os.path.exists({str(release)!r}) and time.monotonic() < deadline:\n"
                         "        time.sleep(0.01)\n"
                         "    return 'The crane failed at 03:14.'\n")
    small_project(project, routes={"online": route("openai-compatible", "qwen3.7-plus", transport="sync", sync_concurrency=1)}, panel=[])
    project.rehearsing = True
    emu = subprocess.Popen([sys.executable, "-m", "batchrun.emulator", "--port", "0", "--latency", "0", "--responder",
                            f"{responder}:answer"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert emu.stderr is not None
        url = emu.stderr.readline().strip().split("listening on ", 1)[1]

        def sent() -> list[dict[str, Any]]:
            """The route's online requests (its preflight, one online request before them, aside)."""
            with urllib.request.urlopen(f"{url}/_emulator/requests", timeout=10) as r:
                return [x for x in json.loads(r.read())["requests"] if x["custom_id"] != PREFLIGHT_ID]

        proc = cliproc.start(["--config", str(project.config_path), "--emulator", url, "refresh", "--interval", "0.05"], env=ENV)
        try:
            wait_for(lambda: len(sent()) >= 1, proc, "the first online request")
            project.state_path.unlink()
            release.touch()
            code = proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        _, err = proc.outputs()
        assert code == 1, err[-3000:]
        assert "was deleted" in err and "Traceback" not in err
        # Four requests to send; the one in flight when the file went may finish, no other is sent.
        assert len(sent()) == 1, sent()
    finally:
        emu.terminate()
        emu.wait(10)


def test_no_preflight_is_sent_for_a_deleted_state_db(project: Project, emulator: Any) -> None:
    """A preflight is a paid request: never sent for a state.db that is gone (nothing could record
    it, and the next run would pay for it again)."""
    from batchrun.base.errors import StateError
    from batchrun.ledger.inputs import resolve_inputs
    from batchrun.run.preflight import preflight
    from batchrun.ledger.store import Store

    small_project(project, routes={"gpt": route("openai", "gpt-5.5")}, panel=[])
    config = project.load(emulator)
    store = Store(project.state_path)
    try:
        project.state_path.unlink()
        with pytest.raises(StateError, match="was deleted"):
            preflight(store, resolve_inputs(None, config, corpus=False), ["gpt"])
    finally:
        store.close()
    assert emulator.requests == [] and emulator.calls == []


def test_a_preflight_answered_after_state_db_was_replaced_is_not_recorded_in_either(project: Project, tmp_path: Path) -> None:
    """state.db replaced while the preflights are in flight: their outcome is not written into the
    file this run opened (nobody reads it any more; the new one it never opened), and it stops."""
    from batchrun.emulator import Emulator, builtin_responder
    from batchrun.base.errors import StateError
    from batchrun.ledger.inputs import resolve_inputs
    from batchrun.run.preflight import preflight
    from batchrun.ledger.store import Store

    arrived, go = threading.Event(), threading.Event()

    def responder(request: dict[str, Any]) -> Any:
        if request.get("custom_id") == PREFLIGHT_ID:
            arrived.set()
            go.wait(20)
        return builtin_responder(request)

    emu = Emulator(host="127.0.0.1", port=0, latency=0.0, responder=responder).start()
    small_project(project, routes={"gpt": route("openai", "gpt-5.5")}, panel=[])
    config = project.load(emu)
    store = Store(project.state_path)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            preflight(store, resolve_inputs(None, config, corpus=False), ["gpt"])
        except BaseException as e:  # noqa: BLE001 - handed to the test
            raised.append(e)

    worker = threading.Thread(target=run, daemon=True)
    try:
        worker.start()
        assert arrived.wait(20), "the preflight never reached the emulator"
        Store(tmp_path / "new.db").close()
        os.replace(tmp_path / "new.db", project.state_path)
        go.set()
        worker.join(30)
        assert len(raised) == 1 and isinstance(raised[0], StateError) and "was replaced" in raised[0].message, raised
        # The run's own connection (to the old file) holds no preflight row.
        assert store.scalar("SELECT count(*) FROM preflights") == 0
    finally:
        go.set()
        store.close()
        emu.stop()


# --- item 7: the lock note ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_the_lock_note_never_writes_through_a_link(kind: str, project: Project, emu: EmulatorProcess, tmp_path: Path) -> None:
    small_project(project)
    project.rehearsing = True
    project.state_path.parent.mkdir(parents=True, exist_ok=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("precious content outside the project\n")
    note = Path(str(project.state_path) + ".lock")
    if kind == "symlink":
        note.symlink_to(outside)
    else:
        os.link(outside, note)
    r = run_batchrun(project, "plan", emu=emu, timeout=60)
    assert r.returncode == 0, r.stderr
    assert outside.read_text() == "precious content outside the project\n"
    assert not note.is_symlink() and note.is_file() and os.stat(note).st_ino != os.stat(outside).st_ino
    assert not list(note.parent.glob(".state.db.lock.*")), "no temporary note left behind"


def hold_flock(path: Path) -> subprocess.Popen[str]:
    """A process that is not batchrun holding the database file's flock (no note, no runs row)."""
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'rb'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)", str(path)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def acquire_now(project: Project) -> str:
    """What a second writer is told, taking the lock in this process without a grace (on a
    thread: a note read that blocked, as on a FIFO, must fail the test, not hang it)."""
    from batchrun.base.errors import LockError
    from batchrun.ledger.lock import WriterLock

    told: list[str] = []

    def take() -> None:
        try:
            WriterLock(project.state_path, "submit").acquire(grace=0.0).release()
            told.append("acquired")
        except LockError as e:
            told.append(e.message)

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    thread.join(20)
    assert told, "the second writer blocked reading the lock note"
    return told[0]


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="the kernel's lock table is Linux's /proc/locks")
def test_a_garbage_or_fifo_note_still_names_the_holder(project: Project, emu: EmulatorProcess) -> None:
    small_project(project)
    project.rehearsing = True
    assert run_batchrun(project, "plan", emu=emu).returncode == 0
    note = Path(str(project.state_path) + ".lock")

    def spoil(kind: str) -> None:
        note.unlink(missing_ok=True)
        if kind == "garbage":
            note.write_text("\x00garbage{not json")
        else:
            os.mkfifo(note)

    # A real writer holding the lock: named with its command (its runs row), through the CLI.
    emu.fault({"kind": "slow", "latency": 30, "count": -1})
    first = start_refresh(project, emu)
    try:
        wait_for(lambda: in_flight(project), first, "the first writer's batches")
        spoil("garbage")
        second = run_batchrun(project, "submit", emu=emu, timeout=60)
        assert second.returncode == 1, second.stderr
        assert f"pid {first.pid} running `batchrun refresh`" in second.stderr, second.stderr
        assert "unidentified" not in second.stderr and "Traceback" not in second.stderr
        spoil("fifo")
        assert f"pid {first.pid} running `batchrun refresh`" in acquire_now(project)
    finally:
        first.kill()
        first.wait()
    # Any other process holding it (no note, no run of its own): named by its pid.
    holder = hold_flock(project.state_path)
    try:
        for kind in ("garbage", "fifo"):
            spoil(kind)
            told = acquire_now(project)
            assert f"pid {holder.pid}" in told and "unidentified" not in told, told
    finally:
        holder.kill()
        holder.wait()
    integrity_ok(project)


def test_flock_holders_reads_the_kernel_table(tmp_path: Path) -> None:
    from batchrun.ledger.lock import _flock_holders

    path = tmp_path / "db"
    path.write_bytes(b"")
    st = os.stat(path)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    table = tmp_path / "locks"
    table.write_text(f"1: POSIX  ADVISORY  WRITE 11 {dev}:{st.st_ino} 0 EOF\n"
                     f"2: FLOCK  ADVISORY  WRITE 4242 {dev}:{st.st_ino} 0 EOF\n"
                     f"2: -> FLOCK  ADVISORY  WRITE 5151 {dev}:{st.st_ino} 0 EOF\n"
                     f"3: FLOCK  ADVISORY  WRITE 7 {dev}:{st.st_ino + 1} 0 EOF\n")
    assert _flock_holders((st.st_dev, st.st_ino), str(table)) == {4242}
    if Path("/proc/locks").exists():
        with open(path, "rb") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            assert os.getpid() in _flock_holders((st.st_dev, st.st_ino))


def test_a_second_writer_waits_out_the_grace_which_only_the_environment_shortens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The grace (5 s; BATCHRUN_LOCK_GRACE, which the suite sets small) lets a writer that starts
    as another ends run after it; a writer still held past it is refused."""
    from batchrun.base.errors import LockError
    from batchrun.ledger.lock import GRACE, WriterLock, lock_grace

    monkeypatch.delenv("BATCHRUN_LOCK_GRACE")
    assert lock_grace() == GRACE == 5.0
    for bad in ("nan", "inf", "-1", "soon"):
        monkeypatch.setenv("BATCHRUN_LOCK_GRACE", bad)
        assert lock_grace() == GRACE, bad
    monkeypatch.setenv("BATCHRUN_LOCK_GRACE", "0.25")
    assert lock_grace() == 0.25
    db = tmp_path / "state.db"
    first = WriterLock(db, "refresh").acquire()
    with pytest.raises(LockError):
        WriterLock(db, "submit").acquire()  # held past the grace (0.25 s from the environment)
    threading.Timer(0.3, first.release).start()
    second = WriterLock(db, "submit").acquire(grace=30.0)  # released within the grace: it runs
    assert second.identity is not None
    second.release()
