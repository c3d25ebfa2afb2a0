"""Rough edges a new maintainer met (session 11's walk-through and reviews): a dry run that wrote
state.db, a closed terminal (SIGHUP) that left a run open, a held judge route `status --route`
did not mention, `verify` of another project's folder, a dirty checkout published as its clean
commit, and a refresh's missing-key error naming fewer routes than submit's."""

from __future__ import annotations

import hashlib
from pathlib import Path

from conftest import Project, small_project


def _files(root: Path) -> dict[str, str]:
    """Every file under `root` with a hash of its bytes, but SQLite's -wal and -shm, which any
    reader of a WAL database leaves beside it (status does too)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


def test_submit_dry_run_writes_nothing_on_a_first_run_or_after_one(project: Project) -> None:
    """`submit --dry-run` created state.db (and its lock file) on a first run, and recorded a run
    and synced the config into an existing one: a dry run now works on a throw-away copy."""
    small_project(project)
    before = _files(project.root)
    r = project.run("submit", "--dry-run")
    assert r.exit_code == 0, r.output
    assert "total estimated at the batch rate" in r.output and "gpt" in r.output
    assert _files(project.root) == before  # no state.db, no state.db.lock, no jobs/
    assert not project.state_path.exists() and not (project.root / "jobs").exists()
    # Nor do the other read-only commands on a folder with no state.db yet (they say so, exit 1).
    for command in (("probe", "gpt", "--dry-run"), ("status",), ("report",), ("cost",)):
        r = project.run(*command)
        assert r.exit_code == (0 if command[0] == "probe" else 1), r.output
        assert _files(project.root) == before, command

    assert project.run("plan").exit_code == 0
    runs = project.sql("SELECT count(*) AS n FROM runs")[0]["n"]
    before = _files(project.root)
    r = project.run("submit", "--dry-run")
    assert r.exit_code == 0, r.output
    assert "batch(es) planned and not sent yet" in r.output
    assert _files(project.root) == before  # state.db, its lock file and jobs/ byte for byte
    assert project.sql("SELECT count(*) AS n FROM runs")[0]["n"] == runs
