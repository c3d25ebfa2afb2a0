"""The per-cell state kept in state.db (ledger/kept.py, m023) against the views that define it.

The views stay the definition (docs/schema.md); kept_requests and kept_cells are a cache of them.
These tests replay randomized histories on the report fixture's state.db (every cell state:
ok, retried, refusal, empty, blocked, waiting, out of context, pending), written the way
batchrun's writers write (results and verdicts, new runs, judge requests queued, batches moving,
reopened requests, accepted failures, a changed config), and compare the kept rows with the views
after each step, exactly (floats to the last bit, rows in the view's order). Writers are killed
mid-way with SIGKILL in real subprocesses: after their changes were committed and before the kept
state was brought up to date, and inside that update at a random point.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from batchrun import __version__
from batchrun.cli import cli
from batchrun.ledger import kept
from batchrun.ledger.pending import current_requests_sql
from batchrun.ledger.store import Store
from batchrun.ledger.lifecycle import Status

FIXTURE = Path(__file__).parent / "fixtures" / "report-project"
KINDS = ("ok", "ok", "ok", "transient", "refusal", "empty", "invalid", "expired", "cancelled", "missing", "batch_failed",
         "unparseable", "auth")


def _project(tmp_path: Path) -> Path:
    for name in ("batchrun.json", "state.db"):
        shutil.copyfile(FIXTURE / name, tmp_path / name)
    Store(tmp_path / "state.db").close()  # migrations
    return tmp_path


def assert_kept_is_the_views(store: Store) -> None:
    assert kept.is_current(store)
    assert store.rows("SELECT * FROM kept_cells") == store.rows("SELECT * FROM cell_status")
    cols = ", ".join(r[1] for r in store.db.execute("PRAGMA table_info(kept_requests)"))
    assert store.rows(f"SELECT {cols} FROM kept_requests ORDER BY custom_id") == store.rows(
        f"SELECT {cols} FROM request_status WHERE custom_id IN ({current_requests_sql()}) ORDER BY custom_id")


def test_a_reader_reads_the_kept_state_and_the_report_stays_byte_identical(tmp_path: Path) -> None:
    project = _project(tmp_path)
    with Store(project / "state.db") as store:
        assert not kept.is_current(store)  # never evaluated: a reader evaluates the views itself
        with store.db.atomic():
            kept.keep_current(store)
        assert_kept_is_the_views(store)
    with Store(project / "state.db", readonly=True) as store:
        assert kept.is_current(store)
    config = project / "batchrun.json"
    for fmt in ("md", "json", "csv"):
        r = CliRunner().invoke(cli, ["--config", str(config), "-q", "report", "--format", fmt], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        expected = (FIXTURE / f"expected-report.{fmt}").read_text(encoding="utf-8")
        assert r.stdout == expected.replace("{CONFIG}", str(config)).replace("{VERSION}", __version__)


def _step(store: Store, rng: random.Random, n: int) -> str:
    """One random change, as batchrun's writers make it; its name."""
    db = store.db
    wanted = [r[0] for r in db.execute(f"SELECT custom_id FROM ({current_requests_sql()}) ORDER BY 1")]
    what = rng.choice(("results", "results", "results", "run", "queue", "batch", "reopen", "accept", "config", "nothing"))
    with db.atomic():
        if what == "results":
            run = store.scalar("SELECT max(id) FROM runs")
            for cid in rng.sample(wanted, min(len(wanted), rng.randrange(1, 12))):
                kind = rng.choice(KINDS)
                cur = db.execute(
                    """INSERT INTO results (batch_id, custom_id, kind, text, collected_at, run_id, error_type)
                       VALUES (?, ?, ?, ?, ?, ?, ?)""",
                    [f"test-{n}", cid, kind, f"answer {n}" if kind == "ok" else None, time.time() + n, run,
                     None if kind == "ok" else kind])
                stage, task = db.execute("SELECT stage, task_id FROM requests WHERE custom_id = ?", [cid]).fetchone()
                if stage == "judge" and kind in ("ok", "unparseable"):
                    rubric = store.scalar("SELECT rubric_total FROM tasks WHERE task_id = ?", [task]) or 1.0
                    total = None if kind == "unparseable" else rng.choice((0.0, rubric / 3, rubric * rng.random(), rubric))
                    db.execute("INSERT INTO judgments (result_id, custom_id, total, rubric_total, score) VALUES (?, ?, ?, ?, ?)",
                               [cur.lastrowid, cid, total, rubric, None if total is None else total / rubric])
        elif what == "run":
            db.execute("INSERT INTO runs (command, started_at, pid) VALUES ('collect', ?, 1)", [time.time()])
        elif what == "queue":
            from batchrun.ledger.sync import queue_judgments
            from batchrun.protocol.config_file import load_config

            queue_judgments(store, load_config(store.path.parent / "batchrun.json"))
        elif what == "batch":
            bid = rng.choice([r[0] for r in db.execute("SELECT id FROM batches ORDER BY id")])
            db.execute("UPDATE batches SET status = ? WHERE id = ?", [rng.choice(list(Status)).value, bid])
        elif what == "reopen":
            cid = rng.choice(wanted)
            route, task = db.execute("SELECT route, task_id FROM requests WHERE custom_id = ?", [cid]).fetchone()
            db.execute("INSERT INTO reopens (custom_id, route, task_id, state, created_at) VALUES (?, ?, ?, 'failed', ?)",
                       [cid, route, task, time.time() + n])
        elif what == "accept":
            route, fp = rng.choice(db.execute("SELECT route, policy_fp FROM config_routes WHERE role = 'contestant'").fetchall())
            db.execute("INSERT INTO accepted_failures (route, policy_fp, reason, cells, created_at) VALUES (?, ?, 'test', 1, ?)",
                       [route, fp, time.time() + n])
        elif what == "config":
            db.execute("UPDATE config_routes SET retry_budget = ? WHERE route = (SELECT min(route) FROM config_routes)",
                       [rng.randrange(0, 4)])
    return what


