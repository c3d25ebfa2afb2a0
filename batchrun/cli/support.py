"""The CLI's plumbing, apart from the commands: the command context, turning errors into
messages and exit codes, opening state.db as the one writer or as a reader, shared options, and
what several commands print (warnings, blocked and waiting routes, retries on stderr)."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import TYPE_CHECKING, Any

import click

from ..base.durations import parse_duration
from ..base.errors import BatchrunError, StateError, environment_error, read_only
from ..base.progress import Progress
from ..base.redaction import redact, redact_python_output, short_key_warnings
from ..base.stop import Stopped, checkpoint, record, stop_signal, swallowed_stops_unsaid

if TYPE_CHECKING:  # imported where used: `batchrun --help` needs neither the config nor state.db
    from ..ledger.inputs import Inputs
    from ..ledger.store import Store
    from ..protocol.config import Config

EXIT_INCOMPLETE = 2


class Context:
    """What every command shares: the global options. `quiet` (-q) means data and what needs
    action only: stdout keeps the data; stderr keeps errors, what was held back or blocked and
    why, an incomplete run's reason, a rehearsal's label and the short-key warning; progress and
    notices (where files went, "Nothing new to write.", a complete run's summary) are left out
    (README, "Global options")."""

    def __init__(self, config_path: str | None, emulator: str | None, quiet: bool):
        self.config_path = config_path
        self.emulator = emulator
        self.quiet = quiet
        self.state_path: Any = None  # known once the config is read: errors from SQLite name no file

    def config(self) -> Config:
        """The config as the command line gives it: a rehearsal with --emulator."""
        config = self._base_config()
        if self.emulator:
            config = config.with_emulator(self.emulator)
        return self._loaded(config)

    def _base_config(self) -> Config:
        """The config file as written: --config, BATCHRUN_CONFIG, or the nearest batchrun.toml
        from here upward."""
        from ..protocol.config_file import find_config_path, load_config

        path = find_config_path(self.config_path)
        if path.is_absolute() and not self.config_path and not os.environ.get("BATCHRUN_CONFIG") and not self.quiet:
            # Found in a folder above this one (config_file.discover_config): say which, since the
            # state.db, jobs/ and results/ it names are there, not here.
            click.echo(f"Using the config {path}", err=True)
        return load_config(path)

    def reading_config(self, *, fallback: bool = True) -> Config:
        """The config for a command that reads state.db and sends nothing (status, report,
        compare, cost, verify; plan and submit --dry-run, which only write request files): read
        as the kind of state.db it finds, labelled as such.

        A state.db that a rehearsal made at the configured path (the demo's folder keeps its
        paths: config.with_emulator(own_paths=False)) is read as that rehearsal, at the emulator
        URL it recorded: its output says it is a rehearsal's, and nothing is sent, so no real work
        can mix with it. With --emulator and no rehearsal
        state.db under rehearsal/ (`fallback`, the reading commands), that marked state.db is the
        rehearsal's to read. Commands that send or collect keep `config()`, and Store.open
        refuses them a state.db of the other kind."""
        base = self._base_config()
        config = base.with_emulator(self.emulator) if self.emulator else base
        self.state_path = base.paths.state  # a damaged state.db is named by its path (handle_errors)
        marked = _rehearsal_mark(base.paths.state)
        if marked and (not self.emulator or (fallback and not config.paths.state.exists())):
            config = base.with_emulator(marked, own_paths=False)
        return self._loaded(config)

    def _loaded(self, config: Config) -> Config:
        self.state_path = config.paths.state
        # Once per process, and even with -q: it says how a key will be kept out of what is
        # stored, and that answers holding it are changed (redaction.short_key_warnings).
        for warning in short_key_warnings():
            click.echo(f"Warning: {warning}", err=True)
        return config

    def progress(self) -> Progress:
        return Progress(quiet=self.quiet)


pass_ctx = click.make_pass_decorator(Context)


def _rehearsal_mark(path: Any) -> str | None:
    """The emulator URL a rehearsal recorded in the state.db at `path` (meta `rehearsal`), or
    None (no state.db there, or a real run's)."""
    from ..ledger.store import Store

    if not path.is_file():
        return None
    with Store(path, readonly=True, any_schema=True) as store:
        return store.meta("rehearsal")


def _on_stop(signum: int, _frame: Any) -> None:
    if stop_signal() is None:
        record(signum)
    if signum in _ONCE:
        # Once: a supervisor repeating SIGTERM, a closing terminal's SIGHUP again, or systemd's SIGHUP
        # after its SIGTERM (SendSIGHUP=) must not cut short the rollback and recording the first began.
        # A second Ctrl-C still interrupts, as it always did: a person pressing it again wants out.
        # Only those handle_errors installed (and puts back): a caller's own handler is not ours.
        for once in _ONCE:
            if signal.getsignal(once) is _on_stop:
                signal.signal(once, signal.SIG_IGN)
    raise Stopped(signum)


# The stop signals a command handles, each with what it says on stderr. SIGTERM and SIGHUP are
# handled once (_on_stop); SIGHUP is what a terminal closing or an ssh session dropping sends to
# the command in the foreground (and, without nohup, to one in the background).
_STOPPED_SAYS = {
    signal.SIGINT: "Interrupted; state.db is consistent and the next run resumes.",
    signal.SIGTERM: "Stopped by SIGTERM; state.db is consistent and the next run resumes.",
    signal.SIGHUP: "Stopped by SIGHUP (the terminal closed); state.db is consistent and the next run resumes.",
}
_ONCE = (signal.SIGTERM, signal.SIGHUP)


def _say_stopped(text: str) -> None:
    """Say how the command stopped, if stderr can still be written: after SIGHUP its terminal may
    be gone (a write then fails with EIO), and the exit code and the run's outcome in state.db
    must not be lost to that."""
    try:
        click.echo(text, err=True)
    except OSError:
        pass


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    def fail(e: BatchrunError) -> None:
        # A provider's refusal may quote the key back: nothing printed carries it.
        click.echo(f"Error: {redact(e.message)}", err=True)
        if e.hint:
            click.echo(f"Hint: {redact(e.hint)}", err=True)
        sys.exit(e.exit_code)

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if stop_signal() is None:
                raise
            raise Stopped(stop_signal() or signal.SIGINT) from e  # the stop, turned into another error on its way up
        finally:
            # A stop whose Stopped was swallowed where it landed (base/stop.py) and that no
            # checkpoint met still ends the command as stopped, not as done.
            checkpoint()

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # SIGTERM and SIGHUP stop the command as Ctrl-C does, through the same handler, for as
        # long as it runs: only from the main thread (Python runs signal handlers there alone, and
        # refuses to install one elsewhere), and the handlers before are put back after, for a
        # library caller or a test runner. `batchrun emulator` installs its own while it serves
        # (emulator.server.serve). A signal the parent set to be ignored stays ignored (as Python
        # leaves an ignored SIGINT alone: `nohup batchrun refresh` keeps running when the terminal
        # closes), and a SIGINT handler other than Python's is kept.
        previous: dict[signal.Signals, Any] = {}
        outer = stop_signal()
        if threading.current_thread() is threading.main_thread():
            record(None)
            for sig, usual in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL),
                               (signal.SIGHUP, signal.SIG_DFL)):
                if signal.getsignal(sig) == usual:
                    previous[sig] = signal.signal(sig, _on_stop)
        try:
            with swallowed_stops_unsaid():
                return run(*args, **kwargs)
        except BatchrunError as e:
            fail(e)
        except (OSError, sqlite3.Error) as e:
            # The disk or the database file, at whatever moment it failed (full, read-only,
            # damaged): one message each, from errors.environment_error. Anything else is a bug
            # and keeps its traceback.
            ctx = next((a for a in args if isinstance(a, Context)), None)
            mapped = environment_error(e, ctx.state_path if ctx else None)
            if mapped is None:
                raise
            fail(mapped)
        except KeyboardInterrupt as e:
            signum = getattr(e, "signum", signal.SIGINT)
            # Exit 128 + the signal's number (143 for SIGTERM, 129 for SIGHUP, 130 for Ctrl-C),
            # the $? a shell (and so a cron wrapper script) shows for a process the signal ended;
            # by exiting rather than by re-raising the signal once clean, so the README's table
            # holds one number per case (README, "Exit codes"). A parent reading the wait status
            # sees "exited 143", not "killed by TERM".
            _say_stopped(_STOPPED_SAYS.get(signum, _STOPPED_SAYS[signal.SIGINT]))
            sys.exit(128 + signum if signum in _STOPPED_SAYS else 130)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if threading.current_thread() is threading.main_thread():
                record(outer)

    return wrapper


