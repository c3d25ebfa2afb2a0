"""The command line: each command opens the store, calls one library function, prints.

Data goes to stdout, progress to stderr. A `BatchrunError` (a user's mistake, a provider refusal)
prints its message and hint and exits 1 without a traceback. `collect` and `refresh` exit 2 while
any route is incomplete.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Any

import click

from .config import Config
from .config_file import load_config
from .errors import BatchrunError, environment_error, read_only
from .progress import Progress
from .redaction import redact
from .store import Store
from .version import __version__

EXIT_INCOMPLETE = 2


class Context:
    def __init__(self, config_path: str | None, emulator: str | None, quiet: bool):
        self.config_path = config_path
        self.emulator = emulator
        self.quiet = quiet
        self.state_path: Any = None  # known once the config is read: errors from SQLite name no file

    def config(self) -> Config:
        config = load_config(self.config_path)
        if self.emulator:
            config = config.with_emulator(self.emulator)
        self.state_path = config.paths.state
        return config

    def progress(self) -> Progress:
        return Progress(quiet=self.quiet)


pass_ctx = click.make_pass_decorator(Context)


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    def fail(e: BatchrunError) -> None:
        # A provider's refusal may quote the key back: nothing printed carries it.
        click.echo(f"Error: {redact(e.message)}", err=True)
        if e.hint:
            click.echo(f"Hint: {redact(e.hint)}", err=True)
        sys.exit(1)

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
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
        except KeyboardInterrupt:
            click.echo("Interrupted; state.db is consistent and the next run resumes.", err=True)
            sys.exit(130)

    return wrapper


@contextmanager
def writer(ctx: Context, command: str, config: Config, *, wait_lock: bool = False) -> Iterator[Store]:
    """Open state.db as the one writer: validate inputs first, take the lock, record the run."""
    from .lock import WriterLock
    from .corpus import scan_corpus
    from .ledger import check_role_changes

    _check_writable(config)
    if not config.paths.state.exists():
        # Validate the dataset before creating state.db, so a bad first run leaves nothing behind.
        scan_corpus(None, config)
    elif command in _READS_DATASET:
        # Likewise before recording a run in an existing state.db: a bad dataset, or a judge the
        # config would silently turn into a contestant, changes nothing (not even the runs table).
        # (Read-only: the document cache makes this a stat per unchanged document.)
        with Store.open(config.paths.state, rehearsal=config.rehearsal, readonly=True, any_schema=True) as ro:
            check_role_changes(ro, config)
            scan_corpus(ro, config)
    lock = WriterLock(config.paths.state, command).acquire(wait=wait_lock)
    store: Store | None = None
    try:
        store = Store.open(config.paths.state, rehearsal=config.rehearsal)
        store.start_run(command)
        yield store
        store.end_run("ok")
    except BaseException:
        if store is not None and store.run_id is not None:
            # Best effort: the disk or database that just failed the command may refuse this too,
            # and the original error is the one to report (a run left without ended_at reads as
            # interrupted, which it was).
            try:
                store.end_run("error")
            except (sqlite3.Error, OSError):
                pass
        raise
    finally:
        if store is not None:
            store.close()
        lock.release()


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
    with Store.open(config.paths.state, rehearsal=config.rehearsal, readonly=True) as store:
        yield store


def _note_rehearsal(config: Config) -> None:
    """On stderr, so the data on stdout keeps its shape: these numbers are the emulator's."""
    if config.rehearsal:
        from .report import rehearsal_title

        click.echo(rehearsal_title(config.rehearsal), err=True)


# Commands that read the dataset and corpus (poll and cancel don't: they keep working on a broken dataset).
_READS_DATASET = frozenset({"plan", "submit", "collect", "refresh", "retry", "accept-failures"})


