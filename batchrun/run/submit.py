"""Submit: plan, then upload and create batches, recording every step before the next needs it.

A local batch moves `planned → uploading → uploaded → creating → in_flight`. Each arrow is
committed to state.db before the provider call that depends on it, so a crash anywhere leaves a
state the next run can finish without paying twice:

- killed while `uploading`: upload again (an orphan uploaded file costs nothing);
- killed while `creating`: the provider may or may not have created the batch. Where batches
  carry our tag (`Adapter.tags_batches`: OpenAI's `metadata`, Gemini's `displayName`), list the
  provider's recent batches and adopt the tagged one, or create if there is none. Where they
  carry none (Anthropic): candidates created in the window with our request count are held until
  they end, then the one whose results carry our custom_ids is adopted; only when no candidate
  can be ours are the requests sent again.

SDK retries are off for creates (clients.py): an SDK that retries a dropped `POST` of a batch
create without an idempotency key would create duplicates. We retry through the adoption path
instead. A batch held while candidates run is listed in `SubmitResult.awaiting`: refresh keeps
waiting for them, within its time limit, as it waits for batches in flight.

A route whose key is refused, or whose upload or create is redirected to another host (refused:
netguard), is blocked; a route whose upload or create the provider refuses outright (another 4xx)
waits for its config to be fixed; the other routes go on. Once the run's time limit has passed nothing more
is sent: the batches left wait for the next run.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base import jsonl, netguard
from ..base.backoff import backoff, retry_base
from ..base.checksums import RequestChecksum
from ..base.errors import ProviderError, StateError
from ..base.progress import SILENT, Progress
from ..base.redaction import redact, redact_file
from ..base.safepath import safe_component
from ..base.stop import checkpoint
from ..ledger.cost import fmt_money
from ..ledger.inputs import Inputs, as_inputs
from ..ledger.lifecycle import HOST_REFUSED, KEY_REFUSED, LIVE, NOT_CREATED, TO_FOLLOW, Status, move
from ..ledger.pending import supersede_stale_batches
from ..ledger.store import Store, sql_list
from ..protocol.config import Config, Route
from ..providers import Adapter, BatchStatus, get_adapter
from ..providers.clients import (
    Classified,
    blocks_route,
    classify,
    client_host,
    is_auth,
    is_transient,
    is_unreachable,
    refuses_call,
    make_client,
    missing_keys,
    provider_error,
    require_keys,
)
from . import faults
from .plan import PlanResult, plan
from .preflight import Check, held_reason, needing
from .preflight import preflight as run_preflight
from .quota import Gate, submission_order

# How far before our recorded create intent a provider's clock may place the batch.
ADOPTION_WINDOW_SECONDS = 600
CREATE_ATTEMPTS = 4


@dataclass
class SubmitResult:
    plan: PlanResult
    created: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    held: list[tuple[str, str]] = field(default_factory=list)  # (batch id, reason)
    # Held batches an uncertain create left waiting for candidate batches to end (Anthropic): they
    # resolve by waiting, so refresh waits for them like batches in flight.
    awaiting: list[str] = field(default_factory=list)
    bytes_uploaded: int = 0
    provider_errors: int = 0
    # A dry run: batches planned earlier and not sent yet (planned/uploading/uploaded), which the
    # next submit sends; each row has id, route, stage, status, n_requests, est_cost.
    unsent: list[dict[str, Any]] = field(default_factory=list)
    # The preflights this submit ran (or found refused earlier in this run), one per route checked.
    preflight: list[Check] = field(default_factory=list)
    # A dry run: what submit would hold now and why, (batch id or "new requests of route R
    # (stage)", reason); and the key variables not set, {variable: [routes]}, named, never read.
    would_hold: list[tuple[str, str]] = field(default_factory=list)
    missing_keys: dict[str, list[str]] = field(default_factory=dict)
    # Why the time limit (`deadline`) cut this submit short, with what it leaves; None if it did not.
    time_limit: str | None = None

    def hold(self, store: Store, batch_id: str, reason: str) -> None:
        """Hold a batch back in this submit, and record why (`batch_holds`: `status` says it
        until the batch goes). A row only when the reason changes: a refresh holding a batch
        round after round adds one."""
        reason = redact(reason)  # a provider's message may quote the key back
        self.held.append((batch_id, reason))
        latest = store.scalar("SELECT reason FROM batch_holds WHERE batch_id = ? ORDER BY id DESC LIMIT 1", [batch_id])
        if latest != reason:
            with store.db.atomic():
                store.db.execute("INSERT INTO batch_holds (batch_id, reason, held_at, run_id) VALUES (?, ?, ?, ?)",
                                 [batch_id, reason, time.time(), store.run_id])

    @property
    def preflight_failed(self) -> list[Check]:
        return [c for c in self.preflight if not c.ok]


def tag_for(store: Store, batch_id: str) -> dict[str, str]:
    """What identifies a provider batch as this state.db's local batch."""
    return {
        "batchrun_batch": batch_id,
        "batchrun_store": store.store_id,
        "display_name": f"batchrun-{store.store_id}-{batch_id}",
    }


