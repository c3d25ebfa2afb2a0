"""One resolved view of the inputs per command (issue 28 item 3): the config, the dataset, the
corpus measurements and every route's policy are resolved once, at the top of a command
(ledger/inputs.py), and passed down; nothing below the command reads the dataset, measures the
corpus or builds a policy again. Real commands against the emulator, with the functions that do
that work counted wherever a module holds them."""

from __future__ import annotations

import hashlib
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from batchrun import Store, load_config, refresh
from batchrun.base.errors import DataError
from batchrun.ledger.inputs import resolve_inputs
from batchrun.ledger.sync import sync_state
from batchrun.protocol import corpus, dataset, policy
from batchrun.run.plan import plan
from conftest import Project, route, small_project

CONTESTANTS = ("gpt", "claude", "gemini")
JUDGES = ("judge-a", "judge-g")


class Calls:
    """Counts of the calls that resolve inputs, per (function, first argument worth naming)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def reset(self) -> None:
        self.counts.clear()

    def of(self, name: str) -> dict[str, int]:
        return {key: n for (fn, key), n in self.counts.items() if fn == name}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    """scan_corpus, load_dataset, measure_file and the two policy builders, counted: replaced in
    their own module and in every batchrun module that imported them by name."""
    seen = Calls()

    def counted(name: str, real: Callable[..., Any], key: Callable[..., str]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            seen.counts[(name, key(*args, **kwargs))] += 1
            return real(*args, **kwargs)
        return wrapper

    targets = [
        (corpus, "scan_corpus", lambda *a, **k: ""),
        (corpus, "measure_file", lambda name, *a, **k: name),
        (dataset, "load_dataset", lambda *a, **k: ""),
        (policy, "generation_policy", lambda config, route: route.name),
        (policy, "judge_policy", lambda config, route: route.name),
    ]
    for module, name, key in targets:
        real = getattr(module, name)
        wrapper = counted(name, real, key)
        for loaded in list(sys.modules.values()):
            if getattr(loaded, "__name__", "").startswith("batchrun") and getattr(loaded, name, None) is real:
                monkeypatch.setattr(loaded, name, wrapper)
    yield seen


def _age(path: Path, seconds: float) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)))


def ok(result: Any, *codes: int) -> Any:
    assert result.exit_code in (codes or (0,)), result.output
    return result


def assert_resolved_once(calls: Calls, *, corpus: bool = True, judges: tuple[str, ...] = JUDGES) -> None:
    assert calls.of("scan_corpus") == ({"": 1} if corpus else {})
    assert calls.of("load_dataset") == ({"": 1} if corpus else {})
    assert calls.of("generation_policy") == dict.fromkeys(CONTESTANTS, 1)
    assert calls.of("judge_policy") == dict.fromkeys(judges, 1)


def test_each_command_resolves_its_inputs_once(project: Project, emulator: Any, calls: Calls) -> None:
    """submit, poll, collect and refresh each read the dataset once, scan the corpus once and build
    each route's policy once, however many rounds and steps they run (before issue 28 a refresh
    rescanned the corpus in its pre-check, every sync, every collect and every sync-batch poll)."""
    small_project(project)
    for doc in (project.root / "corpus").iterdir():
        _age(doc, 3600)
    ok(project.run("submit", emulator=emulator))
    assert_resolved_once(calls)
    assert sorted(calls.of("measure_file")) == ["harbor.txt", "lab.txt", "zh.txt"]  # a first run: no cache yet

    calls.reset()
    ok(project.run("poll", "--wait", "--interval", "0.05", "--timeout", "60", emulator=emulator))
    assert_resolved_once(calls, corpus=False)  # poll reads no dataset (it works on a broken one)

    calls.reset()
    ok(project.run("collect", emulator=emulator), 2)  # judging is still to come
    assert_resolved_once(calls)
    assert calls.of("measure_file") == {}  # state.db's cache answered

    calls.reset()
    ok(project.run("refresh", "--interval", "0.05", "--timeout", "60s", emulator=emulator))
    assert_resolved_once(calls)
    assert calls.of("measure_file") == {}


def test_a_poll_that_sends_a_sync_batch_reads_the_corpus_once(project: Project, emulator: Any, calls: Calls) -> None:
    """poll reads the dataset and corpus only to send a sync batch's lines (refusing lines built
    from inputs changed since), and then once."""
    small_project(project, routes={"gpt": route("openai", "gpt-5.5", transport="sync"), "claude": route("anthropic", "claude-opus-4-8"),
                                   "gemini": route("gemini", "gemini-2.5-pro")}, panel=[])
    ok(project.run("submit", emulator=emulator))
    calls.reset()
    ok(project.run("poll", "--wait", "--interval", "0.05", "--timeout", "60", emulator=emulator))
    assert_resolved_once(calls, judges=())
    assert project.sql("SELECT status FROM batches WHERE transport = 'sync'") == [{"status": "downloaded"}]  # its lines went out


def test_the_library_resolves_a_config_once_too(project: Project, emulator: Any, calls: Calls) -> None:
    """`from batchrun import load_config, Store, refresh` (the package docstring's example): a
    Config passed to the library is resolved at the top of the call, once."""
    small_project(project)
    config = load_config(project.config_path).with_emulator(emulator.url)
    project.rehearsing = True
    with Store(config.paths.state, rehearsal=config.rehearsal) as store:
        outcome = refresh(store, config, interval=0.05)
    assert outcome.complete, outcome.reason
    assert_resolved_once(calls)


def test_a_document_edited_after_the_command_measured_it_is_not_sent_under_the_old_ids(project: Project) -> None:
    """A command works from the inputs it resolved at its top: a document edited while it runs
    (a refresh runs for hours) must not go out under ids made from the old text. plan refuses it,
    naming the file; the next command measures it afresh."""
    small_project(project, panel=[])
    config = load_config(project.config_path)
    doc = project.root / "corpus" / "lab.txt"
    with Store(config.paths.state) as store:
        inputs = resolve_inputs(store, config)
        doc.write_text(doc.read_text(encoding="utf-8") + "The relay was replaced twice.\n", encoding="utf-8")
        with pytest.raises(DataError, match=r"lab\.txt changed while this command ran"):
            plan(store, inputs)
        assert not project.jobs_files()  # nothing of it was written for sending
        result = plan(store, config)  # a new command: the new text, under new ids
    new_sha = hashlib.sha256(doc.read_bytes()).hexdigest()
    assert result.to_send > 0
    assert {r["doc_sha256"] for r in project.sql(
        "SELECT c.doc_sha256 FROM cells c JOIN tasks t USING (task_id) WHERE t.corpus_file = 'lab.txt' AND c.custom_id IN "
        "(SELECT custom_id FROM batch_requests)")} == {new_sha}


def test_the_sync_caches_a_measurement_under_the_file_state_it_was_made_from(project: Project) -> None:
    """The sync records a document's measurement under the (size, mtime) it had when the command
    measured it, not under a stat taken later: a document edited in between is measured again by
    the next command instead of being served the old checksum from the cache."""
    small_project(project, panel=[])
    doc = project.root / "corpus" / "lab.txt"
    _age(doc, 3600)
    config = load_config(project.config_path)
    with Store(config.paths.state) as store:
        inputs = resolve_inputs(store, config)
        doc.write_text(doc.read_text(encoding="utf-8").replace("340", "341"), encoding="utf-8")  # same size
        _age(doc, 1800)  # another mtime, old enough to be cached
        sync_state(store, inputs)
        again = resolve_inputs(store, config)
    info = again.require_corpus().docs["lab.txt"]
    assert info.sha256 == hashlib.sha256(doc.read_bytes()).hexdigest()


# --- each document read once per plan (issue 30 item 3) ----------------------------------------

_OPENED: list[str] | None = None  # while a test records: every path opened, however it was opened


def _record_opens(event: str, args: tuple[Any, ...]) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_record_opens)  # audit hooks stay for the process: this one records only inside _reads_of


class _Reads:
    """The corpus files opened (the interpreter's "open" audit event: open(), io.open, os.open
    alike) and the bytes read from each through batchrun's one reader (userfiles.open_regular)."""

    def __init__(self, corpus_dir: Path) -> None:
        self.corpus_dir = corpus_dir.resolve()
        self.opened: list[str] = []
        self.bytes: Counter[str] = Counter()

    def opens(self) -> Counter[str]:
        return Counter(Path(p).resolve().relative_to(self.corpus_dir).as_posix() for p in self.opened
                       if Path(p).resolve().is_relative_to(self.corpus_dir))


@pytest.fixture
def reads(project: Project, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Reads]:
    global _OPENED
    from batchrun.base import userfiles

    seen = _Reads(project.root / "corpus")
    real = userfiles.open_regular

    def counting_open(path: Path) -> Any:
        f = real(path)
        if not Path(path).resolve().is_relative_to(seen.corpus_dir):
            return f
        name = Path(path).resolve().relative_to(seen.corpus_dir).as_posix()
        read = f.read

        def counted_read(n: int = -1) -> bytes:
            data = read(n)
            seen.bytes[name] += len(data)
            return data
        f.read = counted_read  # type: ignore[method-assign]
        return f

    for loaded in list(sys.modules.values()):
        if getattr(loaded, "__name__", "").startswith("batchrun") and getattr(loaded, "open_regular", None) is real:
            monkeypatch.setattr(loaded, "open_regular", counting_open)
    _OPENED = seen.opened
    try:
        yield seen
    finally:
        _OPENED = None


def test_a_plan_reads_each_document_once(project: Project, reads: _Reads) -> None:
    """A first `batchrun plan` measures every document (the custom_ids carry its checksum) and then
    writes it into every line that carries it: the text escaped while it was measured is kept
    (corpus.EscapedSpool), so each file is opened and read once, not once to measure and again
    to escape. A later plan, which finds the measurements in state.db, reads each document it
    writes once too."""
    small_project(project, panel=[])
    sizes = {p.name: p.stat().st_size for p in (project.root / "corpus").iterdir()}
    for doc in (project.root / "corpus").iterdir():
        _age(doc, 3600)
    reads.opened.clear()  # the test writing them
    ok(project.run("plan", "--route", "gpt"))
    assert project.jobs_files()
    assert reads.opens() == Counter(dict.fromkeys(sizes, 1))
    assert reads.bytes == Counter(sizes)

    reads.opened.clear()
    reads.bytes.clear()
    ok(project.run("plan"))  # the other routes now: measured already (state.db's cache), read once to be written
    assert len(project.jobs_files()) > 1
    assert reads.opens() == Counter(dict.fromkeys(sizes, 1))
    assert reads.bytes == Counter(sizes)


def test_a_full_temporary_folder_is_named_as_such(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """plan keeps the documents it escaped while measuring them in the temporary folder: when that
    folder cannot take them, the error names it (and TMPDIR), exits 1, and leaves nothing behind."""
    import errno
    import tempfile

    small_project(project, panel=[])

    def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", full)
    result = project.run("plan")
    assert result.exit_code == 1
    assert "TMPDIR" in result.output and tempfile.gettempdir() in result.output and "Traceback" not in result.output
    assert not project.state_path.exists() and not project.jobs_files()