def announce_warnings(ctx: Context, store: Store, config: Config) -> None:
    """Print the config's warnings this state.db has not shown yet, once, and remember them.

    Called after the command's work, so an error stays the first thing on stderr. With -q nothing
    is printed and nothing is remembered: the next run without -q says it.
    """
    from .ledger import record_warnings_shown, unshown_warnings

    if ctx.quiet:
        return
    new = unshown_warnings(store, config.warnings)
    for w in new:
        click.echo(f"Warning: {w.message}", err=True)
    record_warnings_shown(store, new)


def wait_lock_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--wait-lock", is_flag=True, help="If another batchrun is writing to this state.db, wait for it instead of exiting.")(fn)


def route_stage_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--route", "routes", multiple=True, help="Only this route (repeatable).")(fn)
    fn = click.option("--stage", "stages", multiple=True, type=click.Choice(["gen", "judge"]), help="Only this stage (repeatable).")(fn)
    return fn


class BatchrunGroup(click.Group):
    """Click, with exit codes a cron wrapper can trust: a usage error (a typo in a flag, a missing
    option) exits 1 like every other user error. Click's own 2 would read as batchrun's
    "incomplete, run again later" (README, exit codes)."""

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


@click.group(cls=BatchrunGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="batchrun")
@click.option("--config", "config_path", envvar="BATCHRUN_CONFIG", metavar="PATH", help="Config file (default ./batchrun.toml; env BATCHRUN_CONFIG).")
@click.option("--emulator", envvar="BATCHRUN_EMULATOR", metavar="URL", help="Rehearse: send every route to a local emulator at URL, keeping state.db, jobs/ and results/ under rehearsal/ (env BATCHRUN_EMULATOR).")
@click.option("-q", "--quiet", is_flag=True, help="No progress or notices on stderr.")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, emulator: str | None, quiet: bool) -> None:
    """batchrun: run WildTrace leaderboard evaluations through the providers' batch APIs.

    \b
    batchrun refresh        # submit, poll and collect until done (the cron job)
    batchrun report         # the leaderboard
    batchrun demo           # everything on the built-in emulator, no keys needed
    """
    ctx.obj = Context(config_path, emulator, quiet)
    _log_to_stderr(quiet)


@cli.command()
@route_stage_options
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@wait_lock_option
@pass_ctx
@handle_errors
def plan(ctx: Context, routes: tuple[str, ...], stages: tuple[str, ...], as_json: bool, wait_lock: bool) -> None:
    """Write the request files for everything missing, under jobs/ (no network)."""
    from .plan import plan as do_plan

    config = ctx.config()
    with writer(ctx, "plan", config, wait_lock=wait_lock) as store:
        result = do_plan(store, config, routes=set(routes) or None, stages=set(stages) or None)
        announce_warnings(ctx, store, config)
        _print_plan(config, result, as_json, quiet=ctx.quiet)


def _print_plan(config: Config, result: Any, as_json: bool, *, quiet: bool = False,
                unsent: list[dict[str, Any]] | None = None) -> None:
    from .cost import fmt_money

    rows = [vars(r).copy() for r in result.routes]
    if as_json:
        click.echo(json.dumps({"routes": rows, "batches": result.batches, "warnings": result.warnings}, indent=2))
        return
    header = (f"{'route':24} {'stage':5} {'tasks':>5} {'ooc':>4} {'to send':>7} {'files':>5} {'bytes':>13} "
              f"{'est in tok':>11} {'est out tok':>11} {'judge req':>9} {'est batch':>10} {'online':>10}")
    click.echo(header)
    for d in rows:
        click.echo(f"{d['route'][:24]:24} {d['stage']:5} {d['tasks']:>5} {d['out_of_context']:>4} {d['to_send']:>7} {d['files']:>5} "
                   f"{d['bytes']:>13,} {d['est_input_tokens']:>11,} {d['est_output_tokens']:>11,} {d['judge_requests_expected']:>9} "
                   f"{fmt_money(d['est_cost_batch']):>10} {fmt_money(d['est_cost_online']):>10}")
    known = [d["est_cost_batch"] for d in rows if d["est_input_tokens"]]
    total = None if any(c is None for c in known) else sum(known)
    click.echo(f"total estimated: {fmt_money(total)} at the batch rate"
               + ("" if total is not None else " (some routes have no price: set price to know)"))
    if unsent:
        # Planned earlier (by `plan`, or a submit that held them): the next submit sends these.
        costs = [b["est_cost"] for b in unsent]
        total_unsent = None if any(c is None for c in costs) else sum(costs)
        click.echo(f"{len(unsent)} batch(es) planned and not sent yet, {sum(b['n_requests'] or 0 for b in unsent)} request(s), "
                   f"est. {fmt_money(total_unsent)}: the next submit will send them")
        for b in unsent:
            click.echo(f"  {b['id']}  {b['route']} {b['stage']}  {b['status']}  {b['n_requests']} request(s)  est. {fmt_money(b['est_cost'])}")
    if not result.batches and not any(d["to_send"] for d in rows) and not unsent and not quiet:
        click.echo("Nothing new to write.", err=True)


