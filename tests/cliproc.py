"""batchrun as a real child process, forked from an interpreter that has already imported it.

`python -m batchrun` spends 1.5-3 s of CPU importing the three provider SDKs before it does
anything, and the crash, fault and lock suites start well over a hundred such processes: on 2
cores that start-up alone was about half of the suite's CPU. Here each run is still its own OS
process, with its own pid, memory, file descriptors and state.db connections, and SIGKILL still
ends it with no cleanup at any point. But it is forked from a server (multiprocessing's
forkserver, one per pytest worker) that imported batchrun and the SDKs once. The child then takes
the arguments, environment, working directory and stdout/stderr that `subprocess.run` would have
given it and runs batchrun's own entry point (`batchrun/__main__.py` calls `cli()`), so exit
codes, output, the writer lock's pid and `BATCHRUN_DIE_AT` all behave as they do in a fresh process.

What a fork does not exercise is interpreter start-up and import itself; tests that are about
that (the usage-error exit code, a missing key) still run `python -m batchrun` literally.

Use `run(...)` where you would use `subprocess.run([sys.executable, "-m", "batchrun", ...])` and
`start(...)` where you would use `subprocess.Popen` (it has pid, poll, wait, kill, send_signal).
"""

from __future__ import annotations

import importlib.util
import io
import multiprocessing
import os
import pkgutil
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any



def _migrations() -> list[str]:
    """The migration modules (a writer creating a state.db imports them all), found by file name."""
    spec = importlib.util.find_spec("batchrun.ledger.migrations")
    paths = list(spec.submodule_search_locations or []) if spec is not None else []
    return [f"batchrun.ledger.migrations.{m.name}" for m in pkgutil.iter_modules(paths) if m.name.startswith("m")]


# Imported once in the fork server, so no child pays for them. Anything a command imports lazily
# and is not listed here is imported by the child itself: slower, never wrong. From the fourth
# line on, what the children of the crash, fault and lock suites still imported themselves (found
# by diffing sys.modules at a child's exit): sqlite_utils cost ~0.2 s of CPU per writer, as it
# imports pandas when that is installed (statsmodels, a test dependency, installs it); the SDK
# clients' first construction imports httpcore2, its transports and SDK resources.
PRELOAD = [
    "cliproc", "batchrun.cli", "batchrun.run.refresh", "batchrun.publish.report", "batchrun.run.status", "batchrun.emulator",
    "batchrun.providers.openai", "batchrun.providers.anthropic", "batchrun.providers.gemini",
    "openai", "anthropic", "google.genai", "numpy",
    "sqlite_utils", "sqlite_utils.migrations", "batchrun.ledger.migrations", *_migrations(), "batchrun.ledger.lock",
    "batchrun.protocol.config_file", "batchrun.base.version", "batchrun.publish.end_of_run", "batchrun.publish.site",
    "batchrun.publish.manifest", "batchrun.publish.results_files", "statistics", "blake3",
    "httpcore2", "h11", "encodings.idna", "encodings.utf_8_sig", "google.auth.aio.credentials", "importlib.resources.readers",
    "opentelemetry.propagate", "opentelemetry.trace.propagation.tracecontext", "opentelemetry.baggage.propagation",
    "openai.resources.batches", "openai.resources.files", "openai.pagination", "openai.lib._files",
]

_ctx: Any = None


def _context() -> Any:
    global _ctx
    if _ctx is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        _ctx = ctx
    return _ctx


def _child(args: list[str], env: dict[str, str], cwd: str | None, out: str, err: str,
           setattrs: dict[str, Any] | None = None) -> None:
    """In the forked child: become `python -m batchrun ARGS` and run it (`setattrs`: module
    globals set first, "module.NAME": value, as `python -c "import module; module.NAME = value;
    from batchrun.cli import cli; cli()"` would)."""
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    # Fresh streams as a new interpreter opens them on files/pipes: stdout block-buffered (what a
    # SIGKILL loses, it loses here too), stderr line-buffered.
    encoding = env.get("PYTHONIOENCODING", "utf-8").split(":")[0] or "utf-8"
    sys.stdout = io.TextIOWrapper(io.open(1, "wb", closefd=False), encoding=encoding)
    sys.stderr = io.TextIOWrapper(io.open(2, "wb", closefd=False), encoding=encoding,
                                  errors="backslashreplace", line_buffering=True)
    sys.argv = [str(Path(sys.modules["batchrun"].__file__ or "batchrun").parent / "__main__.py"), *args]
    for name, value in (setattrs or {}).items():
        module, attr = name.rsplit(".", 1)
        setattr(importlib.import_module(module), attr, value)
    from batchrun.cli import cli

    cli(args=args, prog_name="python -m batchrun")


