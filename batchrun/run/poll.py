"""Poll: follow in-flight batches and download what finished.

For each batch `in_flight`: retrieve it, record what the provider says, and once it is terminal
record `ended` and download its result files into jobs/<id>/ (then `downloaded`). A download whose
last line does not parse (a truncated transfer) is fetched again, a bounded number of times across
runs (MAX_DOWNLOAD_ATTEMPTS); a file still cut short then is accepted as it is and said so by name:
collect resubmits the requests that have no readable result line.

Sync-transport batches are run here: their lines are sent online with bounded concurrency and
each answer is appended to jobs/<id>/results.jsonl as it arrives, in the provider's batch result
shape, so collect has one path. A killed run resumes from that file without resending. A line
that cannot be written (a disk error) stops the sending: no new request goes out, so at most
`sync_concurrency` answers are lost and sent again, as after a crash.

A route whose batch the provider refuses to show or hand over (the key refused, a redirect to
another host, a 404) is blocked for this run: its other batches are not checked again, the other
routes go on, and the batch stays where it was at the provider for the next run.

A result file deleted before collect read it (jobs/ cleaned up) sends its batch back to `ended`
first (resume.send_back_lost_result_files), and it is downloaded again here: the provider keeps
the results for weeks. Only a 404 for that batch or its file from a provider that answers a
listing (or a batch that shows no result file any more) means they are gone: then its requests
have no result and are sent again (resume.results_gone), said by name.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base import jsonl, netguard
from ..base.checksums import file_digest
from ..base.errors import DataError, ProviderError
from ..base.progress import SILENT, Progress
from ..base.redaction import redact, redact_file, redact_json_line
from ..base.stop import checkpoint
from ..ledger.inputs import Inputs, as_inputs
from ..ledger.lifecycle import REDOWNLOAD_PENDING, TO_FOLLOW, Status, move, record
from ..ledger.resume import results_gone, send_back_lost_result_files
from ..ledger.store import Store, sql_list
from ..protocol.config import Config, Route
from ..providers import RETRY_AFTER_KEY, TERMINAL_STATES, Adapter, BatchStatus, get_adapter
from ..providers.clients import Classified, client_host, is_transient, make_client, require_keys, send_online
from . import faults
from .submit import verify_request_file

DOWNLOAD_ATTEMPTS = 3  # fetches of a truncated result file per poll
# Fetches of one batch's result files in all, across polls and runs (5 polls' worth). The
# provider keeps the results for days, so a cut transfer is fetched again rather than paid for
# again; but a file that arrives cut every time (a proxy's size limit, a provider bug) must not
# be fetched forever: after this many the file is accepted as it is and its unreadable tail is
# resubmitted (each request of it costs once more; the alternative is never finishing).
MAX_DOWNLOAD_ATTEMPTS = 5 * DOWNLOAD_ATTEMPTS


@dataclass(frozen=True)
class BatchProgress:
    """How far a running batch is, where its provider says (BatchStatus.requests_done)."""

    batch_id: str
    done: int
    total: int
    seconds_left: float | None  # None until a request has finished: no rate to go by yet

    def words(self) -> str:
        return f"{self.batch_id} {self.done}/{self.total}"


@dataclass
class PollResult:
    in_flight: int = 0
    ended: list[str] = field(default_factory=list)
    downloaded: list[str] = field(default_factory=list)
    requests_in_flight: int = 0
    provider_errors: int = 0
    running: list[BatchProgress] = field(default_factory=list)
    # Routes blocked for this run because the provider refused to show or hand over one of their
    # batches: route -> what happened and the fix (printed as "blocked: ..."). Their batches are
    # not counted in `in_flight`: nothing in this run will move them.
    blocked: dict[str, str] = field(default_factory=dict)

    def in_flight_words(self) -> str:
        """The live line's account of the batches in flight: counts per batch where the providers
        report them, and the longest time left estimated from them."""
        text = f"{self.in_flight} batch(es) in flight ({self.requests_in_flight} requests)"
        if self.running:
            shown = [p.words() for p in self.running[:4]] + ([f"+{len(self.running) - 4} more"] if len(self.running) > 4 else [])
            text += ": " + ", ".join(shown) + " done"
            lefts = [p.seconds_left for p in self.running if p.seconds_left is not None]
            if lefts:
                text += f", about {duration_words(max(lefts))} left"
        return text

    def waiting(self, b: dict[str, Any]) -> None:
        """Count a batch as still in flight (running, or results not yet fetched)."""
        self.in_flight += 1
        self.requests_in_flight += b["n_requests"] or 0


# Provider words that only restate a terminal state (after dropping Gemini's JOB_STATE_/
# BATCH_STATE_ prefix): an event line shows batchrun's word alone for these.
_PLAIN_PROVIDER_WORDS = {"ended", "completed", "succeeded", "canceled", "cancelled", "failed", "expired", "done"}


def duration_words(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def time_left(started: float | None, done: int, total: int, now: float) -> float | None:
    """Time left at the rate so far (requests done since the batch was submitted): None before the
    first request is done, or once all are."""
    if started is None or done <= 0 or done >= total or now <= started:
        return None
    return (now - started) * (total - done) / done


def state_words(status: BatchStatus) -> str:
    """batchrun's state word (done, failed, expired, cancelled), with the provider's own in
    parentheses where it says more (not `ended: ended` or `JOB_STATE_SUCCEEDED`)."""
    raw = str(status.raw_status or "")
    plain = raw.lower().removeprefix("job_state_").removeprefix("batch_state_")
    if not raw or plain in _PLAIN_PROVIDER_WORDS:
        return status.state
    return f"{status.state} (provider: {raw})"


# What a status check or a download answered that blocks the route for the run: sending the call
# again cannot help until the key, the base URL or the proxy is fixed.
_BLOCKING = ("auth", "redirect", "not_found", "client")
# The start of `batches.error` while a batch waits because its route was blocked (cleared once the
# provider shows it again).
BLOCKED_PREFIX = "blocked: "


def _sends_online(store: Store, config: Config) -> bool:
    """Whether a poll would send a sync batch's lines (and so must read the dataset and corpus
    first, to refuse lines built from inputs changed since)."""
    return any(route in config.routes for (route,) in store.db.execute(
        f"SELECT route FROM batches WHERE status IN {sql_list(TO_FOLLOW)} AND transport = 'sync'"))


def poll_once(store: Store, inputs: Inputs, *, progress: Progress = SILENT, skip: set[str] | frozenset[str] = frozenset()) -> PollResult:
    """Check every batch in flight once (`skip`: routes already blocked in this run, not checked
    again). `inputs`: the command's, with the corpus if a sync batch's lines may be sent."""
    config = inputs.config
    result = PollResult()
    store.check_same_file()
    # A result file deleted before collect read it (jobs/ cleaned up, a batch folder removed): the
    # provider still holds the results, so its batch is followed again and downloaded below
    # (resume.send_back_lost_result_files). Whether a file changed is collect's to check.
    send_back_lost_result_files(store, config, check_changes=False, progress=progress)
    following = store.rows(f"SELECT * FROM batches WHERE status IN {sql_list(TO_FOLLOW)} ORDER BY seq")
    if any(b["transport"] == "sync" and b["route"] in config.routes for b in following):
        # poll sends a sync batch's lines itself: an input changed since they were built is
        # refused here too, before any line goes out (resume.py).
        from ..ledger.resume import refuse_changed_inputs

        refuse_changed_inputs(store, inputs)
    # Every key variable missing, with every route in flight that reads it, said at once before
    # any call (not the first batch's route only, from its client, as a resume once did).
    require_keys([r for name, r in config.routes.items()
                  if name not in skip and any(b["route"] == name for b in following)])
    for b in following:
        route = config.routes.get(b["route"])
        if route is None:
            progress.event(f"skipping {b['id']}: route {b['route']!r} is no longer in the config")
            continue
        if route.name in skip or route.name in result.blocked:
            continue
        if b["transport"] == "sync":
            if run_sync_batch(store, route, b, progress):
                result.downloaded.append(b["id"])
            else:
                result.waiting(b)  # stopped at the run's time limit: the next run sends the rest
            continue
        try:
            _follow(store, route, b, result, progress, config.paths.jobs)
        except ProviderError as e:
            c: Classified | None = getattr(e, "classified", None)
            if c is not None and c.failure == "not_found" and b["redownload"] == REDOWNLOAD_PENDING and _answers(route):
                # Its lost result file was to be downloaded again, and the provider, which answers
                # otherwise, no longer holds the results (expired, or deleted): then, and only then,
                # its requests without a result are sent again (resume.results_gone).
                _gone(store, b, route, e.message, result, progress)
                continue
            if c is not None and c.failure in _BLOCKING and not getattr(e, "loopback_refused", False):
                _block(store, config, route, b, c, e, result, progress)
                continue
            if not is_transient(e):
                raise
            # Checking or downloading failed even after retries: the batch is still wherever it
            # was at the provider; the next poll tries again.
            progress.event(f"{b['id']}: {e.message}; will try again")
            result.provider_errors += 1
            result.waiting(b)
    return result


def _gone(store: Store, b: dict[str, Any], route: Route, why: str, result: PollResult, progress: Progress) -> None:
    faults.point("poll.results_gone")
    message = results_gone(store, b, why)
    result.downloaded.append(b["id"])
    progress.event(f"{b['id']} (route {route.name}): {message}")


def _answers(route: Route) -> bool:
    """Whether the route's provider answers a batch listing: a 404 for one batch (or its results)
    then means that batch's results are gone, not that the base URL or a proxy is wrong (which
    404s everything, and blocks the route instead)."""
    try:
        get_adapter(route.provider).check_batch_access(make_client(route), route)
    except ProviderError:
        return False
    return True


def _block(store: Store, config: Config, route: Route, b: dict[str, Any], c: Classified, e: ProviderError, result: PollResult,
           progress: Progress) -> None:
    """The provider refused to show or hand over a batch of this route: the route is blocked for
    this run (the others go on); the batch stays in flight at the provider, for the next run."""
    from ..ledger.diagnosis import refused_call

    what = "downloaded" if b["status"] == Status.ENDED else "checked"
    cause, fix = refused_call(route.name, c.failure, e.message, config, batch_id=b["id"], host=b["endpoint_host"])
    text = f"route {route.name!r}: batch {b['id']} could not be {what}: {cause} ({e.message}). Fix: {fix}"
    record(store, b["id"], error=redact(f"{BLOCKED_PREFIX}{cause} ({e.message})"))
    result.blocked[route.name] = redact(text)
    progress.event(f"{b['id']}: {e.message}; route {route.name!r} is blocked for this run")


def _follow(store: Store, route: Route, b: dict[str, Any], result: PollResult, progress: Progress, jobs: Path) -> None:
    """Retrieve one batch; once terminal, record it and download its results."""
    adapter = get_adapter(route.provider)
    client = make_client(route)
    # An 'ended' batch whose download did not finish is simply retrieved again (idempotent).
    status = adapter.retrieve(client, route, b["provider_batch_id"])
    faults.point("poll.after_retrieve")
    if (b["error"] or "").startswith(BLOCKED_PREFIX):
        record(store, b["id"], error=None)  # the provider shows it again: the route is no longer blocked
    counts_json = json.dumps(status.counts)
    # One line per change of a batch's counts (compared with what the last poll recorded, in this
    # run or an earlier one), not one per poll: a cron log reads as a list of events.
    counts_moved = b["status"] == Status.IN_FLIGHT and counts_json != b["counts_json"]
    if b["status"] == Status.IN_FLIGHT:
        fields: dict[str, Any] = dict(provider_status=status.raw_status, counts_json=counts_json,
                                      last_seen_json=json.dumps(status.raw, default=str))
        if status.state in TERMINAL_STATES:
            move(store, b["id"], Status.ENDED, **fields, ended_at=time.time(), error=status.error, provider_state=status.state,
                 quota=int(status.quota))
            result.ended.append(b["id"])
            progress.event(f"{b['id']} ended: {state_words(status)}" + (f": {status.error}" if status.error else ""))
        else:
            record(store, b["id"], **fields)
    if status.state not in TERMINAL_STATES:
        result.waiting(b)
        if status.requests_done is not None and status.n_requests:
            left = time_left(b["submitted_at"] or status.created_at, status.requests_done, status.n_requests, time.time())
            running = BatchProgress(b["id"], status.requests_done, status.n_requests, left)
            result.running.append(running)
            if counts_moved and running.done > 0:
                progress.event(f"{running.words()} requests done" + (f", about {duration_words(left)} left" if left is not None else ""))
        return
    if b["redownload"] == REDOWNLOAD_PENDING and not any(status.result_refs):
        # Sent back for a new download, and the provider now shows no results for it (an archived
        # Anthropic batch's `results_url` may be null: "archived and its results became
        # unavailable", the Message Batch object's reference): as a 404 for them, the results are gone.
        _gone(store, b, route, "the batch shows no result file any more", result, progress)
        return
    files, attempts, complete = _download(store, b, adapter, client, route, status, jobs)
    names = ", ".join(f.name for f in files)
    if not complete:
        if attempts < MAX_DOWNLOAD_ATTEMPTS:
            # The provider still holds the results: never resubmit (and pay for) what it returned.
            # Keep the batch 'ended' and fetch again on the next poll.
            record(store, b["id"], error=f"result download truncated ({names}); fetched {attempts} of at most "
                                       f"{MAX_DOWNLOAD_ATTEMPTS} time(s), will fetch it again")
            progress.event(f"{b['id']}: result download truncated ({names}), attempt {attempts} of {MAX_DOWNLOAD_ATTEMPTS}; "
                           "will fetch it again")
            result.waiting(b)
            return
        record(store, b["id"], download_truncated=1,
             error=f"result download still truncated after {attempts} attempt(s) ({names}); accepted as it is: "
                   "requests without a readable result line are resubmitted")
        progress.event(f"{b['id']}: result download still truncated after {attempts} attempt(s) ({names}); accepting it as it is, "
                       "requests without a readable line will be resubmitted")
    elif (b["error"] or "").startswith("result download truncated"):
        record(store, b["id"], error=None)  # fetched whole this time: the earlier notice no longer holds
    faults.point("poll.after_download")
    again = b["redownload"] == REDOWNLOAD_PENDING
    move(store, b["id"], Status.DOWNLOADED, downloaded_at=time.time(), result_files_json=json.dumps([str(f) for f in files]),
         result_files_sha256_json=json.dumps([file_digest(f) for f in files]),
         **({"redownload": None, **({"error": None} if complete else {})} if again else {}))
    result.downloaded.append(b["id"])
    if files:
        progress.event(f"downloaded {b['id']}{' again' if again else ''}: {names}")


def _download(store: Store, b: dict[str, Any], adapter: Adapter, client: Any, route: Route,
              status: BatchStatus, jobs: Path) -> tuple[list[Path], int, bool]:
    """Fetch the result files (again while the last line is cut): (files, fetches so far in all, complete)."""
    attempts = b["download_attempts"] or 0
    if not any(status.result_refs):
        return [], attempts, True  # failed at validation, or expired with no results (Gemini)
    files: list[Path] = []
    # The batch's folder may be gone (jobs/ cleaned up while the batch was in flight): the provider
    # still holds the results, so they are fetched into it again rather than failing every run.
    # Only inside this project's jobs folder: state.db records the folder's absolute path, and a
    # project moved (or its [paths] jobs changed) while batches were in flight would otherwise
    # have its results written back under the old location (review).
    folder = Path(b["dir"])
    if not folder.is_dir():
        if folder.parent.resolve() != jobs.resolve():
            raise DataError(
                f"state.db records the folder of batch {b['id']} as {folder}, outside this project's jobs folder {jobs}: "
                "the project was moved, or its [paths] jobs changed, while the batch was in flight.",
                f"Put the project back where it was (or set [paths] jobs to {folder.parent}) and run poll again; "
                "the provider still holds the results.")
        folder.mkdir(parents=True, exist_ok=True)
    for _ in range(max(1, min(DOWNLOAD_ATTEMPTS, MAX_DOWNLOAD_ATTEMPTS - attempts))):
        files = adapter.download(client, route, status, Path(b["dir"]))
        attempts += 1
        record(store, b["id"], download_attempts=attempts)  # counted across runs
        for f in files:
            redact_file(f)  # the provider's answers may quote the key back: never kept on disk
        if all(_complete(f) for f in files):
            return files, attempts, True
    return files, attempts, False


def _complete(path: Path) -> bool:
    """True unless the last line of the file fails to parse (a transfer cut mid-line).

    The whole last line is read, however long: one answer can make a valid line of many MiB, and
    a fixed look-back would take it for a cut one forever. A line nested too deep to decode is
    complete as far as the transfer goes (fetching it again cannot change it): collect skips it
    as unreadable and resubmits its request."""
    last = _last_line(path)
    if not last:
        return True
    try:
        json.loads(last)
        return True
    except RecursionError:
        return True
    except ValueError:
        return False


def _last_line(path: Path, block_size: int = 1 << 20) -> bytes:
    """The file's last non-blank line (without its newline), read backwards block by block."""
    blocks: list[bytes] = []
    with open(path, "rb") as f:
        pos = f.seek(0, 2)
        found_content = False
        while pos > 0:
            step = min(block_size, pos)
            pos -= step
            f.seek(pos)
            block = f.read(step)
            if not found_content:
                block = block.rstrip()
                if not block:
                    continue  # trailing newlines and spaces only, so far
                found_content = True
            newline = block.rfind(b"\n")
            if newline >= 0:
                blocks.append(block[newline + 1:])
                break
            blocks.append(block)
    return b"".join(reversed(blocks)).strip()