@cli.command()
@route_stage_options
@click.option("--dry-run", is_flag=True, help="Plan only: print what would be sent and its estimated cost.")
@click.option("--budget", type=float, metavar="USD", help="Never create a batch that would take tonight's committed spend past USD.")
@wait_lock_option
@pass_ctx
@handle_errors
def submit(ctx: Context, routes: tuple[str, ...], stages: tuple[str, ...], dry_run: bool, budget: float | None, wait_lock: bool) -> None:
    """Plan what is pending, then upload request files and create batches."""
    from .submit import submit as do_submit

    config = ctx.config()
    with writer(ctx, "submit", config, wait_lock=wait_lock) as store:
        result = do_submit(store, config, routes=set(routes) or None, stages=set(stages) or None, dry_run=dry_run,
                           budget=budget, progress=ctx.progress())
        announce_warnings(ctx, store, config)
        if dry_run:
            _print_plan(config, result.plan, False, quiet=ctx.quiet, unsent=result.unsent)
            return
        click.echo(f"created {len(result.created)} batch(es), adopted {len(result.adopted)}, held {len(result.held)}")
        for bid, why in result.held:
            click.echo(f"  held {bid}: {why}")


@cli.command()
@click.option("--wait", is_flag=True, help="Block until nothing is in flight.")
@click.option("--interval", type=float, default=30.0, show_default=True, help="Seconds between checks with --wait.")
@click.option("--timeout", type=float, help="With --wait, give up after this many seconds.")
@wait_lock_option
@pass_ctx
@handle_errors
def poll(ctx: Context, wait: bool, interval: float, timeout: float | None, wait_lock: bool) -> None:
    """Check batches in flight and download the results of those that ended."""
    from .poll import poll as do_poll

    config = ctx.config()
    with writer(ctx, "poll", config, wait_lock=wait_lock) as store:
        r = do_poll(store, config, wait=wait, interval=interval, timeout=timeout, progress=ctx.progress())
        click.echo(f"{r.in_flight} batch(es) in flight, {len(r.downloaded)} downloaded")
    if wait and r.in_flight:
        # --wait ended (--timeout) before the work did: not done, run again later.
        click.echo(f"--timeout reached with {r.in_flight} batch(es) still in flight; poll again later.", err=True)
        sys.exit(EXIT_INCOMPLETE)


@cli.command()
@wait_lock_option
@pass_ctx
@handle_errors
def collect(ctx: Context, wait_lock: bool) -> None:
    """Reconcile downloaded results into state.db, queue judging and retries, write results/.

    Exits 0 when every route is complete, 2 otherwise (after writing what it has).
    """
    from .collect import collect as do_collect

    config = ctx.config()
    with writer(ctx, "collect", config, wait_lock=wait_lock) as store:
        r = do_collect(store, config, progress=ctx.progress())
        announce_warnings(ctx, store, config)
        click.echo(f"collected {len(r.batches)} batch(es), {r.lines} result line(s); {r.new_judge_requests} judge request(s) queued")
        if not r.complete:
            _print_problems(store, config)
    if not r.complete:
        sys.exit(EXIT_INCOMPLETE)


