"""Start-up stays light: what `batchrun --help` and `batchrun status` import, and one SDK client per
route per process. Nothing here is timed (bench/startup.py measures the seconds); these tests keep
the imports that made every command slow from creeping back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from batchrun.providers.clients import make_client

from conftest import KEY_ENV, Project, route, small_project

# Loaded only by the commands that use them (issue 15: ~0.2 s of every command, --help included).
SDKS = ("openai", "anthropic", "google.genai", "httpx")
HEAVY = (*SDKS, "numpy", "sqlite_utils", "importlib.metadata")

_PROBE = """
import json, sys
from batchrun.cli import cli
try:
    cli(sys.argv[1:], prog_name="batchrun")
except SystemExit as e:
    code = e.code
else:
    code = 0
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def imported_by(args: list[str], cwd: Path) -> tuple[int, set[str], str]:
    """Run the CLI in a fresh interpreter; its exit code, every module it imported, its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHRUN_")}
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], set(report["modules"]), done.stdout


def test_help_imports_no_sdk_numpy_sqlite_utils_or_metadata(tmp_path: Path) -> None:
    code, modules, out = imported_by(["--help"], tmp_path)
    assert code == 0 and "Commands:" in out and "status" in out
    assert sorted(m for m in HEAVY if m in modules) == []
    assert not [m for m in modules if m in ("batchrun.run.plan", "batchrun.run.collect", "batchrun.ledger.store")]


def test_version_still_reads_the_installed_version(tmp_path: Path) -> None:
    from batchrun.base.version import __version__

    code, _, out = imported_by(["--version"], tmp_path)
    assert code == 0 and out.strip() == f"batchrun, version {__version__}"


def test_status_on_a_fresh_project_imports_no_sdk_numpy_or_sqlite_utils(project: Project) -> None:
    small_project(project)
    assert project.run("plan").exit_code == 0
    code, modules, out = imported_by(["--config", str(project.config_path), "status"], project.root)
    assert code == 0 and "pending (unsent)" in out
    assert sorted(m for m in HEAVY if m in modules) == []  # a reader opens state.db without sqlite-utils


@pytest.mark.parametrize("provider, model", [("openai", "gpt-5.5"), ("anthropic", "claude-opus-4-8"), ("gemini", "gemini-2.5-pro")])
def test_one_sdk_client_per_route_per_process(project: Project, monkeypatch: pytest.MonkeyPatch, provider: str, model: str) -> None:
    small_project(project, routes={"r": route(provider, model, base_url="http://127.0.0.1:9/v1"),
                                   "other": route(provider, model, base_url="http://127.0.0.1:8/v1")}, panel=[])
    config = project.load()
    r, other = config.routes["r"], config.routes["other"]
    first = make_client(r)
    assert make_client(r) is first  # a second batch of the same route: the same client
    assert make_client(other) is not first  # another route: its own client
    assert make_client(r, timeout=5.0) is not first
    # The SDKs read their environment when a client is built: a changed key (or variable) is a new client.
    monkeypatch.setenv(KEY_ENV, "another-test-key")
    assert make_client(r) is not first


# Each provider's SDK, by the module its adapter imports (providers/<name>.py, lazily).
_SDK_OF = {"openai": "openai", "anthropic": "anthropic", "gemini": "google.genai"}


# One provider is enough to show the rule (each case is a whole refresh in a fresh interpreter).
@pytest.mark.parametrize("provider, contestant, judge", [("openai", "gpt-5.5", "gpt-5.1")])
def test_a_refresh_imports_only_the_sdks_of_its_providers(project: Project, emulator: Any, provider: str, contestant: str,
                                                          judge: str) -> None:
    """A command imports the SDK of each provider its routes use and no other (issue 30 item 4):
    the SDKs are imported inside the adapters' client-making and I/O code, never at import time.
    A whole refresh (plan, preflight, submit, poll, collect, judging, the results files and the
    report) in a fresh interpreter against the emulator, on a config of one provider's routes."""
    small_project(project, routes={"c": route(provider, contestant), "j": route(provider, judge)}, panel=["j"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHRUN_")}
    env[KEY_ENV] = "test-key-not-a-secret"
    args = ["--config", str(project.config_path), "--emulator", emulator.url, "refresh", "--interval", "0.05", "--timeout", "60s"]
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=project.root, env=env, capture_output=True, text=True, timeout=120)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    modules = set(report["modules"])
    assert report["code"] == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert _SDK_OF[provider] in modules  # the SDK really did the work
    assert sorted(sdk for p, sdk in _SDK_OF.items() if p != provider and sdk in modules) == []
