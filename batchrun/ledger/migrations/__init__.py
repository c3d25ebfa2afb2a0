"""state.db's schema: the migrations that build it, one per file, applied in order by name.

Tables hold facts as they happened (documents seen, requests planned, batches created, every
result line downloaded, every judgment parsed); nothing is overwritten. What a cell's state *is*
(pending, in flight, ok, failed) is derived from those rows by views, so there is one source of
truth. `config_routes` is the one exception: a snapshot of the current config that the views use
to show only rows produced under the current policies.

Each schema change is one module here, `mNNN_what.py`: its docstring says why it exists, its
`migrate(db)` makes the change. The module's name is the migration's name, recorded in state.db
once applied (sqlite-utils' `_sqlite_migrations` table), so a file is never renamed and an
applied one never edited: add the next. They are applied in order of their names (two m020s,
from work done side by side, sort as they were applied). A view is frozen with the migration that
created it: every batch status and result kind in its SQL is a literal (the live batch statuses
are lifecycle.LIVE as it was then), so an applied migration never changes. docs/schema.md is
generated from them (`python -m batchrun.ledger.schema_doc`); store.Store applies the pending ones
when it opens state.db for writing.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sqlite3
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported by `database()` and `_Migrations` when a writer needs them
    from sqlite_utils import Database
    from sqlite_utils.migrations import Migrations

_NAME = re.compile(r"m\d{3}_\w+")


def _import_sqlite_utils() -> None:
    """sqlite-utils imports numpy at import time when it is installed, only to map numpy types
    in inserts (batchrun inserts none). numpy is installed for the report's statistics (stats),
    which import it when they run; loading it in every command would add ~0.1 s to each, even
    `--help`. So it is hidden during this one import, unless something already loaded it."""
    import sys

    if "numpy" in sys.modules or "sqlite_utils" in sys.modules:
        import sqlite_utils  # noqa: F401
        return
    sys.modules["numpy"] = None  # type: ignore[assignment]  # makes `import numpy` raise ImportError
    try:
        import sqlite_utils  # noqa: F401
    finally:
        del sys.modules["numpy"]


def database(conn: sqlite3.Connection | None = None) -> Database:
    """sqlite-utils' Database on `conn` (in memory without one): what writers and migrations use."""
    _import_sqlite_utils()
    from sqlite_utils import Database

    return Database(conn, execute_plugins=False) if conn is not None else Database(memory=True, execute_plugins=False)


class _Migrations:
    """The migration modules of this package, in order of their names, built into sqlite-utils'
    `Migrations` only when a writer applies them.

    Importing sqlite-utils (and the migrations' modules) costs about as much as the rest of a
    read-only command's start-up (issue 15: `batchrun status` within 3x of `python -c "import
    click, sqlite3"`); a reader only needs the names, to compare with those a state.db has applied
    (`applied_names`), and they are the file names."""

    def __init__(self, name: str):
        self.name = name
        self._built: Migrations | None = None

    def names(self) -> list[str]:
        return sorted(m.name for m in pkgutil.iter_modules(__path__) if _NAME.fullmatch(m.name))

    def _sqlite_utils(self) -> Migrations:
        if self._built is None:
            _import_sqlite_utils()
            from sqlite_utils.migrations import Migrations

            built = Migrations(self.name)
            for name in self.names():
                built(name=name)(importlib.import_module(f"{__name__}.{name}").migrate)
            self._built = built
        return self._built

    def pending(self, db: Database) -> list[Any]:
        return self._sqlite_utils().pending(db)

    def apply(self, db: Database) -> None:
        self._sqlite_utils().apply(db)


migrations = _Migrations("batchrun")


def known_migrations() -> set[str]:
    """The names of the migrations this version defines."""
    return set(migrations.names())


def applied_names(conn: sqlite3.Connection) -> set[str] | None:
    """The migrations a state.db has applied (None: it has no migrations table), read with plain
    SQL from sqlite-utils' table (`_sqlite_migrations`: migration_set, name, applied_at)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlite_migrations'").fetchone() is None:
        return None
    return {r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations WHERE migration_set = ?", [migrations.name])}