@cli.command()
@click.option("--timeout", "timeout_", metavar="DURATION", help="Stop cleanly after DURATION (90s, 45m, 6h).")
@click.option("--until", metavar="HH:MM", help="Stop cleanly at this local time.")
@click.option("--interval", type=float, default=30.0, show_default=True, help="Seconds between checks while batches run.")
@click.option("--budget", type=float, metavar="USD", help="Never create a batch that would take tonight's committed spend past USD.")
@wait_lock_option
@pass_ctx
@handle_errors
def refresh(ctx: Context, timeout_: str | None, until: str | None, interval: float, budget: float | None, wait_lock: bool) -> None:
    """Submit, poll and collect in a loop until every route is complete (the cron job).

    Exit 0: complete. Exit 2: incomplete (time limit, budget, or nothing can progress). Exit 1: a
    user error (bad config or data).
    """
    from .refresh import deadline_from
    from .refresh import refresh as do_refresh

    config = ctx.config()
    deadline = deadline_from(parse_duration(timeout_) if timeout_ else None, _check_until(until))
    with writer(ctx, "refresh", config, wait_lock=wait_lock) as store:
        outcome = do_refresh(store, config, deadline=deadline, interval=interval, budget=budget, progress=ctx.progress())
        announce_warnings(ctx, store, config)
        from .publish import publish
        from .report import render

        published = publish(store, config, command="refresh")
        click.echo(render(published.data, "md"))
        if not outcome.complete:
            _print_problems(store, config)
        click.echo(f"refresh: {redact(outcome.reason)}", err=True)
        click.echo(f"site: {published.site}", err=True)
    if not outcome.complete:
        sys.exit(EXIT_INCOMPLETE)


def _log_to_stderr(quiet: bool) -> None:
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


def _print_problems(store: Store, config: Config) -> None:
    """Blocked and waiting routes, each with its diagnosis and fix (stderr: it is not data)."""
    from .diagnosis import open_problems

    for problem in open_problems(store, config):
        click.echo(f"{problem.state}: {redact(problem.describe())}", err=True)


@cli.command()
@click.option("--route", "route", required=True, metavar="NAME", help="The route whose cells to reopen.")
@click.option("--task", metavar="TASK_ID", help="Only this task.")
@click.option("--status", "status_", metavar="blocked|waiting|accepted", help="Only cells in this state.")
@click.option("--reason", metavar="TEXT", help="Why (kept with the reopen in state.db).")
@wait_lock_option
@pass_ctx
@handle_errors
def retry(ctx: Context, route: str, task: str | None, status_: str | None, reason: str | None, wait_lock: bool) -> None:
    """Reopen a route's blocked, waiting or accepted cells now, with a fresh retry budget.

    For example after fixing a key, or when the provider was at fault. The next submit or refresh
    sends them. Refusals and empty answers are the model's answer and are never retried.
    """
    from .decisions import reopen
    from .ledger import sync_state

    config = ctx.config()
    with writer(ctx, "retry", config, wait_lock=wait_lock) as store:
        sync_state(store, config)
        done = reopen(store, config, route=route, task=task, status=status_, reason=reason)
        click.echo(f"reopened {done.requests} request(s) of route {route!r} ("
                   + ", ".join(f"{k} {v}" for k, v in sorted(done.by_state.items())) + "); the next submit or refresh sends them")


