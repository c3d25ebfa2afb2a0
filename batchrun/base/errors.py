"""Errors a user can act on.

Every error that reaches the CLI is a `BatchrunError`: a message that names the thing (file, line,
record, key) and a hint that says how to fix it. The CLI prints both and exits 1, without a
traceback. Anything else escaping is a bug in batchrun.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Iterable, Sequence


class BatchrunError(Exception):
    """A problem the user can fix; `hint` says how."""

    exit_code = 1  # the CLI's exit status for it (Incomplete: 2)

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\nHint: {self.hint}"


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to a misspelled `word` (a config key, a route name, a dataset field), or
    None when none is close: the one place every such guess is made, so they agree. Case is
    ignored when comparing (`GPT-5.5` finds `gpt-5.5`)."""
    import difflib  # only on an error: `batchrun --help` never pays for it

    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(str(choice).lower(), str(choice))
    guess = difflib.get_close_matches(str(word).lower(), list(by_lower), n=1)
    return by_lower[guess[0]] if guess else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """"Did you mean `x`? " for the closest choice (`closest`), or "" when none is close."""
    guess = closest(word, choices)
    return f"Did you mean `{guess}`? " if guess else ""


def all_at_once(problems: Sequence[BatchrunError], where: str, what: str) -> BatchrunError:
    """Every problem of one file as one error (a config's, a dataset's), so a night is not lost to
    fix-rerun-fix: the one problem as it is, or a numbered list, each with its fix, of the same
    class as the first. `where`: the file, taken off each message's start; `what`: "the config"."""
    if len(problems) == 1:
        return problems[0]
    lines = [f"{where}: {len(problems)} problems in {what}:"]
    for i, p in enumerate(problems, 1):
        message = p.message.removeprefix(f"{where}: ").removeprefix(f"{where}, ").removeprefix(f"{where} ")  # "PATH (task t2, ...): "
        lines.append(f"  {i}. {message}" + (f" Fix: {p.hint}" if p.hint else ""))
    return type(problems[0])("\n".join(lines), "Fix them all, then run the command again.")


class Incomplete(BatchrunError):
    """Not the user's mistake: what was asked needs work that is not finished yet. The CLI exits 2
    ("incomplete, run again later") instead of 1."""

    exit_code = 2


class ConfigError(BatchrunError):
    """The config file is malformed or inconsistent."""


class DataError(BatchrunError):
    """The dataset or corpus is malformed."""


class StateError(BatchrunError):
    """state.db or jobs/ is not in a state batchrun can work with."""


class ProviderError(BatchrunError):
    """A provider (or the emulator) refused or could not be reached."""


class LockError(BatchrunError):
    """Another batchrun process holds the writer lock."""


class LockWaitEnded(LockError):
    """--wait-lock waited for another writer until the run's time limit (--timeout, --until):
    nothing was done, run again later (exit 2, as for any run its time limit ended)."""

    exit_code = 2


class StorageError(StateError):
    """The disk or the database file failed: full, read-only, damaged, unreadable."""


# --- the disk and the database file -----------------------------------------------------------
# What the environment can do to a run at any moment, turned into one message each (the CLI's
# handle_errors is the one caller). SQLite rolls back the transaction it could not finish, and
# a file cut short is dropped or fetched again by the next run (the same paths as a crash), so
# after any of these state.db is consistent and the same command, run again once the cause is
# fixed, resumes where this one stopped (tests/test_bad_input.py fills a real disk to show it).

_RESUME = "then run the same command again: state.db is consistent and the run resumes where it stopped."


def disk_full(where: object) -> StorageError:
    return StorageError(f"The disk is full: could not write {where}.",
                        f"Free space on that disk (see df -h), or move the project to a larger one; {_RESUME}")


def read_only(where: object) -> StorageError:
    return StorageError(
        f"{where} is on a read-only file system or folder, and this command writes.",
        "Writers (plan, submit, poll, collect, refresh, retry, cancel, accept-failures) need to write state.db, "
        "its lock, jobs/ and results/: run them on a writable copy of the project. status, report and cost "
        "read only and work here.",
    )


def damaged_database(path: object, detail: str, *, untouched: bool = False) -> StorageError:
    return StorageError(
        f"The state database {path} is damaged ({detail})." + (" batchrun changed nothing." if untouched else ""),
        f'Restore it from a backup, or recover what SQLite can still read: sqlite3 {path} ".recover" | sqlite3 recovered.db, '
        'check the copy with sqlite3 recovered.db "PRAGMA integrity_check", keep the damaged file aside (with its -wal '
        f"file, if any) and move recovered.db to {path}.",
    )


def _nearly_full(path: object) -> bool:
    import shutil  # here: it loads bz2 and lzma, and every command imports this module

    try:
        return shutil.disk_usage(os.path.dirname(os.path.abspath(str(path)))).free < (1 << 20)
    except OSError:
        return False


def environment_error(exc: BaseException, state: object | None) -> StorageError | None:
    """The user-facing error for an OSError or sqlite3 error the environment caused, or None for
    anything else (a bug in batchrun, which must keep its traceback). `state` is the database the
    command was using: sqlite3 errors do not say which file they are about."""
    db = state if state is not None else "state.db"
    if isinstance(exc, sqlite3.Error):
        name = getattr(exc, "sqlite_errorname", "") or ""
        if name == "SQLITE_FULL":
            return disk_full(db)
        if name.startswith("SQLITE_READONLY"):
            return read_only(db)
        if name.startswith("SQLITE_CORRUPT") or name == "SQLITE_NOTADB":
            return damaged_database(db, str(exc))
        if name.startswith("SQLITE_IOERR"):
            # A full disk reaches SQLite as an I/O error when it grows the -shm or -wal file
            # (SQLITE_IOERR_SHMSIZE, _WRITE, _FSYNC), not always as SQLITE_FULL.
            if _nearly_full(db):
                return disk_full(db)
            return StorageError(f"The disk failed while reading or writing {db} ({exc}).",
                                f"Check the disk (dmesg, df -h); {_RESUME}")
        if name == "SQLITE_ERROR" and str(exc).startswith(("no such table:", "no such column:")):
            # batchrun's statements name only what its migrations created (tests run every one on
            # the current schema), and the migrations it records as applied are all there (the
            # version check at open): a table or column missing now was removed from the file
            # (a hand-run `sqlite-utils drop-table`, a partial restore).
            return damaged_database(db, f"its schema lost what batchrun's migrations created: {exc}")
        if name.startswith("SQLITE_CANTOPEN"):
            return StorageError(f"Cannot open the state database {db} ({exc}).",
                                "Check that its folder exists and that you may read and write it (and its -wal and -shm files).")
        return None
    if isinstance(exc, OSError):
        # A failed write() names no file; the folder of state.db is where the project lives.
        where = exc.filename if exc.filename is not None else (f"a file of the project in {os.path.dirname(str(state))}" if state else "a file")
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return disk_full(where)
        if exc.errno == errno.EROFS:
            return read_only(where)
        if exc.errno in (errno.EACCES, errno.EPERM):
            return StorageError(f"Permission denied: {where}.", f"Give this user access to it (or point [paths] elsewhere); {_RESUME}")
        if exc.errno == errno.EIO:
            # Also what an fsync reports when the kernel could not write the pages back.
            return StorageError(f"The disk failed while reading or writing {where} ({exc.strerror}).",
                                f"Check the disk (dmesg, df -h); {_RESUME}")
    return None
