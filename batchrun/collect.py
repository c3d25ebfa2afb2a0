"""Collect: reconcile every downloaded result line into state.db, then score and write results.

Each result line becomes one `results` row keyed by (batch, custom_id): reconciling a line twice
changes nothing, and a collect killed halfway resumes where it stopped. Judge lines are parsed
into `judgments`. Requests a batch ended without answering get a row saying why (`expired`,
`cancelled`, `missing`, `batch_failed`), so the retry policy can count them. A batch the provider
refused for a queue quota gets no rows at all: its requests are simply pending again.

After reconciling, judge requests are queued for new valid answers, and results/ and the
leaderboard are rewritten from the views.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import faults, jsonl
from .config import Config
from .cost import billed_output, request_cost
from .grading import parse_verdict, points_json, score
from .plan import queue_judgments, sync_state
from .progress import SILENT, Progress
from .redaction import known_keys, redact
from .providers import RETRY_AFTER_KEY, get_adapter
from .store import Store

CHUNK = 20_000  # result lines per transaction: fewer commits (and WAL checkpoints) per batch

# What a request its batch never answered gets, by the batch's provider_state. "key_refused"
# (submit.KEY_REFUSED): the provider refused the key on the upload or the create, so every
# request is an 'auth' failure that blocks the route until the key is fixed.
_MISSING_KIND = {"expired": "expired", "cancelled": "cancelled", "failed": "batch_failed", "key_refused": "auth"}


@dataclass
class CollectResult:
    batches: list[str] = field(default_factory=list)
    lines: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    new_judge_requests: int = 0
    complete: bool = False
    leaderboard: list[dict[str, Any]] = field(default_factory=list)


def collect(store: Store, config: Config, *, progress: Progress = SILENT, write_outputs: bool = True,
            sync: bool = True) -> CollectResult:
    """`sync=False` when the caller has just synced config and dataset into state.db (refresh's submit)."""
    result = CollectResult()
    # Judge requests queued by sync_state (a judge added to the panel or changed) count as new too.
    judge_requests_before = store.scalar("SELECT count(*) FROM requests WHERE stage = 'judge'") or 0
    if sync:
        sync_state(store, config)
    ingest(store, config, result, progress=progress)
    with store.db.atomic():
        queue_judgments(store, config)
    result.new_judge_requests = (store.scalar("SELECT count(*) FROM requests WHERE stage = 'judge'") or 0) - judge_requests_before
    if result.new_judge_requests:
        progress.event(f"queued {result.new_judge_requests} judge request(s)")
    from .scoring import leaderboard, write_results

    result.leaderboard = leaderboard(store)
    result.complete = bool(result.leaderboard) and all(r["complete"] for r in result.leaderboard)
    if write_outputs:
        write_results(store, config, result.leaderboard)
    return result


def ingest(store: Store, config: Config, result: CollectResult, *, progress: Progress = SILENT) -> None:
    """Reconcile every downloaded batch's result lines into state.db, in batch order.

    Tuned for volume (bench/ingest.py: 100,000 lines, 116 MB): a 64 MB page cache keeps the
    results indexes in memory while lines are inserted in custom_id (random) order, WAL
    checkpoints run on another thread instead of inside each COMMIT, and the cyclic garbage
    collector is paused: parsing allocates millions of dicts and lists that never form cycles,
    and its passes over the rows waiting to be inserted cost ~10% of the time.
    """
    with store.page_cache(kib=65536), store.background_checkpoints(), _gc_paused():
        for b in store.rows("SELECT * FROM batches WHERE status = 'downloaded' ORDER BY seq"):
            collect_batch(store, config, b, result)
            if not progress.quiet:
                progress.event(f"collected {b['id']}: " + ", ".join(f"{k} {v}" for k, v in sorted(_kinds(store, b["id"]).items())))


def _retry_after(obj: dict[str, Any]) -> float | None:
    """The Retry-After a provider sent with an online failure, as poll's sync transport noted it
    on the line (RETRY_AFTER_KEY); batch result lines carry none."""
    value = obj.get(RETRY_AFTER_KEY)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


@contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _kinds(store: Store, batch_id: str) -> dict[str, int]:
    return {r[0]: r[1] for r in store.db.execute("SELECT kind, count(*) FROM results WHERE batch_id = ? GROUP BY kind", [batch_id])}


def collect_batch(store: Store, config: Config, b: dict[str, Any], result: CollectResult) -> None:
    adapter = get_adapter(b["provider"])
    route = config.routes.get(b["route"])
    rubric_totals = dict(store.db.execute("SELECT task_id, rubric_total FROM tasks"))  # a few hundred rows
    members = {
        cid: (stage, rubric_totals.get(task_id, 0))
        for cid, stage, task_id in store.db.execute(
            """SELECT br.custom_id, q.stage, q.task_id FROM batch_requests br JOIN requests q ON q.custom_id = br.custom_id
               WHERE br.batch_id = ?""", [b["id"]])
    }
    if b["quota"]:
        # "Not now": the provider's queue was full. No result rows: the requests are pending again.
        with store.db.atomic():
            store.db.execute("UPDATE batches SET status = 'refused', collected_at = ? WHERE id = ?", [time.time(), b["id"]])
        result.batches.append(b["id"])
        return
    seen: set[str] = {r[0] for r in store.db.execute("SELECT custom_id FROM results WHERE batch_id = ?", [b["id"]])}
    rows: list[tuple[Any, ...]] = []
    verdicts: list[tuple[str, Any, float]] = []
    now = time.time()

    def flush(final: bool = False) -> None:
        if final and (rows or verdicts):
            flush()  # commit the last rows first: a crash here must leave a batch half-collected
            faults.point("collect.mid_batch")
        with store.db.atomic():
            store.db.conn.executemany(
                """INSERT OR IGNORE INTO results (batch_id, custom_id, kind, text, finish_reason, input_tokens, output_tokens,
                   reasoning_tokens, cached_tokens, error_type, error_message, raw_json, collected_at, run_id, cost, retry_after)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""", rows)
            if verdicts:
                # Each judgment points at its result row, found through the (batch_id, custom_id) key.
                store.db.conn.executemany(
                    """INSERT OR IGNORE INTO judgments (result_id, custom_id, total, rubric_total, score, points_awarded_json, parse_error)
                       SELECT id, custom_id, ?, ?, ?, ?, ? FROM results WHERE batch_id = ? AND custom_id = ?""",
                    [(v.total, rt, None if v.total is None else score(v.total, rt),
                      points_json(v.points_awarded), v.error, b["id"], cid)
                     for cid, v, rt in verdicts])
            if final:
                store.db.execute("UPDATE batches SET status = 'collected', collected_at = ? WHERE id = ?", [now, b["id"]])
        rows.clear()
        verdicts.clear()

    keys = known_keys()
    for path in json.loads(b["result_files_json"] or "[]"):
        if not Path(path).exists():
            continue
        for _, raw, _ in jsonl.iter_lines(Path(path)):
            # Decoded once: parsed, and kept as raw_json. Redacted first, so no key a provider
            # quoted back reaches raw_json, text or error_message (files downloaded before
            # poll redacted them, or a key that changed since, are covered here too).
            text = redact(raw.decode("utf-8", "replace"), keys)
            try:
                obj = jsonl.loads(text)
            except ValueError:
                continue  # a truncated last line: that request gets a 'missing' row below
            line = adapter.parse_line(obj)
            member = members.get(line.custom_id)
            if member is None or line.custom_id in seen:
                continue  # not ours (or a duplicate line): never attributed
            seen.add(line.custom_id)
            stage, rubric_total = member
            kind = line.kind
            if stage == "judge" and kind == "ok":
                verdict = parse_verdict(line.text)
                if verdict.total is None:
                    kind = "unparseable"
                verdicts.append((line.custom_id, verdict, rubric_total))
            u = line.usage
            cost = None
            if route is not None:
                cost = request_cost(route, u.input_tokens, billed_output(route, u.output_tokens, u.reasoning_tokens))
                if cost is None and kind != "ok" and route.price.known and u.input_tokens is None and u.output_tokens is None:
                    cost = 0.0  # a failed line the provider reports no usage for is not billed: $0, not unknown
            rows.append((b["id"], line.custom_id, kind, line.text, line.finish_reason, u.input_tokens, u.output_tokens,
                         u.reasoning_tokens, u.cached_tokens, line.error_type, line.error_message,
                         text, now, store.run_id, cost, _retry_after(obj)))
            result.lines += 1
            result.by_kind[kind] = result.by_kind.get(kind, 0) + 1
            if len(rows) >= CHUNK:
                flush()
    # Requests the batch never answered: say why, so the retry policy can count them.
    missing_kind = _MISSING_KIND.get(b["provider_state"] or "", "missing")
    for cid in members:
        if cid not in seen:
            message = b["error"] if missing_kind in ("batch_failed", "auth") else f"no result line in batch ({b['provider_status']})"
            unbilled = 0.0 if route is not None and route.price.known else None  # never processed: nothing billed
            rows.append((b["id"], cid, missing_kind, None, None, None, None, None, None, missing_kind, message, None, now, store.run_id, unbilled, None))
            result.by_kind[missing_kind] = result.by_kind.get(missing_kind, 0) + 1
    flush(final=True)
    faults.point("collect.after_batch")
    result.batches.append(b["id"])