@contextmanager
def writer(ctx: Context, command: str, config: Config, *, wait_lock: bool = False, inputs: bool = True,
           resolved: Inputs | None = None, until: float | None = None) -> Iterator[tuple[Store, Inputs]]:
    """Open state.db as the one writer: resolve the command's inputs first (which validates them),
    take the lock, record the run. Yields the store and the inputs, resolved once for the whole
    command (ledger/inputs.py): with the dataset and corpus for the commands that read them, and
    on a first run for every writer (a bad dataset is found before state.db exists); the policies
    alone otherwise. `inputs=False`: a command that reads neither the dataset nor the corpus
    (preflight) works before they are in place. `resolved`: inputs the command resolved itself,
    before taking the lock (probe). `until`: the command's time limit, which --wait-lock keeps to."""
    from ..ledger.inputs import resolve_inputs
    from ..ledger.lock import WriterLock
    from ..ledger.store import Store
    from ..ledger.sync import check_role_changes

    _check_writable(config)
    if resolved is not None:
        found = resolved
    elif not config.paths.state.exists() and inputs:
        # Validate the dataset before creating state.db, so a bad first run leaves nothing behind.
        found = resolve_inputs(None, config, escape=command in _PLANS)
    elif command in _READS_DATASET:
        # Likewise before recording a run in an existing state.db: a bad dataset, or a judge the
        # config would silently turn into a contestant, changes nothing (not even the runs table).
        # (Read-only: the document cache makes this a stat per unchanged document.)
        with Store.open(config.paths.state, rehearsal=config.rehearsal, readonly=True, any_schema=True) as ro:
            check_role_changes(ro, config)
            found = resolve_inputs(ro, config, escape=command in _PLANS)
    else:
        found = resolve_inputs(None, config, corpus=False)
    lock = WriterLock(config.paths.state, command).acquire(wait=wait_lock, until=until)
    store: Store | None = None
    try:
        store = Store.open(config.paths.state, rehearsal=config.rehearsal)
        if store.identity != lock.identity:
            # Replaced between taking the lock and opening it: the lock guards another file.
            raise StateError(f"The state database {config.paths.state} was replaced by another file while this run was starting.",
                             "Run the command again. Never replace or delete state.db while a writer runs.")
        store.start_run(command)
        yield store, found
        # The per-cell state brought up to date with what the command changed (ledger/kept.py), so
        # the next reader (status, report) reads it as it is instead of evaluating the views.
        from ..ledger import kept

        if kept.available(store):
            kept.keep_current(store)
        checkpoint()  # a stop swallowed where it landed is recorded as one, not as `ok` (base/stop.py)
        store.end_run("ok")
    except BaseException as e:
        if store is not None:
            store.fail_run(e, interrupted=stop_signal() is not None)
        raise
    finally:
        if store is not None:
            store.close()
        lock.release()


