"""Store tuning knobs on real SQLite files: they speed a phase up and leave the store as it was."""

from __future__ import annotations

import gc
import sqlite3
import threading
import time
from pathlib import Path

from batchrun.run.collect import collect
from batchrun.ledger.store import Store
from conftest import Project, small_project


def _pragma(store: Store, name: str) -> int:
    return store.db.execute(f"PRAGMA {name}").fetchone()[0]


def test_page_cache_is_capped_for_the_phase_and_restored(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    before = _pragma(store, "cache_size")
    with store.page_cache(kib=256):
        assert _pragma(store, "cache_size") == -256
    assert _pragma(store, "cache_size") == before
    store.close()


def test_background_checkpoints_copy_the_wal_while_the_writer_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = Store(path)
    store.db.execute("CREATE TABLE blobs (x TEXT)")
    before = path.stat().st_size
    payload = "x" * 10_000
    with store.background_checkpoints(interval=0.01):
        assert _pragma(store, "wal_autocheckpoint") == 0  # the writer's COMMITs no longer checkpoint
        with store.db.atomic():
            store.db.conn.executemany("INSERT INTO blobs VALUES (?)", [(payload,)] * 500)  # ~5 MB into the WAL
        # Only a checkpoint moves pages from the WAL into the database file: the thread's.
        deadline = time.monotonic() + 20
        while path.stat().st_size < before + 4_000_000 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert path.stat().st_size >= before + 4_000_000
        with store.db.atomic():  # and the writer was never blocked by it
            store.db.execute("INSERT INTO blobs VALUES ('after')")
    assert _pragma(store, "wal_autocheckpoint") == 4000
    busy, frames, done = store.db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert busy == 0 and frames == done
    store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 501
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    assert not any(t.name == "batchrun-checkpoint" for t in threading.enumerate())


def test_collect_leaves_the_garbage_collector_as_it_found_it(project: Project) -> None:
    small_project(project)
    config = project.load()
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            store = project.store()
            collect(store, config, write_outputs=False)
            store.close()
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