@cli.command("accept-failures")
@click.option("--route", "route", required=True, metavar="NAME", help="The contestant route.")
@click.option("--reason", required=True, metavar="TEXT", help="Why these cells cannot finish (published with the route).")
@wait_lock_option
@pass_ctx
@handle_errors
def accept_failures(ctx: Context, route: str, reason: str, wait_lock: bool) -> None:
    """Zero-fill a route's remaining infrastructure failures, as your recorded decision.

    The route's headline can then be published; the report and the route's provenance show the
    decision and its reason. Changing the route's config undoes it; `retry` reopens cells.
    """
    from .decisions import accept_failures as do_accept
    from .ledger import sync_state

    config = ctx.config()
    with writer(ctx, "accept-failures", config, wait_lock=wait_lock) as store:
        sync_state(store, config)
        done = do_accept(store, config, route=route, reason=reason)
        click.echo(f"accepted {done.cells} cell(s) of route {route!r} as failures (scored 0): {done.reason}")


@cli.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@pass_ctx
@handle_errors
def verify(ctx: Context, directory: str | None) -> None:
    """Check a published leaderboard against its inputs: every checksum in results/manifest.json.

    Recomputes the dataset's, each document's, the config's, each request file's and each results
    file's checksum from the files present, and compares them with the manifest and with state.db
    (when there is one). Exit 0 when all match; exit 1 naming each mismatch.
    """
    from pathlib import Path

    from .manifest import MANIFEST_NAME, verify as do_verify

    config = ctx.config()
    folder = Path(directory) if directory else config.paths.results
    manifest_path = folder / MANIFEST_NAME
    if not manifest_path.is_file():
        raise BatchrunError(f"No {MANIFEST_NAME} in {folder}.", "It is written by `batchrun collect` and `batchrun refresh` beside the results files.")
    # Either kind of store: verify only compares checksums, and says below if it was a rehearsal.
    store = Store(config.paths.state, readonly=True) if config.paths.state.exists() else None
    try:
        result = do_verify(manifest_path, config, store)
    finally:
        if store is not None:
            store.close()
    for problem in result.mismatches:
        click.echo(f"MISMATCH: {problem}")
    if result.mismatches:
        raise BatchrunError(f"{len(result.mismatches)} of {result.checked} checks failed against {manifest_path}.",
                            "The published numbers do not come from these files: see each MISMATCH above.")
    click.echo(f"verified: {result.checked} checks against {manifest_path}" + ("" if store else " (no state.db here: files only)"))
    if result.rehearsal:
        click.echo(f"note: these results come from a rehearsal on the emulator at {result.rehearsal}, not from real providers.")


def parse_duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    t = text.strip().lower()
    try:
        if t and t[-1] in units:
            return float(t[:-1]) * units[t[-1]]
        return float(t)
    except ValueError:
        raise BatchrunError(f"--timeout {text!r} is not a duration.", "Use a number with s, m, h or d, like 90s, 45m or 6h.")


def _check_until(until: str | None) -> str | None:
    if until is None:
        return None
    parts = until.split(":")
    if len(parts) != 2 or not all(p.isdigit() for p in parts) or not (0 <= int(parts[0]) < 24 and 0 <= int(parts[1]) < 60):
        raise BatchrunError(f"--until {until!r} is not a time of day.", "Use HH:MM in local time, like 06:30.")
    return until


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
@handle_errors
def status(ctx: Context, as_json: bool) -> None:
    """Cells per route and batches in flight (read-only; works while a writer runs)."""
    from .status import status_data

    config = ctx.config()
    _note_rehearsal(config)
    with reader(config) as store:
        data = status_data(store, config)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for route, counts in data["cells"].items():
        words = sorted(counts.items())
        split = data["pending"].get(route)
        if split:
            # "pending" says nothing about whether it was sent: say which.
            words = [w for w in words if w[0] != "pending"]
            words += [(k, v) for k, v in (("pending (unsent)", split["unsent"]), ("in flight", split["in_flight"])) if v]
        click.echo(f"{route}: " + ", ".join(f"{k} {v}" for k, v in words))
    for p in data["problems"]:
        click.echo(f"{p['state']}: {p['text']}")
    for t in data["truncated"]:
        click.echo(f"truncated: {t['text']}")
    click.echo(f"{len(data['in_flight'])} batch(es) live")
    for b in data["in_flight"]:
        click.echo(f"  {b['id']}: {b['state']} {b['provider_status'] or ''} {b['provider_batch_id'] or ''} ({b['n_requests']} requests)"
                   + (f": {b['error']}" if b["error"] else ""))
    if data["planned"]:
        click.echo(f"{len(data['planned'])} batch(es) planned (not sent): the next submit sends them")
        for b in data["planned"]:
            click.echo(f"  {b['id']}: {b['state']} ({b['n_requests']} requests)" + (f": {b['error']}" if b["error"] else ""))