@contextmanager
def dry_run_store(config: Config, command: str) -> Iterator[tuple[Store, Inputs]]:
    """What `writer` yields, for a dry run: the same inputs, resolved and checked the same way,
    and a store that is a throw-away copy of state.db (ledger.store.dry_run_copy). Nothing is
    written beside the config: no state.db on a first run, no lock, no run recorded, no file
    under jobs/."""
    from ..ledger.inputs import resolve_inputs
    from ..ledger.store import Store, dry_run_copy
    from ..ledger.sync import check_role_changes

    if config.paths.state.exists():
        with Store.open(config.paths.state, rehearsal=config.rehearsal, readonly=True, any_schema=True) as ro:
            check_role_changes(ro, config)
            found = resolve_inputs(ro, config, escape=command in _PLANS)
    else:
        found = resolve_inputs(None, config, escape=command in _PLANS)
    with dry_run_copy(config.paths.state, rehearsal=config.rehearsal) as store:
        yield store, found


def _check_writable(config: Config) -> None:
    """A writer on read-only media says so before it starts (rather than failing at the lock or
    halfway through writing jobs/). os.access, not a test write: it reports a read-only mount
    (EROFS) even to root, and changes nothing."""
    for path in (config.paths.state.parent, config.paths.jobs, config.paths.results):
        existing = next((p for p in (path, *path.parents) if p.exists()), None)
        if existing is not None and not os.access(existing, os.W_OK):
            raise read_only(existing)


@contextmanager
def reader(config: Config) -> Iterator[Store]:
    """state.db opened read-only (works on read-only media and while a writer runs), closed after."""
    from ..ledger.store import Store

    with Store.open(config.paths.state, rehearsal=config.rehearsal, readonly=True) as store:
        yield store


def json_header(config: Config, store: Store | None = None, *, rehearsal: str | None = None) -> dict[str, Any]:
    """The top-level keys of every command's JSON (publish.outputs.json_header)."""
    from ..publish.outputs import json_header as header

    return header(config, store, rehearsal=rehearsal)
