"""Plan: what is missing, as provider-native request files under jobs/.

1. `sync_state` reads the config, the dataset and the corpus (documents are measured once and
   cached by path, size and mtime), validates everything *before* writing, then records in one
   transaction: tasks, documents, policies, the current config snapshot, one cell per
   (route, task) with its CJK rule, cap and scope, and one request per cell that is sent.
   Judge requests are queued for every valid answer under the current panel.
2. `plan` writes every pending request into request files, one model per file, sharded by the
   route's limits, never splitting a line. Generation lines are written one document at a time:
   the document is read, JSON-escaped once and spliced into every line that carries it, for
   every route (escaping is compositional), so memory does not grow with the corpus.

custom_ids are deterministic: a hash of everything that makes the request what it is (stage,
policy fingerprint, task, document checksum, question). Re-planning an unchanged cell yields the
same id and, because the request is already in a live batch or done, writes nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import queue
import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from . import jsonl
from .caps import CJK_WINDOW, is_cjk
from .clients import round_backoff
from .config import Config, ConfigWarning, Route, fingerprint
from .corpus import READING, DocumentInfo, EscapedDocument, measure_file, resolve
from .cost import online_cost, request_cost
from .dataset import Dataset, RubricItem, Task, load_dataset
from .errors import ConfigError, DataError
from .prompts import generation_prompt, generation_prompt_overhead, judge_graded_sha256, judge_prompt
from .providers import RequestSpec, get_adapter
from .store import Store

# Stands in for the document while a line is serialised; the escaped document replaces it.
_DOC_SENTINEL = "\x01BATCHRUN-DOCUMENT-9f1c2e\x01"
_DOC_SENTINEL_ESCAPED = jsonl.escape_str(_DOC_SENTINEL)


@dataclass
class RouteSummary:
    route: str
    stage: str
    provider: str
    transport: str
    tasks: int = 0
    out_of_context: int = 0
    requests: int = 0  # current requests of this stage (sent or to send)
    to_send: int = 0  # written to new request files by this plan
    files: int = 0
    bytes: int = 0
    est_input_tokens: int = 0
    est_output_tokens: int = 0
    judge_requests_expected: int = 0  # judge prompts the answers to send will need (if all are valid)
    est_cost_batch: float | None = 0.0  # summed per request (long-context tiers are per request); None = unknown price
    est_cost_online: float | None = 0.0


@dataclass
class PlanResult:
    routes: list[RouteSummary] = field(default_factory=list)
    batches: list[str] = field(default_factory=list)  # local batch ids written
    # Every current warning of the config, shown or not: a --json document describes the config
    # whatever a human has already read (stderr says each one once: unshown_warnings).
    warnings: list[str] = field(default_factory=list)

    @property
    def to_send(self) -> int:
        return sum(r.to_send for r in self.routes)

    def as_json(self) -> dict[str, Any]:
        return {"routes": [vars(r) for r in self.routes], "batches": self.batches, "warnings": self.warnings}


# --- ids and estimates ----------------------------------------------------------------------


def _h(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def generation_custom_id(policy_fp: str, task: Task, doc: DocumentInfo) -> str:
    """The generation request's id. Where reading the document translated newlines (spec 001 reads
    with universal newlines; batchrun before 0.2 sent \r\n as it was), the reading is part of the
    id: such a prompt differs from the one an older batchrun sent under the same id, so its answer
    must not be reused. Every other document keeps its id, and its answers."""
    if doc.newlines_translated:
        return "g-" + _h("gen", policy_fp, task.task_id, doc.sha256, task.question, READING)[:40]
    return "g-" + _h("gen", policy_fp, task.task_id, doc.sha256, task.question)[:40]


def judge_custom_id(judge_fp: str, gen_custom_id: str, answer: str, graded_sha256: str) -> str:
    """The judge request's id: its policy, the answer it grades and everything else it grades
    (question and rubric as the judge sees them: prompts.judge_graded_sha256)."""
    return "j-" + _h("judge", judge_fp, gen_custom_id, _h(answer), graded_sha256)[:40]


def estimate_tokens(chars: int, cjk: bool, route: Route) -> int:
    en, zh = route.chars_per_token
    return math.ceil(chars / (zh if cjk else en))


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:40]


# --- sync ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    dataset: Dataset
    docs: dict[str, DocumentInfo]  # by corpus_file as written in the dataset
    paths: dict[str, Path]  # by corpus_file


# Documents measured by this process, by (path, size, mtime_ns): a command validates the corpus
# before it opens state.db and then syncs it, and a first run has no state.db cache yet; without
# this it would read and hash every document twice.
_measured: dict[tuple[str, int, int], DocumentInfo] = {}
# Neither this nor state.db's document_files cache keeps a file modified in the last 2 s: file
# systems stamp mtimes with a coarse clock (a few ms on ext4), so a same-size edit in the same
# tick would keep the key and serve the old checksum ("racily clean", as git calls it).
_RACY_NS = 2_000_000_000


def _cacheable(st: os.stat_result) -> bool:
    return st.st_mtime_ns < time.time_ns() - _RACY_NS


def scan_corpus(store: Store | None, config: Config) -> Corpus:
    """Load the dataset and measure every document it names (validating all, writing nothing).

    `store` supplies the document cache; None (no state.db yet) measures every document."""
    dataset = load_dataset(config.paths.dataset)
    corpus_dir = config.paths.corpus
    if not corpus_dir.is_dir():
        raise DataError(f"Corpus folder {corpus_dir} does not exist.", "Set [paths] corpus in the config, or put the documents in corpus/.")
    tables = store.db.table_names() if store is not None else []
    cache = {r["path"]: r for r in store.rows("SELECT * FROM document_files")} if store is not None and "document_files" in tables else {}
    # Only measurements made under the current reading rule count (m009_document_readings).
    known = {r["sha256"]: r for r in store.rows(
        """SELECT d.sha256, d.bytes, r.chars, r.cjk, r.newlines_translated FROM document_readings r JOIN documents d ON d.sha256 = r.sha256
           WHERE r.reading = ?""", [READING])} if store is not None and "document_readings" in tables else {}
    docs: dict[str, DocumentInfo] = {}
    paths: dict[str, Path] = {}
    for task in dataset.tasks:
        if task.corpus_file in docs:
            continue
        where = f"{dataset.path} (task {task.task_id}, field corpus_file)"
        name, path = resolve(corpus_dir, task.corpus_file, where=where)
        try:
            st = path.stat()
        except FileNotFoundError:
            raise DataError(f"{where}: corpus file {path} does not exist.", "Put the document in the corpus folder or fix corpus_file.")
        hit = cache.get(str(path))
        if hit and hit["size"] == st.st_size and hit["mtime_ns"] == st.st_mtime_ns and hit["sha256"] in known:
            row = known[hit["sha256"]]
            info = DocumentInfo(name=name, sha256=row["sha256"], chars=row["chars"], nbytes=row["bytes"], cjk=bool(row["cjk"]),
                                newlines_translated=bool(row["newlines_translated"]))
        else:
            if not os.access(path, os.R_OK):
                raise DataError(f"{where}: corpus file {path} is not readable.", "Check the file's permissions.")
            key = (str(path), st.st_size, st.st_mtime_ns)
            info = _measured.get(key)
            if info is None or info.name != name:
                info = measure_file(name, path, where=where)
                if _cacheable(st):
                    _measured[key] = info
        docs[task.corpus_file] = info
        paths[task.corpus_file] = path
    return Corpus(dataset=dataset, docs=docs, paths=paths)


def check_role_changes(store: Store, config: Config) -> None:
    """Refuse a route the last sync recorded as a judge that the config now makes a contestant
    only by inference (it left judging.panel and declares no role).

    Removing a judge from the panel while leaving its route would otherwise turn it, silently,
    into a contestant: a generation request for every task, paid for, and a leaderboard row for
    a model that was grading the others. Read-only, so a refused config changes nothing.
    """
    if "config_routes" not in store.db.table_names():
        return
    were_judges = {r["route"] for r in store.rows("SELECT route FROM config_routes WHERE role IN ('judge', 'idle')")}
    for route in config.contestants:
        if route.name in were_judges and route.role is None:
            raise ConfigError(
                f"{config.path}: route {route.name!r} was a judge at the last run (state.db) and is no longer in "
                "judging.panel, which would make it a contestant: every task would be sent to it and paid for, "
                "and it would join the leaderboard (spec §4: judges are not contestants).",
                f'Add role = "judge" under [routes."{route.name}"] to keep it idle (or remove the route), or '
                'role = "contestant" to put it on the leaderboard deliberately. Nothing was changed.',
            )


def unshown_warnings(store: Store, warnings: tuple[ConfigWarning, ...] | list[ConfigWarning]) -> list[ConfigWarning]:
    """The warnings (and within each, the fallbacks) this state.db has not shown yet."""
    shown = {r["key"] for r in store.rows("SELECT key FROM meta WHERE key LIKE 'warned:%'")}
    out = []
    for w in warnings:
        new = tuple(f for f in w.fallbacks if w.meta_key(f) not in shown)
        if new:
            out.append(replace(w, fallbacks=new))
    return out


def record_warnings_shown(store: Store, warnings: list[ConfigWarning]) -> None:
    """Remember in `meta` (key warned:<route>:<rule>:<model>) that these were shown."""
    with store.db.atomic():
        for w in warnings:
            for f in w.fallbacks:
                store.set_meta(w.meta_key(f), str(time.time()))


def sync_state(store: Store, config: Config, corpus: Corpus | None = None) -> Corpus:
    """Record the current dataset, corpus and config in state.db; queue judgments. Idempotent."""
    corpus = corpus or scan_corpus(store, config)
    now = time.time()
    db = store.db
    ds = corpus.dataset
    with db.atomic():
        # First, before anything is written: a refusal rolls the transaction back untouched.
        check_role_changes(store, config)
        db.execute("INSERT OR IGNORE INTO datasets VALUES (?, ?, ?, ?)", [ds.sha256, str(ds.path), len(ds.tasks), now])
        store.set_meta("dataset_sha256", ds.sha256)
        for cf, info in corpus.docs.items():
            db.execute("INSERT OR IGNORE INTO documents VALUES (?, ?, ?, ?, ?)", [info.sha256, info.name, info.chars, info.nbytes, int(info.cjk)])
            db.execute("""INSERT OR IGNORE INTO document_readings (sha256, reading, chars, cjk, measured_at, newlines_translated)
                          VALUES (?, ?, ?, ?, ?, ?)""", [info.sha256, READING, info.chars, int(info.cjk), now, int(info.newlines_translated)])
            st = corpus.paths[cf].stat()
            if _cacheable(st):  # see _measured: a racy file is not cached
                db.execute("INSERT OR REPLACE INTO document_files VALUES (?, ?, ?, ?)", [str(corpus.paths[cf]), st.st_size, st.st_mtime_ns, info.sha256])
            else:
                db.execute("DELETE FROM document_files WHERE path = ?", [str(corpus.paths[cf])])
        db.execute("DELETE FROM tasks")
        for t in ds.tasks:
            db.execute(
                """INSERT INTO tasks (task_id, position, question, corpus_file, doc_sha256, rubric_json, rubric_total,
                   fields_json, task_sha256, dataset_sha256, graded_sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                [t.task_id, t.position, t.question, t.corpus_file, corpus.docs[t.corpus_file].sha256,
                 json.dumps([{"points": i.points, "correct_criterion": i.criterion, **i.extra} for i in t.rubric], ensure_ascii=False),
                 t.rubric_total, json.dumps(t.fields, ensure_ascii=False, default=str), t.sha256, ds.sha256,
                 judge_graded_sha256(t.question, t.rubric)],
            )
        db.execute("DELETE FROM config_routes")
        for route in config.contestants:
            policy = config.generation_policy(route)
            fp = fingerprint(policy)
            _record_policy(store, fp, "gen", route, policy, now)
            _record_config_route(store, route, "contestant", fp, None, config.generation.max_retries, config.generation.max_resubmits)
            max_tokens = config.generation_max_tokens(route)
            for t in ds.tasks:
                info = corpus.docs[t.corpus_file]
                cap = route.caps.cjk if info.cjk else route.caps.en
                scope = "send" if info.chars <= cap else "out_of_context_scope"
                custom_id = generation_custom_id(fp, t, info) if scope == "send" else None
                db.execute(
                    "INSERT OR REPLACE INTO cells VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [fp, t.task_id, route.name, info.sha256, info.chars, int(info.cjk), cap, route.caps.source, scope, custom_id, t.sha256, now],
                )
                if custom_id:
                    prompt_chars = info.chars + generation_prompt_overhead(t.question)
                    db.execute(
                        """INSERT OR IGNORE INTO requests (custom_id, stage, route, task_id, policy_fp, max_retries, max_resubmits,
                           prompt_chars, est_input_tokens, est_output_tokens, created_at) VALUES (?, 'gen', ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                        [custom_id, route.name, t.task_id, fp, config.generation.max_retries, config.generation.max_resubmits,
                         prompt_chars, estimate_tokens(prompt_chars, info.cjk, route), max_tokens, now],
                    )
        for position, route in enumerate(config.judges):
            policy = config.judge_policy(route)
            fp = fingerprint(policy)
            _record_policy(store, fp, "judge", route, policy, now)
            _record_config_route(store, route, "judge", fp, position, config.judging.max_retries_per_run, config.generation.max_resubmits)
        # Idle judges are remembered as 'idle' (every view reads only 'contestant' and 'judge'
        # rows), so deleting their role line later is caught as a flip too (check_role_changes).
        for route in config.idle:
            _record_config_route(store, route, "idle", fingerprint(config.judge_policy(route)), None, 0, 0)
        queue_judgments(store, config)
        _supersede_stale_batches(store)
    return corpus


def _record_config_route(store: Store, route: Route, role: str, fp: str, panel_position: int | None,
                         retry_budget: int, resubmit_budget: int) -> None:
    # The retry budgets are per run (spec §2: "retry up to 5x"); the views read them from here.
    store.db.execute(
        """INSERT INTO config_routes (route, role, policy_fp, provider, model, transport, endpoint_host, panel_position,
           retry_budget, resubmit_budget) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [route.name, role, fp, route.provider, route.model, route.transport, route.endpoint_host, panel_position,
         retry_budget, resubmit_budget])


