"""Findings of session 12's review and the audit's left-alone items, each with the test that failed
before its fix: a moved project's poll, a rehearsal's results verified without --emulator, a
Gemini listing of small pages."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from conftest import Project, small_project

from batchrun.cli import cli
from batchrun.providers.gemini import MAX_EMPTY_PAGES, _entries
from batchrun.providers import MalformedResponse


def test_a_moved_projects_poll_writes_nothing_under_the_old_location_and_says_why(project: Project, emulator: Any,
                                                                                   tmp_path: Path) -> None:
    """state.db records each batch's folder as an absolute path. A project copied elsewhere (the
    original deleted) while batches were in flight had poll re-create the old project's jobs/
    folder and download there, recording paths outside the project."""
    small_project(project)
    project.point_at(emulator)
    assert project.run("submit").exit_code == 0
    old, new = project.root, tmp_path / "moved"
    shutil.copytree(old, new)
    shutil.rmtree(old)
    r = CliRunner().invoke(cli, ["--config", str(new / project.config_path.name), "poll", "--wait", "--timeout", "20"])
    assert r.exit_code == 1, r.output
    assert "outside this project's jobs folder" in r.output and "[paths] jobs" in r.output, r.output
    assert "Traceback" not in r.output
    assert not old.exists(), sorted(str(p) for p in old.rglob("*"))


def test_a_rehearsals_results_verified_without_emulator_are_named_as_a_rehearsals(project: Project, emulator: Any) -> None:
    """verify rehearsal/results without --emulator compared them with the real state.db, and the
    hint named the very command just run."""
    small_project(project)
    assert project.run("refresh", "--timeout", "60", emulator=emulator).exit_code == 0
    project.rehearsing = False
    assert project.run("plan").exit_code == 0  # the real state.db, another store
    folder = next(project.root.rglob("rehearsal/results"))
    r = CliRunner().invoke(cli, ["--config", str(project.config_path), "verify", str(folder)])
    assert r.exit_code == 1, r.output
    assert "rehearsal" in r.output and f"--emulator {emulator.url}" in r.output, r.output
    again = CliRunner().invoke(cli, ["--config", str(project.config_path), "--emulator", emulator.url, "verify", str(folder)])
    assert again.exit_code == 0, again.output[-1000:]


class _Pager:
    """google-genai's Pager as _entries reads it: .page, .config['page_token'], .next_page()."""

    def __init__(self, pages: list[list[int]]) -> None:
        self.pages, self.n = pages, 0
        self._set()

    def _set(self) -> None:
        self.page = self.pages[self.n]
        self.config = {"page_token": f"t{self.n + 1}" if self.n + 1 < len(self.pages) else None}

    def next_page(self) -> list[int]:
        self.n += 1
        self._set()
        return self.page


def test_a_gemini_listing_of_small_pages_is_read_whole_and_endless_empty_pages_are_refused() -> None:
    """AIP-158 lets a server return fewer entries than asked: 10 a page for 1,010 batches failed
    as 'more than 100 pages'. Pages with entries are bounded by the reader; empty pages are not."""
    small = [list(range(i, i + 10)) for i in range(0, 1010, 10)]
    assert list(_entries(_Pager(small))) == list(range(1010))
    assert list(_entries(_Pager([[], [], [1], [], [2]]))) == [1, 2]
    try:
        list(_entries(_Pager([[]] * (MAX_EMPTY_PAGES + 2))))
    except MalformedResponse as e:
        assert "empty pages" in str(e)
    else:
        raise AssertionError("endless empty pages were read")


_BUG = r'''
import os, sys
import batchrun.run.status as status

def bug(*args, **kwargs):
    raise RuntimeError("a bug met what a provider sent: " + os.environ[sys.argv[2]])

status.status_data = bug
from batchrun.cli import cli
cli.main(["--config", sys.argv[1], "status"])
'''


def test_the_traceback_of_a_bug_is_printed_redacted(project: Project) -> None:
    """A bug keeps its traceback (exit 1 by Python), but what Python prints passed no redaction:
    an exception's message holding a key (audit, left alone then) reached stderr as it was."""
    import os
    import subprocess
    import sys

    from conftest import KEY_ENV

    small_project(project)
    assert project.run("plan").exit_code == 0
    key = "sk-proj-" + "Zq7" * 16
    p = subprocess.run([sys.executable, "-c", _BUG, str(project.config_path), KEY_ENV], capture_output=True, text=True,
                       timeout=60, env={**os.environ, KEY_ENV: key})
    assert p.returncode == 1 and "Traceback" in p.stderr and "RuntimeError: a bug met what a provider sent" in p.stderr, p.stderr
    assert key not in p.stderr and key[8:] not in p.stderr, p.stderr


def test_the_host_recorded_from_an_sdks_base_url_variable_holds_no_credentials(project: Project) -> None:
    """Without a base_url in the route the SDK takes its own *_BASE_URL, which may carry
    user:password@ (a proxy's login): the batches recorded and published it as their host."""
    import openai

    from batchrun.protocol.config_file import load_config
    from batchrun.providers.clients import client_host

    small_project(project)
    route = next(r for r in load_config(project.config_path).routes.values() if r.provider == "openai" and not r.base_url)
    client = openai.OpenAI(api_key="k", base_url="https://proxyuser:s3cret-pass@gateway.example.invalid:8443/v1")
    assert client_host(client, route) == "gateway.example.invalid:8443"