def _matches_tag(store: Store, batch_id: str, status: BatchStatus) -> bool:
    if status.tag is None:
        return False
    tag = tag_for(store, batch_id)
    if status.tag == tag["display_name"]:
        return True
    meta = status.raw.get("metadata") or {}
    return status.tag == batch_id and meta.get("batchrun_store") == store.store_id


def verify_request_file(batch: dict[str, Any]) -> None:
    path = Path(batch["request_file"])
    if not path.exists():
        raise StateError(
            f"Request file {path} of batch {batch['id']} is missing.",
            "Do not delete files under jobs/ while batches are planned. Run `batchrun cancel --batch "
            f"{batch['id']}` to drop this batch; its requests will be planned again.",
        )
    recorded = RequestChecksum.of_batch(batch)
    if recorded is None:  # every planned batch records one (plan.ShardWriter.finish)
        raise StateError(f"Batch {batch['id']} records no checksum of its request file {path}. Refusing to send it.",
                         f"Run `batchrun cancel --batch {batch['id']}` to drop this batch; its requests will be planned again.")
    same, actual = recorded.matches(path)
    if not same:
        raise StateError(
            f"Request file {path} of batch {batch['id']} was changed after it was planned ({recorded.algorithm} {actual[:12]}… "
            f"but state.db recorded {recorded.hexdigest[:12]}…). Refusing to send it.",
            f"Files under jobs/ must not be edited. Run `batchrun cancel --batch {batch['id']}` to drop this batch; "
            "its requests will be planned again from the dataset.",
        )


def _in_flight(store: Store, batch_id: str, seen: BatchStatus, client: Any, route: Route) -> None:
    """Record the provider batch that a create made (or adoption found): the batch is in flight."""
    move(store, batch_id, Status.IN_FLIGHT, provider_batch_id=seen.provider_batch_id, provider_status=seen.raw_status,
         counts_json=json.dumps(seen.counts), last_seen_json=json.dumps(seen.raw, default=str), submitted_at=time.time(),
         run_id=store.run_id, error=None, endpoint_host=client_host(client, route))


def submit(store: Store, config: Config | Inputs, *, routes: set[str] | None = None, stages: set[str] | None = None,
           dry_run: bool = False, budget: float | None = None, preflight: bool = True, deadline: float | None = None,
           progress: Progress = SILENT, refused: dict[str, str] | None = None) -> SubmitResult:
    """Plan what is pending, then upload and create every planned batch that may go now.

    With `preflight` (the default), every route about to upload or send something whose current
    policy has not passed a preflight is checked first (preflight.py); a route that does not pass
    sends nothing in this submit (its batches are held, said with the provider's message and the
    fix), and the other routes go on. `config`: the command's resolved inputs (a Config is
    resolved here, once).

    `deadline` (epoch seconds, `submit --timeout`): every provider call ends by it, as in refresh
    (netguard.time_limit); what it leaves unsent is held for the next run, and `time_limit` says
    so. (refresh passes none: its own limit is in force around every submit it makes.)

    `refused`: route -> why, the routes whose upload or create the provider refused outright earlier
    in this run (refresh keeps it across its rounds): their batches are held without calling again,
    and the routes refused now are added."""
    with netguard.time_limit(deadline):
        # A call cut at the limit is a "deadline" failure, transient: the batch it was for is held
        # (as are those after it, and a creation it left uncertain), never raised.
        result = _submit(store, config, routes=routes, stages=stages, dry_run=dry_run, budget=budget,
                         preflight=preflight, progress=progress, refused={} if refused is None else refused)
        if deadline is not None and netguard.passed() and result.held:
            result.time_limit = time_limit_reason(store)
    return result