@pytest.mark.parametrize("seed", range(2))
def test_the_kept_state_equals_the_views_over_random_histories(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    project = _project(tmp_path)
    with Store(project / "state.db") as store:
        kept.keep_current(store)
        inputs_changed = False
        for n in range(25):
            what = _step(store, rng, n)
            inputs_changed |= what == "config"
            if rng.random() < 0.3:  # several changes before the next update, as a writer's phases make them
                continue
            # Within one command the inputs are checked once (collect between its batches: only
            # when no input changed since the last check may a writer skip it).
            kept.keep_current(store, check_inputs=inputs_changed or rng.random() < 0.5)
            inputs_changed = False
            assert_kept_is_the_views(store)
        kept.keep_current(store)
        assert_kept_is_the_views(store)


# The children's progress handler: SIGKILL once SQLite has called it sys.argv[5] times.
_KILL_AFTER = """
steps = [0]
def tick():
    steps[0] += 1
    if steps[0] >= int(sys.argv[5]):
        os.kill(os.getpid(), signal.SIGKILL)
"""

_CHILD = """
import os, random, signal, sys, time
from batchrun.ledger import kept
from batchrun.ledger.store import Store
sys.path.insert(0, sys.argv[3])
from test_kept_state import _step

seed, mode = int(sys.argv[2]), sys.argv[4]
rng = random.Random(seed)
store = Store(sys.argv[1])
for n in range(3):
    _step(store, rng, 100 + 10 * seed + n)
if mode == "before":  # the changes committed, the kept state not brought up to date
    os.kill(os.getpid(), signal.SIGKILL)
""" + _KILL_AFTER + """
store.db.conn.set_progress_handler(tick, 50)  # SIGKILL after a random number of SQLite steps
kept.keep_current(store)
"""


@pytest.mark.parametrize("seed", range(2))
def test_a_writer_killed_before_or_during_the_update_leaves_a_state_the_next_one_repairs(tmp_path: Path, seed: int) -> None:
    project = _project(tmp_path)
    with Store(project / "state.db") as store:
        kept.keep_current(store)
    rng = random.Random(seed)
    killed = 0
    for round_ in range(4):
        mode = "before" if round_ % 2 == 0 else "during"
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, str(project / "state.db"), str(seed * 10 + round_), str(Path(__file__).parent),
             mode, str(rng.randrange(1, 400))],
            capture_output=True, text=True, timeout=60)
        assert child.returncode in (0, -signal.SIGKILL), child.stderr
        killed += child.returncode == -signal.SIGKILL
        with Store(project / "state.db", readonly=True) as reader:
            if not kept.is_current(reader):  # what a reader then does: the views themselves
                assert child.returncode == -signal.SIGKILL
        with Store(project / "state.db") as store:
            kept.keep_current(store)
            assert_kept_is_the_views(store)
    assert killed >= 2


