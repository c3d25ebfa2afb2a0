"""One writer at a time.

Two cron runs overlapping on the same state.db must not both submit or collect. Writers take an
exclusive `flock` on the database file itself, opened separately (released by the kernel if the
process dies, so a crash never leaves a stale lock). Not on a side file: a `state.db.lock` can be
deleted while a writer holds it, and the next writer would lock a fresh file and start beside
it; and a lock file named after the path differs between `state.db` and a symlink to it. The
database file is the same inode for every path that reaches it, and deleting it is not a way to
run two writers on it.

Who holds the lock is written to `state.db.lock` (next to the resolved database path), so the
second process can say which process holds it. The note is only a name: it is written to a new
file renamed over it, and read without following a symlink, so a `state.db.lock` that is a
symlink (or a hard link) to another file never empties or reveals that file; a FIFO there never
blocks. When the note is missing, unreadable or names a process that does not hold the lock, the
kernel's own table of locks (/proc/locks on Linux: the pid holding each flock, by device and
inode) names the holder, and its unfinished `runs` row in state.db says what it runs. Readers
(`status`, `report`, SQL) never take the lock: SQLite's WAL lets them read meanwhile.

A second writer does not give up at once: it tries again for a grace of 5 seconds, so two runs
that merely touch (a cron job starting as the last one records its end) both run, one after the
other. `--wait-lock` waits without limit. The environment variable `BATCHRUN_LOCK_GRACE`
(seconds) changes the grace; it is a knob for the test suite, whose second writers would
otherwise each wait the full 5 s to be refused (as BATCHRUN_RETRY_BASE shortens the backoffs).

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
import stat
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path

from ..base.errors import LockError, LockWaitEnded, StateError
from ..base.stop import checkpoint

# Descriptors of released locks, by (device, inode) of the database, least recently used first:
# reused by the next writer lock on the same database in this process instead of opening (and
# later closing) another. A long-lived process that writes to many databases (the test suite)
# keeps the most recent MAX_IDLE; an older one is closed, which matters only if the process still
# holds a SQLite connection to that database.
_idle: OrderedDict[tuple[int, int], list[int]] = OrderedDict()
_idle_guard = threading.Lock()
MAX_IDLE = 64

GRACE = 5.0  # seconds a second writer keeps trying before it is refused (see the docstring)


def lock_grace() -> float:
    """The grace before a second writer is refused: GRACE, or BATCHRUN_LOCK_GRACE (tests lower
    it). A value that is not a finite number >= 0 is ignored."""
    try:
        grace = float(os.environ.get("BATCHRUN_LOCK_GRACE", GRACE))
    except ValueError:
        return GRACE
    return grace if 0.0 <= grace < float("inf") else GRACE


class WriterLock:
    def __init__(self, state_path: Path, command: str):
        self.db_path = Path(os.path.realpath(state_path))
        self.path = Path(str(self.db_path) + ".lock")  # who holds it (a note, not the lock)
        self.command = command
        self.fd: int | None = None
        self._inode: tuple[int, int] | None = None

    def acquire(self, *, wait: bool = False, grace: float | None = None, until: float | None = None) -> "WriterLock":
        """Take the lock; `grace`: seconds to keep trying before LockError (None: lock_grace()).
        `until`: the run's time limit (epoch seconds), which bounds even `wait`: the lock counts
        against it like everything else the run does (LockWaitEnded)."""
        fd, inode = self._open()
        deadline = time.monotonic() + (lock_grace() if grace is None else grace)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if wait and until is not None and time.time() >= until:
                    _retire(inode, fd)
                    raise LockWaitEnded(
                        f"Another batchrun process was still writing to this state.db ({self.db_path}) when this run's time "
                        f"limit came: {self._holder(inode)}.", "Nothing was done; the next run picks up the work.")
                if not wait and time.monotonic() >= deadline:
                    _retire(inode, fd)
                    raise LockError(
                        f"Another batchrun process is writing to this state.db ({self.db_path}): {self._holder(inode)}.",
                        "Wait for it to finish, or pass --wait-lock to wait for it. Nothing was changed.",
                    )
                if wait:
                    try:
                        # --wait-lock may wait a whole night's refresh: a stop swallowed where it
                        # landed ends the wait (base/stop.py), not the lock coming free.
                        checkpoint()
                    except BaseException:
                        _retire(inode, fd)
                        raise
                time.sleep(0.2)
        self.fd, self._inode = fd, inode
        self._write_note(json.dumps({"pid": os.getpid(), "command": self.command, "since": time.strftime("%Y-%m-%d %H:%M:%S")}))
        return self

    @property
    def identity(self) -> tuple[int, int] | None:
        """(device, inode) of the database file locked, while the lock is held."""
        return self._inode

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
        """Write the note to a new file and rename it over the old name: a rename replaces the
        name, never what a symlink or a hard link there points at (O_NOFOLLOW on the open alone
        would still truncate a hard-linked file)."""
        try:
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        except OSError:
            return  # only used to name the holder in a message; the lock itself is held
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass

    def _read_note(self) -> str:
        """The note's text, or "" if it is missing, not a regular file, a symlink, or unreadable."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return ""
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return ""
            return os.read(fd, 4096).decode("utf-8", "replace").strip()
        except OSError:
            return ""
        finally:
            os.close(fd)

    def _holder(self, inode: tuple[int, int]) -> str:
        note = _parse_note(self._read_note())
        kernel = _flock_holders(inode)
        if note is not None and (not kernel or note[0] in kernel):
            pid, command, since = note
            return f"pid {pid} running `batchrun {command}` since {since}"
        # The note is gone, garbage, or stale: the kernel says which process holds the lock, and
        # that process's unfinished run in state.db (if it has one yet) what it runs.
        try:
            conn = sqlite3.connect(f"{self.db_path.as_uri()}?mode=ro", uri=True, timeout=5)
            try:
                rows = conn.execute("SELECT pid, command, started_at FROM runs WHERE outcome IS NULL ORDER BY id DESC LIMIT 5").fetchall()
            finally:
                conn.close()
        except sqlite3.Error:
            rows = []
        for pid, command, started in rows:
            if pid and (int(pid) in kernel if kernel else _alive(int(pid))):
                since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
                return f"pid {pid} running `batchrun {command}` since {since}"
        if kernel:
            pids = ", ".join(str(p) for p in sorted(kernel))
            return f"pid {pids} (its note {self.path.name} does not say what it runs)"
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


