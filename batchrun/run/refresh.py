"""Refresh: submit → poll → collect in a loop until done, stuck, or out of time.

Stops when (a) every route is complete (exit 0); (b) nothing more can move in this run: nothing
in flight, nothing sendable and no retry due before the time limit — what is left is blocked
routes (the config must change: each is named with its diagnosis), cells whose retry budget this
run used up (the next run resumes them), or everything held by the budget or a quota (exit 2,
said plainly); (c) the time limit is reached: in-flight batches are left for the next run (exit 2).
While only retries are left that back off (the protocol retries with backoff), it sleeps until the first is due.

The time limit bounds every provider call too (netguard.time_limit): a call still running then is
cut, so the run ends on time and releases the writer lock. A route whose batch the provider
refuses to show (the key, a redirect to another host, a 404) is blocked for the run and named;
the other routes go on. An uncertain create waiting for candidate batches to end (Anthropic) is
waited for like a batch in flight.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from ..base import netguard
from ..base.backoff import ROUND_BACKOFF_CAP, retry_base
from ..base.errors import ProviderError
from ..base.progress import SILENT, Progress
from ..base.stop import checkpoint
from ..ledger.inputs import Inputs, as_inputs
from ..ledger import kept
from ..ledger.lifecycle import LIVE, TO_FOLLOW
from ..ledger.pending import scan_pending
from ..ledger.store import Store, sql_list
from ..protocol.config import Config
from ..providers.clients import is_transient
from ..publish.outputs import write_results
from .collect import collect
from .poll import poll_once
from .preflight import Check
from .submit import submit, time_limit_reason

# Rounds in a row with nothing but provider errors before refresh says the failure is persistent.
MAX_STALLED_ROUNDS = 10


@dataclass
class RefreshOutcome:
    complete: bool
    reason: str
    batches_created: int = 0
    leaderboard: list[dict] = field(default_factory=list)
    # Routes blocked in this run because the provider refused to show or hand over their batches:
    # each with what happened and the fix (poll.PollResult.blocked).
    blocked: list[str] = field(default_factory=list)
    # Routes whose last preflight in this run did not pass: they sent nothing (the others went on).
    preflight_failed: list[Check] = field(default_factory=list)
    # The batches the last submit held back, (batch id, why): each was said once as it was held
    # (a progress `held` line); the CLI says them again only where -q silenced those lines.
    held: list[tuple[str, str]] = field(default_factory=list)


def deadline_from(timeout: float | None, until: str | None) -> float | None:
    """--timeout seconds or --until HH:MM (local time; tomorrow if already past)."""
    limits = []
    if timeout is not None:
        limits.append(time.time() + timeout)
    if until:
        hh, mm = (int(x) for x in until.split(":"))
        now = datetime.now()
        target = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
        if target <= now:
            target += timedelta(days=1)
        limits.append(target.timestamp())
    return min(limits) if limits else None


def refresh(store: Store, config: Config | Inputs, *, deadline: float | None = None, interval: float = 30.0,
            budget: float | None = None, preflight: bool = True, progress: Progress = SILENT) -> RefreshOutcome:
    """Submit (preflighting each route whose policy has not passed one, see submit), poll and
    collect until done, stuck or out of time; every provider call ends by the deadline.

    `config`: the command's resolved inputs (a Config is resolved here): every round works from
    them, as the inputs were when the refresh started; an edit made meanwhile is the next run's."""
    inputs = as_inputs(store, config, escape=True)
    failed: dict[str, Check] = {}
    with netguard.time_limit(deadline):
        outcome = _refresh(store, inputs, deadline=deadline, interval=interval, budget=budget, preflight=preflight,
                           progress=progress, failed=failed)
    return replace(outcome, preflight_failed=list(failed.values()))