def test_results_files_are_not_rebuilt_when_nothing_they_read_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """write_results builds a route's data only when something it reads changed (the kept
    state's epoch, the config, the batches...) or a file is not as written; then the same bytes."""
    from batchrun.ledger.inputs import as_inputs
    from batchrun.protocol.config_file import load_config
    from batchrun.publish import outputs

    project = _project(tmp_path)
    config = load_config(project / "batchrun.json")
    with Store(project / "state.db") as store:
        inputs = as_inputs(store, config, corpus=False)
        paths = outputs.write_results(store, inputs)
        before = {p: p.read_bytes() for p in paths if p.name != "manifest.json"}
        built: list[str] = []
        real = outputs.route_responses
        monkeypatch.setattr(outputs, "route_responses", lambda s, c, route: built.append(route) or real(s, c, route))
        outputs.write_results(store, inputs)
        assert built == []  # nothing changed: no route's data built
        victim = next(iter(before))
        victim.write_text("edited by hand")
        outputs.write_results(store, inputs)
        assert built and victim.read_bytes() == before[victim]  # a file not as written: rebuilt, the same bytes
        built.clear()
        rng = random.Random(7)
        while _step(store, rng, 0) != "results":
            pass
        outputs.write_results(store, inputs)  # new results: the kept state moved on, the data is built again
        assert built
        fresh = {p: p.read_bytes() for p in before}
        built.clear()
        with Store(project / "state.db") as other:  # what a collect without the shortcut writes
            other.db.execute("DELETE FROM meta WHERE key = 'results_stamp'")
        outputs.write_results(store, inputs)
        assert built and {p: p.read_bytes() for p in before} == fresh


def _plan(store: Store, sql: str) -> list[str]:
    # Each step's verb and table alias (index names aside): the order SQLite joins the tables in.
    return [" ".join(row[3].split()[:2]) for row in store.db.execute(f"EXPLAIN QUERY PLAN {sql}")]


def test_the_full_evaluation_joins_in_the_views_own_order_over_its_index(tmp_path: Path) -> None:
    # kept._rebuild indexes temp.requests_now for cell_status (the automatic index SQLite built
    # twice, made once). The join order decides the order each score's mean adds its judges in,
    # so the last bit of a mean: it must be the order of the view over the unindexed table (a
    # unique index on custom_id reorders the joins, and means differed at bench/ingest.py's scale).
    project = _project(tmp_path)
    with Store(project / "state.db") as store:
        from batchrun.ledger.pending import evaluate_requests

        evaluate_requests(store)
        sql = f"SELECT * FROM ({kept._cells_sql(store, 'cells', 'temp.requests_now')})"
        bare = _plan(store, sql)
        assert any(step.startswith("SEARCH js") for step in bare)
        store.db.execute(kept.CELLS_INDEX)
        assert _plan(store, sql) == bare
        indexed = [row[3] for row in store.db.execute(f"EXPLAIN QUERY PLAN {sql}")]
        assert sum("requests_now_cells" in step for step in indexed) == 2  # a request's and each judge request's lookup