def time_limit_reason(store: Store, live: int | None = None) -> str:
    """Why a run cut by its time limit stopped, with what it leaves: batches at the provider and
    batches planned but not sent yet (a limit reached before their preflight or upload). `live`:
    the live batches to count (default: all of them)."""
    if live is None:
        live = store.scalar(f"SELECT count(*) FROM batches WHERE status IN {sql_list(LIVE)}") or 0
    unsent = min(live, store.scalar(f"SELECT count(*) FROM batches WHERE status IN {sql_list(NOT_CREATED)}") or 0)
    left = f"{live - unsent} batch(es) in flight" + (f" and {unsent} planned, not sent yet" if unsent else "")
    return f"time limit reached with {left}; the next run picks them up"


def _submit(store: Store, config: Config | Inputs, *, routes: set[str] | None, stages: set[str] | None, dry_run: bool,
            budget: float | None, preflight: bool, progress: Progress, refused: dict[str, str]) -> SubmitResult:
    inputs = as_inputs(store, config, escape=True)
    config = inputs.config
    result_plan = plan(store, inputs, routes=routes, stages=stages, write=not dry_run)
    result = SubmitResult(plan=result_plan)
    for bid in result_plan.batches:
        progress.counters["files_written"] += 1
        b = store.one("SELECT n_requests, bytes, route FROM batches WHERE id = ?", [bid])
        assert b is not None  # plan just wrote it
        progress.event(f"wrote {bid}: {b['n_requests']} requests, {b['bytes']:,} bytes")
    batches = _unsent(store, config, routes, stages)
    if dry_run:
        result.unsent = [{k: b[k] for k in ("id", "route", "stage", "status", "n_requests", "expected_cost", "est_cost")} for b in batches]
        result.would_hold, result.missing_keys = _foresee(store, config, budget, batches, result_plan)
        return result

    if resolve_uncertain_creations(store, config, result, progress):
        # A 'creating' batch the provider turned out not to have is 'uploaded' again: if the
        # inputs changed since it was written, it is superseded now, never created from them.
        supersede_stale_batches(store)
    batches = _unsent(store, config, routes, stages)
    # Every key is checked before anything is uploaded: a missing variable fails the run cleanly,
    # naming with the routes about to send those in flight that read it (as poll names them).
    following = {r[0] for r in store.db.execute(f"SELECT DISTINCT route FROM batches WHERE status IN {sql_list(TO_FOLLOW)}")}
    require_keys([config.routes[name] for name in dict.fromkeys(b["route"] for b in batches)],
                 also=[r for name, r in config.routes.items() if name in following])

    batches = submission_order(batches, store)
    gate = Gate(store, config, budget if budget is not None else config.budget)
    checks = _Preflights(store, inputs, result, progress) if preflight else None
    if checks is not None:
        # The routes with a batch the budget and queues let through now, checked together.
        checks.run(_would_go(gate, batches))
    for b in batches:
        # Each batch is an upload and a paid create: a stop swallowed where it landed creates no
        # more of them (base/stop.py), as refresh's rounds and poll's waits end there.
        checkpoint()
        route = config.routes[b["route"]]
        if route.name in refused:
            result.hold(store, b["id"], refused[route.name])
            continue
        if netguard.passed():
            result.hold(store, b["id"], "the run's time limit was reached")
            continue
        reason = gate.check(b)
        if reason:
            result.hold(store, b["id"], reason)
            continue
        if checks is not None and (stopped := checks.stopped(b)) is not None:
            # Nothing of a route that did not pass its preflight is uploaded or sent.
            result.hold(store, b["id"], held_reason(route.name, stopped.outcome))
            continue
        if b["transport"] == "sync":
            verify_request_file(b)
            # The sync transport has no provider batch: poll sends its lines online (and records
            # the host again if the config changed in between).
            move(store, b["id"], Status.IN_FLIGHT, provider_batch_id=f"sync-{b['id']}", submitted_at=time.time(), run_id=store.run_id,
                 endpoint_host=client_host(make_client(route), route))
            gate.admit(b)
            result.created.append(b["id"])
            progress.event(f"started {b['id']} ({b['n_requests']} requests, online with concurrency {route.sync_concurrency})")
            continue
        try:
            created = _upload_and_create(store, config, route, b, result, progress)
        except ProviderError as e:
            if blocks_route(e) and store.scalar("SELECT status FROM batches WHERE id = ?", [b["id"]]) == Status.CREATING:
                # Refused while finding out whether an uncertain create made the batch (the
                # listing or a candidate's download): still unknown, so it is held, never sent again.
                result.hold(store, b["id"], f"uncertain creation: {e.message}")
                continue
            if is_auth(e):
                # The key was refused (401/403) on the upload or the create: nothing was created.
                # The route is blocked like a per-request 401 ("check the key in VAR"); the
                # other routes go on.
                _refused_as_a_whole(store, b, e.classified, provider_state=KEY_REFUSED)  # type: ignore[attr-defined]
                progress.event(f"{b['id']}: the provider refused the key of route {route.name!r} ({e.message}); "
                               f"its requests are blocked until the key in {route.api_key_env} is fixed")
                continue
            if blocks_route(e):
                # The upload or the create was redirected to another host, and refused: nothing
                # went there and nothing was created. The route is blocked with the diagnosis.
                _refused_as_a_whole(store, b, e.classified, provider_state=HOST_REFUSED)  # type: ignore[attr-defined]
                progress.event(f"{b['id']}: {e.message}; the requests of route {route.name!r} are blocked until its base_url "
                               "or the proxy in front of it is fixed")
                continue
            if refuses_call(e):
                # A 4xx other than the key's on the upload or the create (a wrong endpoint_path, a
                # model the batch API does not take): certain, nothing was created, and the same call
                # gets the same answer until the config is fixed. Like a refused preflight, the route
                # waits (this batch stays as it is: the next run sends it from the same file) with the
                # provider's message and the fix, and the other routes go on; exit 2.
                refused[route.name] = f"{e.message} Hint: {e.hint}" if e.hint else e.message
                result.hold(store, b["id"], refused[route.name])
                progress.event(f"{b['id']}: {refused[route.name]}")  # one line (refresh: once a run, not every round)
                continue
            if not is_transient(e) or is_unreachable(e):
                raise  # a wrong or down base URL is reported, not waited for
            # The provider is overloaded or flaky right now: this batch waits, the others go on.
            result.hold(store, b["id"], f"provider error: {e.message}; will retry")
            result.provider_errors += 1
            continue
        if created:
            gate.admit(b)
    return result


