"""Issue 5: refresh end to end, incremental, time-limited; the demo twice."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from batchrun.cli import cli
from batchrun.emulator import Emulator

from conftest import DEFAULT_ROUTES, PREFLIGHT_ID, Project, batch_requests, route, small_project


def test_demo_runs_and_second_run_sends_nothing(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "demo"
    runner = CliRunner()
    first = runner.invoke(cli, ["demo", "--dir", str(folder)], catch_exceptions=False)
    assert first.exit_code == 0, first.output
    assert "| # | Route |" in first.output
    assert "every route is complete" in first.output
    for name in ("state.db", "jobs", "results"):
        assert (folder / name).exists()
        assert str(folder / name) in first.output

    # The leaderboard: 5 contestant routes, complete, with out-of-context cells for the small-cap route.
    import sqlite3

    conn = sqlite3.connect(folder / "state.db")
    board = {r[0]: r[1:] for r in conn.execute("SELECT route, complete, all_tasks_overall, out_of_context_n, n_tasks FROM leaderboard")}
    assert len(board) == 5
    assert all(r[0] == 1 and r[1] is not None for r in board.values())
    assert board["kimi-k2.6"][2] > 0  # the long document exceeds its demo cap
    assert all(r[3] >= 20 for r in board.values())
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    scores = json.loads((folder / "results" / "kimi-k2.6.scores.json").read_text())
    assert scores["complete"] is True and scores["out_of_context_n"] > 0
    assert scores["all_tasks_overall"] < scores["scored_overall"]
    assert (folder / "results" / "gpt-5.5.responses.json").exists()

    second = runner.invoke(cli, ["demo", "--dir", str(folder)], catch_exceptions=False)
    assert second.exit_code == 0
    assert "nothing to do" in second.output
    # The second demo's emulator listens on another free port: not a change of any route's host
    # (issue 29 item 3), in the leaderboard it prints, the report and the site.
    assert "the config now names" not in second.output
    report = runner.invoke(cli, ["--config", str(folder / "batchrun.toml"), "report"], catch_exceptions=False)
    assert report.exit_code == 0 and "Provenance:" in report.output and "the config now names" not in report.output
    assert "the config now names" not in (folder / "results" / "site" / "index.html").read_text()
    # -q: the data (the leaderboard) and nothing else, once all is complete (issue 29 item 8).
    quiet = runner.invoke(cli, ["-q", "demo", "--dir", str(folder)], catch_exceptions=False)
    assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout.startswith("# Rehearsal on the emulator at ")
    assert "| # | Route |" in quiet.stdout and quiet.stdout == second.stdout.replace(url_of(second), url_of(quiet))
    conn = sqlite3.connect(folder / "state.db")
    runs = conn.execute("SELECT id FROM runs WHERE command = 'demo' ORDER BY id").fetchall()
    last_run = runs[-1][0]
    # The second run created no batch and collected no result line.
    assert conn.execute("SELECT count(*) FROM batches WHERE run_id = ?", [last_run]).fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM results WHERE run_id = ?", [last_run]).fetchone()[0] == 0
    conn.close()
    # `batchrun demo` without --dir from inside the demo's folder (here a folder in it) refreshes
    # that folder, saying so, rather than nesting a new demo-run in it.
    monkeypatch.chdir(folder / "results")
    inside = runner.invoke(cli, ["demo"], catch_exceptions=False)
    assert inside.exit_code == 0 and "nothing to do" in inside.output
    assert inside.stderr.startswith(f"Using the demo folder {folder}, which this folder is in")
    assert not (folder / "results" / "demo-run").exists() and str(folder / "state.db") in inside.stderr


def url_of(result: object) -> str:
    """The emulator URL in a demo's title line (each demo listens on a free port of its own)."""
    return result.stdout.splitlines()[0].split(" at ")[1].split(" ")[0]  # type: ignore[attr-defined]