def run_sync_batch(store: Store, route: Route, b: dict[str, Any], progress: Progress) -> bool:
    """Send a sync batch's lines online; append each result as it arrives; resume after a crash.

    True once every line has its result; False if the run's time limit stopped the sending (the
    batch stays in flight: the next run sends the rest)."""
    # The file is sent line by line from here, so its checksum is checked here, before any line
    # goes out: on every run, a resumed one too (submit's check was at the batch's start).
    verify_request_file(b)
    adapter = get_adapter(route.provider)
    client = make_client(route)
    out_path = Path(b["dir"]) / "results.jsonl"
    done: set[str] = set()
    if out_path.exists():
        for _, raw, _complete_line in jsonl.iter_lines(out_path):
            try:
                obj = json.loads(raw)
            except ValueError:
                continue  # a line cut by a crash: that request is sent again
            done.add(str(obj.get("custom_id") or obj.get("key")))
        _truncate_partial_line(out_path)
    todo = []
    for _, raw, _ in jsonl.iter_lines(Path(b["request_file"])):
        line = json.loads(raw)
        cid = str(line.get("custom_id") or line.get("key"))
        if cid not in done:
            todo.append(raw)
    # Record where these lines go before sending them. A batch resumed after the config moved the
    # route keeps both hosts: its earlier answers came from the first.
    host = client_host(client, route)
    hosts = set(filter(None, (b["endpoint_host"] or "").split(", "))) if done else set()
    record(store, b["id"], endpoint_host=", ".join(sorted(hosts | {host})))
    lock = threading.Lock()
    # Set by the first failure to record an answer (a disk error: every answer after it would be
    # lost, and paid for again by the next run) or by the run's time limit: no new request goes
    # out, only the at most sync_concurrency already in flight finish.
    stop = threading.Event()
    unsent = threading.Event()  # some line has no result yet: the batch is not done
    progress.event(f"{b['id']}: sending {len(todo)} request(s) online ({len(done)} already answered)")

    def one(raw: bytes) -> None:
        if stop.is_set() or netguard.passed():
            unsent.set()
            return
        try:
            # A stop swallowed where it landed in the main thread (base/stop.py) sends no more
            # paid requests: raised here, fut.result() raises it in the main thread.
            checkpoint()
            send_one(raw)
        except BaseException:
            stop.set()
            raise

    def send_one(raw: bytes) -> None:
        line = json.loads(raw)
        cid = str(line.get("custom_id") or line.get("key"))
        store.check_same_file()  # each online request is paid for: never sent for a vanished state.db
        out, c = send_online(adapter, client, route, line, cid)  # per-request failures become result lines
        if c is not None and c.failure == "deadline":
            # Not sent, or cut at the run's time limit (it may have reached the provider):
            # no result line, so the next run sends it (at most sync_concurrency such, as after a crash).
            stop.set()
            unsent.set()
            return
        if c is not None and c.retry_after is not None:
            out[RETRY_AFTER_KEY] = c.retry_after
        # An answer or an error may quote the key back (the provider repeats what it was sent).
        text = redact_json_line(jsonl.dumps(out)) + "\n"
        with lock:
            with open(out_path, "a", encoding="utf-8") as f:
                f.write(text)
                f.flush()
            faults.point("poll.sync_line")

    with ThreadPoolExecutor(max_workers=route.sync_concurrency) as pool:
        futures = [pool.submit(one, raw) for raw in todo]
        try:
            for fut in futures:
                fut.result()
        except BaseException:
            stop.set()
            for fut in futures:
                fut.cancel()
            raise
    if unsent.is_set():
        progress.event(f"{b['id']}: the run's time limit stopped the online sends; the next run sends the rest")
        return False
    if not out_path.exists():
        out_path.touch()
    move(store, b["id"], Status.DOWNLOADED, provider_status="completed", provider_state="done", ended_at=time.time(), downloaded_at=time.time(),
         result_files_json=json.dumps([str(out_path)]), result_files_sha256_json=json.dumps([file_digest(out_path)]))
    return True


