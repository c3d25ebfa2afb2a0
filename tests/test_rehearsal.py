"""Rehearsals (--emulator) never touch real results; provenance names the hosts batches went to.

A rehearsal keeps state.db, jobs/ and results/ under rehearsal/ and marks its state.db; a store of
the other kind is refused. Every batch records the host it was really sent to, and the report's
provenance reads the hosts from those records, not from the current config or flags. "Real" runs
here are real runs whose routes' base URLs point at the emulator (Project.point_at), so they work
offline.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from batchrun.cli import cli
from batchrun.emulator import Emulator
from conftest import Project, batch_requests, preflight_requests, route, small_project

TITLE = "# Rehearsal on the emulator at {} — not real results"


def ok(result: Any, code: int = 0) -> Any:
    assert result.exit_code == code, result.output
    return result


def rows(db: Path, query: str, params: Any = ()) -> list[dict[str, Any]]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(query, params).fetchall()]
    finally:
        conn.close()


def meta(db: Path, key: str) -> str | None:
    found = rows(db, "SELECT value FROM meta WHERE key = ?", [key])
    return found[0]["value"] if found else None


def host_of(emu: Emulator) -> str:
    return emu.url.split("://", 1)[1].rstrip("/")


def test_rehearsal_then_real_run_sends_every_cell_and_keeps_apart(project: Project, emulator: Emulator) -> None:
    small_project(project)
    real_db, rehearsal_db = project.root / "state.db", project.root / "rehearsal" / "state.db"

    rehearsal = ok(project.run("refresh", "--interval", "0.05", emulator=emulator))
    assert rehearsal.stdout.splitlines()[0] == TITLE.format(emulator.url)
    for name in ("state.db", "jobs", "results"):
        assert (project.root / "rehearsal" / name).exists()
        assert not (project.root / name).exists()
    assert meta(rehearsal_db, "rehearsal") == emulator.url
    rehearsed = [r["custom_id"] for r in batch_requests(emulator)]
    assert rehearsed and len(set(rehearsed)) == len(rehearsed)
    preflights = len(preflight_requests(emulator))
    assert preflights == 5  # the rehearsal preflights every route against the emulator

    # The real run, same config but without --emulator: it finds everything still to do.
    project.point_at(emulator)
    real = ok(project.run("refresh", "--interval", "0.05"))
    assert "Rehearsal" not in real.stdout and "| # | Route |" in real.stdout
    assert "nothing to do" not in real.output
    # The real run keeps its own preflights (its own state.db): each route checked again.
    assert len(preflight_requests(emulator)) == 2 * preflights
    sent = Counter(r["custom_id"] for r in batch_requests(emulator)[len(rehearsed):])
    wanted = {r["custom_id"] for r in rows(real_db, "SELECT custom_id FROM requests")}
    gen = {r["custom_id"] for r in rows(real_db, "SELECT custom_id FROM cells WHERE scope = 'send'")}
    assert gen and gen <= wanted
    assert set(sent) == wanted and set(sent.values()) == {1}  # every real cell and judgment sent, once
    assert wanted == set(rehearsed)  # the very requests the rehearsal had answered

    # The real state.db holds the real run only: no rehearsal mark, batches, attempts or results.
    assert meta(real_db, "rehearsal") is None
    assert [r["command"] for r in rows(real_db, "SELECT command FROM runs")] == ["refresh"]
    real_batches = {r["provider_batch_id"] for r in rows(real_db, "SELECT provider_batch_id FROM batches")}
    rehearsal_batches = {r["provider_batch_id"] for r in rows(rehearsal_db, "SELECT provider_batch_id FROM batches")}
    assert real_batches and not real_batches & rehearsal_batches
    assert Counter(r["custom_id"] for r in rows(real_db, "SELECT custom_id FROM batch_requests")) == sent
    assert len(rows(real_db, "SELECT id FROM results")) == len(wanted)
    assert {r["dir"].startswith(str(project.root / "jobs")) for r in rows(real_db, "SELECT dir FROM batches")} == {True}

    # Reports: the rehearsal's says so in every format; the real one does not.
    md = ok(project.run("report", emulator=emulator)).stdout
    assert md.splitlines()[0] == TITLE.format(emulator.url)
    data = json.loads(ok(project.run("report", "--format", "json", emulator=emulator)).stdout)
    assert data["rehearsal"] == emulator.url and all(r["provenance"]["rehearsal"] == emulator.url for r in data["routes"])
    csv_lines = ok(project.run("report", "--format", "csv", emulator=emulator)).stdout.splitlines()
    assert csv_lines[0].endswith(",rehearsal") and all(line.endswith("," + emulator.url) for line in csv_lines[1:])
    scores = json.loads((project.root / "rehearsal" / "results" / "gpt.scores.json").read_text())
    assert scores["provenance"]["rehearsal"] == emulator.url
    for command in ("cost", "status"):  # data on stdout as for real runs; the note on stderr
        r = ok(project.run(command, "--json", emulator=emulator))
        assert json.loads(r.stdout) and r.stderr.startswith(TITLE.format(emulator.url)[2:])
        assert "Rehearsal" not in ok(project.run(command, "--json")).stderr
    assert "# Rehearsal" not in ok(project.run("report")).stdout
    real_data = json.loads(ok(project.run("report", "--format", "json")).stdout)
    assert real_data["rehearsal"] is None
    assert all(line.endswith(",") for line in ok(project.run("report", "--format", "csv")).stdout.splitlines()[1:])


def test_provenance_hosts_come_from_the_batches_not_from_the_flags(project: Project, emulator: Emulator) -> None:
    small_project(project)
    ok(project.run("refresh", "--interval", "0.05", emulator=emulator))
    other = Emulator(host="127.0.0.1", port=0, latency=0.0).start()
    try:
        # Reading the rehearsal with --emulator at another address does not move its answers there.
        data = json.loads(ok(project.run("report", "--format", "json", emulator=other)).stdout)
    finally:
        other.stop()
    for r in data["routes"]:
        p = r["provenance"]
        assert p["endpoint_host"] == host_of(emulator) and p["endpoint_hosts"] == [host_of(emulator)]
        assert p["configured_host"] == host_of(other)
        assert all(j["endpoint_hosts"] == [host_of(emulator)] for j in p["judge_panel"])

    # A real run at the emulator, then the config moves the routes back to the providers.
    project.point_at(emulator)
    ok(project.run("refresh", "--interval", "0.05"))
    cfg = json.loads(project.config_path.read_text())
    for spec in cfg["routes"].values():
        del spec["base_url"]
    project.config_path.write_text(json.dumps(cfg))
    data = json.loads(ok(project.run("report", "--format", "json")).stdout)
    configured = {"gpt": "api.openai.com", "claude": "api.anthropic.com", "gemini": "generativelanguage.googleapis.com"}
    assert {r["route"]: r["provenance"]["configured_host"] for r in data["routes"]} == configured
    assert {r["provenance"]["endpoint_host"] for r in data["routes"]} == {host_of(emulator)}
    md = ok(project.run("report")).stdout
    assert f"at {host_of(emulator)} (the config now names api.openai.com)" in md


def test_every_batch_records_the_host_it_was_sent_to(project: Project, emulator: Emulator) -> None:
    dead = "http://127.0.0.1:9"
    small_project(project, routes={
        "gpt": route("openai", "gpt-5.5", base_url=dead + "/v1"),
        "claude": route("anthropic", "claude-opus-4-8", base_url=dead),
        "gemini": route("gemini", "gemini-2.5-pro", base_url=dead),
        "kimi": route("openai-compatible", "kimi-k2.6", transport="sync", base_url=dead + "/v1", send_temperature=False),
        "judge-a": route("anthropic", "claude-sonnet-4-6", base_url=dead),
        "judge-g": route("gemini", "gemini-2.5-flash", base_url=dead),
    })
    ok(project.run("plan"))  # planned for the configured host
    assert {r["endpoint_host"] for r in project.sql("SELECT endpoint_host FROM batches")} == {"127.0.0.1:9"}
    project.point_at(emulator)  # then the config moves every route before anything is sent
    ok(project.run("refresh", "--interval", "0.05"))
    batches = project.sql("SELECT transport, stage, endpoint_host FROM batches")
    assert {(b["transport"], b["stage"]) for b in batches} == {("batch", "gen"), ("sync", "gen"), ("batch", "judge")}
    assert {b["endpoint_host"] for b in batches} == {host_of(emulator)}


def test_an_sdk_base_url_variable_pointing_at_this_machine_is_refused_in_a_real_run(
        project: Project, emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """No base_url in the routes: the SDKs read their own variables. Left over in a shell from a
    rehearsal, they would send a real run to the emulator and record its answers as real results
    (found by an adversarial review): refused by name, before anything is sent."""
    calls_before = len(emulator.calls)
    cases = (("openai", "gpt-5.5", "OPENAI_BASE_URL", emulator.url + "/v1"), ("anthropic", "claude-opus-4-8", "ANTHROPIC_BASE_URL", emulator.url),
             ("gemini", "gemini-2.5-pro", "GOOGLE_GEMINI_BASE_URL", emulator.url))
    for provider, model, env, url in cases:
        small_project(project, panel=[], routes={"r": route(provider, model)})  # one route: nothing goes anywhere else
        monkeypatch.setenv(env, url)
        r = project.run("refresh", "--interval", "0.05", "--timeout", "10s")
        assert r.exit_code == 1, r.output
        assert env in r.output and "on this machine" in r.output and "--emulator" in r.output and "Traceback" not in r.output
        monkeypatch.delenv(env)
    assert len(emulator.calls) == calls_before  # nothing reached the emulator
    assert not project.sql("SELECT * FROM results") and not project.sql("SELECT * FROM batches WHERE provider_batch_id IS NOT NULL")
    # The same local address named in the config is a choice (recorded in the route's policy): allowed.
    small_project(project, panel=[], routes={"gpt": route("openai", "gpt-5.5", base_url=emulator.url + "/v1")})
    ok(project.run("refresh", "--interval", "0.05"))
    assert {r["endpoint_host"] for r in project.sql("SELECT endpoint_host FROM batches WHERE status = 'collected'")} == {host_of(emulator)}


@pytest.mark.parametrize("host,local", [
    ("127.0.0.1", True), ("localhost", True), ("[::1]", True), ("LOCALHOST", True), ("localhost.", True), ("0.0.0.0", True),
    ("127.1", True), ("[::ffff:127.0.0.1]", True), ("[::]", True), ("foo.localhost", True),
    ("api.openai.com", False), ("10.0.0.1", False), ("generativelanguage.googleapis.com", False),
])
def test_every_spelling_of_this_machine_counts_as_this_machine(host: str, local: bool) -> None:
    from batchrun.providers.clients import _reaches_this_machine

    assert _reaches_this_machine(host) is local


def test_a_store_of_the_other_kind_is_refused(project: Project, emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    small_project(project)
    # BATCHRUN_EMULATOR rehearses like --emulator.
    monkeypatch.setenv("BATCHRUN_EMULATOR", emulator.url)
    ok(project.run("plan"))
    monkeypatch.delenv("BATCHRUN_EMULATOR")
    rehearsal_db = project.root / "rehearsal" / "state.db"
    assert meta(rehearsal_db, "rehearsal") == emulator.url and not (project.root / "state.db").exists()

    # A real run whose config points at the rehearsal's state.db.
    cfg = json.loads(project.config_path.read_text())
    cfg["paths"]["state"] = "rehearsal/state.db"
    project.config_path.write_text(json.dumps(cfg))
    before = rehearsal_db.read_bytes()
    for args in (["submit"], ["poll"], ["collect"], ["retry", "--route", "gpt"]):
        r = ok(project.run(*args), 1)
        assert f"was made by a rehearsal on the emulator at {emulator.url}" in r.output and "not real results" in r.output
        assert "Hint:" in r.output and "Traceback" not in r.output
    assert rehearsal_db.read_bytes() == before
    # Reading it is harmless, and says whose it is (issue 29 item 1).
    for args in (["status"], ["report"], ["cost"], ["submit", "--dry-run"]):
        r = ok(project.run(*args))
        assert TITLE.format(emulator.url)[2:] in r.output
    assert emulator.calls == []

    # A rehearsal pointed at a real state.db: a real store copied where the rehearsal keeps its own.
    del cfg["paths"]["state"]
    project.config_path.write_text(json.dumps(cfg))
    ok(project.run("plan"))
    real_db = project.root / "state.db"
    conn = sqlite3.connect(real_db)
    with conn:  # as the previous batchrun left it: one migration behind, which a refusal must not apply
        conn.execute("DROP TABLE document_readings")
        conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm009_document_readings'")
    conn.close()
    shutil.copyfile(real_db, rehearsal_db)
    before = rehearsal_db.read_bytes()
    for args in (["plan"], ["submit"], ["poll"], ["cancel", "--all"], ["status"], ["report"]):
        r = ok(project.run(*args, emulator=emulator), 1)
        assert "holds the state of real runs" in r.output and "Traceback" not in r.output
    assert rehearsal_db.read_bytes() == before
    assert emulator.calls == []


def test_demo_folder_reads_as_a_rehearsal_and_refuses_real_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29 items 1 and 9: in the demo's folder the README's reading commands work, with or
    without --emulator, and say it is a rehearsal; what would send real work is refused, before
    anything is sent."""
    folder = tmp_path / "demo"
    runner = CliRunner()
    first = runner.invoke(cli, ["demo", "--dir", str(folder)], catch_exceptions=False)
    assert first.exit_code == 0, first.output
    assert first.stdout.startswith("# Rehearsal on the emulator at http://127.0.0.1:")
    url = meta(folder / "state.db", "rehearsal")
    assert url.startswith("http://127.0.0.1:")
    # The demo keeps its own paths: nothing under rehearsal/.
    assert not (folder / "rehearsal").exists()
    monkeypatch.chdir(folder)  # as a user does: cd demo-run && batchrun report

    def run(*args: str, code: int = 0) -> Any:
        return ok(runner.invoke(cli, list(args), catch_exceptions=False), code)

    stopped = Emulator(host="127.0.0.1", port=0, latency=0.0).start()
    stopped.stop()  # a loopback URL where nothing listens: anything sent there fails loudly
    for flags in ([], ["--emulator", stopped.url]):
        # Markdown and CSV carry the rehearsal's own URL (the state.db's), JSON its `rehearsal` key.
        assert run(*flags, "report").stdout.startswith(TITLE.format(url) + "\n")
        assert json.loads(run(*flags, "report", "--format", "json").stdout)["rehearsal"] == url
        assert run(*flags, "report", "--format", "csv").stdout.splitlines()[1].endswith("," + url)
        for command in (["status"], ["cost"]):
            text = run(*flags, *command)
            assert text.stderr.startswith(TITLE.format(url)[2:])
            assert json.loads(run(*flags, *command, "--json").stdout)["rehearsal"] == url
        compared = json.loads(run(*flags, "compare", "gpt-5.5", "claude-opus-4.8", "--json").stdout)
        assert compared["rehearsal"] == url
        assert f"rehearsal on the emulator at {url}" in run(*flags, "verify").stdout
        # No rehearsal/state.db was looked for and missed, or made.
        assert not (folder / "rehearsal").exists()
    # plan and submit --dry-run send nothing: they plan the demo's state.db as the rehearsal it is.
    planned = run("plan", "--json")
    assert json.loads(planned.stdout)["rehearsal"] == url and planned.stderr.startswith(TITLE.format(url)[2:])
    assert all(r["to_send"] == 0 for r in json.loads(planned.stdout)["routes"])
    dry = run("submit", "--dry-run")
    assert dry.stderr.startswith(TITLE.format(url)[2:]) and "Nothing new to write." in dry.stderr
    # So does probe --dry-run: its JSON says whose numbers these are, as status's and cost's do.
    probed = run("probe", "gpt-5.5", "--dry-run", "--json")
    assert json.loads(probed.stdout)["rehearsal"] == url and probed.stderr.startswith(TITLE.format(url)[2:])
    before = (folder / "state.db").stat().st_mtime_ns, len(list((folder / "jobs").iterdir()))
    # What would send real work into (or collect it from) a rehearsal's state.db is refused.
    for command in (["submit"], ["refresh"], ["poll"], ["collect"], ["cancel", "--all"]):
        r = run(*command, code=1)
        assert f"was made by a rehearsal on the emulator at {url}" in r.output and "Traceback" not in r.output
    assert len(list((folder / "jobs").iterdir())) == before[1]