# --- plan's shortcut (kept.keep_planned) ---------------------------------------------------------


def test_the_planned_rows_moves_look_each_target_up(tmp_path: Path) -> None:
    # Each move of keep_planned finds its row's new number by the row's rowid: a scan of the moves
    # per move took 18.9 s when most rows were out of order (kept.PLANNED_MOVES_TABLE says when).
    project = _project(tmp_path)
    with Store(project / "state.db") as store:
        store.db.execute(kept.PLANNED_MOVES_TABLE)
        steps = [row[3] for row in store.db.execute(f"EXPLAIN QUERY PLAN {kept.PLANNED_MOVES}")]
        assert any(step.startswith("SEARCH m USING INTEGER PRIMARY KEY") for step in steps), steps
        assert not any(step.startswith("SCAN m") for step in steps), steps


def _plan_some(store: Store, rng: random.Random, n: int) -> list[str]:
    """What plan writes to state.db for its files: some of the pending requests, a batch per route
    and stage reserved 'writing', then moved to 'planned' with its batch_requests; their ids."""
    from batchrun.ledger.lifecycle import move, new_batch

    pending = store.db.execute("SELECT custom_id, route, stage FROM kept_requests WHERE state = 'pending' ORDER BY custom_id").fetchall()
    chosen = rng.sample(pending, rng.randrange(0, len(pending) + 1))
    groups: dict[tuple[str, str], list[str]] = {}
    for cid, route, stage in chosen:
        groups.setdefault((route, stage), []).append(cid)
    ids: list[str] = []
    for (route, stage), cids in groups.items():
        with store.db.atomic():
            seq = (store.scalar("SELECT max(seq) FROM batches") or 0) + 1
            bid = f"{seq:06d}-{route}-{stage}-{n}"
            new_batch(store, id=bid, seq=seq, route=route, stage=stage, provider="openai", transport="batch", model="m",
                      dir=f"/nonexistent/{bid}", request_file=f"/nonexistent/{bid}/requests.jsonl", created_at=time.time())
        with store.db.atomic():
            move(store, bid, Status.PLANNED, bytes=1, n_requests=len(cids))
            store.db.conn.executemany("INSERT INTO batch_requests (batch_id, custom_id, position) VALUES (?, ?, ?)",
                                      [(bid, cid, i) for i, cid in enumerate(cids)])
        ids += cids
    return ids


class _Undo(Exception):
    pass


def _kept_rows(store: Store) -> tuple[list, list, list]:
    # Everything the kept state holds, kept_requests with its rowids (the order a later update reads).
    return (store.db.execute("SELECT rowid, * FROM kept_requests ORDER BY rowid").fetchall(),
            store.db.execute("SELECT * FROM kept_cells ORDER BY route, task_id").fetchall(),
            store.db.execute("SELECT * FROM kept_meta").fetchall())


