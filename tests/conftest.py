"""Shared fixtures: a temporary project folder, the emulator, the CLI.

Everything is real: SQLite files on disk, the official SDKs over HTTP to the emulator on
loopback. Nothing here depends on ../shared.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest


def _byte_compile() -> None:
    """Write the bytecode of batchrun and of the test helpers, even under PYTHONDONTWRITEBYTECODE.

    With that variable set (as on the machines the suite is timed on) and batchrun installed in
    editable mode (pip compiles only what it copies into site-packages), nothing ever writes
    batchrun's .pyc files: every process compiled the package from source again, each pytest
    worker and fork server and every `python -m batchrun`, `-m batchrun.emulator` or `-c` child
    (~2 s of CPU for the whole package), and each worker rewrote the assertions of all test
    modules again on every run (~5.5 s of CPU each). Here the first process to load this file
    (pytest's controller, before it starts the workers) compiles the package and the helpers once,
    as pip does for an installed package; an up-to-date tree costs a stat per file. And pytest
    may cache its rewritten test modules (tests/__pycache__, ignored by git): a second run in the
    same tree does not rewrite them. The processes read the .pyc files whatever the variable says;
    the variable only stops their writing, which is all this undoes, for the suite. Silent (quiet=2):
    a tree it cannot write to just goes on as before, and a syntax error shows when it is imported."""
    import compileall

    sys.dont_write_bytecode = False
    here = Path(__file__).resolve().parent
    compileall.compile_dir(str(here.parent / "batchrun"), quiet=2)
    for helper in here.glob("*.py"):
        if not helper.name.startswith(("test_", "conftest")):
            compileall.compile_file(str(helper), quiet=2)


_byte_compile()  # before batchrun's modules are imported below

from click.testing import CliRunner

from batchrun.cli import cli
from batchrun.protocol.config import Config
from batchrun.protocol.config_file import load_config
from batchrun.emulator import Emulator
from batchrun.ledger.store import Store

KEY_ENV = "BATCHRUN_TEST_KEY"
# The custom_id of a preflight's online request (batchrun.run.preflight.CUSTOM_ID): submit and refresh
# send one per route whose policy has not passed a preflight, before anything of it is uploaded.
PREFLIGHT_ID = "batchrun-preflight"
# The writer lock's grace in tests (BATCHRUN_LOCK_GRACE; 5 s in production): a second writer the
# tests expect to be refused is refused after this, not after 5 s.
LOCK_GRACE = "0.3"


def batch_requests(emulator: Any) -> list[dict[str, Any]]:
    """The requests the emulator processed for batches and sync lines, without the preflights'."""
    return [r for r in emulator.requests if r["custom_id"] != PREFLIGHT_ID]


def preflight_requests(emulator: Any) -> list[dict[str, Any]]:
    return [r for r in emulator.requests if r["custom_id"] == PREFLIGHT_ID]


def resent(requests: list[dict[str, Any]]) -> tuple[int, Counter[str]]:
    """(How many batch or sync requests were processed more than once in all, the preflights'
    count per model) of the requests an emulator processed. The preflights all share one
    custom_id, so they are counted by model (one route per model in the tests that use this)."""
    counts = Counter(r["custom_id"] for r in requests if r["custom_id"] != PREFLIGHT_ID)
    return sum(n - 1 for n in counts.values()), Counter(r["model"] for r in requests if r["custom_id"] == PREFLIGHT_ID)


@pytest.fixture(autouse=True, scope="session")
def _small_ca_bundle(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """SSL_CERT_FILE: one CA certificate instead of a bundle of ~150.

    Every SDK client builds an SSL context when it is constructed, also for the emulator's plain
    http:// on loopback, and loading a whole CA bundle into it costs ~20 ms of CPU (~50 ms under
    load): a refresh builds about ten such contexts, and the suite thousands (google-genai two per
    client). No test speaks TLS (nothing leaves loopback), so what the contexts trust is never
    used. httpx2 (httpcore2's default_ssl_context) and google-genai (_ensure_httpx_ssl_ctx) read
    SSL_CERT_FILE, so the SDKs still build their contexts their own way, from a smaller file. Set
    even when the machine sets it (to its whole bundle); restored at the end."""
    import os
    import ssl

    end = "-----END CERTIFICATE-----"
    sources = [os.environ.get("SSL_CERT_FILE"), ssl.get_default_verify_paths().cafile]
    try:
        import certifi  # google-genai's and httpx's own CA bundle

        sources.insert(0, certifi.where())
    except ImportError:
        pass
    bundle = ""
    for source in filter(None, sources):
        try:
            bundle = Path(source).read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        if "-----BEGIN CERTIFICATE-----" in bundle and end in bundle:
            break
        bundle = ""
    if not bundle:
        yield
        return
    path = tmp_path_factory.mktemp("ca") / "one-ca.pem"
    path.write_text(bundle[bundle.index("-----BEGIN CERTIFICATE-----"):bundle.index(end) + len(end)] + "\n", encoding="ascii")
    before = os.environ.get("SSL_CERT_FILE")
    os.environ["SSL_CERT_FILE"] = str(path)
    ssl.create_default_context(cafile=str(path))  # a file the SDKs could not load would fail every test: fail here
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SSL_CERT_FILE", None)
        else:
            os.environ["SSL_CERT_FILE"] = before


@pytest.fixture(autouse=True, scope="session")
def _warm_batchrun_processes() -> Any:
    """tests/cliproc.py runs batchrun child processes forked from a warm server: stop it at the end."""
    yield
    import cliproc

    cliproc.stop()


@pytest.fixture(autouse=True)
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Isolate every test from the machine's provider settings; fast backoff."""
    for var in (
        "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_API_KEY", "GEMINI_API_KEY",
        "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "BATCHRUN_CONFIG", "BATCHRUN_EMULATOR",
        "BATCHRUN_DIE_AT", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_API_VERSION", "OPENAI_CUSTOM_HEADERS",
        "ANTHROPIC_CUSTOM_HEADERS",
    ):
        monkeypatch.delenv(var, raising=False)
    # Backoffs scale with this (a batch retry waits 60 s at 1.0): 6 ms between rounds here.
    monkeypatch.setenv("BATCHRUN_RETRY_BASE", "0.0001")
    # A second writer is refused after this grace, not the 5 s default (batchrun/ledger/lock.py).
    monkeypatch.setenv("BATCHRUN_LOCK_GRACE", LOCK_GRACE)
    monkeypatch.setenv(KEY_ENV, "test-key-not-secret")


@pytest.fixture
def emulator() -> Any:
    emu = Emulator(host="127.0.0.1", port=0, latency=0.0).start()
    yield emu
    emu.stop()


def route(provider: str, model: str, **extra: Any) -> dict[str, Any]:
    """A route table for the config; every route reads the test key variable."""
    r: dict[str, Any] = {"provider": provider, "model": model, "api_key_env": KEY_ENV}
    if provider == "openai-compatible":
        r["base_url"] = "http://127.0.0.1:9/compatible-mode/v1"  # replaced by --emulator in tests
    r.update(extra)
    return r


def task(task_id: str, question: str, corpus_file: str, rubric: list[tuple[Any, str]] | None = None, **extra: Any) -> dict[str, Any]:
    rubric = rubric or [(60, "first detail"), (40, "second detail")]
    return {
        "task_id": task_id, "question_text": question, "corpus_file": corpus_file,
        "ground_truth": {"answer": f"GOLD ANSWER for {task_id}", "clues": [f"CLUE for {task_id}"],
                         "scoring_rubric": [{"points": p, "correct_criterion": c} for p, c in rubric]},
        **extra,
    }


DEFAULT_ROUTES = {
    "gpt": route("openai", "gpt-5.5"),
    "claude": route("anthropic", "claude-opus-4-8"),
    "gemini": route("gemini", "gemini-2.5-pro"),
    "judge-a": route("anthropic", "claude-sonnet-4-6"),
    "judge-g": route("gemini", "gemini-2.5-flash"),
}
DEFAULT_PANEL = ["judge-a", "judge-g"]
# The protocol's panel: three judges of three distinct models (spec 001 §4). Most tests use
# DEFAULT_PANEL (two judges, a third of the judge requests fewer) or no panel at all, which the
# config refuses unless it says protocol = "custom": Project.config says so for them (their
# numbers are then marked as not WildTrace-protocol numbers), and the tests of protocol numbers
# use this panel.
PROTOCOL_JUDGES = {**{k: DEFAULT_ROUTES[k] for k in DEFAULT_PANEL}, "judge-q": route("openai", "gpt-4.1")}
PROTOCOL_PANEL = [*DEFAULT_PANEL, "judge-q"]


class Project:
    """A batchrun project in a temporary folder: config, dataset, corpus, state.db."""

    def __init__(self, root: Path):
        self.root = root
        (root / "corpus").mkdir(parents=True, exist_ok=True)
        (root / "data").mkdir(parents=True, exist_ok=True)
        self.config_path = root / "batchrun.json"
        self.dataset_path = root / "data" / "tasks.json"
        # Set by the first run or load with an emulator: a rehearsal (--emulator) keeps state.db,
        # jobs/ and results/ under rehearsal/, and the helpers below look there from then on.
        self.rehearsing = False

    @property
    def area(self) -> Path:
        """The folder holding state.db, jobs/ and results/ (the defaults) of the runs under test."""
        return self.root / "rehearsal" if self.rehearsing else self.root

    @property
    def state_path(self) -> Path:
        return self.area / "state.db"

    @property
    def results_dir(self) -> Path:
        return self.area / "results"

    def doc(self, name: str, text: str) -> Path:
        path = self.root / "corpus" / name
        path.write_text(text, encoding="utf-8")
        return path

    def tasks(self, records: list[dict[str, Any]], fmt: str = "json") -> Path:
        if fmt == "jsonl":
            self.dataset_path = self.root / "data" / "tasks.jsonl"
            lines = []
            for r in records:
                r = dict(r)
                r["ground_truth"] = json.dumps(r["ground_truth"], ensure_ascii=False)
                lines.append(json.dumps(r, ensure_ascii=False))
            self.dataset_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        else:
            self.dataset_path = self.root / "data" / "tasks.json"
            self.dataset_path.write_text(json.dumps(records, ensure_ascii=False, indent=1), encoding="utf-8")
        if self.config_path.exists():
            cfg = json.loads(self.config_path.read_text())
            cfg.setdefault("paths", {})["dataset"] = str(self.dataset_path.relative_to(self.root))
            self.config_path.write_text(json.dumps(cfg, indent=1))
        return self.dataset_path

    def config(self, routes: dict[str, Any] | None = None, panel: list[str] | None = None, **sections: Any) -> Path:
        """The config file. A panel of other than three judges declares protocol = "custom" (unless
        `protocol` is given; None: no protocol key at all), as the config is refused otherwise
        (spec 001 §4)."""
        panel = DEFAULT_PANEL if panel is None else panel
        if len(panel) != len(PROTOCOL_PANEL):
            sections.setdefault("protocol", "custom")
        if sections.get("protocol", "") is None:
            del sections["protocol"]
        cfg: dict[str, Any] = {
            "paths": {"dataset": str(self.dataset_path.relative_to(self.root))},
            "judging": {"panel": panel},
            "routes": DEFAULT_ROUTES if routes is None else routes,
        }
        for k, v in sections.items():
            if isinstance(v, dict) and isinstance(cfg.get(k), dict):
                cfg[k].update(v)
            else:
                cfg[k] = v
        self.config_path.write_text(json.dumps(cfg, indent=1))
        return self.config_path

    def load(self, emulator: Any = None) -> Config:
        config = load_config(self.config_path)
        if emulator is None:
            return config
        self.rehearsing = True
        return config.with_emulator(emulator.url)

    def point_at(self, emulator: Any) -> None:
        """Make the config's own base URLs the emulator's (config.with_emulator's rule: each
        adapter's base_url_suffix): runs without --emulator are then real runs, with real state,
        that still work offline."""
        from batchrun.providers import get_adapter

        cfg = json.loads(self.config_path.read_text())
        for r in cfg["routes"].values():
            r["base_url"] = emulator.url + get_adapter(r["provider"]).base_url_suffix
        self.config_path.write_text(json.dumps(cfg, indent=1))

    def store(self) -> Store:
        return Store(self.state_path)

    def run(self, *args: str, emulator: Any = None, input: str | None = None) -> Any:
        """Run the CLI in-process with this project's config (and the emulator, if given)."""
        base = ["--config", str(self.config_path)]
        if emulator is not None:
            base += ["--emulator", emulator.url]
            self.rehearsing = True
        return CliRunner().invoke(cli, [*base, *args], input=input, catch_exceptions=False)

    def sql(self, query: str, params: Any = ()) -> list[dict[str, Any]]:
        conn = sqlite3.connect(self.state_path)
        conn.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in conn.execute(query, params).fetchall()]
        finally:
            conn.close()

    def jobs_files(self) -> list[Path]:
        return sorted((self.area / "jobs").glob("*/requests.jsonl"))


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path / "proj")