@cli.command()
@click.option("--batch", metavar="ID", help="A local batch id (see status).")
@click.option("--route", metavar="NAME", help="Every live batch of a route.")
@click.option("--all", "all_", is_flag=True, help="Every live batch.")
@wait_lock_option
@pass_ctx
@handle_errors
def cancel(ctx: Context, batch: str | None, route: str | None, all_: bool, wait_lock: bool) -> None:
    """Cancel a batch, a route's batches, or all."""
    from .status import cancel as do_cancel

    config = ctx.config()
    with writer(ctx, "cancel", config, wait_lock=wait_lock) as store:
        cancelled = do_cancel(store, config, batch=batch, route=route, all_=all_)
        for bid in cancelled:
            click.echo(f"cancelled {bid}")
        if not cancelled:
            click.echo("Nothing to cancel: no live batch" + (f" of route {route!r}." if route else "."), err=True)


def statistics_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    from .stats import DEFAULT_RESAMPLES, DEFAULT_SEED

    fn = click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True, help="Seed of the bootstrap and Monte-Carlo permutation draws.")(fn)
    fn = click.option("--resamples", type=click.IntRange(min=100), default=DEFAULT_RESAMPLES, show_default=True,
                      help="Bootstrap resamples (of documents) for the 95% intervals.")(fn)
    return fn


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json", "html"]), default="md", show_default=True,
              help="Output format: Markdown, CSV, JSON (everything), or html: a static site written to --out DIR.")
@click.option("--out", type=click.Path(), help="Write to this file instead of stdout (html: this folder).")
@statistics_options
@pass_ctx
@handle_errors
def report(ctx: Context, fmt: str, out: str | None, resamples: int, seed: int) -> None:
    """The leaderboard (read-only), sorted by All-tasks, with intervals, paired comparisons and provenance."""
    from .analysis import Settings, full_report
    from .report import render

    config = ctx.config()
    if fmt == "html" and not out:
        raise BatchrunError("--format html writes a folder of pages, not a stream.", "Pass --out DIR, e.g. --out site/.")
    with reader(config) as store:
        data = full_report(store, config, Settings(resamples=resamples, seed=seed))
        if fmt == "html":
            from .site import write_site

            index = write_site(store, config, data, Path(str(out)))
            click.echo(f"wrote {index}", err=True)
            return
    text = render(data, fmt)
    if out:
        try:
            with open(out, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise BatchrunError(f"Cannot write the report to --out {out}: {e.strerror}.",
                                "Choose a path in a writable folder (or leave out --out to print the report).")
        click.echo(f"wrote {out}", err=True)
    else:
        click.echo(text, nl=False)


@cli.command()
@click.argument("route_a", metavar="A")
@click.argument("route_b", metavar="B")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (differences as fractions 0-1).")
@statistics_options
@pass_ctx
@handle_errors
def compare(ctx: Context, route_a: str, route_b: str, as_json: bool, resamples: int, seed: int) -> None:
    """Paired comparison of two routes: mean difference with interval, sign and permutation tests (read-only)."""
    from .analysis import Settings
    from .analysis import compare as do_compare
    from .report import render_comparison

    config = ctx.config()
    store = Store.open(config.paths.state, rehearsal=config.rehearsal, readonly=True)
    data = do_compare(store, config, route_a, route_b, Settings(resamples=resamples, seed=seed))
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False, indent=2))
        return
    click.echo(render_comparison(data), nl=False)


