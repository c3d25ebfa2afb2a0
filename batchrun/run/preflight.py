"""Preflight: prove each route's model id, key, parameters, base URL and API version in seconds,
for a few cents, before anything is uploaded.

Per route, two calls:

- **one tiny online request of the route's own kind**: built by its adapter's `build_line` from
  the route's current policy, exactly as its real requests are (the model id, the temperature or
  its absence, the completion budget under the provider's own parameter name, the endpoint's body
  shape, the API version header), sent with the route's key to the base URL its client really
  uses, by `send_online` (the sync transport's call). Only the prompt (a few words) and the budget
  (`MAX_TOKENS`) are tiny. The answer is read by the adapter's `parse_line`, so a refusal is
  classified as it would be in a batch line: the provider's own message, with diagnosis' fix.
- **the cheapest call that proves the batch API is usable with that key**: a listing of one batch
  (`Adapter.check_batch_access`), the listing submit's adoption reads anyway. Sync routes need
  none.

A route passes (`ok`) when both were accepted; it is `refused` when the provider refused the
request, the key or the batch API, or redirected a call to another host (netguard refuses to
follow it, as for every call: a config or key problem, said with the message and the fix), and
`unavailable` when it could not be checked (429, 5xx, no answer, the run's time limit: nothing
proven either way; tried again on the next round). Both calls pass netguard like every provider
call (the route's own origin only, within the run's time limit), and nothing is sent or recorded
for a state.db deleted or replaced under the run. Every preflight is recorded (`preflights`, m020) with its cost, which
`batchrun cost` counts (stage `preflight`). A pass is remembered under the route's *preflight
key*: its policy fingerprint (what it sends) and where it goes (the base URL its client sends
to, the key variable, the transport). `submit` (so `refresh` too) preflights every route it is
about to upload for whose key has no pass, so a night with nothing new sends none; a route that
fails sends nothing that run, and the other routes go on.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from ..base import netguard
from ..base.backoff import backoff, retry_base
from ..base.errors import ConfigError, ProviderError
from ..base.progress import SILENT, Progress
from ..base.redaction import redact
from ..ledger.cost import billed_output, request_cost
from ..ledger.diagnosis import diagnose
from ..ledger.inputs import Inputs
from ..ledger.store import Store
from ..ledger.sync import estimate_tokens
from ..protocol.config import Config, Route
from ..protocol.policy import fingerprint
from ..providers import RequestSpec, Usage, get_adapter
from ..providers.clients import client_host, make_client, provider_error, require_keys, send_online

Outcome = Literal["ok", "refused", "unavailable"]

# A few words, answerable in a word: the request proves what it is sent with, not a skill.
PROMPT = "This is a connection check from batchrun. Reply with the single word OK."
# The completion budget of the online request: the smallest every endpoint batchrun sends to
# accepts (OpenAI's Responses API refuses max_output_tokens below 16; the others take 1). A
# reasoning model may spend it all thinking and answer nothing: still a request accepted.
MAX_TOKENS = 16
# The request's custom_id (sent as the trace header with online calls, see providers.TRACE_HEADER).
CUSTOM_ID = "batchrun-preflight"
# Attempts of the online request that fails transiently (429, 5xx, no answer), and the longest
# wait between two (seconds; scaled like every backoff by BATCHRUN_RETRY_BASE).
ATTEMPTS = 3
MAX_WAIT = 10.0
# Routes checked at once: each is two short calls, mostly waiting on the network.
CONCURRENCY = 8
# The online request's state when the connection could not even be opened (a wrong or down base
# URL): the listing would fail the same way, so it is not tried.
UNREACHABLE = "not sent: nothing answers at the base URL"
# What to do once a refusal's cause is fixed: a route is preflighted until it passes.
THEN = "then run the command again (the route is checked again before anything of it is uploaded)"
# The state of a call the run's time limit stopped (netguard: every call ends by the deadline).
DEADLINE = "cut at the run's time limit"
AT_THE_LIMIT = "The run reached its time limit (--timeout or --until) first: the next run checks the route again."


@dataclass(frozen=True)
class Target:
    """A route as its requests would be sent: the policy its role gives it, and where it goes."""

    route: Route
    stage: Literal["gen", "judge"]
    policy_fp: str
    temperature: float | None
    base_url: str  # the base URL its client sends to (the SDKs also read their own variables)
    host: str
    key: str  # the preflight key: a pass under it needs no other

    @property
    def name(self) -> str:
        return self.route.name


@dataclass(frozen=True)
class Check:
    """One route's preflight, as recorded."""

    route: str
    stage: str
    provider: str
    model: str
    endpoint_host: str
    outcome: Outcome
    online: str  # "ok", or what happened to the online request
    batch_api: str | None  # "ok", what happened to the listing, or None (a sync route: not checked)
    message: str = ""  # the provider's own words, where it refused or failed
    fix: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    est_cost: float | None = None
    cost: float | None = None
    seconds: float = 0.0
    reused: bool = False  # refused earlier in this run: not sent again

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def describe(self) -> str:
        """One line for a person: `route → ok`, or the provider's message and the fix."""
        if self.ok:
            parts = [f"online {self.input_tokens or 0}+{self.output_tokens or 0} tokens"]
            parts.append("batch API ok" if self.batch_api == "ok" else "sync: no batch API needed")
            cost = _money(self.cost) if self.cost is not None else "cost unknown: no price"
            return f"{self.route} → ok ({', '.join(parts)}; {cost}, {self.seconds:.1f} s)"
        what = "refused" if self.outcome == "refused" else "could not be checked"
        return f"{self.route} → {what}: {self.message}" + (f" Fix: {self.fix}" if self.fix else "")

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _money(value: float | None) -> str:
    from ..ledger.cost import fmt_money

    # A preflight costs micro-dollars: shown to the millionth, never as "$0.0000".
    return f"${value:.6f}" if value is not None and 0 < value < 0.0001 else fmt_money(value)


