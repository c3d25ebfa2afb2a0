"""cli: the command line. Each command opens the store, calls one library function, prints.

Data goes to stdout, progress to stderr. A `BatchrunError` (a user's mistake, a provider refusal)
prints its message and hint and exits 1 without a traceback. `collect` and `refresh` exit 2 while
any route is incomplete. The commands' shared plumbing (errors and exit codes, the writer and
reader stores, the inputs each command resolves once, options) is in support.py; the demo (the
shipped project and `batchrun demo`) in demo/.

May import: base, providers, protocol, ledger, publish, run, emulator.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..base.errors import BatchrunError
from ..base.redaction import redact
from .support import (  # the plumbing the commands share
    EXIT_INCOMPLETE,
    BatchrunGroup,
    Context,
    Number,
    announce_warnings,
    check_until,
    handle_errors,
    log_to_stderr,
    note_rehearsal,
    parse_duration,
    pass_ctx,
    print_preflight_failures,
    print_problems,
    reader,
    route_stage_options,
    seconds,
    wait_lock_option,
    writer,
)

if TYPE_CHECKING:
    from ..protocol.config import Config

# Nothing heavy is imported at the top of this module: `batchrun --help` loads click and this
# file (each command imports what it runs), and the package __init__ is lazy too. SDKs, numpy and
# sqlite-utils load only in the commands that use them (tests/test_startup.py keeps it so).


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    # Not click.version_option(__version__): reading the version from the installed metadata
    # (importlib.metadata, ~20 ms) would then happen on every command, not only on --version.
    if not value or ctx.resilient_parsing:
        return
    from ..base.version import __version__

    click.echo(f"batchrun, version {__version__}")
    ctx.exit()


@click.group(cls=BatchrunGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version, help="Show the version and exit.")
@click.option("--config", "config_path", envvar="BATCHRUN_CONFIG", metavar="PATH", help="Config file (default ./batchrun.toml; env BATCHRUN_CONFIG).")
@click.option("--emulator", envvar="BATCHRUN_EMULATOR", metavar="URL", help="Rehearse: send every route to a local emulator at URL, keeping state.db, jobs/ and results/ under rehearsal/ (env BATCHRUN_EMULATOR).")
@click.option("-q", "--quiet", is_flag=True, help="No progress or notices on stderr (errors and blocked routes still print).")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, emulator: str | None, quiet: bool) -> None:
    """batchrun: run WildTrace leaderboard evaluations through the providers' batch APIs.

    \b
    batchrun refresh        # submit, poll and collect until done (the cron job)
    batchrun report         # the leaderboard
    batchrun demo           # everything on the built-in emulator, no keys needed
    """
    ctx.obj = Context(config_path, emulator, quiet)
    log_to_stderr(quiet)


@cli.command()
@route_stage_options
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@wait_lock_option
@pass_ctx
@handle_errors
def plan(ctx: Context, routes: tuple[str, ...], stages: tuple[str, ...], as_json: bool, wait_lock: bool) -> None:
    """Write the request files for everything missing, under jobs/ (no network)."""
    from ..run.plan import plan as do_plan

    config = ctx.config()
    with writer(ctx, "plan", config, wait_lock=wait_lock) as (store, inputs):
        result = do_plan(store, inputs, routes=set(routes) or None, stages=set(stages) or None)
        announce_warnings(ctx, store, config)
        _print_plan(config, result, as_json, quiet=ctx.quiet)


def _sum_known(values: list[float | None]) -> float | None:
    """A total, unknown if any part is (a route without a price)."""
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _print_plan(config: Config, result: Any, as_json: bool, *, quiet: bool = False,
                unsent: list[dict[str, Any]] | None = None) -> None:
    from ..ledger.cost import EXPECTED_OUTPUT_PRIOR, fmt_money

    rows = [vars(r).copy() for r in result.routes]
    if as_json:
        click.echo(json.dumps({"routes": rows, "batches": result.batches, "warnings": result.warnings}, indent=2))
        return
    # Two costs: `expected` from the output answers really use (observed, or the stated prior
    # before any answer: cost.EXPECTED_OUTPUT_PRIOR), and `bound`, every answer using its whole
    # max_tokens, which --budget checks (at the batch rate; `online` is the bound without discount).
    header = (f"{'route':24} {'stage':5} {'tasks':>5} {'ooc':>4} {'to send':>7} {'files':>5} {'bytes':>13} "
              f"{'est in tok':>11} {'exp out tok':>11} {'max out tok':>11} {'judge req':>9} {'expected':>10} {'bound':>10} {'online':>10}")
    click.echo(header)
    for d in rows:
        click.echo(f"{d['route'][:24]:24} {d['stage']:5} {d['tasks']:>5} {d['out_of_context']:>4} {d['to_send']:>7} {d['files']:>5} "
                   f"{d['bytes']:>13,} {d['est_input_tokens']:>11,} {d['expected_output_tokens']:>11,} {d['est_output_tokens']:>11,} "
                   f"{d['judge_requests_expected']:>9} {fmt_money(d['est_cost_expected']):>10} {fmt_money(d['est_cost_batch']):>10} "
                   f"{fmt_money(d['est_cost_online']):>10}")
    sending = [d for d in rows if d["est_input_tokens"]]
    total = _sum_known([d["est_cost_batch"] for d in sending])
    expected = _sum_known([d["est_cost_expected"] for d in sending])
    click.echo(f"total estimated at the batch rate: {fmt_money(expected)} expected, {fmt_money(total)} bound (what --budget checks)"
               + ("" if total is not None else " (some routes have no price: set price to know)"))
    if sending:
        prior = sorted({d["route"] for d in sending if d["expected_basis"].startswith("prior")})
        seen = sorted({d["route"] for d in sending if d["expected_basis"].startswith("observed")})
        click.echo("expected output: " + "; ".join(
            part for part in (f"the mean of the answers so far ({', '.join(seen)})" if seen else "",
                              f"{EXPECTED_OUTPUT_PRIOR:.0%} of max_tokens before any answer ({', '.join(prior)})" if prior else "")
            if part) + "; bound: every answer uses its whole max_tokens")
    if unsent:
        # Planned earlier (by `plan`, or a submit that held them): the next submit sends these.
        click.echo(f"{len(unsent)} batch(es) planned and not sent yet, {sum(b['n_requests'] or 0 for b in unsent)} request(s), "
                   f"expected {fmt_money(_sum_known([b['expected_cost'] for b in unsent]))}, "
                   f"bound {fmt_money(_sum_known([b['est_cost'] for b in unsent]))}: the next submit will send them")
        for b in unsent:
            click.echo(f"  {b['id']}  {b['route']} {b['stage']}  {b['status']}  {b['n_requests']} request(s)  "
                       f"expected {fmt_money(b['expected_cost'])}, bound {fmt_money(b['est_cost'])}")
    if not result.batches and not any(d["to_send"] for d in rows) and not unsent and not quiet:
        click.echo("Nothing new to write.", err=True)


def no_preflight_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--no-preflight", "no_preflight", is_flag=True,
                        help="Skip the preflight of routes whose policy has not passed one (see `batchrun preflight`).")(fn)


@cli.command()
@route_stage_options
@click.option("--dry-run", is_flag=True, help="Plan only: print what would be sent and its estimated cost.")
@click.option("--budget", type=Number(min=0), metavar="USD", help="Never create a batch that would take tonight's committed spend past USD.")
@no_preflight_option
@wait_lock_option
@pass_ctx
@handle_errors
def submit(ctx: Context, routes: tuple[str, ...], stages: tuple[str, ...], dry_run: bool, budget: float | None,
           no_preflight: bool, wait_lock: bool) -> None:
    """Plan what is pending, preflight new route policies, then upload request files and create batches.

    Exit 2 when a route did not pass its preflight (it sent nothing; the others went on).
    """
    from ..run.submit import submit as do_submit

    config = ctx.config()
    with writer(ctx, "submit", config, wait_lock=wait_lock) as (store, inputs):
        result = do_submit(store, inputs, routes=set(routes) or None, stages=set(stages) or None, dry_run=dry_run,
                           budget=budget, preflight=not no_preflight, progress=ctx.progress())
        announce_warnings(ctx, store, config)
        if dry_run:
            _print_plan(config, result.plan, False, quiet=ctx.quiet, unsent=result.unsent)
            return
        click.echo(f"created {len(result.created)} batch(es), adopted {len(result.adopted)}, held {len(result.held)}")
        for bid, why in result.held:
            click.echo(f"  held {bid}: {why}")
        print_preflight_failures(result.preflight_failed)
    if result.preflight_failed:
        sys.exit(EXIT_INCOMPLETE)


@cli.command()
@click.option("--wait", is_flag=True, help="Block until nothing is in flight.")
@click.option("--interval", type=seconds(), default=30.0, show_default=True, help="Seconds between checks with --wait.")
@click.option("--timeout", type=seconds(), help="With --wait, give up after this many seconds.")
@wait_lock_option
@pass_ctx
@handle_errors
def poll(ctx: Context, wait: bool, interval: float, timeout: float | None, wait_lock: bool) -> None:
    """Check batches in flight and download the results of those that ended."""
    from ..run.poll import poll as do_poll

    config = ctx.config()
    with writer(ctx, "poll", config, wait_lock=wait_lock) as (store, inputs):
        r = do_poll(store, inputs, wait=wait, interval=interval, timeout=timeout, progress=ctx.progress())
        click.echo(f"{r.in_flight} batch(es) in flight, {len(r.downloaded)} downloaded")
    for text in r.blocked.values():
        click.echo(f"blocked: {redact(text)}", err=True)
    if wait and r.in_flight:
        # --wait ended (--timeout) before the work did: not done, run again later.
        click.echo(f"--timeout reached with {r.in_flight} batch(es) still in flight; poll again later.", err=True)
    if (wait and r.in_flight) or r.blocked:
        sys.exit(EXIT_INCOMPLETE)


@cli.command()
@wait_lock_option
@pass_ctx
@handle_errors
def collect(ctx: Context, wait_lock: bool) -> None:
    """Reconcile downloaded results into state.db, queue judging and retries, write results/.

    Exits 0 when every route is complete, 2 otherwise (after writing what it has).
    """
    from ..run.collect import collect as do_collect

    config = ctx.config()
    with writer(ctx, "collect", config, wait_lock=wait_lock) as (store, inputs):
        r = do_collect(store, inputs, progress=ctx.progress())
        announce_warnings(ctx, store, config)
        click.echo(f"collected {len(r.batches)} batch(es), {r.lines} result line(s); {r.new_judge_requests} judge request(s) queued")
        if not r.complete:
            print_problems(store, config, requests="requests_now")  # collect's leaderboard just filled it
    if not r.complete:
        sys.exit(EXIT_INCOMPLETE)


@cli.command()
@click.option("--timeout", "timeout_", metavar="DURATION", help="Stop cleanly after DURATION (90s, 45m, 6h).")
@click.option("--until", metavar="HH:MM", help="Stop cleanly at this local time.")
@click.option("--interval", type=seconds(), default=30.0, show_default=True, help="Seconds between checks while batches run.")
@click.option("--budget", type=Number(min=0), metavar="USD", help="Never create a batch that would take tonight's committed spend past USD.")
@no_preflight_option
@wait_lock_option
@pass_ctx
@handle_errors
def refresh(ctx: Context, timeout_: str | None, until: str | None, interval: float, budget: float | None, no_preflight: bool,
            wait_lock: bool) -> None:
    """Submit, poll and collect in a loop until every route is complete (the cron job).

    Exit 0: complete. Exit 2: incomplete (time limit, budget, a route that did not pass its
    preflight, or nothing can progress). Exit 1: a user error (bad config or data).
    """
    from ..run.refresh import deadline_from
    from ..run.refresh import refresh as do_refresh

    config = ctx.config()
    deadline = deadline_from(parse_duration(timeout_) if timeout_ else None, check_until(until))
    with writer(ctx, "refresh", config, wait_lock=wait_lock) as (store, inputs):
        outcome = do_refresh(store, inputs, deadline=deadline, interval=interval, budget=budget, preflight=not no_preflight,
                             progress=ctx.progress())
        announce_warnings(ctx, store, config)
        from ..publish.end_of_run import publish
        from ..publish.report import render

        published = publish(store, inputs, command="refresh")
        click.echo(render(published.data, "md"))
        if not outcome.complete:
            for text in outcome.blocked:  # batches the provider refused to show in this run
                click.echo(f"blocked: {redact(text)}", err=True)
            print_problems(store, config, requests="requests_now")  # publish's leaderboard just filled it
        print_preflight_failures(outcome.preflight_failed)
        click.echo(f"refresh: {redact(outcome.reason)}", err=True)
        click.echo(f"site: {published.site}", err=True)
    if not outcome.complete:
        sys.exit(EXIT_INCOMPLETE)


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
    from ..ledger.decisions import reopen
    from ..ledger.sync import sync_state

    config = ctx.config()
    with writer(ctx, "retry", config, wait_lock=wait_lock) as (store, inputs):
        sync_state(store, inputs)
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
    from ..ledger.decisions import accept_failures as do_accept
    from ..ledger.sync import sync_state

    config = ctx.config()
    with writer(ctx, "accept-failures", config, wait_lock=wait_lock) as (store, inputs):
        sync_state(store, inputs)
        done = do_accept(store, config, route=route, reason=reason)
        click.echo(f"accepted {done.cells} cell(s) of route {route!r} as failures (scored 0): {done.reason}")


@cli.command()
@click.option("--route", "routes", multiple=True, metavar="NAME", help="Only this route (repeatable; default: every route that sends).")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@wait_lock_option
@pass_ctx
@handle_errors
def preflight(ctx: Context, routes: tuple[str, ...], as_json: bool, wait_lock: bool) -> None:
    """Check each route with one tiny online request and one batch listing: route → ok, or the
    provider's message and the fix, in seconds (a few tokens each, counted in `cost`).

    Exit 1 when any route does not pass. submit and refresh run it for each route whose policy has
    not passed one.
    """
    from ..run.preflight import preflight as do_preflight

    config = ctx.config()
    names = list(routes) or list(config.routes)
    unknown = [name for name in names if name not in config.routes]
    if unknown:
        raise BatchrunError(f"No route {', '.join(repr(n) for n in unknown)} in {config.path}.",
                            f"Routes: {', '.join(config.routes)}.")
    with writer(ctx, "preflight", config, wait_lock=wait_lock, inputs=False) as (store, inputs):
        checks = do_preflight(store, inputs, names, each=False, progress=ctx.progress())
    skipped = [name for name in names if name not in {c.route for c in checks}]
    if as_json:
        click.echo(json.dumps({"ok": all(c.ok for c in checks), "routes": [c.as_json() for c in checks], "skipped_idle": skipped},
                              indent=2, ensure_ascii=False))
    else:
        for check in checks:
            click.echo(redact(check.describe()))
        for name in skipped:
            click.echo(f"{name} → skipped: idle (role = \"judge\" outside judging.panel), it sends nothing")
    if not all(c.ok for c in checks):
        sys.exit(1)


@cli.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@pass_ctx
@handle_errors
def verify(ctx: Context, directory: str | None) -> None:
    """Check a published leaderboard against its inputs: every checksum in results/manifest.json.

    Recomputes the dataset's, each document's, the config's, each request file's, each downloaded
    provider file's and each results file's checksum from the files present, and compares them with
    the manifest and with state.db (when there is one), which also gives every published number
    again. Exit 0 when all match; exit 1 naming each mismatch.
    """
    from pathlib import Path

    from ..publish.manifest import MANIFEST_NAME
    from ..publish.verify import verify as do_verify

    config = ctx.config()
    folder = Path(directory) if directory else config.paths.results
    manifest_path = folder / MANIFEST_NAME
    if not manifest_path.is_file():
        raise BatchrunError(f"No {MANIFEST_NAME} in {folder}.", "It is written by `batchrun collect` and `batchrun refresh` beside the results files.")
    from ..ledger.store import Store

    # Either kind of store: verify only compares checksums, and says below if it was a rehearsal.
    # Any schema: verify reads only what every version has (verify.py checks for the one
    # later column it reads), and upgrading it would mean a collect, which rewrites the manifest.
    store = Store(config.paths.state, readonly=True, any_schema=True) if config.paths.state.exists() else None
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
    for note in result.notes:
        click.echo(f"note: {note}.")
    if result.protocol_note:
        click.echo(f"note: {result.protocol_note}")
    if result.rehearsal:
        click.echo(f"note: these results come from a rehearsal on the emulator at {result.rehearsal}, not from real providers.")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
@handle_errors
def status(ctx: Context, as_json: bool) -> None:
    """Cells per route and batches in flight (read-only; works while a writer runs)."""
    from ..run.status import status_data

    config = ctx.config()
    note_rehearsal(config)
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
    from ..run.status import cancel as do_cancel

    config = ctx.config()
    with writer(ctx, "cancel", config, wait_lock=wait_lock) as (store, _):
        cancelled = do_cancel(store, config, batch=batch, route=route, all_=all_)
        for bid in cancelled:
            click.echo(f"cancelled {bid}")
        if not cancelled:
            click.echo("Nothing to cancel: no live batch" + (f" of route {route!r}." if route else "."), err=True)


MAX_RESAMPLES = 100_000


def statistics_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    from ..publish.stats import DEFAULT_RESAMPLES, DEFAULT_SEED

    # numpy seeds from any non-negative integer; the bound keeps it an SQLite and JSON integer.
    fn = click.option("--seed", type=click.IntRange(min=0, max=2**63 - 1), default=DEFAULT_SEED, show_default=True,
                      help="Seed of the Monte-Carlo permutation draws (0 or more).")(fn)
    # The Monte-Carlo draws are a resamples x documents matrix: 10**12 would take terabytes
    # (numpy's _ArrayMemoryError); the p-value's Monte-Carlo error is long negligible before that.
    fn = click.option("--resamples", type=click.IntRange(min=100, max=MAX_RESAMPLES), default=DEFAULT_RESAMPLES, show_default=True,
                      help="Monte-Carlo sign flips (of whole documents) for the permutation test, when more than 20 documents "
                           f"differ ({100}-{MAX_RESAMPLES:,}).")(fn)
    return fn


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json", "html"]), default="md", show_default=True,
              help="Output format: Markdown, CSV, JSON (everything), or html: a static site written to --out DIR.")
@click.option("--out", type=click.Path(), help="Write to this file instead of stdout (html: this folder).")
@click.option("--provisional", is_flag=True, help="Rank, compare and group routes with accepted failures too (their numbers are marked: not protocol numbers).")
@statistics_options
@pass_ctx
@handle_errors
def report(ctx: Context, fmt: str, out: str | None, provisional: bool, resamples: int, seed: int) -> None:
    """The leaderboard (read-only), sorted by All-tasks, with intervals, paired comparisons and provenance."""
    from ..publish.analysis import Settings, full_report
    from ..publish.report import render

    config = ctx.config()
    if fmt == "html" and not out:
        raise BatchrunError("--format html writes a folder of pages, not a stream.", "Pass --out DIR, e.g. --out site/.")
    with reader(config) as store:
        # Markdown and CSV print no per-task rows: not built for them (~0.1 s at 32 routes x 100k results).
        data = full_report(store, config, Settings(resamples=resamples, seed=seed, provisional=provisional),
                           with_tasks=fmt in ("json", "html"))
        if fmt == "html":
            from ..publish.site import write_site

            try:
                index = write_site(store, config, data, Path(str(out)))
            except OSError as e:
                # /dev/null, /proc/x, a file, a read-only place: the folder the user named.
                where = f" ({e.filename})" if e.filename and str(e.filename) != str(out) else ""
                raise BatchrunError(f"Cannot write the site to --out {out}: {e.strerror or e}{where}.",
                                    "Pass --out a folder you can create and write (new, empty, or written by an earlier "
                                    "report), e.g. --out site/.") from None
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
@click.option("--provisional", is_flag=True, help="Compare the tasks both routes have finished, when the runs are not equal and complete (the result says so).")
@statistics_options
@pass_ctx
@handle_errors
def compare(ctx: Context, route_a: str, route_b: str, as_json: bool, provisional: bool, resamples: int, seed: int) -> None:
    """Paired comparison of two routes: mean difference with interval, sign and permutation tests (read-only).

    Both routes must have finished every task (exit 2 naming what is open) and have no accepted
    failures (exit 1); --provisional compares the tasks both have finished, and says so.
    """
    from ..publish.analysis import Settings
    from ..publish.analysis import compare as do_compare
    from ..publish.report import render_comparison
    from ..ledger.store import Store

    config = ctx.config()
    store = Store.open(config.paths.state, rehearsal=config.rehearsal, readonly=True)
    data = do_compare(store, config, route_a, route_b, Settings(resamples=resamples, seed=seed, provisional=provisional))
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
    from ..ledger.cost import cost_report, fmt_money

    config = ctx.config()
    note_rehearsal(config)
    with reader(config) as store:
        data = cost_report(store, since)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    # stage: gen, judge or preflight (each preflight is one online request, counted as a "batch")
    click.echo(f"{'night':10} {'route':24} {'stage':9} {'batches':>7} {'in tok':>12} {'out tok':>12} {'expected':>10} {'bound':>10} {'actual':>10}")
    for r in data["rows"]:
        click.echo(f"{r['night']:10} {r['route'][:24]:24} {r['stage']:9} {r['batches']:>7} {r['input_tokens']:>12,} {r['output_tokens']:>12,} "
                   f"{fmt_money(r['expected_cost']):>10} {fmt_money(r['estimated_cost']):>10} {fmt_money(r['actual_cost']):>10}")
    for n in data["nights"]:
        unpriced = n["unpriced_routes"]
        click.echo(f"{n['night']:10} {'TOTAL':24} {'':9} {n['batches']:>7} {'':>12} {'':>12} {fmt_money(n['expected_cost']):>10} "
                   f"{fmt_money(n['estimated_cost']):>10} {fmt_money(n['actual_cost']):>10}"
                   + (f"  priced routes only: {len(unpriced)} route(s) unpriced ({', '.join(unpriced)})" if unpriced else ""))
    if data["nights"]:
        click.echo("Nights run noon to noon, local time (a night is labelled by the date it starts). expected: from the "
                   "output answers really used (or a prior before any); bound: every answer using its whole max_tokens, "
                   "what --budget checks.")
    if data["routes"]:
        click.echo("")
        click.echo("Estimate vs actual per route (collected batches):")
        click.echo(f"{'route':24} {'stage':5} {'batches':>7} {'expected':>10} {'bound':>10} {'actual':>10} {'vs expected':>11}")
        for r in data["routes"]:
            error = "—" if r["error"] is None else f"{100 * r['error']:+.0f}%"
            click.echo(f"{r['route'][:24]:24} {r['stage']:5} {r['batches']:>7} {fmt_money(r['expected_cost']):>10} "
                       f"{fmt_money(r['estimated_cost']):>10} {fmt_money(r['actual_cost']):>10} {error:>11}")


@cli.command()
@click.argument("route")
@click.option("--max-cost", type=Number(min=0), metavar="USD", help="Never spend more than this on the search's requests (required when it sends any).")
@click.option("--dry-run", is_flag=True, help="Show the plan and its estimated cost; send nothing.")
@click.option("--write", is_flag=True, help="Put the suggested caps into ROUTE's table in the config file, with a comment (date, method).")
@click.option("--precision", default="2%", show_default=True, metavar="PCT", help="Stop the search when the largest accepted length is within this of the smallest rejected.")
@click.option("--json", "as_json", is_flag=True, help="Print the evidence and the suggestion as JSON.")
@pass_ctx
@handle_errors
def probe(ctx: Context, route: str, max_cost: float | None, dry_run: bool, write: bool, precision: str, as_json: bool) -> None:
    """Measure ROUTE's real context window and suggest its caps in characters (spec §3: a new model is probed)."""
    from ..ledger.inputs import resolve_inputs
    from ..run import probe as probing

    config = ctx.config()
    if write and config.rehearsal:
        raise BatchrunError("--write with --emulator would put the emulator's window into the real config.",
                            "Probe the real provider to write caps, or copy the suggestion by hand.")
    probing.route_for(config, route)  # an unknown route is said before the dataset is read
    inputs = resolve_inputs(None, config)
    result = probing.probe(inputs, route, max_cost=max_cost, precision=probing.parse_precision(precision), dry_run=dry_run,
                           progress=ctx.progress().event)
    target = config.routes[route]
    if not as_json:
        # The evidence first: it was paid for, and it stays on screen even if the lock or the
        # config write below fails.
        click.echo("\n".join(probing.describe(result, target)))
    written = None
    if not result.dry_run:
        with writer(ctx, "probe", config, resolved=inputs) as (store, _):
            written = probing.write_caps(config, result) if write and not probing.missing_caps(result) else None
            probing.record(store, result, written=written is not None)
            if written:
                # Caps are part of the route's generation policy: new caps re-plan its cells.
                sent = store.scalar("""SELECT count(*) FROM cells c JOIN config_routes cr ON cr.route = c.route AND cr.policy_fp = c.policy_fp
                                       WHERE c.route = ? AND c.custom_id IS NOT NULL""", [route]) or 0
                if sent:
                    click.echo(f"Note: the caps are part of route {route!r}'s policy: its {sent:,} planned or answered cell(s) "
                               f"are planned afresh under the new caps by the next run (batches still in flight are refused "
                               f"until they end or `batchrun cancel --route {route}`).", err=True)
    if as_json:
        en, cjk = probing.suggested_caps(result, target)
        click.echo(json.dumps({**result.evidence(), "plan": list(result.plan), "suggested_caps": {"en": en, "cjk": cjk},
                               "written": written is not None}, indent=2, ensure_ascii=False))
    else:
        if written:
            click.echo(f"written to {config.path}: {probing.caps_text(*written)}")
    if write and not result.dry_run and written is None:
        probing.write_caps(config, result)  # raises: says which cap is missing and what to do


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port (0 = any free port).")
@click.option("--latency", type=seconds(), default=1.0, show_default=True, help="Seconds before a batch finishes.")
@click.option("--responder", metavar="FILE.py:FUNCTION", help="Answer requests with your own function (or module:function).")
@click.option("--fault", "faults_", multiple=True, metavar="JSON", help="Inject a fault (repeatable), e.g. '{\"kind\":\"http_error\",\"status\":429,\"count\":3}'.")
@click.option("--window", "windows_", multiple=True, metavar="MODEL=TOKENS", help="A model's context window in input tokens, 0 = none (repeatable; the paper's models have defaults).")
@click.option("--model", "models_", multiple=True, metavar="ID", help="Accept this model id besides each provider's built-in table (repeatable).")
@click.option("--key", "keys_", multiple=True, metavar="VALUE", help="Accept only these API keys; any other gets the provider's invalid-key error (repeatable; default: any key).")
@handle_errors
def emulator(host: str, port: int, latency: float, responder: str | None, faults_: tuple[str, ...], windows_: tuple[str, ...],
             models_: tuple[str, ...], keys_: tuple[str, ...]) -> None:
    """Serve a local emulator of the OpenAI, Anthropic and Gemini batch APIs (for rehearsals and tests)."""
    from ..emulator import normalize_fault, run_emulator
    from ..emulator.server import check_loopback

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
    from ..emulator.windows import parse_window

    try:
        windows = dict(parse_window(w) for w in windows_)
    except ValueError as e:
        raise BatchrunError(f"{e}.", "Pass --window MODEL=TOKENS, e.g. --window my-model=200000.")
    if responder:
        from ..emulator import load_responder

        try:
            responder_fn = load_responder(responder)
        except Exception as e:  # noqa: BLE001 - the user's file: any failure to load it is their error to see
            raise BatchrunError(f"--responder {responder!r} cannot be loaded: {e}",
                                "Pass FILE.py:FUNCTION or package.module:FUNCTION naming a function that takes the request dict.")
    try:
        if any(not m.strip() for m in models_):
            raise BatchrunError("--model was given an empty model id.", "Pass the provider's model id, e.g. --model gpt-5.5.")
        if any(not k for k in keys_):
            raise BatchrunError("--key was given an empty key.", "Pass the key the rehearsal should accept, e.g. --key sk-rehearsal.")
        run_emulator(host, port, latency, responder_fn if responder else None, parsed, windows, models_, keys_ or None)
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
