"""Collect: reconcile every downloaded result line into state.db, then score and write results.

Each result line becomes one `results` row keyed by (batch, custom_id): reconciling a line twice
changes nothing, and a collect killed halfway resumes where it stopped. Judge lines are parsed
into `judgments`. Requests a batch ended without answering get a row saying why (`expired`,
`cancelled`, `missing`, `batch_failed`), so the retry policy can count them. A batch the provider
refused for a queue quota gets no rows at all: its requests are simply pending again.

A result line is provider output and is read as such: a line that is not JSON, or whose custom_id
cannot be read, is skipped (its request gets the `missing` row and is resubmitted); a line that
names one of our requests but has the wrong shape is a `transient` failure of that request
(error_type `malformed`, raw line kept, retried). No line can stop the batch. What is stored per
line is bounded (MAX_STORED_CHARS); the whole line stays in its file under jobs/. A request the
file answers with two different lines gets neither: an infrastructure failure (error_type
`duplicate`) that keeps every line as evidence, retried (_conflicts); the same line repeated byte
for byte is read once. Keys are redacted from each line and again from the text decoded from it.

After reconciling, judge requests are queued for new valid answers, and results/ and the
leaderboard are rewritten from the views.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base import jsonl
from ..base.gcpause import gc_paused
from ..base.progress import SILENT, Progress
from ..base.redaction import Keys, known_keys, redact, redact_json_line
from ..ledger import kept
from ..ledger.cost import billed_output, request_cost
from ..ledger.lifecycle import HOST_REFUSED, KEY_REFUSED, REDOWNLOAD_GONE, Status, move
from ..ledger.store import Store
from ..ledger.inputs import Inputs, as_inputs
from ..ledger.sync import queue_judgments, sync_state
from ..protocol.config import Config
from ..protocol.grading import Verdict, parse_verdict, points_json, score
from ..providers import RETRY_AFTER_KEY, Adapter, LineResult, get_adapter
from ..providers.reading import malformed
from . import faults

CHUNK = 20_000  # result lines per transaction: fewer commits (and WAL checkpoints) per batch
DUPLICATE = "duplicate"  # results.error_type of a request its result file answers with different lines (_conflicts)
MEMO_REPLY_CHARS = 512  # the longest judge reply whose judgment is remembered (collect_batch's `judged`)
INGEST_CACHE_KIB = 65536  # SQLite's page cache while rows go into indexed tables (see ingest)

# The most of one answer kept in state.db (results.text; likewise results.raw_json, the line),
# in characters. The largest completion budget the protocol sends is 32,768 tokens (~130 KB of
# text), so no honest answer comes near it; a provider that returns 60 MB must not make state.db
# grow by 60 MB a line. A longer answer is stored cut, with results.truncated = 1; its whole line
# stays in the batch's result file under jobs/. Judges see response[:5000], so they grade the same.
MAX_STORED_CHARS = 1 << 20

# What a request its batch never answered gets, by the batch's provider_state. KEY_REFUSED: the
# provider refused the key on the upload or the create, so every request is an 'auth' failure
# that blocks the route until the key is fixed; HOST_REFUSED: the upload or the create was sent
# to another host, refused, so every request is 'invalid' (the route's config or proxy must change).
_MISSING_KIND = {"expired": "expired", "cancelled": "cancelled", "failed": "batch_failed", KEY_REFUSED: "auth", HOST_REFUSED: "invalid"}


@dataclass
class CollectResult:
    batches: list[str] = field(default_factory=list)
    lines: int = 0
    skipped_lines: int = 0  # lines that name none of the batch's requests (unreadable, or not ours)
    truncated: list[str] = field(default_factory=list)  # notices: batches accepted with a cut result file
    notices: list[str] = field(default_factory=list)  # notices: result files answering a request twice
    by_kind: dict[str, int] = field(default_factory=dict)
    new_judge_requests: int = 0
    complete: bool = False
    leaderboard: list[dict[str, Any]] = field(default_factory=list)


def collect(store: Store, config: Config | Inputs, *, progress: Progress = SILENT, write_outputs: bool = True,
            sync: bool = True) -> CollectResult:
    """`config`: the command's resolved inputs (a Config is resolved here, once). `sync=False` when
    the caller has just synced them into state.db (refresh's submit)."""
    inputs = as_inputs(store, config)
    config = inputs.config
    result = CollectResult()
    store.check_same_file()  # a phase of its own: never begun on a state.db deleted or replaced under the run
    # Judge requests queued by sync_state (a judge added to the panel or changed) count as new too.
    judge_requests_before = store.scalar("SELECT count(*) FROM requests WHERE stage = 'judge'") or 0
    from ..ledger.resume import send_back_lost_result_files

    # First, before the sync and before any line is read: a refusal leaves state.db as it was. A
    # result file deleted or changed since poll downloaded it is downloaded again by the next poll
    # (the provider keeps the results), never read as "no result" and paid for again.
    send_back_lost_result_files(store, config, progress=progress, then="the next poll or refresh downloads it again")
    # Answers that came back for requests built from inputs changed since (the batch had ended
    # when the edit came, or was cancelled for it): recorded for audit, never scored, and said so,
    # naming the input (read before the sync, which records the new inputs).
    stale: dict[str, Any] = {}
    if store.scalar("SELECT 1 FROM batches WHERE status = ? LIMIT 1", [Status.DOWNLOADED]):
        from ..ledger.resume import changed_inputs

        stale = changed_inputs(store, inputs, statuses=(Status.DOWNLOADED,))
    if sync:
        sync_state(store, inputs, queue=False)
    ingest(store, config, result, progress=progress)
    for bid, (_, changes) in stale.items():
        if bid in result.batches:
            progress.event(f"{bid}: its answers are to {'; '.join(c.input for c in changes)} as it was before it changed: "
                           "kept for audit, never scored; the cells are planned again from the new input")
    # Once, after the new answers are in: for them, and for a judge the sync just added or changed
    # (queue_judgments inside sync_state would cost a second pass over every current cell). With
    # ingest's page cache: a night's 86,000 judge requests go into requests' four indexes in
    # random key order, and with SQLite's default 2 MB they were read back from the OS per row
    # (1.5 -> 0.9 s, bench/ingest.py night 1).
    with store.page_cache(kib=INGEST_CACHE_KIB), store.db.atomic():
        queue_judgments(store, config)
        if kept.available(store):
            # The per-cell state (ledger/kept.py) brought up to date with every line ingested and
            # every judge request queued, in this transaction: once per collect, not once per
            # batch (32 updates cost ~2.9 s more CPU than one at bench/ingest.py's night 1). Each
            # batch's transaction above leaves its results above kept_meta.results_upto, so a
            # collect killed in between leaves a kept state no reader trusts and the next writer
            # completes (tests/test_kept_state.py).
            kept.keep_current(store)
    result.new_judge_requests = (store.scalar("SELECT count(*) FROM requests WHERE stage = 'judge'") or 0) - judge_requests_before
    if result.new_judge_requests:
        progress.event(f"queued {result.new_judge_requests} judge request(s)")
    from ..publish.outputs import leaderboard, write_results

    result.leaderboard = leaderboard(store)  # evaluates the views once (cells_now), for write_results too
    result.complete = bool(result.leaderboard) and all(r["complete"] for r in result.leaderboard)
    if write_outputs:
        write_results(store, inputs, result.leaderboard)
    return result


def ingest(store: Store, config: Config, result: CollectResult, *, progress: Progress = SILENT) -> None:
    """Reconcile every downloaded batch's result lines into state.db, in batch order.

    Tuned for volume (bench/ingest.py: 100,000 lines, 116 MB): a 64 MB page cache keeps the
    results indexes in memory while lines are inserted in custom_id (random) order, WAL
    checkpoints run on another thread instead of inside each COMMIT, and the cyclic garbage
    collector is paused: parsing allocates millions of dicts and lists that never form cycles,
    and its passes over the rows waiting to be inserted cost ~10% of the time.
    """
    with store.page_cache(kib=INGEST_CACHE_KIB), store.background_checkpoints(), gc_paused():
        for b in store.rows("SELECT * FROM batches WHERE status = ? ORDER BY seq", [Status.DOWNLOADED]):
            skipped_before, truncated_before, notices_before = result.skipped_lines, len(result.truncated), len(result.notices)
            collect_batch(store, config, b, result)
            if not progress.quiet:
                progress.event(f"collected {b['id']}: " + ", ".join(f"{k} {v}" for k, v in sorted(_kinds(store, b["id"]).items()))
                               + (f"; skipped {result.skipped_lines - skipped_before} unreadable line(s)"
                                  if result.skipped_lines > skipped_before else ""))
                for notice in result.truncated[truncated_before:] + result.notices[notices_before:]:
                    progress.event(notice)


def _retry_after(obj: Any) -> float | None:
    """The Retry-After a provider sent with an online failure, as poll's sync transport noted it
    on the line (RETRY_AFTER_KEY); batch result lines carry none."""
    value = obj.get(RETRY_AFTER_KEY) if isinstance(obj, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None


def _kinds(store: Store, batch_id: str) -> dict[str, int]:
    return {r[0]: r[1] for r in store.db.execute("SELECT kind, count(*) FROM results WHERE batch_id = ? GROUP BY kind", [batch_id])}


def _parse(adapter: Adapter, obj: Any) -> LineResult:
    """The adapter's reading of one decoded line. parse_line is total (providers.parse_total);
    this guard is the last line of defence: whatever it raises makes the line malformed, so one
    line can never stop a batch (or every later collect)."""
    try:
        return adapter.parse_line(obj)
    except Exception as e:  # noqa: BLE001 - a per-request failure is a value, never an exception
        try:
            custom_id = adapter.custom_id_of(obj)
        except Exception:  # noqa: BLE001
            custom_id = None
        return malformed(custom_id, f"unreadable result line ({type(e).__name__}: {e})")


def _pointer(path: str, number: int, raw: bytes, key: str = "batchrun_cut") -> str:
    """raw_json for a line longer than MAX_STORED_CHARS: where the whole line is, and its hash.
    Valid JSON (an audit query's json_extract must not fail on it), not the line itself.
    `batchrun_withheld`: a line that spells a key in pieces, which only its decoded text shows."""
    return jsonl.dumps({key: {"file": str(path), "line": number, "bytes": len(raw),
                              "sha256": hashlib.sha256(raw).hexdigest()}})


def _conflicts(b: dict[str, Any], first: dict[str, tuple[str, int, int, str | None]],
               repeated: dict[str, list[tuple[str, int, int]]], result: CollectResult, keys: Keys) -> list[tuple[str, str, str, int | None]]:
    """The requests a result file answers with more than one line, said and recorded.

    The same line again (byte for byte, after redaction) adds nothing: counted in a notice. Lines
    that differ leave no way to know which is the provider's answer to the request: using the
    first (or the last) would publish an answer chosen by file order. So neither is used: the
    request gets an infrastructure failure (kind `transient`, error_type `duplicate`, retried
    like any other, never a zero) whose raw_json keeps every line (`batchrun_duplicates`: file,
    line number, bytes, sha256 and the line's text), and collect names the batch and requests."""
    out = []
    same = 0
    for cid, lines in repeated.items():
        if len({digest for _, _, digest in lines}) == 1:
            same += len(lines) - 1
            continue
        wanted: dict[str, set[int]] = {}
        for path, number, _ in lines:
            wanted.setdefault(path, set()).add(number)
        texts: dict[tuple[str, int], bytes] = {}
        for path, numbers in wanted.items():
            for number, raw, _ in jsonl.iter_lines(Path(path)):
                if number in numbers:
                    texts[(path, number)] = raw
        evidence: list[dict[str, Any]] = [{"file": path, "line": number, "bytes": len(texts.get((path, number), b"")),
                     "sha256": hashlib.sha256(texts.get((path, number), b"")).hexdigest(),
                     "raw": redact_json_line(texts.get((path, number), b"").decode("utf-8", "replace"), keys)}
                    for path, number, _ in lines]
        cut = None
        if sum(len(e["raw"]) for e in evidence) > MAX_STORED_CHARS:
            for e in evidence:
                e["raw"] = None  # the whole lines stay in the result file under jobs/
            cut = 1
        where = "; ".join(f"{Path(p).name} line {n}" for p, n, _ in lines)
        message = (f"the provider's result file holds {len(lines)} different lines for this request ({where}): neither is "
                   "used (results.raw_json keeps them all); the request is sent again")
        out.append((cid, message, jsonl.dumps({"batchrun_duplicates": evidence}), cut))
        kind = first[cid][3]
        if kind is not None:
            result.by_kind[kind] = result.by_kind.get(kind, 0) - 1
        result.by_kind["transient"] = result.by_kind.get("transient", 0) + 1
    if out:
        result.notices.append(f"batch {b['id']} ({b['route']}): {len(out)} request(s) answered by different lines in the result file "
                              f"({', '.join(cid for cid, *_ in out[:5])}{', ...' if len(out) > 5 else ''}): neither line is used, "
                              "each is kept in results.raw_json, and those requests are sent again")
    if same:
        result.notices.append(f"batch {b['id']} ({b['route']}): {same} result line(s) repeated byte for byte: read once")
    return out


def _judgment(answer: str | None, complete: bool, rubric_total: float) -> tuple[Any, ...]:
    """A judge's reply as its judgments row: (total, rubric_total, score, points_awarded_json, parse_error)."""
    try:
        verdict = parse_verdict(answer, complete=complete)
    except (ValueError, OverflowError, RecursionError) as e:  # a reply no reading of should stop the collect
        verdict = Verdict(None, error=f"unreadable verdict: {type(e).__name__}")
    return (verdict.total, rubric_total, None if verdict.total is None else score(verdict.total, rubric_total),
            points_json(verdict.points_awarded), verdict.error)


def _scrub(text: str) -> str:
    """Text with lone surrogates replaced by U+FFFD (and surrogate pairs joined)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def collect_batch(store: Store, config: Config, b: dict[str, Any], result: CollectResult) -> None:
    adapter = get_adapter(b["provider"])
    route = config.routes.get(b["route"])
    rubric_totals = dict(store.db.execute("SELECT task_id, rubric_total FROM tasks"))  # a few hundred rows
    # The batch's requests, read in rowid order: the custom_id index alone finds their rowids, then
    # the rows are read in table order instead of one random table lookup per request (night 2 of
    # bench/ingest.py: 86,756 requests, 0.16-0.22 -> 0.13 s). Unordered: the missing rows below
    # are written in custom_id order, as before.
    members = {
        cid: (stage, rubric_totals.get(task_id, 0))
        for cid, stage, task_id in store.db.execute(
            """SELECT custom_id, stage, task_id FROM requests WHERE rowid IN (
                 SELECT q.rowid FROM batch_requests br JOIN requests q ON q.custom_id = br.custom_id WHERE br.batch_id = ?)""",
            [b["id"]])
    }
    if b["quota"]:
        # "Not now": the provider's queue was full. No result rows: the requests are pending again.
        move(store, b["id"], Status.REFUSED, collected_at=time.time())
        result.batches.append(b["id"])
        return
    seen: set[str] = {r[0] for r in store.db.execute("SELECT custom_id FROM results WHERE batch_id = ?", [b["id"]])}
    rows: list[tuple[Any, ...]] = []
    # Per verdict: its row's index in `rows`, its custom_id, and the judgment's (total,
    # rubric_total, score, points_awarded_json, parse_error).
    verdicts: list[tuple[int, str, tuple[Any, ...]]] = []
    # The judgment a reply makes, by (reply, complete, rubric_total): judges' replies repeat (a
    # panel's verdicts are a few hundred distinct short texts a night), and parsing one is a pure
    # function of them. Only short replies are kept, so a provider's unique megabyte replies
    # cannot fill memory.
    judged: dict[tuple[str, bool, float], tuple[Any, ...]] = {}
    now = time.time()

    def flush(final: bool = False) -> None:
        if final and (rows or verdicts):
            flush()  # commit the last rows first: a crash here must leave a batch half-collected
            faults.point("collect.mid_batch")
        try:
            write(final)
        except UnicodeEncodeError:
            # A JSON "\ud800" escape decodes to a lone surrogate, which SQLite cannot store as
            # UTF-8 (the transaction was rolled back): replace those, then write the chunk again.
            rows[:] = [tuple(_scrub(v) if isinstance(v, str) else v for v in row) for row in rows]
            write(final)
        rows.clear()
        verdicts.clear()

    def write(final: bool) -> None:
        store.check_same_file()  # before each commit: never into a state.db deleted or replaced mid-run
        conn = store.db.conn
        with store.db.atomic():
            last_id = (conn.execute("SELECT max(id) FROM results").fetchone()[0] or 0) if verdicts else 0
            inserted = conn.executemany(
                """INSERT OR IGNORE INTO results (batch_id, custom_id, kind, text, finish_reason, input_tokens, output_tokens,
                   reasoning_tokens, cached_tokens, error_type, error_message, raw_json, collected_at, run_id, cost, retry_after,
                   truncated)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""", rows).rowcount
            if verdicts and inserted == len(rows) and conn.execute("SELECT max(id) FROM results").fetchone()[0] == last_id + len(rows):
                # Every row went in, each with the next rowid (an INTEGER PRIMARY KEY without
                # AUTOINCREMENT takes max(id) + 1): row i of the chunk is result last_id + 1 + i,
                # so each judgment names its result without a lookup through the (batch_id,
                # custom_id) key (81,818 lookups at bench/ingest.py's night 2).
                conn.executemany(
                    """INSERT OR IGNORE INTO judgments (result_id, custom_id, total, rubric_total, score, points_awarded_json, parse_error)
                       VALUES (?, ?, ?, ?, ?, ?, ?)""",
                    [(last_id + 1 + i, cid, *judgment) for i, cid, judgment in verdicts])
            elif verdicts:
                # A row was ignored, or SQLite chose other ids (it picks them at random once a row
                # holds the largest rowid): each judgment finds its result through the key.
                conn.executemany(
                    """INSERT OR IGNORE INTO judgments (result_id, custom_id, total, rubric_total, score, points_awarded_json, parse_error)
                       SELECT id, custom_id, ?, ?, ?, ?, ? FROM results WHERE batch_id = ? AND custom_id = ?""",
                    [(*judgment, b["id"], cid) for _, cid, judgment in verdicts])
            if final:
                for cid, message, raw_json, cut in conflicts:
                    # The first of the lines was recorded as it came (this batch is not collected
                    # until this transaction): it becomes the record of the conflict.
                    store.db.execute("DELETE FROM judgments WHERE result_id IN (SELECT id FROM results WHERE batch_id = ? AND custom_id = ?)",
                                     [b["id"], cid])
                    store.db.execute(
                        """UPDATE results SET kind = 'transient', text = NULL, finish_reason = NULL, error_type = ?,
                           error_message = ?, raw_json = ?, truncated = ?, retry_after = NULL WHERE batch_id = ? AND custom_id = ?""",
                        [DUPLICATE, message, raw_json, cut, b["id"], cid])
                move(store, b["id"], Status.COLLECTED, collected_at=now)

    keys = known_keys()
    # Every line naming one of the batch's requests: custom_id -> (file, line, hash of the line,
    # kind recorded, or None if an earlier interrupted collect recorded it), and the lines of a
    # custom_id named more than once (see _conflicts).
    first: dict[str, tuple[str, int, int, str | None]] = {}
    repeated: dict[str, list[tuple[str, int, int]]] = {}
    conflicts: list[tuple[str, str, str, int | None]] = []
    for path in json.loads(b["result_files_json"] or "[]"):
        if not Path(path).exists():
            continue
        for number, raw, _ in jsonl.iter_lines(Path(path)):
            # Decoded once: parsed, and kept as raw_json. Redacted first, so no key a provider
            # quoted back reaches raw_json, text or error_message (files downloaded before
            # poll redacted them, or a key that changed since, are covered here too).
            text = redact_json_line(raw.decode("utf-8", "replace"), keys)
            try:
                obj = jsonl.loads(text)
            except ValueError:
                # Not JSON (a truncated last line, garbage, nesting too deep to decode): no
                # custom_id can be read, so that request gets a 'missing' row below.
                result.skipped_lines += 1
                continue
            line = _parse(adapter, obj)
            member = members.get(line.custom_id)
            if member is None:
                result.skipped_lines += 1
                continue  # not ours: never attributed
            digest = hash(text)
            earlier = first.get(line.custom_id)
            if earlier is not None:
                # A second line for one request: never a silent choice between them (_conflicts).
                repeated.setdefault(line.custom_id, [earlier[:3]]).append((path, number, digest))
                continue
            first[line.custom_id] = (path, number, digest, None)
            if line.custom_id in seen:
                continue  # recorded by an earlier collect of this batch that was interrupted
            seen.add(line.custom_id)
            stage, rubric_total = member
            kind = line.kind
            # The text decoded from the line is redacted again: a key the line spelt in pieces
            # (one answer in several content parts) only appears once they are joined.
            answer = redact(line.text, keys) if line.text else line.text
            error_message = redact(line.error_message, keys) if line.error_message else line.error_message
            finish_reason = redact(line.finish_reason, keys) if line.finish_reason else line.finish_reason
            raw_json, cut = text, None
            if answer is not None and len(answer) > MAX_STORED_CHARS:
                answer, cut = answer[:MAX_STORED_CHARS], 1
            if len(text) > MAX_STORED_CHARS:
                raw_json, cut = _pointer(path, number, raw), 1
            elif (answer, error_message, finish_reason) != (line.text, line.error_message, line.finish_reason):
                raw_json = _pointer(path, number, raw, key="batchrun_withheld")  # the line still holds the pieces
            if stage == "judge" and kind == "ok":
                # A reply cut at the judge's budget, or by us at MAX_STORED_CHARS, may end inside its verdict.
                complete = not (line.at_budget or cut)
                if answer is not None and len(answer) <= MEMO_REPLY_CHARS:
                    judgment = judged.get((answer, complete, rubric_total)) or judged.setdefault(
                        (answer, complete, rubric_total), _judgment(answer, complete, rubric_total))
                else:
                    judgment = _judgment(answer, complete, rubric_total)
                if judgment[0] is None:
                    kind = "unparseable"
                verdicts.append((len(rows), line.custom_id, judgment))
            u = line.usage
            cost = None
            if route is not None:
                cost = request_cost(route, u.input_tokens, billed_output(route, u.output_tokens, u.reasoning_tokens))
                if cost is None and kind != "ok" and route.price.known and u.input_tokens is None and u.output_tokens is None:
                    cost = 0.0  # a failed line the provider reports no usage for is not billed: $0, not unknown
            rows.append((b["id"], line.custom_id, kind, answer, finish_reason, u.input_tokens, u.output_tokens,
                         u.reasoning_tokens, u.cached_tokens, line.error_type, error_message,
                         raw_json, now, store.run_id, cost, _retry_after(obj), cut))
            first[line.custom_id] = (path, number, digest, kind)
            result.lines += 1
            result.by_kind[kind] = result.by_kind.get(kind, 0) + 1
            if len(rows) >= CHUNK:
                flush()
    # Requests the batch never answered: say why, so the retry policy can count them.
    missing_kind = _MISSING_KIND.get(b["provider_state"] or "", "missing")
    unread = 0
    for cid in sorted(cid for cid in members if cid not in seen):
        if missing_kind in ("batch_failed", "auth") or b["provider_state"] == HOST_REFUSED:
            message = b["error"]
        elif b["redownload"] == REDOWNLOAD_GONE:
            message = b["error"]  # its result file was lost and the provider no longer held the results
        elif b["download_truncated"]:
            message = (f"no readable result line: the result file was still truncated after {b['download_attempts']} "
                       f"download(s) and was accepted as it is ({b['provider_status']})")
        else:
            message = f"no result line in batch ({b['provider_status']})"
        unbilled = 0.0 if route is not None and route.price.known else None  # never processed: nothing billed
        rows.append((b["id"], cid, missing_kind, None, None, None, None, None, None, missing_kind, message, None, now, store.run_id,
                     unbilled, None, None))
        result.by_kind[missing_kind] = result.by_kind.get(missing_kind, 0) + 1
        unread += 1
    conflicts += _conflicts(b, first, repeated, result, keys)
    if b["download_truncated"]:
        result.truncated.append(
            f"batch {b['id']} ({b['route']}): result download still truncated after {b['download_attempts']} attempt(s); "
            f"accepted as it is: {unread} request(s) without a readable line are resubmitted")
    flush(final=True)
    faults.point("collect.after_batch")
    result.batches.append(b["id"])