# -- what a route sends, and where ------------------------------------------------------------


def target(inputs: Inputs, name: str) -> Target | None:
    """The route as its requests would go (None for an idle route: it sends nothing). Builds the
    route's client, so its key must be set."""
    p = inputs.policy(name)
    if p.role == "idle":
        return None
    route, policy_fp = p.route, p.fingerprint
    # The route's own client (shared with its uploads: building one costs ~25 ms, issue 15).
    client = make_client(route)
    base_url = get_adapter(route.provider).client_base_url(client) or route.endpoint_host
    key = fingerprint({"policy": policy_fp, "base_url": base_url, "api_key_env": route.api_key_env, "transport": route.transport})
    return Target(route, p.stage, policy_fp, p.temperature, base_url, client_host(client, route), key)


def passed(store: Store, t: Target) -> bool:
    return store.scalar("SELECT 1 FROM preflights WHERE preflight_key = ? AND outcome = 'ok' LIMIT 1", [t.key]) is not None


def needing(store: Store, inputs: Inputs, names: Iterable[str]) -> list[str]:
    """The routes (of `names`, their keys set) whose current preflight key has no pass: what
    `preflight(..., only_new=True)` would check."""
    out = []
    for name in dict.fromkeys(names):
        t = target(inputs, name)
        if t is not None and not passed(store, t):
            out.append(name)
    return out


def _refused_in_this_run(store: Store, t: Target) -> Check | None:
    """A refusal of this key earlier in this run (refresh submits every round): the same request
    would be refused again, so it is reported, not sent. Transient failures are tried again."""
    if store.run_id is None:
        return None
    row = store.one("""SELECT * FROM preflights WHERE preflight_key = ? AND run_id = ? AND outcome = 'refused'
                       ORDER BY id DESC LIMIT 1""", [t.key, store.run_id])
    if row is None:
        return None
    return Check(row["route"], row["stage"], row["provider"], row["model"], row["endpoint_host"], "refused", row["online"],
                 row["batch_api"], row["message"] or "", row["fix"] or "", reused=True)


