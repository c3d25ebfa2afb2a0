"""state.db: everything batchrun knows, in SQLite, auditable with plain SQL.

`Store` opens it (read-only for readers, which then work on read-only media and while a writer
runs; for writing, with the pending migrations (migrations/) applied) and refuses a damaged file,
a newer batchrun's schema, or a store of the other kind (real run vs rehearsal). What the tables
and views hold is described in the migrations and docs/schema.md.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..base.errors import BatchrunError, StateError, StorageError, damaged_database
from .migrations import applied_names, database, known_migrations, migrations

if TYPE_CHECKING:
    from sqlite_utils import Database


def _version() -> str:
    # Imported when a writer records it, not with this module: reading the installed metadata
    # (importlib.metadata) would add to every read-only command's start-up (bench/startup.py).
    from ..base.version import __version__

    return __version__


def sql_list(values: tuple[str, ...]) -> str:
    """('a', 'b') as SQL text; repr() would write a one-element tuple as ('a',)."""
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


_SQLITE_MAGIC = b"SQLite format 3\x00"


def file_identity(path: Path) -> tuple[int, int]:
    """(device, inode) of the file at `path` (following symlinks): the same for every path to it."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _wal_pending(path: Path) -> bool:
    """A non-empty -wal file: committed transactions not yet copied into the database file."""
    try:
        return Path(f"{path}-wal").stat().st_size > 0
    except FileNotFoundError:
        return False


