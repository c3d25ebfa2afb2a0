"""The commands that move a run: plan, submit, poll, collect and refresh (the cron job), retry and
accept-failures (the maintainer's decisions), cancel. Each opens state.db as the one writer with
the command's inputs resolved once (support.writer), calls one library function, prints."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ..base.errors import BatchrunError
from ..base.redaction import redact
from .support import (
    EXIT_INCOMPLETE,
    Context,
    Number,
    announce_warnings,
    check_until,
    complete_routes,
    dry_run_store,
    handle_errors,
    json_header,
    note_rehearsal,
    pass_ctx,
    print_preflight_failures,
    print_problems,
    route_stage_options,
    seconds,
    wait_lock_option,
    writer,
)

if TYPE_CHECKING:
    from ..protocol.config import Config


@click.command()
@route_stage_options
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@wait_lock_option
@pass_ctx
@handle_errors
def plan(ctx: Context, routes: tuple[str, ...], stages: tuple[str, ...], as_json: bool, wait_lock: bool) -> None:
    """Write the request files for everything missing, under jobs/ (no network)."""
    from ..run.plan import plan as do_plan

    config = ctx.reading_config(fallback=False)  # sends nothing: a rehearsal's state.db is planned as the rehearsal's
    config.require_routes(routes)  # before the dataset is read or the lock taken
    note_rehearsal(config)
    with writer(ctx, "plan", config, wait_lock=wait_lock) as (store, inputs):
        result = do_plan(store, inputs, routes=set(routes) or None, stages=set(stages) or None)
        announce_warnings(ctx, store, config)
        _print_plan(config, result, as_json, quiet=ctx.quiet, json_keys=json_header(config, store) if as_json else None)


def _sum_known(values: list[float | None]) -> float | None:
    """A total, unknown if any part is (a route without a price)."""
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _print_plan(config: Config, result: Any, as_json: bool, *, quiet: bool = False,
                unsent: list[dict[str, Any]] | None = None, json_keys: dict[str, Any] | None = None,
                submitting: Any = None) -> None:
    """The plan's table; for `submit --dry-run` (`submitting`: its SubmitResult) also what the
    next submit would send, hold back and why, and the key variables it would find unset."""
    from ..ledger.cost import EXPECTED_OUTPUT_PRIOR, fmt_money

    rows = [vars(r).copy() for r in result.routes]
    if as_json:
        click.echo(json.dumps({**(json_keys or {}), "routes": rows, "batches": result.batches, "warnings": result.warnings}, indent=2))
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
    if submitting is not None and submitting.would_hold:
        click.echo(f"held back if submitted now ({len(submitting.would_hold)}; submit sends the rest and exits 2, "
                   "and `batchrun status` then says why each waits):")
        for what, why in submitting.would_hold:
            click.echo(f"  would hold {what}: {why}")
    if submitting is not None and submitting.missing_keys:
        # Names only: whether each is set was looked at, its value never read out.
        missing = submitting.missing_keys
        click.echo(f"{len(missing)} API key variable(s) not set, which submit needs before it uploads anything: "
                   + "; ".join(f"{env} (route{'s' if len(rs) > 1 else ''} {', '.join(repr(r) for r in rs)})" for env, rs in missing.items())
                   + ". Export " + ", ".join(missing) + " first.")
    if not result.batches and not any(d["to_send"] for d in rows) and not unsent and not quiet:
        click.echo("Nothing new to write.", err=True)


def no_preflight_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--no-preflight", "no_preflight", is_flag=True,
                        help="Skip the preflight of routes whose policy has not passed one (see `batchrun preflight`).")(fn)


@click.command()
@route_stage_options
@click.option("--dry-run", is_flag=True, help="Plan only: print what would be sent and its estimated cost.")
@click.option("--budget", type=Number(min=0), metavar="USD", help="Never create a batch that would take tonight's committed spend past USD.")
@click.option("--timeout", "timeout_", type=seconds(), help="Stop cleanly after this long, every provider call included (90, 90s, 45m, 6h).")
@no_preflight_option
@wait_lock_option
@pass_ctx
@handle_errors
def submit(ctx: Context, routes: tuple[str, ...], stages: tuple[str, ...], dry_run: bool, budget: float | None,
           timeout_: float | None, no_preflight: bool, wait_lock: bool) -> None:
    """Plan what is pending, preflight new route policies, then upload request files and create batches.

    Exit 2 when a route did not pass its preflight (it sent nothing; the others went on), or when
    --timeout cut it short (what is left waits for the next run).
    """
    from ..run.refresh import deadline_from
    from ..run.submit import submit as do_submit

    # A dry run sends nothing: like plan, it works on a rehearsal's state.db (the demo's) and says so.
    config = ctx.reading_config(fallback=False) if dry_run else ctx.config()
    config.require_routes(routes)
    if dry_run:
        note_rehearsal(config)
    deadline = deadline_from(timeout_, None)  # from now: the lock and the inputs count against it, as in refresh
    # A dry run works on a throw-away copy of state.db and writes nothing beside the config (no lock).
    with (dry_run_store(config, "submit") if dry_run else writer(ctx, "submit", config, wait_lock=wait_lock, until=deadline)) as (store, inputs):
        result = do_submit(store, inputs, routes=set(routes) or None, stages=set(stages) or None, dry_run=dry_run,
                           budget=budget, preflight=not no_preflight, deadline=deadline, progress=ctx.progress())
        announce_warnings(ctx, store, config)
        if dry_run:
            _print_plan(config, result.plan, False, quiet=ctx.quiet, unsent=result.unsent, submitting=result)
            return
        # Each held batch once, with why (the library logs none: refresh says each once per run).
        click.echo(f"created {len(result.created)} batch(es), adopted {len(result.adopted)}, held {len(result.held)}")
        for bid, why in result.held:
            click.echo(f"  held {bid}: {why}")
        print_preflight_failures(result.preflight_failed)
    if result.held or result.preflight_failed:
        # Work held back is work not done: exit 2, "incomplete, run again later" (README, exit codes).
        if result.time_limit:
            click.echo(f"submit: {result.time_limit}", err=True)
        elif result.held:
            click.echo(f"submit: {len(result.held)} batch(es) held back, not sent (why: each 'held' line); "
                       "the next submit tries them again, and `batchrun status` says why each waits.", err=True)
        sys.exit(EXIT_INCOMPLETE)


# The shortest --interval a run against a provider's API may use. Each round checks every batch
# in flight (one status call each), and a batch takes up to 24 hours (OpenAI's completion_window,
# Anthropic's and Gemini's batch guides): checking every second learns nothing sooner and spends
# the batch endpoints' own rate limit (Anthropic: 1,000 requests per minute on all batch endpoints
# at the start tier, and "a rate of 60 requests per minute (RPM) may be enforced as 1 request per
# second", docs.anthropic.com/claude/reference/rate-limits; its own polling example sleeps 60 s
# between checks, docs.anthropic.com/en/api/messages-batch-examples). 0 was a loop bounded only by
# 429 backoff. 5 s keeps tens of batches in flight well inside such limits and is still quick
# enough to watch a small batch; the default is 30 s. Rehearsals and routes on this machine (the
# emulator, the tests) take any interval.
MIN_INTERVAL = 5.0


def check_interval(config: Config, interval: float) -> None:
    """Refuse an --interval below MIN_INTERVAL for a run that polls a provider's API."""
    if interval >= MIN_INTERVAL or config.rehearsal:
        return
    from ..providers.clients import off_this_machine

    remote = [name for name, r in config.routes.items() if off_this_machine(r)]
    if remote:
        raise BatchrunError(
            f"--interval {interval:g}s is below the {MIN_INTERVAL:g}s floor for a run against a provider's API "
            f"(route{'s' if len(remote) > 1 else ''} {', '.join(repr(n) for n in remote)}): every batch in flight is "
            "checked each round, and polling that often only spends the provider's rate limit.",
            f"Use --interval {MIN_INTERVAL:g}s or more (the default, 30s, suits batches that take minutes to hours); "
            "shorter intervals are for rehearsals on the emulator (--emulator URL). Nothing was sent.")