# -- a batch held for its route's preflight -----------------------------------------------------
#
# submit holds every batch of a route whose preflight did not pass (batch_holds keeps the reason).
# The reason is only as current as the route's latest preflight: `status` reads that record for
# the provider's words and the fix (a submit's stderr is gone by then), and once the route has
# passed a preflight the hold no longer applies.


def held_reason(route: str, outcome: str) -> str:
    """Why submit holds a batch of `route` whose preflight ended with `outcome` (not ok)."""
    return f"preflight of route {route!r} " + ("refused (the provider's message and the fix are on stderr)" if outcome == "refused"
                                                else "could not reach the provider; will retry")


def held_now(store: Store, route: str, reason: str) -> str | None:
    """A batch of `route` held for `reason`, as it stands now: a preflight hold reads the route's
    latest preflight (its message, fix and time), or None once that one passed; any other
    reason is returned as it is."""
    if not reason.startswith(f"preflight of route {route!r} "):
        return reason
    row = store.one("SELECT outcome, message, fix, started_at FROM preflights WHERE route = ? ORDER BY id DESC LIMIT 1", [route])
    if row is None:
        return reason
    if row["outcome"] == "ok":
        return None
    at = datetime.fromtimestamp(row["started_at"], timezone.utc).isoformat(timespec="seconds")
    what = "refused" if row["outcome"] == "refused" else "could not reach the provider (will retry)"
    return (f"preflight of route {route!r} {what} at {at}" + (f": {row['message']}" if row["message"] else "")
            + (f" Fix: {row['fix']}" if row["fix"] else ""))


# -- running them -----------------------------------------------------------------------------


def preflight(store: Store, inputs: Inputs, names: Iterable[str], *, only_new: bool = False, each: bool = True,
              progress: Progress = SILENT) -> list[Check]:
    """Preflight these routes (idle routes are skipped: they send nothing), record each, and
    return the checks in the order given. `only_new` (submit's use): skip the routes whose current
    preflight key has passed already, report a refusal earlier in this run without sending, and
    raise the ProviderError of a base URL where nothing answers (as an upload would).
    `each`: a progress line per route (the preflight command prints them as data instead).
    `inputs`: the command's (the policies are what a preflight proves; no dataset is read)."""
    config = inputs.config
    checks: dict[str, Check] = {}
    to_send: list[Target] = []
    for name in dict.fromkeys(names):
        route = config.routes[name]
        if config.role_of(name) == "idle":
            continue  # sends nothing
        try:
            require_keys([route])
        except ConfigError as e:
            # Nothing can be sent without the key; said as this route's problem (the others go on).
            checks[name] = _record(store, _unsent_check(config, name, e), None, time.time())
            continue
        t = target(inputs, name)
        if t is None or (only_new and passed(store, t)):
            continue
        earlier = _refused_in_this_run(store, t) if only_new else None
        if earlier is not None:
            checks[name] = earlier  # said when it was sent
            continue
        to_send.append(t)
    if to_send:
        # Each preflight is paid for: never sent for a state.db deleted or replaced under the run
        # (it could not record them, and the next run would pay for them again).
        store.check_same_file()
        progress.event(f"preflight: checking {len(to_send)} route(s) with one tiny online request each"
                       + (" and a listing of their batch API" if any(t.route.transport == "batch" for t in to_send) else ""))
        raised: BaseException | None = None
        with ThreadPoolExecutor(max_workers=min(CONCURRENCY, len(to_send))) as pool:
            started = time.time()
            for t, check in zip(to_send, pool.map(lambda t: _outcome(config, t, only_new), to_send)):
                if not isinstance(check, Check):
                    # A base URL where nothing answers (only_new): raised once the other routes'
                    # checks, sent and paid for, are recorded.
                    raised = raised or check
                    continue
                checks[t.name] = _record(store, check, t, started)
                if each:
                    progress.event(f"preflight {check.describe()}")
        if raised is not None:
            raise raised
    return [checks[name] for name in dict.fromkeys(names) if name in checks]