def test_refresh_then_nothing_to_do(project: Project, emulator: Emulator) -> None:
    small_project(project)
    first = project.run("refresh", "--interval", "0.05", emulator=emulator)
    assert first.exit_code == 0, first.output
    sent = len(emulator.requests)
    assert sent > 0
    second = project.run("refresh", "--interval", "0.05", emulator=emulator)
    assert second.exit_code == 0
    assert "nothing to do" in second.output
    assert len(emulator.requests) == sent  # nothing reached the emulator


def test_incremental_refresh_sends_exactly_the_new_route(project: Project, emulator: Emulator) -> None:
    small_project(project)
    assert project.run("refresh", "--interval", "0.05", emulator=emulator).exit_code == 0
    before = len(emulator.requests)

    routes = dict(DEFAULT_ROUTES)
    routes["newcomer"] = route("openai", "gpt-4.1")
    project.config(routes=routes)
    result = project.run("refresh", "--interval", "0.05", emulator=emulator)
    assert result.exit_code == 0, result.output
    new = emulator.requests[before:]
    # Only the new route is preflighted (the others' policies passed theirs in the first refresh).
    assert [r["model"] for r in new if r["custom_id"] == PREFLIGHT_ID] == ["gpt-4.1"]
    new = [r for r in new if r["custom_id"] != PREFLIGHT_ID]
    gen_ids = {r["custom_id"] for r in project.sql("SELECT custom_id FROM requests WHERE route = 'newcomer' AND stage = 'gen'")}
    judge_ids = {r["custom_id"] for r in project.sql(
        "SELECT j.custom_id FROM requests j JOIN requests g ON g.custom_id = j.parent_custom_id WHERE g.route = 'newcomer'")}
    assert len(gen_ids) == 4 and len(judge_ids) == 4 * 2
    assert Counter(r["custom_id"] for r in new) == Counter({cid: 1 for cid in gen_ids | judge_ids})
    assert {r["model"] for r in new if r["custom_id"] in gen_ids} == {"gpt-4.1"}


def test_refresh_timeout_stops_cleanly_and_resumes_without_resubmitting(project: Project, tmp_path: Path) -> None:
    small_project(project)
    # The limit is for the run, not for this process's first imports (seconds on a loaded
    # machine, when this test runs first): the SDKs, and sqlite-utils with the pandas it imports.
    import anthropic  # noqa: F401
    import openai  # noqa: F401
    from google import genai  # noqa: F401

    from batchrun.ledger.migrations import database

    database().close()
    emu = Emulator(port=0, latency=4.0).start()  # batches take longer than the time limit
    try:
        # 2 s: enough for the preflights and at least one create on a loaded machine, far less
        # than the batches' 4 s.
        first = project.run("refresh", "--timeout", "2s", "--interval", "0.2", emulator=emu)
        assert first.exit_code == 2, first.output
        assert "time limit reached" in first.output
        live = project.sql("SELECT id, status FROM batches WHERE status = 'in_flight'")
        assert 1 <= len(live) <= 3, first.output  # a generation batch per contestant route, as many as the limit allowed
        accepted = Counter(r["custom_id"] for r in batch_requests(emu))

        emu.set_latency(0.0)  # retries and judge batches created from now on finish at once
        second = project.run("refresh", "--interval", "0.1", "--timeout", "60s", emulator=emu)
        assert second.exit_code == 0, second.output
        again = Counter(r["custom_id"] for r in batch_requests(emu))
        gen = {cid for cid in accepted}
        # The in-flight generation requests were not sent a second time.
        assert all(again[cid] == 1 for cid in gen)
    finally:
        emu.stop()


