"""The report is byte-identical on a fixed state.db: speed work on the queries behind it (issue 15)
must not change a published number, a status, a judge's detail or a line of provenance.

tests/fixtures/report-project holds a small state.db with every cell state (ok, retried, refusal,
empty, judging, pending, blocked, waiting, out of context), live batches and history invisible
to the current views, built by bench/make_report_fixture.py, and the reports rendered from it by
the code before the issue-15 changes (expected-report.*)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from batchrun import __version__
from batchrun.cli import cli
from batchrun.store import Store

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


def test_the_fixture_holds_every_cell_state() -> None:
    import json

    data = json.loads((FIXTURE / "expected-report.json").read_text(encoding="utf-8"))
    statuses = {t["status"] for r in data["routes"] for t in r["tasks"]}
    assert {"ok", "pending", "refusal", "empty", "blocked", "waiting", "out_of_context_scope"} <= statuses
    assert {r["complete"] for r in data["routes"]} == {True, False}
    assert all(len(t["judges"]) == 3 for r in data["routes"] for t in r["tasks"] if t["status"] == "ok")