def _outcome(config: Config, t: Target, strict: bool) -> Check | ProviderError:
    try:
        return _check(config, t, strict)
    except ProviderError as e:
        return e


def _unsent_check(config: Config, name: str, e: ConfigError) -> Check:
    route = config.routes[name]
    return Check(name, "gen" if config.role_of(name) == "contestant" else "judge", route.provider, route.model,
                 route.endpoint_host, "refused", "not sent: no key", None, e.message, e.hint or "")


def _check(config: Config, t: Target, strict: bool) -> Check:
    """The two calls for one route (run in a worker thread: nothing here touches state.db)."""
    route, adapter = t.route, get_adapter(t.route.provider)
    client = make_client(route)
    started = time.monotonic()
    line = adapter.build_line(route, RequestSpec(CUSTOM_ID, route.model, PROMPT, MAX_TOKENS, t.temperature))
    # Bound: the prompt (with a margin for the provider's framing) and the whole budget, online rate.
    est = request_cost(route, estimate_tokens(len(PROMPT), False, route) + 16, MAX_TOKENS, online=True)
    answer = _online(config, t, client, line, strict)
    if isinstance(answer, Check):
        # A refused or failed request is not billed.
        check = replace(answer, est_cost=est, cost=0.0 if route.price.known else None)
    else:
        billed = billed_output(route, answer.output_tokens, answer.reasoning_tokens)
        check = Check(route.name, t.stage, route.provider, route.model, t.host, "ok", "ok", None, input_tokens=answer.input_tokens,
                      output_tokens=billed, est_cost=est, cost=request_cost(route, answer.input_tokens, billed, online=True))
    if route.transport == "batch" and check.online not in (UNREACHABLE, DEADLINE):
        check = _batch_api(config, t, client, check)
    return replace(check, seconds=time.monotonic() - started)


def _online(config: Config, t: Target, client: Any, line: dict[str, Any], strict: bool) -> Check | Usage:
    """The online request: its usage when accepted, else the Check that says what happened.
    `strict`: a connection that cannot even be opened raises its ProviderError, as an upload's
    would (submit: a wrong or down base URL is reported, not waited for)."""
    route, adapter = t.route, get_adapter(t.route.provider)
    fail = Check(route.name, t.stage, route.provider, route.model, t.host, "unavailable", "", None)
    for attempt in range(ATTEMPTS):
        out, c = send_online(adapter, client, route, line, CUSTOM_ID)
        if c is not None:
            if c.failure == "redirect":
                # netguard refused a redirect to another host (nothing went there): the route's
                # real requests would meet the same, so it is refused, as their sends block the route.
                d = diagnose(route.name, "invalid", c.message, config, then=THEN)
                return replace(fail, outcome="refused", online=f"refused: {d.cause}", message=c.message, fix=_fix(d.fix))
            if c.failure == "deadline":
                # The run's time limit (refresh --timeout) passed before or during the call: not
                # now, and not the base URL's fault; the next run checks the route again.
                return replace(fail, online=DEADLINE, message=c.message, fix=AT_THE_LIMIT)
            if not c.connected or (c.failure in ("transient", "uncertain", "quota") and c.status is None):
                if c.connected and attempt < ATTEMPTS - 1 and _waited(attempt, c.retry_after):
                    continue
                # No answer at all: the base URL is down or wrong (nothing was proven).
                err = provider_error(c, what="The preflight request", route=route)
                if not c.connected and strict:
                    raise err
                online = UNREACHABLE if not c.connected else "no answer"
                return replace(fail, online=online, message=redact(err.message), fix=err.hint or "")
        retry_after = None if c is None else c.retry_after
        result = adapter.parse_line(out)
        if result.kind in ("ok", "empty", "refusal"):
            return result.usage
        message = redact(result.error_message or result.error_type or result.kind)
        if result.kind in ("invalid", "auth"):
            d = diagnose(route.name, result.kind, message, config, result.error_type, then=THEN)
            return replace(fail, outcome="refused", online=f"refused: {d.cause}", message=message, fix=_fix(d.fix))
        if attempt < ATTEMPTS - 1 and _waited(attempt, retry_after):
            continue
        return replace(fail, online=f"failed: {result.error_type or result.kind}", message=message,
                       fix="The provider could not answer now (nothing was proven either way): run the command again later.")
    raise AssertionError("unreachable: the last attempt returns")