def check_store_kind(config: Config) -> None:
    """Refuse now a state.db of the other kind (real vs rehearsal) that a writer would refuse
    later: for a command that sends before it opens state.db as the writer (probe)."""
    from ..ledger.store import Store

    if config.paths.state.exists():
        Store.open(config.paths.state, rehearsal=config.rehearsal, readonly=True, any_schema=True).close()


def note_rehearsal(config: Config) -> None:
    """On stderr, so the data on stdout keeps its shape: these numbers are the emulator's."""
    if config.rehearsal:
        from ..publish.report import rehearsal_title

        click.echo(rehearsal_title(config.rehearsal), err=True)


# Commands that read the dataset and corpus (poll and cancel don't: they keep working on a broken dataset).
_READS_DATASET = frozenset({"plan", "submit", "collect", "refresh", "retry", "accept-failures"})
# The commands that write request files (submit and refresh plan first): the documents they
# measure are escaped in the same pass, for plan (corpus.EscapedSpool: each read once).
_PLANS = frozenset({"plan", "submit", "refresh"})


def announce_warnings(ctx: Context, store: Store, config: Config) -> None:
    """Print the config's warnings this state.db has not shown yet, once, and remember them.

    Called after the command's work, so an error stays the first thing on stderr. With -q nothing
    is printed and nothing is remembered: the next run without -q says it.
    """
    from ..ledger.sync import record_warnings_shown, unshown_warnings

    if ctx.quiet:
        return
    new = unshown_warnings(store, config.warnings)
    for w in new:
        click.echo(f"Warning: {w.message}", err=True)
    record_warnings_shown(store, new)