def _record_policy(store: Store, fp: str, stage: str, route: Route, policy: dict[str, Any], now: float) -> None:
    store.db.execute("INSERT OR IGNORE INTO policies VALUES (?, ?, ?, ?, ?, ?, ?)",
                     [fp, stage, route.name, route.provider, route.model, json.dumps(policy, sort_keys=True), now])


def queue_judgments(store: Store, config: Config) -> int:
    """One judge request per valid answer x judge route of the current panel. Returns how many were new.

    Only answers still missing a request from a judge are read (prompts are built only for them),
    so a collect with nothing new to judge costs one indexed query per judge."""
    judges = {r["route"]: r["policy_fp"] for r in store.rows("SELECT route, policy_fp FROM config_routes WHERE role = 'judge'")}
    now = time.time()
    new = 0
    for judge_name, jfp in judges.items():
        route = config.routes[judge_name]
        answers = store.rows(
            """SELECT c.custom_id, c.task_id, t.question, t.rubric_json, t.graded_sha256, res.id AS result_id, res.text
               FROM cells c
               JOIN config_routes cr ON cr.route = c.route AND cr.policy_fp = c.policy_fp AND cr.role = 'contestant'
               JOIN tasks t ON t.task_id = c.task_id AND t.task_sha256 = c.task_sha256
               JOIN request_status s ON s.custom_id = c.custom_id AND s.state = 'ok'
               JOIN results res ON res.id = s.ok_result_id
               WHERE NOT EXISTS (SELECT 1 FROM requests jr WHERE jr.parent_custom_id = c.custom_id
                                 AND jr.route = ? AND jr.policy_fp = ? AND jr.parent_result_id = res.id
                                 AND jr.graded_sha256 = t.graded_sha256)""",
            [judge_name, jfp])
        for a in answers:
            rubric = [_Item(i["points"], i["correct_criterion"]) for i in json.loads(a["rubric_json"])]
            cid = judge_custom_id(jfp, a["custom_id"], a["text"], a["graded_sha256"])
            prompt_chars = len(judge_prompt(a["question"], rubric, a["text"]))
            cur = store.db.execute(
                """INSERT OR IGNORE INTO requests (custom_id, stage, route, task_id, policy_fp, parent_custom_id,
                   parent_result_id, max_retries, max_resubmits, prompt_chars, est_input_tokens, est_output_tokens,
                   created_at, graded_sha256) VALUES (?, 'judge', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                [cid, judge_name, a["task_id"], jfp, a["custom_id"], a["result_id"],
                 config.judging.max_retries_per_run, config.generation.max_resubmits, prompt_chars,
                 estimate_tokens(prompt_chars, is_cjk(a["question"] + a["text"][:CJK_WINDOW]), route), config.judging.max_tokens,
                 now, a["graded_sha256"]],
            )
            new += cur.rowcount
    return new


@dataclass(frozen=True)
class _Item:
    points: int | float
    criterion: str


def current_requests_sql() -> str:
    """custom_ids of the requests the current config wants (gen of current cells, judges of those)."""
    return """
      SELECT c.custom_id FROM cells c
        JOIN config_routes cr ON cr.route = c.route AND cr.policy_fp = c.policy_fp AND cr.role = 'contestant'
        JOIN tasks t ON t.task_id = c.task_id AND t.task_sha256 = c.task_sha256
        WHERE c.custom_id IS NOT NULL
      UNION ALL
      SELECT jr.custom_id FROM requests jr
        JOIN config_routes j ON j.route = jr.route AND j.policy_fp = jr.policy_fp AND j.role = 'judge'
        JOIN cells c ON c.custom_id = jr.parent_custom_id
        JOIN config_routes cr ON cr.route = c.route AND cr.policy_fp = c.policy_fp AND cr.role = 'contestant'
        JOIN tasks t ON t.task_id = c.task_id AND t.task_sha256 = c.task_sha256
        WHERE jr.stage = 'judge' AND jr.graded_sha256 = t.graded_sha256"""


def _supersede_stale_batches(store: Store) -> None:
    """Planned (never uploaded) batches holding requests the config no longer wants are dropped."""
    store.db.execute(
        f"""UPDATE batches SET status = 'superseded', error = 'config changed before upload'
            WHERE status = 'planned' AND EXISTS (
              SELECT 1 FROM batch_requests br WHERE br.batch_id = batches.id
                AND br.custom_id NOT IN ({current_requests_sql()}))"""
    )


# --- pending requests -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pending:
    """A request to write: what plan needs to build its line and estimate it (slots: a plan of
    30 routes holds ~15,000 of these)."""

    custom_id: str
    stage: Literal["gen", "judge"]
    route: str
    task_id: str
    parent_result_id: int | None  # judge requests: the answer being graded
    est_input_tokens: int
    est_output_tokens: int


@dataclass(frozen=True)
class PendingScan:
    """What can be sent now, and what waits for its backoff to end."""

    due: list[Pending]
    backing_off: int = 0  # requests that failed and wait out their backoff before the next attempt
    next_retry_at: float | None = None  # when the first of those becomes due (epoch seconds)


def pending_requests(store: Store, config: Config, *, routes: set[str] | None = None, stages: set[str] | None = None) -> list[Pending]:
    """Current requests with nothing live, something left to try, and no backoff to wait out."""
    return scan_pending(store, config, routes=routes, stages=stages).due


def scan_pending(store: Store, config: Config, *, routes: set[str] | None = None, stages: set[str] | None = None,
                 now: float | None = None) -> PendingScan:
    """Pending requests in a stable order, split into those due now and those backing off.

    A request that failed is due `clients.round_backoff` after its last failure was collected
    (honouring the provider's Retry-After), counted by its failures in this run; a `retry`
    (reopen) after the failure makes it due at once."""
    now = time.time() if now is None else now
    cur = store.db.execute(
        f"""SELECT s.custom_id, s.stage, s.route, s.task_id, r.parent_result_id, r.est_input_tokens, r.est_output_tokens,
                   p.route AS judged_route, s.retry_run_n + s.resubmit_run_n AS run_failures, s.reopened_at,
                   last.collected_at AS failed_at, last.retry_after, b.transport, last.batch_id
            FROM request_status s JOIN requests r ON r.custom_id = s.custom_id
            JOIN tasks t ON t.task_id = s.task_id
            LEFT JOIN requests p ON p.custom_id = r.parent_custom_id
            LEFT JOIN results last ON last.id = s.last_result_id
            LEFT JOIN batches b ON b.id = last.batch_id
            WHERE s.state = 'pending' AND s.custom_id IN ({current_requests_sql()})
            ORDER BY s.stage DESC, s.route, t.position"""
    )
    observed = observed_output_tokens(store)
    due: list[Pending] = []
    backing_off = 0
    next_at: float | None = None
    for (custom_id, stage, route, task_id, parent_result_id, est_in, est_out, judged_route, run_failures, reopened_at,
         failed_at, retry_after, transport, failed_batch) in cur:
        if routes and route not in routes and not (stage == "judge" and judged_route in routes):
            continue
        if stages and stage not in stages:
            continue
        if failed_at is not None and not (reopened_at is not None and reopened_at >= failed_at):
            # Requests that failed together in one batch share their jitter: they go out together.
            wait = round_backoff(transport or "batch", max(run_failures, 1), retry_after=retry_after,
                                 jitter_key=f"{route}:{failed_batch}")
            if failed_at + wait > now:
                backing_off += 1
                next_at = failed_at + wait if next_at is None else min(next_at, failed_at + wait)
                continue
        avg = observed.get((route, stage))
        if avg is not None:
            est_out = min(avg, est_out)
        due.append(Pending(custom_id, stage, route, task_id, parent_result_id, est_in, est_out))
    return PendingScan(due, backing_off, next_at)


# Successful results a route needs before its observed average replaces the budget as the estimate.
OBSERVED_MIN_RESULTS = 5


def observed_output_tokens(store: Store) -> dict[tuple[str, str], int]:
    """Average output tokens per (route, stage) over its successful results, once there are enough."""
    rows = store.db.execute(
        f"""SELECT q.route, q.stage, count(*), avg(coalesce(r.output_tokens, 0) + coalesce(r.reasoning_tokens, 0) * (b.provider = 'gemini'))
            FROM results r JOIN requests q ON q.custom_id = r.custom_id JOIN batches b ON b.id = r.batch_id
            WHERE r.kind = 'ok' AND r.output_tokens IS NOT NULL GROUP BY q.route, q.stage
            HAVING count(*) >= {OBSERVED_MIN_RESULTS}"""
    ).fetchall()
    return {(route, stage): math.ceil(avg) for route, stage, _, avg in rows}


# --- writing ------------------------------------------------------------------------------


class _BackgroundSha256:
    """sha256 fed from the writing thread, computed on another one.

    Every byte plan writes is hashed (the checksum submit verifies), ~1 s per 1.75 GB at
    WildTrace scale; hashlib releases the GIL for updates over 2 KiB, so on a second core the
    checksum overlaps the escaping and writing instead of adding to them (full-scale plan
    4.1 -> 3.4 s, bench/plan.py). The queue is bounded: at most four pieces (< 0.5 MB) wait, so
    memory does not grow if hashing falls behind.
    """

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=4)
        self._thread = threading.Thread(target=self._run, name="batchrun-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (data := self._queue.get()) is not None:
            self._sha.update(data)

    def update(self, data: bytes) -> None:
        self._queue.put(data)  # bytes are immutable: safe to hash after the caller moves on

    def close(self) -> None:
        """Hash what is queued and stop the thread."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def hexdigest(self) -> str:
        self.close()
        return self._sha.hexdigest()


class ShardWriter:
    """Request files for one route and stage, cut at the route's request and byte limits."""

    def __init__(self, store: Store, config: Config, route: Route, stage: str, result: PlanResult, summary: RouteSummary):
        self.store, self.config, self.route, self.stage = store, config, route, stage
        self.result, self.summary = result, summary
        self.batch_id: str | None = None
        self.file: Any = None
        self.sha: Any = None  # a _BackgroundSha256 while a file is open
        self.n = 0
        self.bytes = 0
        self.ids: list[str] = []
        self.est_in = 0
        self.est_out = 0
        self.est_cost: float | None = 0.0

    def write(self, custom_id: str, parts: list[bytes | EscapedDocument], est_in: int, est_out: int) -> None:
        size = sum(len(p) for p in parts)
        if size > self.route.max_bytes_per_file:
            raise DataError(
                f"Request {custom_id} for route {self.route.name!r} is {size:,} bytes, more than the route's file limit "
                f"({self.route.max_bytes_per_file:,} bytes).",
                "Raise max_bytes_per_file for this route (up to the provider's limit) or lower its caps.",
            )
        # A route's enqueued-token quota also caps a file: a batch bigger than the queue could never go.
        over_tokens = self.route.max_enqueued_tokens is not None and self.est_in + est_in > self.route.max_enqueued_tokens
        if self.file is not None and (self.n + 1 > self.route.max_requests_per_file or self.bytes + size > self.route.max_bytes_per_file or over_tokens):
            self.finish()
        if self.file is None:
            self._open()
        for p in parts:
            for data in (p,) if isinstance(p, bytes) else p.chunks():
                self.file.write(data)
                self.sha.update(data)
        self.n += 1
        self.bytes += size
        self.ids.append(custom_id)
        self.est_in += est_in
        self.est_out += est_out
        c = request_cost(self.route, est_in, est_out)
        self.est_cost = None if (c is None or self.est_cost is None) else self.est_cost + c

    def _open(self) -> None:
        db = self.store.db
        with db.atomic():
            seq = (self.store.scalar("SELECT max(seq) FROM batches") or 0) + 1
            self.batch_id = f"{seq:06d}-{_slug(self.route.name)}-{self.stage}"
            folder = self.config.paths.jobs / self.batch_id
            # Reserved before the file exists: a crash while writing leaves a 'writing' row,
            # which the next run marks abandoned (its requests were never live).
            db.execute(
                """INSERT INTO batches (id, seq, route, stage, provider, transport, model, status, dir, request_file,
                   endpoint_host, run_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'writing', ?, ?, ?, ?, ?)""",
                [self.batch_id, seq, self.route.name, self.stage, self.route.provider, self.route.transport, self.route.model,
                 str(folder), str(folder / "requests.jsonl"), self.route.endpoint_host, self.store.run_id, time.time()],
            )
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "requests.jsonl"
        self.tmp = folder / "requests.jsonl.partial"
        self.file = open(self.tmp, "wb", buffering=1 << 20)
        self.sha = _BackgroundSha256()
        self.n = self.bytes = self.est_in = self.est_out = 0
        self.est_cost = 0.0
        self.ids = []

    def abort(self) -> None:
        """Stop writing after a failure: close the file and stop its checksum thread."""
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass  # a full disk refuses the buffered rest too: the partial file is dropped anyway
            finally:
                self.sha.close()
                self.file = None

    def finish(self) -> None:
        if self.file is None:
            return
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        os.replace(self.tmp, self.path)
        est_cost = self.est_cost
        db = self.store.db
        with db.atomic():
            db.execute(
                """UPDATE batches SET status = 'planned', sha256 = ?, bytes = ?, n_requests = ?,
                   est_input_tokens = ?, est_output_tokens = ?, est_cost = ? WHERE id = ?""",
                [self.sha.hexdigest(), self.bytes, self.n, self.est_in, self.est_out, est_cost, self.batch_id],
            )
            db.conn.executemany(
                "INSERT INTO batch_requests (batch_id, custom_id, position) VALUES (?, ?, ?)",
                [(self.batch_id, cid, i) for i, cid in enumerate(self.ids)],
            )
        self.summary.files += 1
        self.summary.bytes += self.bytes
        self.summary.to_send += self.n
        self.result.batches.append(self.batch_id)
        self.file = None
        self.ids = []


def recover_interrupted_writes(store: Store, config: Config) -> None:
    """Batches left 'writing' by a crash: their files are incomplete; drop them (and stale scratch files)."""
    for stale in (config.paths.jobs / ".scratch").glob("*.escaped"):
        stale.unlink(missing_ok=True)
    for row in store.rows("SELECT id, dir FROM batches WHERE status = 'writing'"):
        partial = Path(row["dir"]) / "requests.jsonl.partial"
        if partial.exists():
            partial.unlink()
        with store.db.atomic():
            store.db.execute("UPDATE batches SET status = 'abandoned', error = 'interrupted while writing' WHERE id = ?", [row["id"]])


def _line_parts(adapter: Any, route: Route, spec: RequestSpec, document_escaped: EscapedDocument | None) -> list[bytes | EscapedDocument]:
    line = jsonl.dumps(adapter.build_line(route, spec))
    if document_escaped is None:
        return [line.encode(), b"\n"]
    # The document is the last part of the prompt: splice at the last occurrence, so a question
    # that happens to contain the placeholder text cannot move the document.
    head, sep, tail = line.rpartition(_DOC_SENTINEL_ESCAPED)
    assert sep, "document placeholder missing from the request line"
    return [head.encode(), document_escaped, tail.encode(), b"\n"]


@dataclass(frozen=True, slots=True)
class _TaskText:
    question: str
    corpus_file: str
    rubric: tuple[RubricItem, ...]


def plan(store: Store, config: Config, *, routes: set[str] | None = None, stages: set[str] | None = None,
         write: bool = True, corpus: Corpus | None = None) -> PlanResult:
    """Sync state, then write request files for everything pending (unless write=False)."""
    for name in routes or ():
        if name not in config.routes:
            raise DataError(f"--route {name!r} is not a route of {config.path}.", f"Known routes: {', '.join(config.routes)}.")
    recover_interrupted_writes(store, config)
    # A plan writes and reads each page of state.db about once; SQLite's default 2 MB page cache
    # would only fill with them and add to the plan's peak memory (which must not grow with the
    # corpus).
    with store.page_cache(kib=256):
        tasks, dataset_path, doc_paths = _sync_for_writing(store, config, corpus)
        return _plan_pending(store, config, tasks, dataset_path, doc_paths, routes=routes, stages=stages, write=write)


def _sync_for_writing(store: Store, config: Config, corpus: Corpus | None) -> tuple[dict[str, _TaskText], Path, dict[str, Path]]:
    """Sync state; keep only what writing needs: each task's question, document and rubric, and
    each document's path. The rest of the dataset (ground truths, metadata: most of its memory) is
    let go before the files are written."""
    synced = sync_state(store, config, corpus)
    tasks = {t.task_id: _TaskText(t.question, t.corpus_file, t.rubric) for t in synced.dataset.tasks}
    return tasks, synced.dataset.path, synced.paths


def _plan_pending(store: Store, config: Config, tasks: dict[str, _TaskText], dataset_path: Path, doc_paths: dict[str, Path], *,
                  routes: set[str] | None, stages: set[str] | None, write: bool) -> PlanResult:
    """Summarise what is pending per route and write it into request files."""
    result = PlanResult(warnings=[w.message for w in config.warnings])
    summaries: dict[tuple[str, str], RouteSummary] = {}
    for route in config.contestants:
        s = RouteSummary(route.name, "gen", route.provider, route.transport)
        if not route.price.known:  # unknown, even with nothing to send: never shown as $0
            s.est_cost_batch = s.est_cost_online = None
        row = store.one(
            """SELECT count(*) AS tasks, sum(scope = 'out_of_context_scope') AS ooc, sum(scope = 'send') AS send
               FROM cells c JOIN config_routes cr ON cr.route = c.route AND cr.policy_fp = c.policy_fp
               JOIN tasks t ON t.task_id = c.task_id AND t.task_sha256 = c.task_sha256 WHERE c.route = ?""", [route.name])
        s.tasks, s.out_of_context, s.requests = row["tasks"] or 0, row["ooc"] or 0, row["send"] or 0
        summaries[(route.name, "gen")] = s
    for route in config.judges:
        s = RouteSummary(route.name, "judge", route.provider, route.transport)
        if not route.price.known:
            s.est_cost_batch = s.est_cost_online = None
        s.requests = store.scalar(
            "SELECT count(*) FROM requests r JOIN config_routes j ON j.route = r.route AND j.policy_fp = r.policy_fp WHERE r.stage = 'judge' AND j.role = 'judge' AND r.route = ?",
            [route.name]) or 0
        summaries[(route.name, "judge")] = s
    result.routes = list(summaries.values())

    pending = pending_requests(store, config, routes=routes, stages=stages)
    for p in pending:
        s = summaries.get((p.route, p.stage))
        if s:
            s.est_input_tokens += p.est_input_tokens
            s.est_output_tokens += p.est_output_tokens
            route = config.routes[p.route]
            batch = request_cost(route, p.est_input_tokens, p.est_output_tokens)
            online = online_cost(route, p.est_input_tokens, p.est_output_tokens)
            s.est_cost_batch = None if (batch is None or s.est_cost_batch is None) else s.est_cost_batch + batch
            s.est_cost_online = None if (online is None or s.est_cost_online is None) else s.est_cost_online + online
    panel = len(config.judging.panel)
    for p in pending:
        if p.stage == "gen":
            summaries[(p.route, "gen")].judge_requests_expected += panel
    if not write or not pending:
        if not write:
            for p in pending:
                summaries[(p.route, p.stage)].to_send += 1
        return result

    opened: list[ShardWriter] = []  # aborted (file closed, checksum thread stopped) if writing fails
    try:
        # Judge requests: small, built from the answer in state.db.
        by_judge: dict[str, list[Pending]] = defaultdict(list)
        for p in pending:
            if p.stage == "judge":
                by_judge[p.route].append(p)
        for judge_name, reqs in by_judge.items():
            route = config.routes[judge_name]
            adapter = get_adapter(route.provider)
            writer = ShardWriter(store, config, route, "judge", result, summaries[(judge_name, "judge")])
            opened.append(writer)
            temperature = config.judge_temperature(route)
            for p in reqs:
                task = tasks[p.task_id]
                answer = store.scalar("SELECT text FROM results WHERE id = ?", [p.parent_result_id]) or ""
                spec = RequestSpec(p.custom_id, route.model, judge_prompt(task.question, task.rubric, answer), config.judging.max_tokens, temperature)
                writer.write(p.custom_id, _line_parts(adapter, route, spec, None), p.est_input_tokens, p.est_output_tokens)
            writer.finish()

        # Generation requests: one document at a time, escaped once, for every route that needs it.
        by_doc: dict[str, list[Pending]] = defaultdict(list)
        for p in pending:
            if p.stage == "gen":
                by_doc[tasks[p.task_id].corpus_file].append(p)
        writers: dict[str, ShardWriter] = {}
        scratch = config.paths.jobs / ".scratch"
        for corpus_file in sorted(by_doc):
            escaped = EscapedDocument(doc_paths[corpus_file], scratch, where=f"{dataset_path} (corpus_file {corpus_file})")
            for p in by_doc[corpus_file]:
                route = config.routes[p.route]
                writer = writers.get(route.name)
                if writer is None:
                    writer = writers[route.name] = ShardWriter(store, config, route, "gen", result, summaries[(route.name, "gen")])
                    opened.append(writer)
                task = tasks[p.task_id]
                spec = RequestSpec(
                    p.custom_id, route.model, generation_prompt(task.question, _DOC_SENTINEL),
                    config.generation_max_tokens(route), config.generation_temperature(route),
                )
                writer.write(p.custom_id, _line_parts(get_adapter(route.provider), route, spec, escaped), p.est_input_tokens, p.est_output_tokens)
            escaped.close()
        for writer in writers.values():
            writer.finish()
    except BaseException:
        for writer in opened:
            writer.abort()  # its 'writing' batch row and partial file are cleared by the next plan
        raise
    return result