def _damage(path: Path) -> str | None:
    """Why the file cannot be a whole SQLite database, judged from its 100-byte header
    (https://sqlite.org/fileformat.html#the_database_header), or None.

    SQLite itself would open a truncated file and answer some queries from what is left before
    it reports corruption, so a reader could print a short leaderboard and a writer could start
    recording in it. Damage past the header is reported by SQLite when it is read
    (errors.environment_error)."""
    size = path.stat().st_size
    if size == 0:
        return None  # SQLite's empty database: a first run that stopped before creating a table
    with open(path, "rb") as f:
        head = f.read(100)
    if len(head) < 100 or not head.startswith(_SQLITE_MAGIC):
        return "it is not an SQLite database: its header is missing"
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    # The page count is valid only when the change counter matches "version-valid-for"; a pending
    # -wal may legitimately hold pages a checkpoint had begun to write, so SQLite judges then.
    if pages and head[24:28] == head[92:96] and size < pages * page_size and not _wal_pending(path):
        return f"it is truncated: {size:,} bytes, where its header says {pages * page_size:,}"
    return None


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A connection that never writes, so readers work on read-only media.

    `mode=ro` still needs the -shm file of a WAL database (https://sqlite.org/wal.html, "Read-Only
    Databases"), which cannot be created in a folder that is not writable. There, with no WAL
    content pending, nothing outside the database file can change what is read, so it is opened
    `immutable=1` (no locking, no -shm). With WAL content pending and no -shm, the only correct
    reading needs a writer's recovery first."""
    uri = path.resolve().as_uri() + "?mode=ro"
    folder_writable = os.access(path.parent, os.W_OK)
    if not folder_writable:
        if not _wal_pending(path):
            uri += "&immutable=1"
        elif not Path(f"{path}-shm").exists():
            raise StateError(
                f"{path} has write-ahead log content ({path}-wal) that was never merged, and its folder is read-only, "
                "so it cannot be read correctly here.",
                "Run any writing command (e.g. batchrun collect) once on a writable copy of the project, which merges "
                "the log; the copy can then be read anywhere.",
            )
    return sqlite3.connect(uri, uri=True, timeout=30, check_same_thread=False)


class _ReadOnlyDatabase:
    """What readers use of sqlite-utils' `Database` (execute, table_names, atomic, conn, close),
    on a plain connection: a read-only command does not import sqlite-utils, which cost about as
    much as the rest of `batchrun status`'s start-up (issue 15, bench/startup.py)."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def execute(self, sql: str, parameters: Any = None) -> sqlite3.Cursor:
        return self.conn.execute(sql) if parameters is None else self.conn.execute(sql, parameters)

    def table_names(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]

    @contextmanager
    def atomic(self) -> Iterator["_ReadOnlyDatabase"]:
        with self.conn:  # a reader's temporary tables; its connection cannot write state.db
            yield self

    def close(self) -> None:
        self.conn.close()


def _rehearsal_only_hint(path: Path) -> str | None:
    """When only a rehearsal has run (its state.db under rehearsal/, this one absent): the hint to
    read that one at the emulator URL it recorded, not to plan or submit, which would start a
    real run."""
    from ..protocol.config import rehearsal_path

    other = rehearsal_path(path)
    if not other.is_file():
        return None
    try:
        with Store(other, readonly=True, any_schema=True) as store:
            url = store.meta("rehearsal")
    except (BatchrunError, sqlite3.Error, OSError):
        return None  # a hint only: the rehearsal's own state.db is judged when it is opened
    if not url:
        return None
    return (f"Only a rehearsal has run here: {other} is its state.db, on the emulator at {url}. Read it with "
            f"`batchrun --emulator {url} COMMAND` (status, report, ...); `batchrun plan` or `submit` without "
            "--emulator would start a real run.")


@contextmanager
def dry_run_copy(path: Path, *, rehearsal: str | None) -> Iterator["Store"]:
    """A store a dry run (`submit --dry-run`) may change as the real command would (sync, plan,
    the gates), with nothing written beside the config: a copy of the state.db at `path` in a
    temporary folder (TMPDIR, deleted when it ends), or a new empty store there if there is none
    yet. No lock is taken and no run recorded: the real state.db is only read. The copy is made
    from a read-only connection by SQLite's backup API in one step, a consistent snapshot even
    while a writer runs (https://sqlite.org/backup.html). A state.db of the other kind (real vs
    rehearsal) is refused as a writer would refuse it."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="batchrun-dry-run-") as tmp:
        copy = Path(tmp) / "state.db"
        try:
            if Path(path).exists():
                with Store.open(Path(path), rehearsal=rehearsal, readonly=True, any_schema=True) as source:
                    target = sqlite3.connect(str(copy))
                    try:
                        source.db.conn.backup(target)
                    finally:
                        target.close()
            store = Store(copy, rehearsal=rehearsal)  # an older schema is upgraded in the copy alone
        except sqlite3.Error as e:
            if (failed := _copy_failed(e, path, copy)) is None:
                raise
            raise failed from e
        try:
            yield store
        except sqlite3.Error as e:
            if (failed := _copy_failed(e, path, copy)) is None:
                raise
            raise failed from e
        finally:
            store.close()


def _copy_failed(e: sqlite3.Error, path: Path, copy: Path) -> StorageError | None:
    """The error for a dry run's copy of state.db that its disk could not hold or write: it names
    the copy and TMPDIR, not the state.db that was only read (whose disk handle_errors would
    blame). None for a damaged page or anything else, which stays the error it is."""
    name = getattr(e, "sqlite_errorname", "") or ""
    if not name.startswith(("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_CANTOPEN")):
        return None
    return StorageError(
        f"A dry run could not write its throw-away copy of state.db, {copy} ({e}).",
        f"A dry run copies {path} to the temporary folder (TMPDIR) and changes only the copy: free space there, or set "
        "TMPDIR to a folder on a disk with room for it. Nothing was changed.")


class Store:
    """An open state.db with migrations applied.

    `rehearsal` is the emulator URL when the store is opened for a rehearsal: a store created
    then records it in meta (`rehearsal`), for good. `Store.open` refuses a store of the other
    kind, so emulator answers can never be read or extended as real results (and the reverse)."""

    def __init__(self, path: Path, *, readonly: bool = False, rehearsal: str | None = None, any_schema: bool = False):
        """`any_schema`: a reader that reads only tables every version has (the document cache,
        meta) may open a state.db that a writer has yet to upgrade."""
        self.path = Path(path)
        self.readonly = readonly
        if readonly and not self.path.exists():
            hint = ("A rehearsal keeps its own state.db: run `batchrun --emulator URL refresh` (or plan, submit) first."
                    if rehearsal else _rehearsal_only_hint(self.path) or "Run `batchrun plan` or `batchrun submit` first.")
            raise StateError(f"No state database at {self.path}.", hint)
        if self.path.exists() and (damage := _damage(self.path)):
            raise damaged_database(self.path, damage, untouched=True)
        if readonly:
            conn = _connect_readonly(self.path)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), timeout=30, check_same_thread=False)
        # The file a writer works on (device, inode): see check_same_file. sqlite3.connect has
        # opened it by now, so this is the file its connection writes to.
        self.identity: tuple[int, int] | None = None if readonly else file_identity(self.path)
        # Typed as sqlite-utils' Database: a reader's stand-in has the part of it readers use.
        self.db: Database = cast("Database", _ReadOnlyDatabase(conn)) if readonly else database(conn)
        self._check_version()
        if readonly and not any_schema:
            self.check_schema()
        if not readonly:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            # Checkpoint the WAL every ~16 MB rather than every 4 MB: ingesting result lines
            # writes hundreds of MB, and each checkpoint is a pause.
            self.db.execute("PRAGMA wal_autocheckpoint=4000")
            if migrations.pending(self.db):
                migrations.apply(self.db)
            if self.meta("store_id") is None:
                with self.db.atomic():
                    self.set_meta("store_id", uuid.uuid4().hex[:12])
                    self.set_meta("created_by", _version())
                    if rehearsal:
                        self.set_meta("rehearsal", rehearsal)
        self.run_id: int | None = None

    @classmethod
    def open(cls, path: Path, *, rehearsal: str | None, readonly: bool = False, any_schema: bool = False) -> "Store":
        """Open state.db for a real run (`rehearsal` None) or a rehearsal; refuse the other kind.

        An existing store is checked read-only first: opening it for writing applies migrations,
        and a store of the other kind must be left exactly as it was (meta, which that check
        reads, is in every schema version)."""
        if readonly or Path(path).exists():
            ro = cls(path, readonly=True, rehearsal=rehearsal, any_schema=True)
            try:
                ro.check_kind(rehearsal)  # first: a store of the other kind is refused as such
                if readonly and not any_schema:
                    ro.check_schema()
            except BaseException:
                ro.close()
                raise
            if readonly:
                return ro
            ro.close()
        return cls(path, rehearsal=rehearsal)

    def check_schema(self) -> None:
        """A reader never changes the file, and on an older schema its views would be the old
        version's: refuse until a writer has upgraded it."""
        if known_migrations() - (applied_names(self.db.conn) or set()):
            raise StateError(
                f"{self.path} was written by an older batchrun and needs its schema upgraded.",
                "Run `batchrun plan` once (it sends nothing, and works on a rehearsal's state.db such as the "
                "demo's too): it upgrades state.db in place, keeping every row.")

    def check_kind(self, rehearsal: str | None) -> None:
        """Defence in depth behind the separate rehearsal paths (config.rehearsal_path)."""
        if self.meta("store_id") is None:
            # Its creation never finished (a process killed between the migrations and the
            # meta rows that name its kind): it holds nothing yet, so it is of neither kind, and
            # the writer that opens it now records its own.
            return
        marked = self.meta("rehearsal")
        if rehearsal and not marked:
            raise StateError(
                f"{self.path} holds the state of real runs; a rehearsal on the emulator ({rehearsal}) never reads or writes it.",
                "Rehearsals keep their state in a `rehearsal` folder beside the real paths; check [paths] in the config. "
                "If this is a demo folder made by an older batchrun, delete it and run `batchrun demo` again. Nothing was changed.",
            )
        if not rehearsal and marked:
            raise StateError(
                f"{self.path} was made by a rehearsal on the emulator at {marked}: its answers are not real results.",
                "To rehearse, pass --emulator URL (or set BATCHRUN_EMULATOR); for real results point [paths] state at "
                "another file (the default is state.db beside the config). Nothing was changed.",
            )

    def _check_version(self) -> None:
        applied = applied_names(self.db.conn)
        if applied is None:
            return
        unknown = sorted(applied - known_migrations())
        if unknown:
            raise StateError(
                f"{self.path} was written by a newer batchrun (it has migrations this version {_version()} "
                f"does not know: {', '.join(unknown)}).",
                "Upgrade batchrun (pip install -U batchrun), or point [paths] state at another file. Nothing was changed.",
            )

    def check_same_file(self) -> None:
        """Refuse to go on if state.db was deleted or replaced since this writer opened it.

        SQLite keeps writing to the file it opened: deleted, it is a file nobody will ever read
        (the run would exit 0 "complete" and the next run would pay for every request again);
        replaced, the run's rows go to the old file while the next run reads the new one. Called
        at the natural points before more work: each batch step (lifecycle, before every upload
        and create), each online request of the sync transport, each round of refresh and poll,
        the start of collect and of publishing, each chunk of result rows, and before a run is
        recorded as ended."""
        if self.identity is None:
            return
        try:
            now = file_identity(self.path)
        except FileNotFoundError:
            raise StateError(
                f"The state database {self.path} was deleted while this run was writing to it; the run stopped "
                "before doing more work (what it recorded since went to the deleted file).",
                "Put state.db back where it was (from the trash or a backup) and run the command again: it resumes "
                "from there. A new, empty state.db would not know the batches already sent and would pay for every "
                "request again.") from None
        except OSError:
            return  # not a verdict on the file's identity: the next read or write reports the disk
        if now != self.identity:
            raise StateError(
                f"The state database {self.path} was replaced by another file while this run was writing to it "
                f"(device and inode {self.identity[0]}:{self.identity[1]} when it started, {now[0]}:{now[1]} now); "
                "the run stopped before doing more work, and wrote nothing to the new file.",
                "If the new file is meant (a restored backup), run the command again: it works on that file. Never "
                "replace or delete state.db while a writer runs; status, report and SQL read it safely meanwhile.")

    # -- meta and runs ------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        if "meta" not in self.db.table_names():
            return None
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", [key, value])

    @property
    def store_id(self) -> str:
        return self.meta("store_id") or "unknown"

    # -- the runs table: one row per writer run, and how it ended (`outcome`, README "state.db"):
    # `ok`; `error` (it stopped on an error, reported to the user); `interrupted` (Ctrl-C, SIGTERM or
    # SIGHUP: KeyboardInterrupt); `killed` (it recorded nothing: SIGKILL, the OOM killer, a power
    # cut; set by the next writer, with no end time, as nobody knows it).

    def start_run(self, command: str) -> int:
        """Record a run starting. Called holding the writer lock (ledger/lock.py): so a run with no
        outcome yet is one whose process is gone without recording any; closed here as `killed`,
        its `ended_at` left empty rather than invented."""
        with self.db.atomic():
            self.db.execute("UPDATE runs SET outcome = 'killed' WHERE outcome IS NULL")
            cur = self.db.execute(
                "INSERT INTO runs (command, started_at, pid, batchrun_version) VALUES (?, ?, ?, ?)",
                [command, time.time(), os.getpid(), _version()],
            )
        assert cur.lastrowid is not None  # an INSERT into a rowid table
        self.run_id = cur.lastrowid
        return self.run_id

    def end_run(self, outcome: str) -> None:
        if self.run_id is None:
            return
        if outcome == "ok":
            self.check_same_file()  # a run whose file vanished under it did not end well
        with self.db.atomic():
            self.db.execute("UPDATE runs SET ended_at = ?, outcome = ? WHERE id = ?", [time.time(), outcome, self.run_id])

    def fail_run(self, error: BaseException, *, interrupted: bool = False) -> None:
        """Record how a run that raised `error` ended: `interrupted` for Ctrl-C, SIGTERM and SIGHUP (a
        KeyboardInterrupt: base.stop.Stopped; or `interrupted`, a stop the code it landed in
        turned into another error), `error` otherwise. What the run was writing when
        it stopped is rolled back first, never committed with the outcome. Best effort: the disk
        or database that just failed the command may refuse this too, and the original error is
        the one to report (the next writer then closes the run as `killed`). An outcome already
        recorded (`ok`, then a failure printing the result) stands."""
        if self.run_id is None:
            return
        outcome = "interrupted" if interrupted or isinstance(error, KeyboardInterrupt) else "error"
        try:
            if self.db.conn.in_transaction:
                self.db.conn.rollback()
            with self.db.atomic():
                self.db.execute("UPDATE runs SET ended_at = ?, outcome = ? WHERE id = ? AND outcome IS NULL",
                                [time.time(), outcome, self.run_id])
        except (sqlite3.Error, OSError, KeyboardInterrupt):
            pass  # (a second Ctrl-C or SIGTERM while recording: the stop under way is the one reported)

    @contextmanager
    def page_cache(self, *, kib: int) -> Iterator[None]:
        """Cap SQLite's page cache (per connection, default 2 MB) for a phase, then restore it."""
        old = self.db.execute("PRAGMA cache_size").fetchone()[0]
        self.db.execute(f"PRAGMA cache_size = -{int(kib)}")
        try:
            yield
        finally:
            self.db.execute(f"PRAGMA cache_size = {int(old)}")

    @contextmanager
    def background_checkpoints(self, *, interval: float = 0.2) -> Iterator[None]:
        """Checkpoint the WAL from a second connection on another thread during a long write.

        SQLite's automatic checkpoint runs inside the writer's COMMIT and stalls it (copying the
        WAL into the database and fsyncing it: ~0.5 s per 100,000 result lines here). In WAL
        mode a checkpoint from another connection runs alongside the writer
        (https://sqlite.org/wal.html, "application-initiated checkpoints"), and Python's sqlite3
        releases the GIL while it does, so it moves to the second core. The automatic one is off
        meanwhile and restored after a last checkpoint.
        """
        stop = threading.Event()

        def run() -> None:
            conn = sqlite3.connect(str(self.path), timeout=30, check_same_thread=False)
            try:
                while not stop.wait(interval):
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")  # never waits for the writer
            except sqlite3.Error:
                pass  # only a speed-up: the last checkpoint below and the automatic ones still run
            finally:
                conn.close()

        old = self.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        self.db.execute("PRAGMA wal_autocheckpoint = 0")
        thread = threading.Thread(target=run, name="batchrun-checkpoint", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            self.db.execute(f"PRAGMA wal_autocheckpoint = {int(old)}")
            self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    # -- small query helpers -------------------------------------------------------------------

    def rows(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        cur = self.db.execute(sql, params)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]

    def one(self, sql: str, params: Any = ()) -> dict[str, Any] | None:
        rows = self.rows(sql, params)
        return rows[0] if rows else None

    def scalar(self, sql: str, params: Any = ()) -> Any:
        row = self.db.execute(sql, params).fetchone()
        return row[0] if row else None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