@click.command()
@click.option("--wait", is_flag=True, help="Block until nothing is in flight.")
@click.option("--interval", type=seconds(), default="30s", show_default=True, help="Time between checks with --wait (90, 90s, 45m, 6h).")
@click.option("--timeout", type=seconds(), help="With --wait, give up after this long (90, 90s, 45m, 6h).")
@wait_lock_option
@pass_ctx
@handle_errors
def poll(ctx: Context, wait: bool, interval: float, timeout: float | None, wait_lock: bool) -> None:
    """Check batches in flight and download the results of those that ended."""
    from ..run.poll import poll as do_poll

    config = ctx.config()
    if wait:  # without --wait, poll checks once and --interval is not used
        check_interval(config, interval)
    until = time.time() + timeout if wait and timeout is not None else None  # --wait --timeout: the lock counts too
    with writer(ctx, "poll", config, wait_lock=wait_lock, until=until) as (store, inputs):
        r = do_poll(store, inputs, wait=wait, interval=interval, timeout=timeout, progress=ctx.progress())
        click.echo(f"{r.in_flight} batch(es) in flight, {len(r.downloaded)} downloaded")
    for text in r.blocked.values():
        click.echo(f"blocked: {redact(text)}", err=True)
    if wait and r.in_flight:
        # --wait ended (--timeout) before the work did: not done, run again later.
        click.echo(f"--timeout reached with {r.in_flight} batch(es) still in flight; poll again later.", err=True)
    if (wait and r.in_flight) or r.blocked:
        sys.exit(EXIT_INCOMPLETE)