def test_a_store_whose_creation_was_cut_short_is_of_neither_kind(tmp_path) -> None:
    """Killed after the migrations but before the meta rows naming its kind (store_id,
    rehearsal): the store holds nothing, and the next writer, of either kind, takes it."""
    from batchrun.ledger.store import Store, migrations
    from sqlite_utils import Database

    for rehearsal in ("http://127.0.0.1:9", None):
        path = tmp_path / f"{bool(rehearsal)}.db"
        db = Database(path)
        migrations.apply(db)  # what Store.__init__ does first
        db.close()
        store = Store.open(path, rehearsal=rehearsal)
        assert store.meta("store_id") and store.meta("rehearsal") == rehearsal
        store.close()
        store = Store.open(path, rehearsal=rehearsal)  # and from then on it is of that kind
        store.close()


def test_reading_after_only_a_rehearsal_points_at_the_rehearsal_not_a_real_run(project: Project, emulator: Emulator) -> None:
    """After rehearsing only, plain `status` and `report` said "Run batchrun plan or batchrun
    submit first", which would start a real run (found by a newcomer): they name the rehearsal's
    state.db and the --emulator URL it recorded."""
    small_project(project)
    ok(project.run("plan", emulator=emulator))
    assert (project.root / "rehearsal" / "state.db").is_file() and not (project.root / "state.db").exists()
    for command in ("status", "report"):
        r = ok(project.run(command), 1)
        assert f"No state database at {project.root / 'state.db'}." in r.output
        assert f"Only a rehearsal has run here: {project.root / 'rehearsal' / 'state.db'} is its state.db" in r.output
        assert f"`batchrun --emulator {emulator.url} COMMAND` (status, report, ...)" in r.output
        assert "Run `batchrun plan`" not in r.output
    assert not (project.root / "state.db").exists()  # nothing created by the reads