class _Preflights:
    """A submit's preflights (preflight.py): each route checked at most once per submit, only when
    it has a batch about to go, and the routes known up front together (concurrently)."""

    def __init__(self, store: Store, inputs: Inputs, result: SubmitResult, progress: Progress):
        self.store, self.inputs, self.result, self.progress = store, inputs, result, progress
        self.stopping: dict[str, Check | None] = {}  # route -> the check that stops it, or None

    def run(self, batches: list[dict[str, Any]]) -> None:
        """Preflight the routes of these batches (about to go) that need one."""
        names = [n for n in dict.fromkeys(b["route"] for b in batches) if n not in self.stopping]
        if not names:
            return
        self.stopping.update(dict.fromkeys(names))
        need = needing(self.store, self.inputs, names)
        if not need:
            return
        for b in batches:
            if b["route"] in need:
                # A submit refused for an edited request file sends nothing, preflights included
                # (checked again right before each upload; a night with no preflight hashes once).
                verify_request_file(b)
        checks = run_preflight(self.store, self.inputs, need, only_new=True, progress=self.progress)
        self.result.preflight += checks
        # (A base URL where nothing answers raises, as an upload that cannot connect does.)
        for check in checks:
            if check.ok:
                continue
            self.stopping[check.route] = check
            if check.outcome == "unavailable":
                self.result.provider_errors += 1

    def stopped(self, b: dict[str, Any]) -> Check | None:
        """The check that stops this batch's route sending now (None: it may send)."""
        self.run([b])
        return self.stopping[b["route"]]