@pytest.mark.parametrize("seed", range(2))
def test_after_a_plan_the_kept_state_is_what_keep_current_makes_of_it(tmp_path: Path, seed: int,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """kept.keep_planned sets the planned requests' state without the views: after every plan of a
    random history its rows (rowids included) are the ones keep_current makes from the same
    state.db, and the views' own; anything besides the plan since the kept state was current (a
    result, a reopen...) makes it decline."""
    rng = random.Random(seed)
    project = _project(tmp_path)
    taken = declined = 0
    with Store(project / "state.db") as store:
        kept.keep_current(store)
        for n in range(16):
            # Both of keep_current's ways (everything evaluated again, or the changed rows updated,
            # which leaves the rows out of requests' order), before the plan and after it.
            monkeypatch.setattr(kept, "REBUILD_SHARE", rng.choice((0.0, 1.0, 1.0, 1.0)))
            _step(store, rng, n)
            planned = [r[0] for r in store.db.execute("SELECT id FROM batches WHERE status = 'planned' ORDER BY id")]
            if planned and rng.random() < 0.8:  # their requests pending again (a config change supersedes them)
                with store.db.atomic():
                    store.db.execute("UPDATE batches SET status = 'superseded' WHERE id = ?", [rng.choice(planned)])
            if rng.random() < 0.5:  # `batchrun retry`: the blocked and waiting requests pending again
                with store.db.atomic():
                    for cid, route, task in store.db.execute(
                            "SELECT custom_id, route, task_id FROM kept_requests WHERE state IN ('blocked', 'waiting')").fetchall():
                        store.db.execute("INSERT INTO reopens (custom_id, route, task_id, state, created_at) VALUES (?, ?, ?, 'failed', ?)",
                                         [cid, route, task, time.time() + n])
            kept.keep_current(store)  # as plan's request_states
            ids = _plan_some(store, rng, n)
            monkeypatch.setattr(kept, "REBUILD_SHARE", rng.choice((0.0, 1.0)))
            extra = bool(ids) and (not declined or rng.random() < 0.2)
            if extra:  # another change besides the plan's
                while _step(store, rng, 1000 + n) in ("nothing", "run", "config", "queue"):
                    pass
            try:  # the path without the shortcut, on the same state.db, rolled back
                with store.db.atomic():
                    kept.keep_current(store)
                    expected = _kept_rows(store)
                    raise _Undo
            except _Undo:
                pass
            took = kept.keep_planned(store, ids)
            if not took:
                kept.keep_current(store)
            assert _kept_rows(store) == expected
            assert_kept_is_the_views(store)
            # What the triggers named and every state the plan moved were checked against the views
            # above; the shortcut was taken exactly when nothing but the plan changed.
            if ids and not extra:
                assert took
                taken += 1
            else:
                assert not took
                declined += ids != []
    assert taken >= 3 and declined >= 1


def test_a_plan_keeps_the_kept_state_without_the_views_and_it_is_the_same(project: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real `batchrun plan`: its requests' kept rows set directly (keep_planned taken), equal to
    the views, and to what the same plan leaves without the shortcut (rowids included)."""
    from conftest import small_project

    small_project(project)
    taken: list[bool] = []
    real = kept.keep_planned
    monkeypatch.setattr(kept, "keep_planned", lambda store, ids: taken.append(real(store, ids)) or taken[-1])
    assert project.run("plan").exit_code == 0
    assert taken == [True]
    with project.store() as store:
        assert store.scalar("SELECT count(*) FROM kept_requests WHERE state = 'in_flight'") == len(project.sql("SELECT * FROM batch_requests"))
        assert kept.is_current(store)  # and its rows the views' (in the views' order here: by key)
        assert store.rows("SELECT * FROM kept_cells ORDER BY route, task_id") == store.rows(
            "SELECT * FROM cell_status ORDER BY route, task_id")
        cols = ", ".join(r[1] for r in store.db.execute("PRAGMA table_info(kept_requests)"))
        assert store.rows(f"SELECT {cols} FROM kept_requests ORDER BY custom_id") == store.rows(
            f"SELECT {cols} FROM request_status WHERE custom_id IN ({current_requests_sql()}) ORDER BY custom_id")
        shortcut = _kept_rows(store)
    shutil.rmtree(project.area / "jobs")
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (project.state_path.parent / name).unlink(missing_ok=True)
    monkeypatch.setattr(kept, "keep_planned", lambda store, ids: False)  # the command's end evaluates the views
    assert project.run("plan").exit_code == 0
    with project.store() as store:
        assert _kept_rows(store) == shortcut


_PLAN_CHILD = """
import os, random, signal, sys, time
from batchrun.ledger import kept
from batchrun.ledger.store import Store
sys.path.insert(0, sys.argv[3])
from test_kept_state import _plan_some

rng = random.Random(int(sys.argv[2]))
store = Store(sys.argv[1])
with store.db.atomic():  # something pending to plan: a new run, `batchrun retry`, the last round's batches superseded
    store.db.execute("INSERT INTO runs (command, started_at, pid) VALUES ('plan', ?, 1)", [time.time()])
    store.db.execute("UPDATE batches SET status = 'superseded' WHERE status = 'planned'")
    for cid, route, task in store.db.execute(
            "SELECT custom_id, route, task_id FROM kept_requests WHERE state IN ('blocked', 'waiting')").fetchall():
        store.db.execute("INSERT INTO reopens (custom_id, route, task_id, state, created_at) VALUES (?, ?, ?, 'failed', ?)",
                         [cid, route, task, time.time()])
kept.keep_current(store)
assert store.scalar("SELECT count(*) FROM kept_requests WHERE state = 'pending'")
while not (ids := _plan_some(store, rng, 0)):
    pass
if sys.argv[4] == "before":  # the files recorded, the kept state not set
    os.kill(os.getpid(), signal.SIGKILL)
""" + _KILL_AFTER + """
store.db.conn.set_progress_handler(tick, 20)  # SIGKILL after that many rounds of SQLite steps
kept.REBUILD_SHARE = float(sys.argv[6])  # both of its ways (~440 and ~1,400 rounds here)
assert kept.keep_planned(store, ids)
"""


def test_a_plan_killed_before_or_while_it_sets_the_kept_state_leaves_one_the_next_command_repairs(tmp_path: Path) -> None:
    project = _project(tmp_path)
    with Store(project / "state.db") as store:
        kept.keep_current(store)
    killed = 0
    rounds = (("before", 0, 0.3), ("during", 200, 1.0), ("during", 500, 0.0), ("during", 1200, 0.0))
    for round_, (mode, steps, share) in enumerate(rounds):
        child = subprocess.run([sys.executable, "-c", _PLAN_CHILD, str(project / "state.db"), str(round_), str(Path(__file__).parent),
                                mode, str(steps), str(share)], capture_output=True, text=True, timeout=60)
        assert child.returncode == -signal.SIGKILL, child.stderr
        killed += 1
        with Store(project / "state.db") as store:
            assert not kept.is_current(store)  # the planned requests are still named in kept_dirty
            kept.keep_current(store)
            assert_kept_is_the_views(store)
            assert store.scalar("SELECT count(*) FROM kept_requests k JOIN batch_requests br ON br.custom_id = k.custom_id "
                                "JOIN batches b ON b.id = br.batch_id WHERE b.status = 'planned' AND k.state != 'in_flight'") == 0
    assert killed == len(rounds)


def test_the_evaluation_tables_are_set_aside_and_the_next_evaluation_in_the_connection_drops_them(tmp_path: Path) -> None:
    # keep_current renames the full evaluation's temporary tables instead of dropping them (their
    # pages go with the connection's temporary file): a second evaluation in the same connection
    # (another rebuild, a reader's own evaluation) must find their names and their indexes' free.
    from batchrun.ledger.pending import evaluate_requests

    project = _project(tmp_path)
    with Store(project / "state.db") as store:
        def temp_names() -> set[str]:
            return {r[0] for r in store.db.execute("SELECT name FROM sqlite_temp_master WHERE type IN ('table', 'index', 'view')")}

        for budget in (1, 2):  # the second a changed input: everything evaluated again in the same connection
            with store.db.atomic():
                store.db.execute("UPDATE config_routes SET retry_budget = ? WHERE route = (SELECT min(route) FROM config_routes)", [budget])
            kept.keep_current(store)
            assert_kept_is_the_views(store)
            assert {"spent_requests_now", "spent_requests_wanted", "requests_now_cells", "requests_wanted_id"} <= temp_names()
            assert not {"requests_now", "requests_wanted", "outcomes_now", "wanted"} & temp_names()
        evaluate_requests(store)  # a reader's evaluation: the spent tables dropped first
        assert not any(name.startswith("spent_") for name in temp_names())
        cols = ", ".join(r[1] for r in store.db.execute("PRAGMA table_info(kept_requests)"))
        assert store.rows(f"SELECT {cols} FROM temp.requests_now ORDER BY custom_id") == store.rows(
            f"SELECT {cols} FROM kept_requests ORDER BY custom_id")
