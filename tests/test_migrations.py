"""state.db's migrations: one file each in batchrun/ledger/migrations/, applied in order by name,
each saying why it exists; state.db files written before they were split open as they were."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from batchrun.ledger.migrations import known_migrations, migrations
from batchrun.ledger.store import Store

FIXTURES = Path(__file__).parent / "fixtures"
FOLDER = Path(__file__).resolve().parent.parent / "batchrun" / "ledger" / "migrations"


def _recorded(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT name, applied_at FROM _sqlite_migrations WHERE migration_set = 'batchrun' ORDER BY rowid").fetchall()
    finally:
        conn.close()


def test_each_migration_is_one_file_that_says_why_it_exists() -> None:
    files = sorted(p.stem for p in FOLDER.glob("*.py") if p.name != "__init__.py")
    assert files == migrations.names() and len(files) >= 21
    for name in files:
        assert re.fullmatch(r"m\d{3}_[a-z0-9_]+", name), name
        tree = ast.parse((FOLDER / f"{name}.py").read_text(encoding="utf-8"))
        doc = ast.get_docstring(tree) or ""
        assert len(doc.split()) >= 12, f"{name}: its docstring must say why the migration exists"
        assert callable(importlib.import_module(f"batchrun.ledger.migrations.{name}").migrate), name


def test_the_migrations_apply_in_the_order_of_their_names_which_is_the_order_they_were_applied_in() -> None:
    built = migrations._sqlite_utils()
    assert [m.name for m in built._migrations] == sorted(known_migrations())
    # A state.db migrated one release at a time recorded them in that same order.
    assert [name for name, _ in _recorded(FIXTURES / "report-project" / "state.db")] == sorted(known_migrations())


@pytest.mark.parametrize("fixture", ["report-project", "v0.1-project"])
def test_an_existing_state_db_opens_without_running_an_applied_migration_again(fixture: str, tmp_path: Path) -> None:
    """The names recorded in state.db are the file names: a store written before the split (every
    migration applied, or 0.1.0's six) runs none again; 0.1.0's gets the later ones, once each."""
    path = tmp_path / "state.db"
    shutil.copyfile(FIXTURES / fixture / "state.db", path)
    before = _recorded(path)
    assert {name for name, _ in before} <= known_migrations()
    Store(path).close()  # a writer: applies what is pending
    after = _recorded(path)
    assert after[:len(before)] == before  # none re-applied, none renamed
    assert [name for name, _ in after] == sorted(known_migrations())
    Store(path).close()
    assert _recorded(path) == after  # nothing pending the second time
