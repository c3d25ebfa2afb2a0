"""`batchrun demo`: a whole leaderboard refresh on the built-in emulator, no keys needed.

Creates a working folder with the shipped demo dataset, corpus and config, starts the emulator
in-process on a free loopback port, points every route at it, runs `refresh`, and prints the
leaderboard and where state.db, jobs/, results/ and the static site (results/site/index.html) are.
Running it again finds nothing to do.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from ...base.errors import BatchrunError, DataError
from ...base.progress import Progress
from ...ledger.lock import WriterLock
from ...ledger.store import Store
from ...protocol.config_file import load_config

DEMO_KEY_ENV = "BATCHRUN_DEMO_KEY"
DEFAULT_FOLDER = "demo-run"  # in the current folder, unless that is in a demo folder already (enclosing_demo)


# Written by every demo into its folder: the folder is the demo's to refresh, whatever this
# batchrun's shipped config and dataset are now (an upgrade may change them).
MARKER = ".batchrun-demo"


def _refuse_another_project(directory: Path, root: Path) -> None:
    """The demo writes its dataset and documents into its folder and runs its config there. A
    folder holding another project (found by a review: `demo --dir` on a real project overwrote
    its data/dataset.json and same-named documents) is refused, not overwritten or run. A demo
    folder (its marker, the demo's config, or a state.db a demo or rehearsal marked) is the
    demo's to refresh."""
    import sqlite3

    config, state = directory / "batchrun.toml", directory / "state.db"
    if (directory / MARKER).is_file() or (config.exists() and config.read_bytes() == (root / "batchrun.toml").read_bytes()):
        return
    if state.is_file():
        try:
            conn = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
            try:
                if conn.execute("SELECT value FROM meta WHERE key = 'rehearsal'").fetchone():
                    return  # a demo folder from before the marker, whose config was edited
            finally:
                conn.close()
        except sqlite3.Error:
            pass  # not readable as a marked state.db: not known to be a demo's
    ours = [("data/dataset.json", root / "dataset.json"), *((f"corpus/{doc.name}", doc) for doc in sorted((root / "corpus").glob("*.txt")))]
    overwritten = [name for name, src in ours if (directory / name).exists() and (directory / name).read_bytes() != src.read_bytes()]
    problems = []
    if config.exists():
        problems.append("its own batchrun.toml, which the demo would run on the emulator, writing into the folder")
    if state.exists():
        problems.append("a state.db that is not a demo's")
    if overwritten:
        problems.append(f"its own {', '.join(overwritten)}, which the demo would overwrite")
    if problems:
        elsewhere = "demo-run" if directory.name != "demo-run" else "demo-run-2"
        raise DataError(f"{directory} holds another project: {'; '.join(problems)}. Nothing was changed.",
                        f"Give the demo a folder of its own: `batchrun demo --dir {elsewhere}`, or any new folder.")


def enclosing_demo(start: Path) -> Path | None:
    """The demo folder `start` is in: itself or the nearest folder above holding a demo's marker
    (every demo writes it), or None. `batchrun demo` run there without --dir refreshes that folder
    rather than nesting another demo-run inside it (found by a review: `cd demo-run && batchrun
    demo` made demo-run/demo-run). Only the marker counts: a folder above that merely holds a
    state.db is a project's, not known to be the demo's."""
    for folder in (start, *start.parents):
        if (folder / MARKER).is_file():
            return folder
    return None


def prepare(directory: Path) -> Path:
    """Copy the demo files into `directory` (keeping an existing config); return the config path."""
    src = resources.files("batchrun.cli.demo")
    with resources.as_file(src) as root:
        _refuse_another_project(directory, root)
        (directory / "data").mkdir(parents=True, exist_ok=True)
        (directory / "corpus").mkdir(parents=True, exist_ok=True)
        (directory / MARKER).write_text("This folder is batchrun's demo: `batchrun demo --dir` refreshes it.\n", encoding="utf-8")
        shutil.copyfile(root / "dataset.json", directory / "data" / "dataset.json")
        for doc in sorted((root / "corpus").glob("*.txt")):
            target = directory / "corpus" / doc.name
            if not target.exists() or target.read_bytes() != doc.read_bytes():
                shutil.copyfile(doc, target)
        config = directory / "batchrun.toml"
        if not config.exists():
            shutil.copyfile(root / "batchrun.toml", config)
    return config


def sqlite_utils_command() -> str:
    """sqlite-utils as it can be run from here: the one installed beside this Python (a venv's
    bin/, which is not on PATH unless the venv is activated), else the bare name."""
    import sys

    beside = Path(sys.executable).parent / "sqlite-utils"
    if beside.exists() and shutil.which("sqlite-utils") != str(beside):
        return str(beside)
    return "sqlite-utils"


def run_demo(directory: str | Path | None, *, progress: Progress, echo: Callable[..., None] = print, latency: float = 0.3,
             interval: float = 0.2, quiet: bool = False) -> int:
    """Run the demo in `directory` (None: the demo folder the current folder is in, else
    ./demo-run); the exit code. `quiet` (-q): the leaderboard only, and why the refresh stopped
    if it is incomplete; not where the files are or what to try next."""
    from ...emulator import Emulator
    from ...ledger.inputs import resolve_inputs
    from ...publish.end_of_run import publish
    from ...run.refresh import refresh
    from ...base.stop import checkpoint, stop_signal
    from ...publish.report import render

    if directory is None:
        found = enclosing_demo(Path.cwd().resolve())
        if found is not None and not quiet:
            echo(f"Using the demo folder {found}, which this folder is in (--dir PATH for another).", err=True)
        directory = found or DEFAULT_FOLDER
    folder = Path(directory).resolve()
    try:
        config_path = prepare(folder)
    except OSError as e:
        # /proc/demo, a read-only mount, a path through a file: the user's --dir, said as such.
        raise BatchrunError(f"Cannot set up the demo folder {folder} (--dir {directory}): {e.strerror or e}.",
                            "Pass --dir a folder you can create and write, e.g. --dir demo-run (created in the current folder).") from None
    os.environ.setdefault(DEMO_KEY_ENV, "demo-key-not-a-secret")
    emu = Emulator(host="127.0.0.1", port=0, latency=latency).start()
    try:
        # The demo folder is all demo: it keeps the usual paths, but its state.db is marked as a
        # rehearsal's (Store.open), so it is never taken for, or mixed into, real results.
        config = load_config(config_path).with_emulator(emu.url, own_paths=False)
        progress.event(f"emulator listening on {emu.url}; working folder {folder}")
        lock = WriterLock(config.paths.state, "demo").acquire()
        try:
            store = Store.open(config.paths.state, rehearsal=config.rehearsal)
        except BaseException:
            lock.release()
            raise
        store.start_run("demo")
        try:
            inputs = resolve_inputs(store, config, escape=True)  # once, for the refresh and what it publishes
            outcome = refresh(store, inputs, interval=interval, progress=progress)
            published = publish(store, inputs, command="demo")
            checkpoint()  # a stop swallowed where it landed is recorded as one (base/stop.py)
            store.end_run("ok")
            echo(render(published.data, "md"))
        except BaseException as e:
            store.fail_run(e, interrupted=stop_signal() is not None)  # as a writer's (cli.support.writer)
            raise
        finally:
            store.close()
            lock.release()
    finally:
        emu.stop()
    if not quiet or not outcome.complete:
        echo(f"refresh: {outcome.reason}", err=True)
    if not quiet:
        echo(f"state.db: {config.paths.state}\njobs/:    {config.paths.jobs}\nresults/: {config.paths.results}", err=True)
        echo(f"site:     {published.site}", err=True)
        echo(f"Try: {sqlite_utils_command()} {config.paths.state} \"select * from leaderboard\"", err=True)
    return 0 if outcome.complete else 2