def _parse_note(text: str) -> tuple[int, str, str] | None:
    """(pid, command, since) from a note, or None if it is not one batchrun wrote."""
    try:
        info = json.loads(text)
        pid, command, since = info["pid"], info["command"], info["since"]
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(pid, bool) or not isinstance(pid, int) or not isinstance(command, str) or not isinstance(since, str):
        return None
    return pid, command, since


def _flock_holders(inode: tuple[int, int], table: str = "/proc/locks") -> set[int]:
    """The pids holding a flock on the file (device, inode), from Linux's /proc/locks; empty
    where there is no such table (macOS) or it names none.

    A line reads `1: FLOCK  ADVISORY  WRITE 12345 08:01:1234567 0 EOF`: the pid, then the
    device's major and minor numbers in hex and the inode in decimal (fs/locks.c,
    lock_get_status). fcntl's F_GETLK cannot answer this: it sees POSIX locks, not flocks."""
    dev, ino = inode
    want = f"{os.major(dev):02x}:{os.minor(dev):02x}:{ino}"
    try:
        with open(table, encoding="ascii", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return set()
    pids = set()
    for line in lines:
        fields = line.split()  # a waiter's line ("1: -> FLOCK ...") has "->" in fields[1]: not a holder
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == want:
            try:
                pid = int(fields[4])
            except ValueError:
                continue
            if pid > 0:
                pids.add(pid)
    return pids