def _foresee(store: Store, config: Config, budget: float | None, batches: list[dict[str, Any]],
             planned: PlanResult) -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
    """For a dry run, which sends nothing: what a submit now would hold back and why, and the
    key variables the routes about to send (and the judges of their answers) have unset. The batches planned earlier count as themselves; the new
    requests of each route and stage as one batch (submit cuts them into files at the route's
    limits: a missing price, the budget or a queue limit holds them all or, where they fit in
    part, some)."""
    new = [{"id": f"new requests of route {r.route!r} ({r.stage}, {r.to_send})", "route": r.route, "stage": r.stage,
            "transport": r.transport, "est_cost": r.est_cost_batch, "est_input_tokens": r.est_input_tokens, "seq": 10**15 + i}
           for i, r in enumerate(planned.routes) if r.to_send]
    gate = Gate(store, config, budget if budget is not None else config.budget)
    holds = []
    for b in submission_order([*batches, *new], store):
        if (reason := gate.check(b)) is not None:
            holds.append((b["id"], reason))
        else:
            gate.admit(b)
    sending = [config.routes[name] for name in dict.fromkeys(b["route"] for b in [*batches, *new])]
    if any(b["stage"] == "gen" for b in [*batches, *new]):
        sending += config.judges  # the answers are judged in the same refresh: their keys are needed tonight too
    return holds, missing_keys(list({r.name: r for r in sending}.values()))