def _batch_api(config: Config, t: Target, client: Any, check: Check) -> Check:
    """The listing: `check` with its outcome, the worse of the two parts."""
    route = t.route
    try:
        get_adapter(route.provider).check_batch_access(client, route)
    except ProviderError as e:
        c = getattr(e, "classified", None)
        failure = getattr(c, "failure", "transient")
        if failure == "auth":
            what, fix = "refused: the key", f"Check the key in {route.api_key_env}: it may not use the batch API; {THEN}."
        elif failure == "redirect":
            # A listing redirected to another host, refused by netguard (nothing went there).
            d = diagnose(route.name, "invalid", e.message, config, then=THEN)
            what, fix = f"refused: {d.cause}", _fix(d.fix)
        elif failure == "deadline":
            what, fix = DEADLINE, AT_THE_LIMIT
        elif failure == "not_found":
            what, fix = "refused: no batch API here", (
                f"Check base_url for route {route.name!r} ({t.base_url}): a provider without a batch API takes "
                f'transport = "sync"; {THEN}.')
        elif failure == "client":
            what, fix = "refused", f"Fix what the provider's message names for route {route.name!r}; {THEN}."
        else:
            what, fix = "no answer", "The provider could not answer now (nothing was proven either way): run the command again later."
        outcome: Outcome = "refused" if failure in ("auth", "redirect", "not_found", "client") else "unavailable"
        message = redact(e.message)
        merged: Outcome = "refused" if "refused" in (check.outcome, outcome) else "unavailable"
        return replace(check, outcome=merged, batch_api=what,
                       message=f"{check.message} Batch API: {message}".strip() if check.message else message,
                       fix=check.fix if check.outcome == "refused" else fix)
    return replace(check, batch_api="ok")


def _fix(fix: str) -> str:
    return fix[0].upper() + fix[1:] if fix else fix


def _waited(attempt: int, retry_after: float | None) -> bool:
    """Back off before another attempt; False (no attempt) where the provider asks for longer than
    a preflight waits: the route is then unavailable for now, tried again on the next round."""
    if retry_after is not None and retry_after > MAX_WAIT:
        return False
    wait = min(backoff(attempt + 1, base=retry_base(), cap=MAX_WAIT, retry_after=retry_after), MAX_WAIT)
    left = netguard.remaining()
    if left is not None and wait >= left:
        return False  # the run's time limit comes first (refresh --timeout): tried again next run
    time.sleep(wait)
    return True


def _record(store: Store, check: Check, t: Target | None, started: float) -> Check:
    store.check_same_file()  # never into a state.db deleted or replaced mid-run
    route = check.route
    row = {
        "route": route, "stage": check.stage, "provider": check.provider, "model": check.model,
        "policy_fp": t.policy_fp if t else "", "base_url": t.base_url if t else "", "endpoint_host": check.endpoint_host,
        "api_key_env": t.route.api_key_env if t else "", "transport": t.route.transport if t else "",
        "preflight_key": t.key if t else "", "outcome": check.outcome, "online": check.online, "batch_api": check.batch_api,
        "message": check.message or None, "fix": check.fix or None, "input_tokens": check.input_tokens,
        "output_tokens": check.output_tokens, "est_cost": check.est_cost, "cost": check.cost, "started_at": started,
        "seconds": check.seconds, "run_id": store.run_id,
    }
    with store.db.atomic():
        store.db.execute(f"INSERT INTO preflights ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})", list(row.values()))
    return check