def small_project(project: Project, **config_kw: Any) -> Project:
    """Two English documents, one Chinese, four tasks, the default routes and panel."""
    project.doc("harbor.txt", "The harbor crane failed at 03:14 on Tuesday. The operator was Mara Quist. "
                "Wind speed reached 41 knots before the failure. Repairs took nine days.\n" * 5)
    project.doc("lab.txt", "The freezer alarm sounded at 22:05. Dr. Ilse Varga moved 340 samples to unit B. "
                "The compressor relay was replaced by Tomasz Reyes.\n" * 5)
    project.doc("zh.txt", "港口起重机在凌晨三点十四分发生故障。操作员是马拉。风速达到四十一节。维修用了九天。\n" * 5)
    project.tasks([
        task("t1", "When did the harbor crane fail and who was the operator?", "harbor.txt", [(60, "failed at 03:14 on Tuesday"), (40, "operator was Mara Quist")]),
        task("t2", "How long did the crane repairs take and what was the wind speed?", "harbor.txt", [(50, "Repairs took nine days"), (50, "41 knots")]),
        task("t3", "Who moved the freezer samples and how many?", "lab.txt", [(70, "Ilse Varga moved 340 samples"), (30, "unit B")]),
        task("t4", "起重机何时发生故障？", "zh.txt", [(100, "凌晨三点十四分发生故障")]),
    ])
    project.config(**config_kw)
    return project

