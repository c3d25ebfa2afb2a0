"""How ledger.pending.evaluate_requests reads history, on the report fixture's state.db (real SQLite).

request_outcomes aggregates every result of a request. The evaluation must find a wanted
request's results in the covering index results_outcome, never read the table's rows (their text
and raw JSON come before collected_at, so scanning them reads every answer ever collected), and
give exactly the view's rows. A few requests (kept._update's changed ones) are looked up in the
requests and cells, not found by scanning them. kept.keep_current gives the temporary tables a larger page cache
while it evaluates; the connection's own setting comes back after.
"""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

from batchrun.ledger import kept
from batchrun.ledger.pending import evaluate_requests
from batchrun.ledger.store import Store

FIXTURE = Path(__file__).parent / "fixtures" / "report-project"


def _store(tmp_path: Path) -> Store:
    for name in ("batchrun.json", "state.db"):
        shutil.copyfile(FIXTURE / name, tmp_path / name)
    return Store(tmp_path / "state.db")


def _evaluate(store: Store, among: str | None = None, *, reading: str = "results") -> list[str]:
    """evaluate_requests, and the plans of the statements that read the table `reading`."""
    statements: list[str] = []
    store.db.conn.set_trace_callback(statements.append)
    try:
        evaluate_requests(store, among=among)
    finally:
        store.db.conn.set_trace_callback(None)
    plans = []
    for sql in statements:
        if re.search(rf"\b{reading}\b", sql) and sql.lstrip().startswith(("CREATE TEMP TABLE", "INSERT")):
            select = re.sub(r"^\s*CREATE TEMP TABLE \w+ AS ", "", sql)
            plans += [row[3] for row in store.db.execute(f"EXPLAIN QUERY PLAN {select}")]
    return plans


def test_outcomes_are_read_from_the_covering_index_and_equal_the_view(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        db = store.db
        plan = _evaluate(store)
        assert any(step.startswith("SEARCH res USING COVERING INDEX results_outcome (custom_id=?)") for step in plan), plan
        assert not any(step.startswith("SCAN res") for step in plan), plan
        view = "SELECT * FROM request_outcomes WHERE custom_id IN (SELECT custom_id FROM temp.wanted) ORDER BY custom_id"
        rows = db.execute("SELECT * FROM temp.outcomes_now ORDER BY custom_id").fetchall()
        assert rows and rows == db.execute(view).fetchall()
        # A few requests (kept._update's case): still each one's results by the index, not a scan,
        some = random.Random(0).sample([r[0] for r in db.execute("SELECT custom_id FROM requests ORDER BY 1")], 5)
        db.execute("CREATE TEMP TABLE some_requests (custom_id TEXT PRIMARY KEY) WITHOUT ROWID")
        db.conn.executemany("INSERT INTO temp.some_requests VALUES (?)", [(c,) for c in some])
        assert not any(step.startswith("SCAN res") for step in _evaluate(store, among="temp.some_requests"))
        # ... and they are looked up in the requests and cells, not found by scanning them.
        for table in ("requests", "cells"):
            steps = _evaluate(store, among="temp.some_requests", reading=table)
            assert steps and not any(re.match(r"SCAN (r|jr|c)\b", step) for step in steps), steps
        assert db.execute("SELECT * FROM temp.outcomes_now ORDER BY custom_id").fetchall() == db.execute(view).fetchall()


def test_keep_current_gives_back_the_temporary_page_cache(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        store.db.execute("PRAGMA temp.cache_size = -1234")
        with store.db.atomic():
            kept.keep_current(store)
        assert store.db.execute("PRAGMA temp.cache_size").fetchone()[0] == -1234
        assert kept.is_current(store)


def test_the_full_evaluation_takes_each_wanted_request_once_in_the_requests_order(tmp_path: Path) -> None:
    # evaluate_requests takes the wanted requests' rows as their cells and judge requests are
    # found (no table of their ids, no scan of requests): each once, in requests' own order (what
    # the scan gave, so kept_requests is written in the same order), each row the view's.
    from batchrun.ledger.pending import current_requests_sql

    with _store(tmp_path) as store:
        db = store.db
        evaluate_requests(store)
        wanted = f"SELECT custom_id FROM requests WHERE custom_id IN ({current_requests_sql()})"
        got = db.execute("SELECT * FROM temp.requests_now").fetchall()
        assert got and [row[0] for row in got] == [r[0] for r in db.execute(f"{wanted} ORDER BY rowid")]
        assert got == db.execute(f"""SELECT s.* FROM request_status s JOIN requests r ON r.custom_id = s.custom_id
                                     WHERE s.custom_id IN ({wanted}) ORDER BY r.rowid""").fetchall()
        assert db.execute("SELECT * FROM temp.outcomes_now ORDER BY custom_id").fetchall() == db.execute(
            f"SELECT * FROM request_outcomes WHERE custom_id IN ({wanted}) ORDER BY custom_id").fetchall()