class BatchrunProcess:
    """A running `batchrun ARGS` child: the subset of subprocess.Popen the tests use."""

    def __init__(self, args: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                 stdout: str | Path | None = None, setattrs: Mapping[str, Any] | None = None) -> None:
        self.args = ["python", "-m", "batchrun", *args]
        self._dir = tempfile.mkdtemp(prefix="batchrun-proc-")
        self._out, self._err = os.path.join(self._dir, "stdout"), os.path.join(self._dir, "stderr")
        self._own_out = stdout is None
        if stdout is not None:
            self._out = str(stdout)
        self._proc = _context().Process(
            target=_child, args=(list(args), dict(os.environ if env is None else env),
                                 None if cwd is None else str(cwd), self._out, self._err, dict(setattrs or {})),
            name="batchrun", daemon=False)
        self._texts: tuple[str, str] | None = None
        self._proc.start()
        self.pid: int = self._proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.exitcode

    def poll(self) -> int | None:
        return self._proc.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._proc.join(timeout)
        if self._proc.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self._collect()
        return self._proc.exitcode

    def _collect(self) -> None:
        if self._texts is None:
            texts = []
            for path in (self._out, self._err):
                if path == self._out and not self._own_out:
                    texts.append("")  # the caller's (a FIFO, read by the test)
                    continue
                try:
                    with open(path, encoding="utf-8", errors="replace") as f:
                        texts.append(f.read())
                except FileNotFoundError:  # killed before it opened its streams
                    texts.append("")
            self._texts = (texts[0], texts[1])
            shutil.rmtree(self._dir, ignore_errors=True)

    def send_signal(self, sig: int) -> None:
        if self._proc.exitcode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def outputs(self) -> tuple[str, str]:
        """What the child wrote to stdout and stderr; waits for it to end."""
        self.wait()
        assert self._texts is not None
        return self._texts


def start(args: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
          stdout: str | Path | None = None, setattrs: Mapping[str, Any] | None = None) -> BatchrunProcess:
    """`subprocess.Popen([python, -m, batchrun, *args])`, forked warm. Its output goes to files,
    read (and removed) when it is waited for: `.outputs()` returns (stdout, stderr). `stdout`: a
    path the child opens for its stdout instead (a FIFO the test reads; its text is then "").
    `setattrs`: module globals the child sets before it runs the CLI ("module.NAME": value), for
    a batchrun that differs in a constant (another prompt template, say)."""
    return BatchrunProcess(args, env=env, cwd=cwd, stdout=stdout, setattrs=setattrs)


def run(args: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
        timeout: float | None = None, setattrs: Mapping[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([python, -m, batchrun, *args], capture_output=True, text=True)`, forked warm."""
    proc = start(args, env=env, cwd=cwd, setattrs=setattrs)
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        out, err = proc.outputs()
        raise subprocess.TimeoutExpired(proc.args, timeout or 0, output=out, stderr=err) from None
    out, err = proc.outputs()
    return subprocess.CompletedProcess(proc.args, code, out, err)


def _ready() -> None:
    """In a forked child: nothing (warm()'s child)."""


_warmed = False


def warm() -> None:
    """Start this process's fork server and wait until it has imported PRELOAD (a first child
    forked and ended), once. The first `start()` in a pytest worker otherwise pays for those
    imports itself: 1.5-3 s of CPU, 11-15 s of wall time at a load average of 5-7. Tests that time
    a child call this before starting their clock, so they time the child, not the fork server."""
    global _warmed
    if not _warmed:
        proc = _context().Process(target=_ready, name="batchrun-warm", daemon=False)
        proc.start()
        proc.join()
        _warmed = True


def stop() -> None:
    """Stop this process's fork server, if one was started, and wait for it: then its CPU time (and
    its children's) counts in this process's, so `time pytest` reports the suite's real cost.

    SIGKILL, not the server's own shutdown (closing its pipe): that lets the server's interpreter
    finalize every module it preloaded, 1.5-2.5 s at the end of each worker for nothing. A killed
    process's CPU time (and that of the children it reaped) is still added to ours when we reap it."""
    global _warmed
    from multiprocessing import forkserver

    _warmed = False  # a later start() starts a new server, whose imports are to be waited for again
    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None) if server is not None else None
    if _ctx is not None and pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        server._stop()  # closes its pipe, reaps it, removes its socket