def complete_routes(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of a route name (README, "Shell completion"): the config's routes, in
    config order, read the way the command would find the config (--config before the command,
    BATCHRUN_CONFIG, or upward from here); none when there is no readable config."""
    from click.shell_completion import CompletionItem

    from ..protocol.config_file import load_config

    try:
        config = load_config(ctx.find_root().params.get("config_path"))
    except Exception:  # noqa: BLE001 - completing a word must never fail the user's shell
        return []
    return [CompletionItem(name) for name in config.routes if name.startswith(incomplete)]


def wait_lock_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--wait-lock", is_flag=True, help="If another batchrun is writing to this state.db, wait for it instead of exiting.")(fn)


def route_stage_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--route", "routes", multiple=True, metavar="NAME", shell_complete=complete_routes,
                      help="Only this route (repeatable).")(fn)
    fn = click.option("--stage", "stages", multiple=True, type=click.Choice(["gen", "judge"]), help="Only this stage (repeatable).")(fn)
    return fn


class BatchrunGroup(click.Group):
    """Click, with exit codes a cron wrapper can trust: a usage error (a typo in a flag, a missing
    option) exits 1 like every other user error. Click's own 2 would read as batchrun's
    "incomplete, run again later" (README, exit codes).

    And the group's options work after the command too (`batchrun status --config X`, `batchrun
    refresh -q`), with the same meaning: each command gets a hidden copy of each, which sets the
    same field of the command `Context` the group made (the later of two wins)."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        taken = {opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts)}
        for p in self.params:
            if not isinstance(p, click.Option) or taken & set(p.opts):
                continue
            # --version keeps its own callback; the others set what the group's callback stored.
            callback = p.callback if not p.expose_value else _set_global(p.name or "")
            # is_flag only for flags: click (>= 8.2) reads an explicit is_flag=False as "the value
            # may be left out", so `refresh --emulator` without its URL would run for real.
            cmd.params.append(click.Option(p.opts, is_flag=True if p.is_flag else None, metavar=p.metavar, expose_value=False,
                                           hidden=True, is_eager=p.is_eager, callback=callback))
        super().add_command(cmd, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            try:
                return super().invoke(ctx)
            finally:
                if sys.stdout is not None:  # None: started with stdout closed (click then prints nothing)
                    sys.stdout.flush()  # what is still buffered goes now, so a closed pipe is caught here
        except BrokenPipeError:
            if not _stdio_reader_gone():
                raise
            _die_of_sigpipe()

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.Exit as e:  # --help, --version
            sys.exit(e.exit_code)
        except click.UsageError as e:
            e.show()
            sys.exit(1)
        except click.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(1)
        except click.ClickException as e:
            e.show()
            sys.exit(1)


def _stdio_reader_gone() -> bool:
    """Whether stdout or stderr is a pipe (or FIFO) whose reader has closed it: poll() reports
    POLLERR for such a write end (Linux pipe_poll). A BrokenPipeError from anything else (a
    socket) is not this, and keeps its traceback."""
    import select

    poller = select.poll()
    for fd in (1, 2):
        poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _die_of_sigpipe() -> None:
    """The reader of our output left (`batchrun cost | head -1`): end as cat, grep or git do when
    they write to a pipe nobody reads, killed by SIGPIPE (status 141 in a shell), saying nothing.
    Not exit 1 (click's default): that means a user error here, and a reader that stopped reading
    is nobody's error; not 0 or 2 either: the output was not all delivered, and 2 means "run again
    later". A shell does not report a SIGPIPE'd command; `set -o pipefail` sees it as it sees any
    other tool's. Python ignores SIGPIPE (so a closed socket raises instead of killing), hence the
    default action restored just for this. Reached after the command's own cleanup ran (the
    writer's lock released, state.db closed)."""
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    sys.exit(128 + signal.SIGPIPE)  # not reached: the signal's default action ends the process


# The group's parameter names -> the Context field each sets.
_GLOBAL_FIELDS = {"config_path": "config_path", "emulator": "emulator", "quiet": "quiet"}


def _set_global(name: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    field = _GLOBAL_FIELDS[name]  # a new group option without a field here fails at import, not at use

    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        obj = ctx.find_object(Context)
        if value in (None, False) or obj is None or ctx.resilient_parsing:
            return  # not given after the command: the group's value (or its env var) stands
        setattr(obj, field, value)
        if field == "quiet":
            log_to_stderr(True)

    return callback


def log_to_stderr(quiet: bool) -> None:
    """batchrun's log (retries and their waits) as progress lines on stderr; -q silences it."""
    import logging

    class CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg,unused-ignore]
        """Writes to sys.stderr as it is when a record is emitted (a test runner may swap it)."""

        @property  # type: ignore[override,unused-ignore]
        def stream(self) -> Any:
            return sys.stderr

        @stream.setter
        def stream(self, _: Any) -> None:
            pass

    logger = logging.getLogger("batchrun")
    if not any(isinstance(h, CurrentStderr) or getattr(h, "batchrun", False) for h in logger.handlers):
        handler = CurrentStderr()
        handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%H:%M:%S"))
        handler.batchrun = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    redact_python_output()


def print_problems(store: Store, config: Config, *, requests: str = "request_status") -> None:
    """Blocked and waiting routes, each with its diagnosis and fix (stderr: it is not data).
    `requests`: as for diagnosis.open_problems ("requests_now" right after the views were evaluated)."""
    from ..ledger.diagnosis import open_problems

    for problem in open_problems(store, config, requests=requests):
        click.echo(f"{problem.state}: {redact(problem.describe())}", err=True)


class Number(click.FloatRange):
    """A float option that must be a finite number in range. click's FloatRange lets `nan`
    through (NaN compares false with every bound) and `inf` wherever no maximum is set: a NaN
    timeout never expires, a NaN latency never lets a batch end."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            low = "" if self.min is None else f"{self.min:g}{'<' if self.min_open else '<='}"
            high = "" if self.max is None else f"{'<' if self.max_open else '<='}{self.max:g}"
            self.fail(f"{value!r} is not a finite number; give a finite number in the range {low}x{high}.", param, ctx)
        return rv


class Duration(click.ParamType):
    """Every option that takes a length of time (--timeout, --interval, --latency): a number of
    seconds (`90`, `0.5`) or a number with a unit, s, m, h or d (`90s`, `45m`, `6h`, `1d`); finite,
    0 or more (base/durations.py). One syntax for all, so `poll --timeout 6h` means what `refresh
    --timeout 6h` does."""

    name = "duration"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            return parse_duration(value)
        except ValueError as e:
            self.fail(f"{e}.", param, ctx)


def seconds() -> Duration:
    """A length of time (Duration): `--interval 30`, `--timeout 6h`."""
    return Duration()


def print_preflight_failures(checks: list[Any]) -> None:
    """The routes that did not pass their preflight, each with the provider's message and the fix
    (stderr, like blocked routes: a cron job's mail carries them, -q or not)."""
    for check in checks:
        click.echo(f"preflight: {redact(check.describe())}", err=True)


def check_until(until: str | None) -> str | None:
    if until is None:
        return None
    parts = until.split(":")
    if len(parts) != 2 or not all(p.isdigit() for p in parts) or not (0 <= int(parts[0]) < 24 and 0 <= int(parts[1]) < 60):
        raise BatchrunError(f"--until {until!r} is not a time of day.", "Use HH:MM in local time, like 06:30.")
    return until