@cli.command()
@click.option("--since", metavar="YYYY-MM-DD", help="Only nights from this date on.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
@handle_errors
def cost(ctx: Context, since: str | None, as_json: bool) -> None:
    """Spend per route and per night: estimate vs actual (read-only)."""
    from .cost import cost_report, fmt_money

    config = ctx.config()
    _note_rehearsal(config)
    with reader(config) as store:
        data = cost_report(store, since)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"{'night':10} {'route':24} {'stage':5} {'batches':>7} {'in tok':>12} {'out tok':>12} {'estimate':>10} {'actual':>10}")
    for r in data["rows"]:
        click.echo(f"{r['night']:10} {r['route'][:24]:24} {r['stage']:5} {r['batches']:>7} {r['input_tokens']:>12,} {r['output_tokens']:>12,} "
                   f"{fmt_money(r['estimated_cost']):>10} {fmt_money(r['actual_cost']):>10}")
    for n in data["nights"]:
        click.echo(f"{n['night']:10} {'TOTAL':24} {'':5} {n['batches']:>7} {'':>12} {'':>12} {fmt_money(n['estimated_cost']):>10} {fmt_money(n['actual_cost']):>10}")


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address to bind.")
@click.option("--port", type=int, default=8765, show_default=True, help="Port (0 = any free port).")
@click.option("--latency", type=float, default=1.0, show_default=True, help="Seconds before a batch finishes.")
@click.option("--responder", metavar="FILE.py:FUNCTION", help="Answer requests with your own function (or module:function).")
@click.option("--fault", "faults_", multiple=True, metavar="JSON", help="Inject a fault (repeatable), e.g. '{\"kind\":\"http_error\",\"status\":429,\"count\":3}'.")
@handle_errors
def emulator(host: str, port: int, latency: float, responder: str | None, faults_: tuple[str, ...]) -> None:
    """Serve a local emulator of the OpenAI, Anthropic and Gemini batch APIs (for rehearsals and tests)."""
    from .emulator import normalize_fault, run_emulator
    from .emulator.server import check_loopback

    try:
        check_loopback(host)
    except ValueError as e:
        raise BatchrunError(f"{e}.", "Run it on this machine and point batchrun at it with --emulator http://127.0.0.1:PORT.")

    parsed = []
    for f in faults_:
        try:
            parsed.append(normalize_fault(json.loads(f)))
        except ValueError as e:  # JSONDecodeError is a ValueError too
            raise BatchrunError(f"--fault {f!r} is not a valid fault: {e}",
                                "Pass a JSON object, e.g. --fault '{\"kind\":\"http_error\",\"status\":500,\"count\":3}'.")
    if responder:
        from .emulator import load_responder

        try:
            responder_fn = load_responder(responder)
        except Exception as e:  # noqa: BLE001 - the user's file: any failure to load it is their error to see
            raise BatchrunError(f"--responder {responder!r} cannot be loaded: {e}",
                                "Pass FILE.py:FUNCTION or package.module:FUNCTION naming a function that takes the request dict.")
    try:
        run_emulator(host, port, latency, responder_fn if responder else None, parsed)
    except OSError as e:
        import errno

        if e.errno == errno.EADDRINUSE:
            raise BatchrunError(f"Port {port} on {host} is already in use.", "Stop what is using it, or pass --port 0 for any free port.")
        raise


@cli.command()
@click.option("--dir", "directory", default="demo-run", show_default=True, type=click.Path(file_okay=False), help="Working folder to create/use.")
@pass_ctx
@handle_errors
def demo(ctx: Context, directory: str) -> None:
    """Run a whole leaderboard refresh on the built-in emulator, no keys needed."""
    from .demo import run_demo

    code = run_demo(directory, progress=ctx.progress(), echo=click.echo)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    cli()
