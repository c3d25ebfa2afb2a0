"""Poll: follow in-flight batches and download what finished.

For each batch `in_flight`: retrieve it, record what the provider says, and once it is terminal
record `ended` and download its result files into jobs/<id>/ (then `downloaded`). A download whose
last line does not parse (a truncated transfer) is fetched again; what still cannot be read is
left to collect, which resubmits requests that have no result line.

Sync-transport batches are run here: their lines are sent online with bounded concurrency and
each answer is appended to jobs/<id>/results.jsonl as it arrives, in the provider's batch result
shape, so collect has one path. A killed run resumes from that file without resending.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import faults, jsonl
from .clients import classify, is_transient, make_client
from .config import Config, Route
from .errors import ProviderError
from .progress import SILENT, Progress
from .redaction import redact, redact_file
from .providers import RETRY_AFTER_KEY, TERMINAL_STATES, BatchStatus, get_adapter
from .store import Store
from .submit import verify_request_file

DOWNLOAD_ATTEMPTS = 3


@dataclass
class PollResult:
    in_flight: int = 0
    ended: list[str] = field(default_factory=list)
    downloaded: list[str] = field(default_factory=list)
    requests_in_flight: int = 0
    provider_errors: int = 0

    def waiting(self, b: dict[str, Any]) -> None:
        """Count a batch as still in flight (running, or results not yet fetched)."""
        self.in_flight += 1
        self.requests_in_flight += b["n_requests"] or 0


def _set(store: Store, batch_id: str, **fields: Any) -> None:
    # Statuses and errors are the provider's words, which may quote the key back.
    values = [redact(v) if isinstance(v, str) else v for v in fields.values()]
    cols = ", ".join(f"{k} = ?" for k in fields)
    with store.db.atomic():
        store.db.execute(f"UPDATE batches SET {cols} WHERE id = ?", [*values, batch_id])


def poll_once(store: Store, config: Config, *, progress: Progress = SILENT) -> PollResult:
    result = PollResult()
    for b in store.rows("SELECT * FROM batches WHERE status IN ('in_flight', 'ended') ORDER BY seq"):
        route = config.routes.get(b["route"])
        if route is None:
            progress.event(f"skipping {b['id']}: route {b['route']!r} is no longer in the config")
            continue
        if b["transport"] == "sync":
            run_sync_batch(store, route, b, progress)
            result.downloaded.append(b["id"])
            continue
        try:
            _follow(store, route, b, result, progress)
        except ProviderError as e:
            if not is_transient(e):
                raise
            # Checking or downloading failed even after retries: the batch is still wherever it
            # was at the provider; the next poll tries again.
            progress.event(f"{b['id']}: {e.message}; will try again")
            result.provider_errors += 1
            result.waiting(b)
    return result


def _follow(store: Store, route: Route, b: dict[str, Any], result: PollResult, progress: Progress) -> None:
    """Retrieve one batch; once terminal, record it and download its results."""
    adapter = get_adapter(route.provider)
    client = make_client(route)
    # An 'ended' batch whose download did not finish is simply retrieved again (idempotent).
    status = adapter.retrieve(client, route, b["provider_batch_id"])
    faults.point("poll.after_retrieve")
    if b["status"] == "in_flight":
        fields: dict[str, Any] = dict(provider_status=status.raw_status, counts_json=json.dumps(status.counts),
                                      last_seen_json=json.dumps(status.raw, default=str))
        if status.state in TERMINAL_STATES:
            fields.update(status="ended", ended_at=time.time(), error=status.error, provider_state=status.state, quota=int(status.quota))
            result.ended.append(b["id"])
            progress.event(f"{b['id']} ended: {status.raw_status}" + (f" ({status.error})" if status.error else ""))
        _set(store, b["id"], **fields)
    if status.state not in TERMINAL_STATES:
        result.waiting(b)
        return
    files = _download(adapter, client, route, status, Path(b["dir"]))
    if not all(_complete(f) for f in files):
        # The provider still holds the results: never resubmit (and pay for) what it returned.
        # Keep the batch 'ended' and fetch again on the next poll.
        _set(store, b["id"], error=f"result download truncated; retrying ({', '.join(f.name for f in files)})")
        progress.event(f"{b['id']}: result download was cut short; will fetch it again")
        result.waiting(b)
        return
    faults.point("poll.after_download")
    _set(store, b["id"], status="downloaded", downloaded_at=time.time(), result_files_json=json.dumps([str(f) for f in files]))
    result.downloaded.append(b["id"])
    if files:
        progress.event(f"downloaded {b['id']}: {', '.join(f.name for f in files)}")


def _download(adapter: Any, client: Any, route: Route, status: BatchStatus, dest: Path) -> list[Path]:
    if not any(status.result_refs):
        return []  # failed at validation, or expired with no results (Gemini)
    files: list[Path] = []
    for _ in range(DOWNLOAD_ATTEMPTS):
        files = adapter.download(client, route, status, dest)
        for f in files:
            redact_file(f)  # the provider's answers may quote the key back: never kept on disk
        if all(_complete(f) for f in files):
            return files
    return files  # still truncated: the caller keeps the batch 'ended' and tries again later


def _complete(path: Path) -> bool:
    """True unless the last line of the file fails to parse (a transfer cut mid-line)."""
    last = b""
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - (1 << 20)))
        tail = f.read()
    for line in reversed(tail.split(b"\n")):
        if line.strip():
            last = line
            break
    if not last:
        return True
    try:
        json.loads(last)
        return True
    except ValueError:
        return False


def run_sync_batch(store: Store, route: Route, b: dict[str, Any], progress: Progress) -> None:
    """Send a sync batch's lines online; append each result as it arrives; resume after a crash."""
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
    lock = threading.Lock()
    progress.event(f"{b['id']}: sending {len(todo)} request(s) online ({len(done)} already answered)")

    def one(raw: bytes) -> None:
        line = json.loads(raw)
        cid = str(line.get("custom_id") or line.get("key"))
        try:
            out = adapter.send_online(client, route, line)
        except Exception as exc:  # noqa: BLE001 - per-request failures become result lines
            c = classify(exc)
            if c is None:
                raise
            out = adapter.error_line(cid, c.status, c.message)
            if c.retry_after is not None:
                out[RETRY_AFTER_KEY] = c.retry_after
        # An answer or an error may quote the key back (the provider repeats what it was sent).
        text = redact(jsonl.dumps(out)) + "\n"
        with lock:
            with open(out_path, "a", encoding="utf-8") as f:
                f.write(text)
                f.flush()
            faults.point("poll.sync_line")

    with ThreadPoolExecutor(max_workers=route.sync_concurrency) as pool:
        for fut in [pool.submit(one, raw) for raw in todo]:
            fut.result()
    if not out_path.exists():
        out_path.touch()
    _set(store, b["id"], status="downloaded", provider_status="completed", provider_state="done", ended_at=time.time(), downloaded_at=time.time(),
         result_files_json=json.dumps([str(out_path)]))


def _truncate_partial_line(path: Path) -> None:
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        path.write_bytes(data[: data.rfind(b"\n") + 1])


def poll(store: Store, config: Config, *, wait: bool = False, interval: float = 30.0, timeout: float | None = None,
         progress: Progress = SILENT) -> PollResult:
    start = time.monotonic()
    ended: list[str] = []
    downloaded: list[str] = []
    while True:
        result = poll_once(store, config, progress=progress)
        # Report what this whole call ended and downloaded, not only its last round.
        ended += result.ended
        downloaded += result.downloaded
        result.ended, result.downloaded = list(ended), list(downloaded)
        if not wait or result.in_flight == 0:
            progress.done()
            return result
        waited = time.monotonic() - start
        if timeout is not None and waited + interval > timeout:
            progress.done()
            return result
        progress.status(f"{result.in_flight} batch(es) in flight ({result.requests_in_flight} requests), waited {waited:.0f}s")
        time.sleep(interval)


__all__ = ["poll", "poll_once", "PollResult", "ProviderError"]