def _would_go(gate: Gate, batches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The batches the gate would let through now, in order (tried on a copy of it)."""
    trial = gate.copy()
    going = []
    for b in batches:
        if trial.check(b) is None:
            trial.admit(b)
            going.append(b)
    return going


def _unsent(store: Store, config: Config, routes: set[str] | None, stages: set[str] | None) -> list[dict[str, Any]]:
    """The batches this submit would upload and create: planned, not created yet, selected."""
    batches = store.rows(f"SELECT * FROM batches WHERE status IN {sql_list(NOT_CREATED)} ORDER BY seq")
    return [b for b in batches if b["route"] in config.routes and (not routes or b["route"] in routes or b["stage"] == "judge")
            and (not stages or b["stage"] in stages)]


def _upload_and_create(store: Store, config: Config, route: Route, b: dict[str, Any], result: SubmitResult, progress: Progress) -> bool:
    adapter = get_adapter(route.provider)
    client = make_client(route)
    path = Path(b["request_file"])
    file_id = b["provider_file_id"]
    # Planning recorded the host the config named then; the batch goes where this client sends.
    host = client_host(client, route)
    if b["status"] in (Status.PLANNED, Status.UPLOADING) or not file_id:
        verify_request_file(b)
        move(store, b["id"], Status.UPLOADING, endpoint_host=host)
        faults.point("submit.before_upload")
        try:
            file_id = adapter.upload(client, route, path)
        except Exception:
            # The upload failed (and was retried) in this process: nothing is half-done, the
            # batch is simply still to upload. Only a crash leaves 'uploading' behind.
            move(store, b["id"], Status.PLANNED)
            raise
        faults.point("submit.after_upload")
        move(store, b["id"], Status.UPLOADED, provider_file_id=file_id)
        if file_id:
            result.bytes_uploaded += b["bytes"] or 0
            progress.counters["bytes_uploaded"] += b["bytes"] or 0
            progress.event(f"uploaded {b['id']} ({b['bytes']:,} bytes) as {file_id}")
    return _create(store, route, adapter, client, b, file_id, result, progress)


def _create(store: Store, route: Route, adapter: Adapter, client: Any, b: dict[str, Any], file_id: str | None,
            result: SubmitResult, progress: Progress) -> bool:
    """Create the provider batch, never twice: every uncertain failure goes through adoption."""
    path = Path(b["request_file"])
    for attempt in range(CREATE_ATTEMPTS):
        if adapter.inline_requests:
            # The requests are read from the file into the create body: check it once more first.
            verify_request_file(b)
        move(store, b["id"], Status.CREATING, creating_at=time.time())
        faults.point("submit.before_create")
        try:
            status = adapter.create(client, route, file_id=file_id, path=path, tag=tag_for(store, b["id"]))
        except Exception as exc:  # noqa: BLE001 - classified; unknown errors propagate
            c = classify(exc)
            if c is None:
                raise
            if c.failure == "deadline":
                # The run's time limit: not sent (certainly not created), or cut while it ran (maybe
                # created: it stays 'creating', and the next run's adoption finds out).
                if not c.connected:
                    move(store, b["id"], Status.UPLOADED)
                raise provider_error(c, what=f"Creating the batch {b['id']}", route=route)
            if c.failure == "uncertain" and not c.connected:
                # Certain too: the connection itself failed (refused, DNS), nothing was sent.
                move(store, b["id"], Status.UPLOADED)
                if attempt == CREATE_ATTEMPTS - 1 or not _back_off(attempt, c):
                    raise provider_error(c, what=f"Creating the batch {b['id']}", route=route)
                continue
            if c.failure == "client" and c.status in adapter.validation_failure_statuses:
                # The provider validates the requests in the create call (it has no "failed" batch
                # state): record a batch the provider failed as a whole; collect re-queues its
                # requests once, then fails them with the provider's message (protocol: the same
                # as a failed batch at the providers that have one).
                _refused_as_a_whole(store, b, c, provider_state="failed")
                progress.event(f"{b['id']} refused by the provider as a whole (HTTP {c.status}): {c.message}")
                return False
            if c.failure in ("client", "auth", "not_found", "quota", "redirect"):
                # Certain: the provider refused (or redirected elsewhere), nothing was created.
                move(store, b["id"], Status.UPLOADED, error=f"create refused: HTTP {c.status}: {c.message}")
                if c.failure == "quota":
                    result.hold(store, b["id"], f"provider quota: the provider's queue is full ({c.message}); will retry later")
                    result.provider_errors += 1
                    return False
                raise provider_error(c, what="Creating the batch", route=route)
            progress.event(f"creating {b['id']} gave no clear answer ({c.message}); checking whether the provider created it")
            current = store.one("SELECT * FROM batches WHERE id = ?", [b["id"]])
            assert current is not None
            outcome = _adopt(store, route, adapter, client, current, progress)
            if outcome == "adopted":
                result.adopted.append(b["id"])
                return True
            if outcome == "hold":
                result.hold(store, b["id"], "uncertain creation: waiting for candidate batches to end")
                result.awaiting.append(b["id"])
                return False
            # Not created (adoption found nothing). The batch stays 'creating', so if the provider
            # did create it after all, the next round's adoption finds it before any new create.
            if attempt == CREATE_ATTEMPTS - 1 or not _back_off(attempt, c):
                # Still failing (a 5xx burst, an overloaded region): classified, so submit holds
                # this batch for a later round and goes on with the others.
                raise provider_error(c, what=f"Creating the batch {b['id']} ({attempt + 1} attempt(s))", route=route)
            continue
        faults.point("submit.after_create")
        _in_flight(store, b["id"], status, client, route)
        result.created.append(b["id"])
        progress.event(f"created {b['id']} as {status.provider_batch_id} ({b['n_requests']} requests, est. {fmt_money(b['est_cost'])})")
        return True
    raise AssertionError("unreachable: every attempt returns, continues or raises")


# A create retried in this process waits at most this many retry_base() units between attempts;
# a provider asking for longer (Retry-After) gets it by the batch waiting for a later round.
CREATE_BACKOFF_CAP = 10.0


def _back_off(attempt: int, c: Classified) -> bool:
    """Sleep before create attempt `attempt + 2`; False if the provider asked to wait longer than
    this process waits, or the wait would end past the run's time limit (the batch is then left
    for a later round)."""
    cap = CREATE_BACKOFF_CAP * retry_base()
    if c.retry_after is not None and c.retry_after > cap:
        return False
    delay = backoff(attempt + 1, base=retry_base(), cap=cap, retry_after=c.retry_after)
    left = netguard.remaining()
    if left is not None and delay >= left:
        return False
    time.sleep(delay)
    return True


def _refused_as_a_whole(store: Store, b: dict[str, Any], c: Classified, *, provider_state: str) -> None:
    """Record a batch the provider refused before creating it: ended, with no result file."""
    now = time.time()
    move(store, b["id"], Status.DOWNLOADED, provider_state=provider_state, provider_status=f"HTTP {c.status}" if c.status else "refused",
         error=c.message, creating_at=b.get("creating_at") or now, ended_at=now, downloaded_at=now, result_files_json="[]",
         run_id=store.run_id)


def _adopt(store: Store, route: Route, adapter: Adapter, client: Any, b: dict[str, Any], progress: Progress) -> str:
    """Find the provider batch an uncertain create may have made. Returns adopted | hold | absent."""
    since = (b["creating_at"] or b["created_at"]) - ADOPTION_WINDOW_SECONDS
    recent = adapter.list_recent(client, route, since)
    if adapter.tags_batches:
        for status in recent:
            if _matches_tag(store, b["id"], status):
                _in_flight(store, b["id"], status, client, route)
                progress.event(f"adopted {status.provider_batch_id} for {b['id']} (created before a crash or a dropped connection)")
                return "adopted"
        return "absent"
    # No tag. Candidates: created in the window, same request count, not already ours.
    known = {r[0] for r in store.db.execute("SELECT provider_batch_id FROM batches WHERE provider_batch_id IS NOT NULL").fetchall()}
    candidates = [s for s in recent if s.provider_batch_id not in known and s.n_requests == b["n_requests"]]
    if not candidates:
        return "absent"
    ours = {r[0] for r in store.db.execute("SELECT custom_id FROM batch_requests WHERE batch_id = ?", [b["id"]]).fetchall()}
    waiting = False
    for cand in candidates:
        if cand.state not in ("done", "cancelled"):
            waiting = True
            continue
        # The id is the provider's word (a hostile listing once said `../../…/PWNED`): encoded,
        # it stays one folder under this batch's own.
        dest = Path(b["dir"]) / f"candidate-{safe_component(cand.provider_batch_id)}"
        dest.mkdir(parents=True, exist_ok=True)
        files = adapter.download(client, route, cand, dest)
        for f in files:
            redact_file(f)
        ids = set()
        for f in files:
            for _, raw, _ in jsonl.iter_lines(f):
                try:
                    custom_id = adapter.custom_id_of(jsonl.loads(raw.decode("utf-8", "replace")))
                except ValueError:
                    continue
                # A line that names no request (not JSON, not an object, no custom_id) proves
                # nothing either way; one that names a request not ours rules the candidate out.
                if custom_id is not None:
                    ids.add(custom_id)
        if ids and ids <= ours:
            _in_flight(store, b["id"], cand, client, route)
            progress.event(f"adopted {cand.provider_batch_id} for {b['id']}: its results carry our custom_ids")
            return "adopted"
    return "hold" if waiting else "absent"


def resolve_uncertain_creations(store: Store, config: Config, result: SubmitResult, progress: Progress) -> int:
    """Batches left in 'creating' by a crash or a dropped connection: adopt, hold, or release.
    Returns how many were released (back to 'uploaded': the provider has no such batch)."""
    released = 0
    for b in store.rows("SELECT * FROM batches WHERE status = ? ORDER BY seq", [Status.CREATING]):
        route = config.routes.get(b["route"])
        if route is None:
            continue
        adapter = get_adapter(route.provider)
        client = make_client(route)
        try:
            outcome = _adopt(store, route, adapter, client, b, progress)
        except ProviderError as e:
            if not is_transient(e) and not blocks_route(e):
                raise
            # The listing could not be read (even after retries), or the provider refused it (the
            # key, a redirect to another host): whether the provider made this batch is still
            # unknown, so it stays 'creating' for a later round; the other batches and routes go on.
            result.hold(store, b["id"], f"uncertain creation: {e.message}; will retry later")
            if is_transient(e):
                result.provider_errors += 1
            continue
        if outcome == "adopted":
            result.adopted.append(b["id"])
        elif outcome == "hold":
            result.hold(store, b["id"], "uncertain creation: waiting for candidate batches to end")
            result.awaiting.append(b["id"])
        else:
            # Nothing at the provider is ours: it is safe to create it now.
            move(store, b["id"], Status.UPLOADED)
            released += 1
    return released