def _refresh(store: Store, inputs: Inputs, *, deadline: float | None, interval: float, budget: float | None,
             preflight: bool, progress: Progress, failed: dict[str, Check]) -> RefreshOutcome:
    config = inputs.config
    created = 0
    started = time.time()
    stalled = 0  # consecutive rounds where the providers only answered with errors
    first_round = True
    last_error = ""
    blocked: dict[str, str] = {}  # routes blocked in this run (poll.PollResult.blocked)
    held: dict[str, str] = {}  # batch -> why submit held it, as last said in this run
    refused: dict[str, str] = {}  # routes whose upload or create the provider refused in this run: not asked again

    def outcome(complete: bool, reason: str, leaderboard: list[dict], held_now: list[tuple[str, str]] | None = None) -> RefreshOutcome:
        return RefreshOutcome(complete, reason, created, leaderboard, list(blocked.values()), held=list(held_now or []))

    def out_of_time() -> bool:
        return deadline is not None and time.time() >= deadline

    while True:
        # Between rounds: a stop signal whose Stopped was swallowed where it landed ends the run
        # here, not at the end of the night (base/stop.py); a state.db deleted or replaced
        # mid-run stops it too.
        checkpoint()
        store.check_same_file()
        try:
            s = submit(store, inputs, budget=budget, preflight=preflight, progress=progress, refused=refused)
            for bid, why in s.held:
                # Said once per batch and reason, not every round while a queue or the budget holds it.
                if held.get(bid) != why:
                    held[bid] = why
                    progress.event(f"held {bid}: {why}")
            for check in s.preflight:
                if check.ok:
                    failed.pop(check.route, None)
                else:
                    failed[check.route] = check
            p = poll_once(store, inputs, progress=progress, skip=set(blocked))
        except ProviderError as e:
            if not is_transient(e):
                raise
            # A provider outage is "not now" for an unattended run, unless it persists.
            stalled += 1
            last_error = e.message
            progress.event(f"provider error: {e.message}")
            if out_of_time() or stalled >= MAX_STALLED_ROUNDS or (deadline is not None and time.time() + interval > deadline):
                c = collect(store, inputs, progress=progress)
                reason = "time limit reached; the next run resumes" if out_of_time() else f"persistent infrastructure failure: {last_error}"
                return outcome(False, reason, c.leaderboard)
            time.sleep(interval)
            continue
        blocked.update(p.blocked)
        created += len(s.created) + len(s.adopted)
        # results/ changes only when something was collected (or, on the first round, when the
        # config changed since the last run): rewriting ~2 files per route every tick is waste.
        c = collect(store, inputs, progress=progress, write_outputs=False, sync=False)  # submit just synced
        if first_round or c.batches:
            write_results(store, inputs, c.leaderboard)
        first_round = False
        progressed = bool(s.created or s.adopted or p.ended or p.downloaded or c.batches)
        if s.provider_errors or p.provider_errors:
            stalled = 0 if progressed else stalled + 1
            if stalled >= MAX_STALLED_ROUNDS and not out_of_time():
                why = "; ".join(sorted({r for _, r in s.held})) or "checking or downloading batches keeps failing"
                return outcome(False, f"persistent infrastructure failure: {why}", c.leaderboard)
        else:
            stalled = 0
        if c.complete:
            reason = "every route is complete" if created else "nothing to do: every route is already complete"
            return outcome(True, reason, c.leaderboard)
        # Batches of a route blocked in this run are not waited for: nothing in this run moves them.
        marks = ", ".join("?" for _ in blocked)
        live = store.scalar(f"SELECT count(*) FROM batches WHERE status IN {sql_list(LIVE)} "
                            f"AND NOT (status IN {sql_list(TO_FOLLOW)} AND route IN ({marks}))", sorted(blocked)) or 0
        if out_of_time():
            return outcome(False, time_limit_reason(store, live), c.leaderboard)
        scan = scan_pending(store, config, states=kept.request_states(store))
        if live == 0 or (s.held and not p.in_flight and not s.awaiting and not s.provider_errors and not progressed):
            retry_at = scan.next_retry_at
            if s.held and not scan.due and retry_at is not None and (deadline is None or retry_at <= deadline):
                # Held batches do not move by waiting, but failed requests backing off do: wait for
                # them as when nothing is held (a refused route used to end the run at once, leaving
                # another route's retries silent until a later run).
                _sleep_until(retry_at, progress, f"{scan.backing_off} request(s) back off after a failure")
                continue
            if s.held:
                # Each batch's why is its `held` line: the summary counts them, not repeats them.
                return outcome(False, f"{len(s.held)} batch(es) held back, not sent (why: each 'held' line); the next run tries "
                                      "them again, and `batchrun status` says why each waits", c.leaderboard, s.held)
            if not scan.due and not c.new_judge_requests:
                retry_at = scan.next_retry_at
                # A provider's Retry-After can ask for days: a wait longer than a run ever backs off
                # (the batch round cap, 30 min) is left to the next run, as submit and preflight
                # leave one, not slept through here holding the writer lock from the next nights.
                too_far = retry_at is not None and retry_at - time.time() > ROUND_BACKOFF_CAP["batch"] * retry_base()
                if retry_at is None or too_far or (deadline is not None and retry_at > deadline):
                    return outcome(False, _stuck_reason(store, config, scan.backing_off, blocked), c.leaderboard)
                _sleep_until(retry_at, progress, f"{scan.backing_off} request(s) back off after a failure")
            continue  # something new became sendable (retries, judgments): submit it now
        if deadline is not None and time.time() + interval > deadline:
            return outcome(False, time_limit_reason(store, live), c.leaderboard)
        if not progressed:
            waited = 0.0
            while waited < interval:
                progress.status(
                    f"{progress.counters['files_written']} file(s) written, {progress.counters['bytes_uploaded']:,} bytes uploaded; "
                    f"{p.in_flight_words()}; "
                    f"waited {time.time() - started:.0f}s, next check in {interval - waited:.0f}s")
                step = min(1.0, interval - waited)
                checkpoint()
                time.sleep(step)
                waited += step
            progress.done()


def _stuck_reason(store: Store, config: Config, backing_off: int, blocked_routes: dict[str, str]) -> str:
    from ..ledger.diagnosis import open_problems

    problems = open_problems(store, config)
    parts = []
    if blocked_routes:
        parts.append(f"the provider refused to show the batches of route(s) {', '.join(repr(r) for r in sorted(blocked_routes))} "
                     "(see above)")
    waiting = sum(p.requests for p in problems if p.state == "waiting")
    blocked = sum(p.requests for p in problems if p.state == "blocked")
    if waiting:
        parts.append(f"{waiting} request(s) wait for the next run after a persistent infrastructure failure")
    if blocked:
        parts.append(f"{blocked} request(s) are blocked until the config is fixed (see above)")
    if backing_off:
        parts.append(f"{backing_off} retry(ies) back off past the time limit (or longer than a run waits)")
    return "nothing more can move in this run: " + ("; ".join(parts) or "nothing is sendable")


def _sleep_until(when: float, progress: Progress, what: str) -> None:
    # Said once as an event too: off a terminal the live status line is not shown, and a night's
    # log would otherwise be silent for the whole backoff.
    if when > time.time():
        progress.event(f"{what}: next attempt at {time.strftime('%H:%M:%S', time.localtime(when))} "
                       f"(in {when - time.time():.0f}s)")
    while (left := when - time.time()) > 0:
        progress.status(f"{what}; next attempt in {left:.0f}s")
        checkpoint()
        time.sleep(min(1.0, left))
    progress.done()