def test_progress_is_one_line_per_event_off_a_terminal_and_live_on_one(project: Project) -> None:
    import io

    from batchrun.base.progress import Progress
    from batchrun.run.refresh import refresh

    class Seen(Exception):
        pass

    class StopAtFirstStatus(Progress):
        """Ends the refresh at its first status update: the first round in which nothing ended."""

        def status(self, message: str) -> None:
            super().status(message)
            raise Seen(message)

    small_project(project)
    # No batch ever ends, so the round after the batches are created has nothing to show but the
    # status: reached however slow this machine is (a 2 s latency was outrun on a loaded machine,
    # and no round waited). The test stops there instead of waiting out a whole refresh.
    emu = Emulator(port=0, latency=3600).start()
    try:
        config = project.load(emu)
        for live in (False, True):
            buf = io.StringIO()
            store = project.store()
            store.start_run("refresh")
            with pytest.raises(Seen) as seen:
                refresh(store, config, interval=0.2, progress=StopAtFirstStatus(buf, live=live))
            store.close()
            assert "batch(es) in flight" in str(seen.value)
            out = buf.getvalue()
            lines = out.splitlines()
            assert any("created" in line for line in lines)
            if live:
                assert "\r" in out and "batch(es) in flight" in out and "bytes uploaded" in out and "waited" in out
            else:
                assert "\r" not in out and "in flight" not in out
                assert all(line.startswith("[") for line in lines)
            project.state_path.unlink()
            for f in project.area.glob("state.db*"):
                f.unlink()
            emu.reset()
    finally:
        emu.stop()


def test_generation_only_config_completes_without_headline_numbers(project: Project, emulator: Emulator) -> None:
    small_project(project, panel=[], routes={"gpt": DEFAULT_ROUTES["gpt"]})
    result = project.run("refresh", "--interval", "0.05", emulator=emulator)
    assert result.exit_code == 0, result.output
    (row,) = project.sql("SELECT * FROM leaderboard")
    assert row["complete"] == 1 and row["all_tasks_overall"] is None and row["scored_overall"] is None
    report = json.loads(project.run("report", "--format", "json", emulator=emulator).output)
    assert report["routes"][0]["overall"] is None


def test_progress_reports_per_batch_counts_and_time_left(project: Project) -> None:
    """A running batch's request counts (here OpenAI's, which move while it runs) show as one line
    per change off a terminal, with the time left at the rate so far, and in the live line on one."""
    import io
    import re

    from batchrun.base.progress import Progress
    from batchrun.run.refresh import refresh

    small_project(project, panel=[], routes={"gpt": DEFAULT_ROUTES["gpt"]})
    # 2 s for 4 requests: one finishes about every half second, and polls every 0.1 s see it happen.
    emu = Emulator(port=0, latency=2.0).start()
    try:
        result = project.run("refresh", "--interval", "0.1", emulator=emu)
        assert result.exit_code == 0, result.output
        lines = [ln for ln in result.stderr.splitlines() if "requests done" in ln]
        found = [re.search(r"\] (\S+) (\d+)/(\d+) requests done(, about \d+ s left)?$", ln) for ln in lines]
        assert lines and all(found), result.stderr
        done = [int(m.group(2)) for m in found if m]
        assert all(m.group(1).endswith("-gpt-gen") and m.group(3) == "4" for m in found if m)
        # One line per change: each count once, rising; a time left while some are still to do (4/4
        # is seen while the batch is finalizing: every request done, its results being prepared).
        assert done == sorted(set(done)) and all(0 < d <= 4 for d in done) and any(d < 4 for d in done)
        assert all(m.group(4) for m in found if m and int(m.group(2)) < 4)
        assert "\r" not in result.stderr

        # On a terminal the live line carries the same counts.
        project.state_path.unlink()
        for f in project.area.glob("state.db*"):
            f.unlink()
        buf = io.StringIO()
        store = project.store()
        store.start_run("refresh")
        refresh(store, project.load(emu), interval=0.1, progress=Progress(buf, live=True))
        store.close()
        assert re.search(r"1 batch\(es\) in flight \(4 requests\): \S+-gpt-gen [1-3]/4 done, about \d+ s left", buf.getvalue()), buf.getvalue()
    finally:
        emu.stop()
