"""The report is byte-identical on a fixed state.db: speed work on the queries behind it (issue 15)
must not change a published number, a status, a judge's detail or a line of provenance.

tests/fixtures/report-project holds a small state.db with every cell state (ok, retried, refusal,
empty, judging, pending, blocked, waiting, out of context), live batches and history invisible
to the current views, built by bench/make_report_fixture.py, and the reports rendered from it by
the code before the issue-15 changes (expected-report.*; rendered again where the format changed
on purpose: issue 26 added the protocol columns and fields; session 11 left the incomplete
routes' rank empty, as the site does; nothing else moved)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from batchrun import __version__
from batchrun.cli import cli
from batchrun.ledger.store import Store

FIXTURE = Path(__file__).parent / "fixtures" / "report-project"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report-project")
    for name in ("batchrun.json", "state.db"):
        shutil.copyfile(FIXTURE / name, root / name)
    Store(root / "state.db").close()  # a writer applies the migrations added since the fixture was built
    return root


@pytest.mark.parametrize("fmt", ["md", "json", "csv"])
def test_report_is_byte_identical_to_the_committed_one(project: Path, fmt: str) -> None:
    config = project / "batchrun.json"
    r = CliRunner().invoke(cli, ["--config", str(config), "-q", "report", "--format", fmt], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    expected = (FIXTURE / f"expected-report.{fmt}").read_text(encoding="utf-8")
    expected = expected.replace("{CONFIG}", str(config)).replace("{VERSION}", __version__)
    assert r.stdout == expected


def test_csv_writes_booleans_as_sqlite_utils_does(project: Path) -> None:
    """Issue 29 item 8: 1 and 0, never Python's True/False: the report's `complete` column is the
    leaderboard view's, as `sqlite-utils state.db "select ..." --csv` writes it."""
    import csv
    import io
    import subprocess
    import sys

    r = CliRunner().invoke(cli, ["--config", str(project / "batchrun.json"), "report", "--format", "csv"], catch_exceptions=False)
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert "True" not in r.stdout and "False" not in r.stdout
    assert {row["complete"] for row in rows} == {"0", "1"} and {row["protocol_number"] for row in rows} == {"1"}
    sqlite_utils = Path(sys.executable).parent / "sqlite-utils"
    out = subprocess.run([str(sqlite_utils), str(project / "state.db"), "select route, complete from leaderboard", "--csv"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert {row["route"]: row["complete"] for row in csv.DictReader(io.StringIO(out))} == {row["route"]: row["complete"] for row in rows}


def test_the_fixture_holds_every_cell_state() -> None:
    import json

    data = json.loads((FIXTURE / "expected-report.json").read_text(encoding="utf-8"))
    statuses = {t["status"] for r in data["routes"] for t in r["tasks"]}
    assert {"ok", "pending", "refusal", "empty", "blocked", "waiting", "out_of_context_scope"} <= statuses
    assert {r["complete"] for r in data["routes"]} == {True, False}
    assert all(len(t["judges"]) == 3 for r in data["routes"] for t in r["tasks"] if t["status"] == "ok")


def test_the_views_evaluated_once_equal_the_views(project: Path) -> None:
    """snapshot_cells runs request_outcomes', request_status's and cell_status's own SQL once each,
    over the current requests and their results, and leaderboard() the leaderboard view's over
    that: row for row (and in the same order) what the views give."""
    from batchrun.publish.outputs import leaderboard

    with Store(project / "state.db") as store:
        board = leaderboard(store)  # fills cells_now and requests_now
        assert store.rows("SELECT * FROM cells_now") == store.rows("SELECT * FROM cell_status")
        # request_status of the requests the current config wants (history is not evaluated).
        from batchrun.ledger.pending import current_requests_sql

        wanted = store.rows(f"SELECT * FROM request_status WHERE custom_id IN ({current_requests_sql()}) ORDER BY custom_id")
        assert store.rows("SELECT * FROM requests_now ORDER BY custom_id") == wanted
        assert len(wanted) < store.scalar("SELECT count(*) FROM requests")  # the fixture has history
        view = store.rows("SELECT * FROM leaderboard")
        assert [r["route"] for r in board] == [r["route"] for r in view]
        for mine, theirs in zip(board, view):
            assert {k: mine[k] for k in theirs if k not in ("complete",) and not k.endswith("_n")} == {
                k: v for k, v in theirs.items() if k not in ("complete",) and not k.endswith("_n")}
            assert mine["complete"] == bool(theirs["complete"])
            assert all(mine[k] == (theirs[k] or 0) for k in theirs if k.endswith("_n"))


def test_queue_judgments_with_nothing_new_queues_nothing(project: Path) -> None:
    import shutil as sh

    from batchrun.protocol.config_file import load_config
    from batchrun.ledger.sync import queue_judgments

    copy = project.parent / "queue-copy"
    copy.mkdir(exist_ok=True)
    for name in ("batchrun.json", "state.db"):
        sh.copyfile(project / name, copy / name)
    config = load_config(copy / "batchrun.json")
    with Store(copy / "state.db") as store:
        before = store.scalar("SELECT count(*) FROM requests WHERE stage = 'judge'")
        with store.db.atomic():
            assert queue_judgments(store, config) == 0
        assert store.scalar("SELECT count(*) FROM requests WHERE stage = 'judge'") == before
        # Every ok answer of a current cell has a request from each judge of the panel.
        missing = store.scalar(
            """SELECT count(*) FROM cell_status cs JOIN config_routes j ON j.role = 'judge'
               JOIN request_status s ON s.custom_id = cs.custom_id AND s.state = 'ok'
               WHERE NOT EXISTS (SELECT 1 FROM requests jr WHERE jr.parent_custom_id = cs.custom_id
                                 AND jr.route = j.route AND jr.parent_result_id = s.ok_result_id)""")
        assert missing == 0
        # A judge request that goes missing is queued again exactly as it was (same id, answer,
        # prompt size and estimates): the answer found by index is the view's ok_result_id.
        gone = store.rows(
            """SELECT jr.* FROM requests jr JOIN cell_status cs ON cs.custom_id = jr.parent_custom_id AND cs.result_id = jr.parent_result_id
               JOIN config_routes j ON j.route = jr.route AND j.policy_fp = jr.policy_fp AND j.role = 'judge'
               WHERE jr.stage = 'judge' AND cs.status = 'ok' ORDER BY jr.custom_id LIMIT 3""")
        assert len(gone) == 3
        with store.db.atomic():
            store.db.conn.executemany("DELETE FROM requests WHERE custom_id = ?", [(g["custom_id"],) for g in gone])
            assert queue_judgments(store, config) == 3
        for g in gone:
            again = store.one("SELECT * FROM requests WHERE custom_id = ?", [g["custom_id"]])
            assert again is not None
            assert {k: v for k, v in again.items() if k != "created_at"} == {k: v for k, v in g.items() if k != "created_at"}


def test_the_report_intervals_and_tests_rest_on_documents(project: Path) -> None:
    """Recomputed outside batchrun.publish.stats from the report's own per-task scores and state.db's
    documents: each complete route's All-tasks interval is the CR2 / Bell-McCaffrey t interval
    (test_stats' matrix implementation, scipy's t quantile), and the adjacent pair's wins,
    losses and ties count documents by the sign of their summed difference."""
    import json

    from scipy import stats as sp
    from test_stats import cr2_by_the_matrices

    config = project / "batchrun.json"
    r = CliRunner().invoke(cli, ["--config", str(config), "-q", "report", "--format", "json"], catch_exceptions=False)
    data = json.loads(r.stdout)
    with Store(project / "state.db") as store:
        doc_of = {row["task_id"]: row["doc_sha256"] for row in store.rows("SELECT task_id, doc_sha256 FROM tasks")}
    zero = {"out_of_context_scope", "refusal", "empty", "accepted"}
    values = {}
    for route in data["routes"]:
        if not route["complete"]:
            continue
        tasks = route["tasks"]
        values[route["route"]] = [t["score"] if t["status"] == "ok" else 0.0 if t["status"] in zero else None for t in tasks]
        docs = [doc_of[t["task_id"]] for t in tasks]
        theta, se, df = cr2_by_the_matrices(values[route["route"]], docs)
        q = sp.t.ppf(0.975, df)
        iv = data["statistics"]["routes"][route["route"]]["all_tasks"]
        assert (iv["estimate"], iv["se"], iv["df"], iv["n_documents"]) == pytest.approx((theta, se, df, len(set(docs))), abs=1e-3)
        assert (iv["low"], iv["high"]) == pytest.approx((max(theta - q * se, 0), min(theta + q * se, 1)), abs=1e-6)
    (a, b), pair = data["statistics"]["pairwise"]["routes"][:2], data["statistics"]["pairwise"]["pairs"][0]["all_tasks"]
    ids = {route["route"]: [t["task_id"] for t in route["tasks"]] for route in data["routes"]}
    by_task = {name: dict(zip(ids[name], v)) for name, v in values.items()}
    sums: dict[str, float] = {}
    for task_id in ids[a]:
        sums[doc_of[task_id]] = sums.get(doc_of[task_id], 0.0) + by_task[a][task_id] - by_task[b][task_id]
    wins, losses = sum(s > 1e-9 for s in sums.values()), sum(s < -1e-9 for s in sums.values())
    assert (pair["wins"], pair["losses"], pair["ties"], pair["n_documents"]) == (wins, losses, len(sums) - wins - losses, len(sums))
    assert pair["sign_p"] == pytest.approx(sp.binomtest(wins, wins + losses).pvalue, rel=1e-2)
