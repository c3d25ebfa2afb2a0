"""One writer at a time.

Two cron runs overlapping on the same state.db must not both submit or collect. Writers take an
exclusive `flock` on the database file itself, opened separately (released by the kernel if the
process dies, so a crash never leaves a stale lock). Not on a side file: a `state.db.lock` can be
deleted while a writer holds it, and the next writer would lock a fresh file and start beside
it; and a lock file named after the path differs between `state.db` and a symlink to it. The
database file is the same inode for every path that reaches it, and deleting it is not a way to
run two writers on it.

Who holds the lock is written to `state.db.lock` (next to the resolved database path), so the
second process can say which process holds it; if that note was deleted, the holder's unfinished
`runs` row in state.db names it. Readers (`status`, `report`, SQL) never take the lock: SQLite's
WAL lets them read meanwhile.

`flock` and SQLite's own POSIX (`fcntl`) locks are independent on Linux and macOS local file
systems (SQLite in WAL mode does not support network file systems anyway). But closing *any*
descriptor of a file drops every POSIX lock the process holds on it (SQLite's "How To Corrupt"
§2.2), so a released lock's descriptor is kept open and reused, never closed while the process
may hold a SQLite connection to the same database.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path

from .errors import LockError, StateError

# Descriptors of released locks, by (device, inode) of the database, least recently used first:
# reused by the next writer lock on the same database in this process instead of opening (and
# later closing) another. A long-lived process that writes to many databases (the test suite)
# keeps the most recent MAX_IDLE; an older one is closed, which matters only if the process still
# holds a SQLite connection to that database.
_idle: OrderedDict[tuple[int, int], list[int]] = OrderedDict()
_idle_guard = threading.Lock()
MAX_IDLE = 64


class WriterLock:
    def __init__(self, state_path: Path, command: str):
        self.db_path = Path(os.path.realpath(state_path))
        self.path = Path(str(self.db_path) + ".lock")  # who holds it (a note, not the lock)
        self.command = command
        self.fd: int | None = None
        self._inode: tuple[int, int] | None = None

    def acquire(self, *, wait: bool = False, grace: float = 5.0) -> "WriterLock":
        fd, inode = self._open()
        deadline = time.monotonic() + grace
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not wait and time.monotonic() >= deadline:
                    _retire(inode, fd)
                    raise LockError(
                        f"Another batchrun process is writing to this state.db ({self.db_path}): {self._holder()}.",
                        "Wait for it to finish, or pass --wait-lock to wait for it. Nothing was changed.",
                    )
                time.sleep(0.2)
        self.fd, self._inode = fd, inode
        self._write_note(json.dumps({"pid": os.getpid(), "command": self.command, "since": time.strftime("%Y-%m-%d %H:%M:%S")}))
        return self

    def release(self) -> None:
        if self.fd is not None and self._inode is not None:
            self._write_note("")
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            _retire(self._inode, self.fd)
            self.fd = self._inode = None

    def __enter__(self) -> "WriterLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _open(self) -> tuple[int, tuple[int, int]]:
        """A descriptor of the database file (created empty if new: SQLite takes an empty file as
        an empty database)."""
        try:
            self.db_path.parent.mkdir(parents=True, exist_ok=True)
            st = os.stat(self.db_path) if self.db_path.exists() else None
            if st is not None:
                with _idle_guard:
                    spare = _idle.get((st.st_dev, st.st_ino))
                    if spare:
                        return spare.pop(), (st.st_dev, st.st_ino)
            fd = os.open(self.db_path, os.O_RDONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as e:
            raise StateError(f"Cannot open the state database {self.db_path} to lock it: {e.strerror}.",
                             "Check that the folder exists and is writable, and that [paths] state names a file.") from None
        st = os.fstat(fd)
        return fd, (st.st_dev, st.st_ino)

    def _write_note(self, text: str) -> None:
        try:
            with open(self.path, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError:
            pass  # only used to name the holder in a message; the lock itself is held

    def _holder(self) -> str:
        try:
            note = self.path.read_text(encoding="utf-8").strip()
        except OSError:
            note = ""
        if note:
            return _describe(note)
        # The note is gone (deleted while held): the holder's unfinished run in state.db names it.
        try:
            conn = sqlite3.connect(f"{self.db_path.as_uri()}?mode=ro", uri=True, timeout=5)
            try:
                rows = conn.execute("SELECT pid, command, started_at FROM runs WHERE ended_at IS NULL ORDER BY id DESC LIMIT 5").fetchall()
            finally:
                conn.close()
        except sqlite3.Error:
            rows = []
        for pid, command, started in rows:
            if pid and _alive(int(pid)):
                since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
                return f"pid {pid} running `batchrun {command}` since {since}"
        return "an unidentified process"


def _retire(inode: tuple[int, int], fd: int) -> None:
    with _idle_guard:
        _idle.setdefault(inode, []).append(fd)
        _idle.move_to_end(inode)
        while sum(len(fds) for fds in _idle.values()) > MAX_IDLE:
            _, fds = _idle.popitem(last=False)
            for old in fds:
                os.close(old)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(holder: str) -> str:
    try:
        info = json.loads(holder)
        return f"pid {info['pid']} running `batchrun {info['command']}` since {info['since']}"
    except (ValueError, KeyError, TypeError):
        return "an unidentified process"