@click.command()
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


@click.command()
@click.option("--timeout", "timeout_", type=seconds(), help="Stop cleanly after this long (90, 90s, 45m, 6h).")
@click.option("--until", metavar="HH:MM", help="Stop cleanly at this local time.")
@click.option("--interval", type=seconds(), default="30s", show_default=True, help="Time between checks while batches run (90, 90s, 45m).")
@click.option("--budget", type=Number(min=0), metavar="USD", help="Never create a batch that would take tonight's committed spend past USD.")
@no_preflight_option
@wait_lock_option
@pass_ctx
@handle_errors
def refresh(ctx: Context, timeout_: float | None, until: str | None, interval: float, budget: float | None, no_preflight: bool,
            wait_lock: bool) -> None:
    """Submit, poll and collect in a loop until every route is complete (the cron job).

    Exit 0: complete. Exit 2: incomplete (time limit, budget, a route that did not pass its
    preflight, or nothing can progress). Exit 1: a user error (bad config or data).
    """
    from ..run.refresh import deadline_from
    from ..run.refresh import refresh as do_refresh

    config = ctx.config()
    check_interval(config, interval)
    deadline = deadline_from(timeout_, check_until(until))
    with writer(ctx, "refresh", config, wait_lock=wait_lock, until=deadline) as (store, inputs):
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
        if ctx.quiet:  # held work needs action: -q silenced the `held` lines as they happened, not their news
            for bid, why in outcome.held:
                click.echo(f"held {bid}: {redact(why)}", err=True)
        if not ctx.quiet or not outcome.complete:  # -q: why it stopped only when that needs action
            click.echo(f"refresh: {redact(outcome.reason)}", err=True)
        if not ctx.quiet:
            click.echo(f"site: {published.site}", err=True)
    if not outcome.complete:
        sys.exit(EXIT_INCOMPLETE)


@click.command()
@click.option("--route", "route", required=True, metavar="NAME", shell_complete=complete_routes, help="The route whose cells to reopen.")
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
    config.require_routes([route])
    with writer(ctx, "retry", config, wait_lock=wait_lock) as (store, inputs):
        sync_state(store, inputs)
        done = reopen(store, config, route=route, task=task, status=status_, reason=reason)
        click.echo(f"reopened {done.requests} request(s) of route {route!r} ("
                   + ", ".join(f"{k} {v}" for k, v in sorted(done.by_state.items())) + "); the next submit or refresh sends them")


@click.command("accept-failures")
@click.option("--route", "route", required=True, metavar="NAME", shell_complete=complete_routes, help="The contestant route.")
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
    config.require_routes([route])
    with writer(ctx, "accept-failures", config, wait_lock=wait_lock) as (store, inputs):
        sync_state(store, inputs)
        done = do_accept(store, config, route=route, reason=reason)
        click.echo(f"accepted {done.cells} cell(s) of route {route!r} as failures (scored 0): {done.reason}")


@click.command()
@click.option("--batch", metavar="ID", help="A local batch id (see status).")
@click.option("--route", metavar="NAME", shell_complete=complete_routes, help="Every live batch of a route.")
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