def _truncate_partial_line(path: Path) -> None:
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        path.write_bytes(data[: data.rfind(b"\n") + 1])


def poll(store: Store, config: Config | Inputs, *, wait: bool = False, interval: float = 30.0, timeout: float | None = None,
         progress: Progress = SILENT) -> PollResult:
    """Check the batches in flight; with `wait`, until none is left or `timeout` seconds have
    passed. Every provider call is bounded by that timeout too (netguard.time_limit). `config`:
    the command's resolved inputs (a Config is resolved here); the dataset and corpus are read
    only when a sync batch's lines are to be sent (a poll keeps working on a broken dataset)."""
    plain = config if isinstance(config, Config) else config.config
    inputs = as_inputs(store, config, corpus=_sends_online(store, plain))
    with netguard.time_limit(time.time() + timeout if wait and timeout is not None else None):
        return _poll(store, inputs, wait=wait, interval=interval, timeout=timeout, progress=progress)


def _poll(store: Store, inputs: Inputs, *, wait: bool, interval: float, timeout: float | None, progress: Progress) -> PollResult:
    start = time.monotonic()
    ended: list[str] = []
    downloaded: list[str] = []
    blocked: dict[str, str] = {}
    while True:
        result = poll_once(store, inputs, progress=progress, skip=set(blocked))
        # Report what this whole call ended, downloaded and blocked, not only its last round.
        ended += result.ended
        downloaded += result.downloaded
        blocked.update(result.blocked)
        result.ended, result.downloaded, result.blocked = list(ended), list(downloaded), dict(blocked)
        if not wait or result.in_flight == 0:
            progress.done()
            return result
        waited = time.monotonic() - start
        if timeout is not None and waited + interval > timeout:
            progress.done()
            return result
        progress.status(f"{result.in_flight_words()}; waited {waited:.0f}s")
        # `--wait` loops until every batch ends: a stop swallowed where it landed ends it here, as
        # it ends refresh's rounds (base/stop.py), not when the last batch ends.
        checkpoint()
        time.sleep(interval)


__all__ = ["poll", "poll_once", "BatchProgress", "PollResult", "ProviderError"]
