"""Plan: the pending requests, written as provider-native request files under jobs/.

`plan` syncs state.db with the config, the dataset and the corpus (ledger.sync_state), then writes
every pending request (ledger.pending_requests) into request files, one model per file, sharded by
the route's limits, never splitting a line. Generation lines are written one document at a time:
the document is read, JSON-escaped once and spliced into every line that carries it, for every
route (escaping is compositional), so memory does not grow with the corpus. Each file's BLAKE3
checksum is recorded with its batch (submit refuses a file edited after planning; checksums.py
says why BLAKE3); request_files.py takes each file to the disk.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base import jsonl
from ..base.errors import DataError
from ..base.gcpause import gc_paused
from ..ledger import kept
from ..ledger.cost import ExpectedOutput, expected_output, online_cost, request_cost
from ..ledger.lifecycle import Status, move, new_batch
from ..ledger.pending import Pending, pending_requests
from ..ledger.store import Store
from ..ledger.inputs import Inputs, as_inputs
from ..ledger.sync import sync_state
from ..protocol.config import Config, Route
from ..protocol.corpus import EscapedDocument
from ..protocol.dataset import Task
from ..protocol.policy import RoutePolicy
from ..protocol.prompts import JUDGE_RESPONSE_CHARS, generation_prompt, judge_prompt
from ..providers import Adapter, RequestSpec, get_adapter
from .request_files import Closer, RequestFile

# Stands in for the document while a line is serialised; the escaped document replaces it.
_DOC_SENTINEL = "\x01BATCHRUN-DOCUMENT-9f1c2e\x01"
_DOC_SENTINEL_ESCAPED = jsonl.escape_str(_DOC_SENTINEL)
# Likewise the answer in a judge line: serialising each 2-6 KB answer inside its line with json.dumps
# was most of the judge stage's own work (issue 30: 29% of it at 30 routes); escape_utf8 is faster.
_ANSWER_SENTINEL = "\x02BATCHRUN-ANSWER-4d7a0b\x02"
_ANSWER_SENTINEL_ESCAPED = jsonl.escape_str(_ANSWER_SENTINEL)
# And the custom_id, so a judge's line for a task is serialised once (_JudgeLines), not per answer.
_ID_SENTINEL = "\x03BATCHRUN-ID-8e2f61\x03"
_ID_SENTINEL_ESCAPED = jsonl.escape_str(_ID_SENTINEL)


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
    est_output_tokens: int = 0  # the bound: every answer uses its whole max_tokens
    expected_output_tokens: int = 0  # what the route's answers are expected to use (cost.ExpectedOutput)
    expected_basis: str = ""  # where that expectation comes from: observed answers, or the prior
    judge_requests_expected: int = 0  # judge prompts the answers to send will need (if all are valid)
    est_cost_expected: float | None = 0.0  # the expected cost at the batch rate; None = unknown price
    est_cost_batch: float | None = 0.0  # the bound (--budget checks it), summed per request (long-context tiers are per request)
    est_cost_online: float | None = 0.0  # the bound at the online rate


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


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:40]



# --- writing ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Written:
    """A finished request file's batch and what its row records once the file is on the disk."""

    batch_id: str
    n: int
    bytes: int
    ids: tuple[str, ...]
    est_in: int
    est_out: int
    est_cost: float | None
    expected_cost: float | None


class ShardWriter:
    """Request files for one route and stage, cut at the route's request and byte limits."""

    def __init__(self, store: Store, config: Config, route: Route, stage: str, result: PlanResult, summary: RouteSummary,
                 expected: ExpectedOutput, closer: Closer, recorded: list[str]):
        self.store, self.config, self.route, self.stage = store, config, route, stage
        self.expected = expected
        self.closer = closer
        self.recorded = recorded  # the custom_ids of every file recorded so far (kept.keep_planned)
        self.result, self.summary = result, summary
        self.batch_id: str | None = None
        self.file: RequestFile | None = None
        self.n = 0
        self.bytes = 0
        self.ids: list[str] = []
        self.est_in = 0
        self.est_out = 0
        self.est_cost: float | None = 0.0
        self.expected_cost: float | None = 0.0

    def write(self, custom_id: str, parts: list[bytes], est_in: int, est_out: int) -> None:
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
            self.file = self._open()
        for data in parts:
            self.file.write(data)
        self.n += 1
        self.bytes += size
        self.ids.append(custom_id)
        self.est_in += est_in
        self.est_out += est_out
        c = request_cost(self.route, est_in, est_out)
        self.est_cost = None if (c is None or self.est_cost is None) else self.est_cost + c
        e = request_cost(self.route, est_in, self.expected.tokens(self.route.name, self.stage, est_out))
        self.expected_cost = None if (e is None or self.expected_cost is None) else self.expected_cost + e

    def _open(self) -> RequestFile:
        self.closer.settle(wait=False)  # record the files already on the disk
        db = self.store.db
        with db.atomic():
            seq = (self.store.scalar("SELECT max(seq) FROM batches") or 0) + 1
            self.batch_id = f"{seq:06d}-{_slug(self.route.name)}-{self.stage}"
            folder = self.config.paths.jobs / self.batch_id
            # Reserved before the file exists: a crash while writing leaves a 'writing' row,
            # which the next run marks abandoned (its requests were never live).
            new_batch(self.store, id=self.batch_id, seq=seq, route=self.route.name, stage=self.stage, provider=self.route.provider,
                      transport=self.route.transport, model=self.route.model, dir=str(folder), request_file=str(folder / "requests.jsonl"),
                      endpoint_host=self.route.endpoint_host, run_id=self.store.run_id, created_at=time.time())
        folder.mkdir(parents=True, exist_ok=True)
        self.n = self.bytes = self.est_in = self.est_out = 0
        self.est_cost = self.expected_cost = 0.0
        self.ids = []
        return RequestFile(folder, self.closer)

    def abort(self) -> None:
        """Stop writing after a failure: close the file and stop its checksum thread."""
        if self.file is not None:
            file, self.file = self.file, None
            file.abort()

    def finish(self) -> None:
        """Hand the open file to the closer: on the disk and in place, then recorded (_record)."""
        if self.file is None:
            return
        assert self.batch_id is not None  # set by _open with the file
        # Ownership moves first: an interrupt from here on cannot make abort close it a second time.
        file, self.file = self.file, None
        written = _Written(self.batch_id, self.n, self.bytes, tuple(self.ids), self.est_in, self.est_out, self.est_cost,
                           self.expected_cost)
        self.ids = []
        file.hand_over(lambda checksum: self._record(written, checksum))

    def _record(self, w: _Written, checksum: str) -> None:
        """The file is on the disk under its name: mark its batch planned."""
        db = self.store.db
        with db.atomic():
            move(self.store, w.batch_id, Status.PLANNED, blake3=checksum, bytes=w.bytes, n_requests=w.n,
                 est_input_tokens=w.est_in, est_output_tokens=w.est_out, est_cost=w.est_cost, expected_cost=w.expected_cost)
            db.conn.executemany(
                "INSERT INTO batch_requests (batch_id, custom_id, position) VALUES (?, ?, ?)",
                [(w.batch_id, cid, i) for i, cid in enumerate(w.ids)],
            )
        self.recorded.extend(w.ids)
        self.summary.files += 1
        self.summary.bytes += w.bytes
        self.summary.to_send += w.n
        self.result.batches.append(w.batch_id)


def recover_interrupted_writes(store: Store, config: Config) -> None:
    """Batches left 'writing' by a crash: their files are incomplete, or complete but never
    recorded (a crash between the rename and the batch row); drop them (and the scratch files of
    escaped documents that earlier versions of plan spooled to disk)."""
    for stale in (config.paths.jobs / ".scratch").glob("*.escaped"):
        stale.unlink(missing_ok=True)
    for row in store.rows("SELECT id, dir FROM batches WHERE status = ?", [Status.WRITING]):
        for name in ("requests.jsonl.partial", "requests.jsonl"):
            (Path(row["dir"]) / name).unlink(missing_ok=True)
        move(store, row["id"], Status.ABANDONED, error="interrupted while writing")


def _line_parts(adapter: Adapter, route: Route, spec: RequestSpec, document_escaped: EscapedDocument | None) -> list[bytes]:
    line = jsonl.dumps(adapter.build_line(route, spec))
    if document_escaped is None:
        return [line.encode() + b"\n"]
    # The document is the last part of the prompt: splice at the last occurrence, so a question
    # that happens to contain the placeholder text cannot move the document.
    head, sep, tail = line.rpartition(_DOC_SENTINEL_ESCAPED)
    assert sep, "document placeholder missing from the request line"
    return [head.encode(), document_escaped.data, tail.encode() + b"\n"]


class _JudgeLines:
    """One judge route's request lines: per task, the line is serialised once around two
    placeholders (the custom_id and the answer) and cut there; each request's line is then the
    pieces with its id and its escaped answer put back. The judge stage at 30 routes writes
    40,578 lines over 481 tasks: serialising each whole line (judge_prompt, build_line,
    json.dumps) was most of its own work (issue 30). The bytes are the same (escaping is per
    character, and the adapters put the id and the prompt in the line as they are); a template
    in which a placeholder is not found exactly once (a question holding one) is not used."""

    def __init__(self, adapter: Adapter, route: Route, policy: RoutePolicy):
        self.adapter, self.route, self.policy = adapter, route, policy
        self._templates: dict[str, tuple[bytes, bool, bytes, bytes] | None] = {}

    def _template(self, task: Task) -> tuple[bytes, bool, bytes, bytes] | None:
        """(text before the first placeholder, whether that one is the id, text between, text
        after with the newline)."""
        spec = RequestSpec(_ID_SENTINEL, self.route.model, judge_prompt(task.question, task.rubric, _ANSWER_SENTINEL),
                           self.policy.max_tokens, self.policy.temperature)
        line = jsonl.dumps(self.adapter.build_line(self.route, spec))
        if line.count(_ID_SENTINEL_ESCAPED) != 1 or line.count(_ANSWER_SENTINEL_ESCAPED) != 1:
            return None
        head, first, mid, _, tail = re.split(f"({re.escape(_ID_SENTINEL_ESCAPED)}|{re.escape(_ANSWER_SENTINEL_ESCAPED)})", line)
        return head.encode(), first == _ID_SENTINEL_ESCAPED, mid.encode(), tail.encode() + b"\n"

    def line(self, custom_id: str, task: Task, answer: str) -> bytes:
        template = self._templates.get(task.task_id, _UNSEEN)
        if template is _UNSEEN:
            template = self._templates[task.task_id] = self._template(task)
        response = answer[:JUDGE_RESPONSE_CHARS]
        if template is None or "\x7f" in response:
            return _judge_line(self.adapter, self.route, self.policy, custom_id, task, answer)
        # Five pieces joined once (a list built with a test per piece was ~1.5 us of a line's ~10).
        head, id_first, mid, tail = template
        escaped_id, escaped_answer = jsonl.escape_str(custom_id).encode(), jsonl.escape_utf8(response)
        if id_first:
            return b"".join((head, escaped_id, mid, escaped_answer, tail))
        return b"".join((head, escaped_answer, mid, escaped_id, tail))


_UNSEEN: Any = object()  # a task whose template is not made yet (None: made, and not usable)


def _judge_line(adapter: Adapter, route: Route, policy: RoutePolicy, custom_id: str, task: Task, answer: str) -> bytes:
    """A judge request line: the line built around a placeholder, the escaped answer spliced in.
    The same bytes as serialising the whole line (escaping is per character), except that DEL
    would be written escaped (escape_utf8): an answer holding one is serialised whole."""
    response = answer[:JUDGE_RESPONSE_CHARS]
    if "\x7f" in response:
        spec = RequestSpec(custom_id, route.model, judge_prompt(task.question, task.rubric, response), policy.max_tokens,
                           policy.temperature)
        return jsonl.dumps(adapter.build_line(route, spec)).encode() + b"\n"
    spec = RequestSpec(custom_id, route.model, judge_prompt(task.question, task.rubric, _ANSWER_SENTINEL), policy.max_tokens,
                       policy.temperature)
    line = jsonl.dumps(adapter.build_line(route, spec))
    # The response is the prompt's last part but one: the last occurrence is the placeholder's.
    head, sep, tail = line.rpartition(_ANSWER_SENTINEL_ESCAPED)
    assert sep, "answer placeholder missing from the judge request line"
    return b"".join((head.encode(), jsonl.escape_utf8(response), tail.encode(), b"\n"))


# Recording a file's requests inserts one batch_requests row per request into three B-trees keyed
# by its custom_id (the table's key, its custom_id index, and kept_dirty through m023's trigger),
# in the order of the file: random places in each. With the 256 KiB cap plan had (its rows were
# thought to be written once each), those pages left the cache and were read and written again
# for every few rows: 40,578 judge requests at 30 routes took 0.96-1.0 s of CPU to record; with
# 8 MiB, 0.22-0.25 s (the default 2 MB: 0.66 s; 4 MiB: 0.32-0.37 s; 16 MiB no faster than 8, and
# 7 MB more of peak memory in the judge stage at 3 routes, which fills it). A cap, not an
# allocation: a small project uses what it touches.
PLAN_CACHE_KIB = 8192


def plan(store: Store, config: Config | Inputs, *, routes: set[str] | None = None, stages: set[str] | None = None,
         write: bool = True) -> PlanResult:
    """Sync state, then write request files for everything pending (unless write=False).
    `config`: the command's resolved inputs (a Config is resolved here, once)."""
    inputs = as_inputs(store, config, escape=True)
    config = inputs.config
    config.require_routes(routes or ())
    if write:  # (a dry run touches no file under jobs/)
        recover_interrupted_writes(store, config)
    # The cyclic garbage collector is paused (base/gcpause.py says why); SQLite's page cache for
    # the plan is PLAN_CACHE_KIB (which says why this size).
    try:
        with gc_paused(), store.page_cache(kib=PLAN_CACHE_KIB):
            sync_state(store, inputs)
            return _plan_pending(store, inputs, routes=routes, stages=stages, write=write)
    finally:
        # What the command escaped while measuring is for its first plan; a later round of a
        # refresh reads the documents it needs again (and refuses one changed since).
        if inputs.corpus is not None and inputs.corpus.escaped is not None:
            inputs.corpus.escaped.close()


def _plan_pending(store: Store, inputs: Inputs, *, routes: set[str] | None, stages: set[str] | None, write: bool) -> PlanResult:
    """Summarise what is pending per route and write it into request files."""
    config = inputs.config
    result = PlanResult(warnings=[w.message for w in config.warnings])
    summaries = _route_summaries(store, config)
    # The summary shows what was asked for: --route and --stage filter its rows too.
    result.routes = [s for s in summaries.values() if (not routes or s.route in routes) and (not stages or s.stage in stages)]
    pending = pending_requests(store, config, routes=routes, stages=stages, states=kept.request_states(store))
    expected = expected_output(store, config)
    _add_estimates(config, summaries, pending, expected)
    if not write:
        for p in pending:
            summaries[(p.route, p.stage)].to_send += 1
        return result
    if pending:
        files = _Files(store, inputs, result, summaries, expected)
        try:
            _write_judge_requests(files, [p for p in pending if p.stage == "judge"])
            _write_generation_requests(files, [p for p in pending if p.stage == "gen"])
            files.closer.settle(wait=True)
            # The kept state: these requests went from pending to in flight, and nothing else
            # changed since request_states brought it up to date (kept.keep_planned says why that
            # is known without the views, and checks what it can; if it declines, the command's
            # end evaluates them as before). 30 routes, judge stage, in-process CPU at load ~1:
            # keep_current 0.54 s, keep_planned 0.18-0.19 s.
            kept.keep_planned(store, files.recorded)
        except BaseException:
            files.abort()  # each 'writing' batch row and partial file is cleared by the next plan
            files.closer.keep_finished()
            raise
        finally:
            files.closer.shutdown()
    return result


def _route_summaries(store: Store, config: Config) -> dict[tuple[str, str], RouteSummary]:
    """One summary per (route, stage) of the current config, with its cells and current requests."""
    summaries: dict[tuple[str, str], RouteSummary] = {}
    for route in config.contestants:
        s = RouteSummary(route.name, "gen", route.provider, route.transport)
        if not route.price.known:  # unknown, even with nothing to send: never shown as $0
            s.est_cost_batch = s.est_cost_online = s.est_cost_expected = None
        row = store.one(
            """SELECT count(*) AS tasks, sum(scope = 'out_of_context_scope') AS ooc, sum(scope = 'send') AS send
               FROM cells c JOIN config_routes cr ON cr.route = c.route AND cr.policy_fp = c.policy_fp
               JOIN tasks t ON t.task_id = c.task_id AND t.task_sha256 = c.task_sha256 WHERE c.route = ?""", [route.name]) or {}
        s.tasks, s.out_of_context, s.requests = row.get("tasks") or 0, row.get("ooc") or 0, row.get("send") or 0
        summaries[(route.name, "gen")] = s
    for route in config.judges:
        s = RouteSummary(route.name, "judge", route.provider, route.transport)
        if not route.price.known:
            s.est_cost_batch = s.est_cost_online = s.est_cost_expected = None
        s.requests = store.scalar(
            "SELECT count(*) FROM requests r JOIN config_routes j ON j.route = r.route AND j.policy_fp = r.policy_fp WHERE r.stage = 'judge' AND j.role = 'judge' AND r.route = ?",
            [route.name]) or 0
        summaries[(route.name, "judge")] = s
    return summaries


def _add_estimates(config: Config, summaries: dict[tuple[str, str], RouteSummary], pending: list[Pending],
                   expected: ExpectedOutput) -> None:
    """Add each pending request's estimated tokens and costs (expected and bound) to its route's
    summary, and the judge requests every answer to send will need (if it is valid)."""
    panel = len(config.judging.panel)
    for summary in summaries.values():
        summary.expected_basis = expected.basis(summary.route, summary.stage)
    for p in pending:
        s = summaries.get((p.route, p.stage))
        if s is None:
            continue
        s.est_input_tokens += p.est_input_tokens
        s.est_output_tokens += p.est_output_tokens
        route = config.routes[p.route]
        batch = request_cost(route, p.est_input_tokens, p.est_output_tokens)
        online = online_cost(route, p.est_input_tokens, p.est_output_tokens)
        s.est_cost_batch = None if (batch is None or s.est_cost_batch is None) else s.est_cost_batch + batch
        s.est_cost_online = None if (online is None or s.est_cost_online is None) else s.est_cost_online + online
        out = expected.tokens(p.route, p.stage, p.est_output_tokens)
        s.expected_output_tokens += out
        e = request_cost(route, p.est_input_tokens, out)
        s.est_cost_expected = None if (e is None or s.est_cost_expected is None) else s.est_cost_expected + e
        if p.stage == "gen":
            s.judge_requests_expected += panel


@dataclass
class _Files:
    """The request files one plan writes: a ShardWriter per (route, stage), all aborted together
    (file closed, checksum thread stopped) if writing fails, and the closer that takes each full
    file to the disk."""

    store: Store
    inputs: Inputs
    result: PlanResult
    summaries: dict[tuple[str, str], RouteSummary]
    expected: ExpectedOutput
    opened: list[ShardWriter] = field(default_factory=list)
    closer: Closer = field(default_factory=Closer)
    recorded: list[str] = field(default_factory=list)  # the custom_ids of the files recorded, in order

    @property
    def config(self) -> Config:
        return self.inputs.config

    def writer(self, route: Route, stage: str) -> ShardWriter:
        writer = ShardWriter(self.store, self.config, route, stage, self.result, self.summaries[(route.name, stage)], self.expected,
                             self.closer, self.recorded)
        self.opened.append(writer)
        return writer

    def abort(self) -> None:
        for writer in self.opened:
            writer.abort()


def _write_judge_requests(files: _Files, pending: list[Pending]) -> None:
    """Judge requests: small, built from the answer in state.db; one judge route at a time."""
    by_judge: dict[str, list[Pending]] = defaultdict(list)
    for p in pending:
        by_judge[p.route].append(p)
    store = files.store
    tasks = {t.task_id: t for t in files.inputs.require_corpus().dataset.tasks}
    for judge_name, reqs in by_judge.items():
        policy = files.inputs.policy(judge_name)
        route = policy.route
        lines = _JudgeLines(get_adapter(route.provider), route, policy)
        writer = files.writer(route, "judge")
        for start in range(0, len(reqs), _ANSWERS_PER_QUERY):
            chunk = reqs[start:start + _ANSWERS_PER_QUERY]
            answers = _answer_texts(store, [p.parent_result_id for p in chunk if p.parent_result_id is not None])
            for p in chunk:
                answer = answers.get(p.parent_result_id or 0) or ""
                writer.write(p.custom_id, [lines.line(p.custom_id, tasks[p.task_id], answer)], p.est_input_tokens,
                             p.est_output_tokens)
        writer.finish()


# Answers are read this many at a time (one query each, under SQLite's 999-variable limit of
# older versions): a query per judge request cost more than building and writing its line
# (0.17 ms each, 40,578 of them at 30 routes x 3 judges), and a few hundred answers of 2-6 KB
# stay a small, bounded part of plan's memory.
_ANSWERS_PER_QUERY = 500


def _answer_texts(store: Store, ids: list[int]) -> dict[int, str | None]:
    if not ids:
        return {}
    unique = sorted(set(ids))
    rows = store.db.execute(f"SELECT id, text FROM results WHERE id IN ({','.join('?' * len(unique))})", unique)
    return dict(rows.fetchall())


def _write_generation_requests(files: _Files, pending: list[Pending]) -> None:
    """Generation requests: one document at a time, escaped once, for every route that needs it."""
    corpus = files.inputs.require_corpus()
    tasks = {t.task_id: t for t in corpus.dataset.tasks}
    by_doc: dict[str, list[Pending]] = defaultdict(list)
    for p in pending:
        by_doc[tasks[p.task_id].corpus_file].append(p)
    writers: dict[str, ShardWriter] = {}
    for corpus_file in sorted(by_doc):
        # The document as the command measured it (its ids carry that checksum): escaped when it was
        # measured, or read now and refused if it changed since.
        escaped = EscapedDocument.of(corpus, corpus_file, where=f"{corpus.dataset.path} (corpus_file {corpus_file})")
        for p in by_doc[corpus_file]:
            policy = files.inputs.policy(p.route)
            route = policy.route
            writer = writers.get(route.name)
            if writer is None:
                writer = writers[route.name] = files.writer(route, "gen")
            task = tasks[p.task_id]
            spec = RequestSpec(p.custom_id, route.model, generation_prompt(task.question, _DOC_SENTINEL), policy.max_tokens,
                               policy.temperature)
            writer.write(p.custom_id, _line_parts(get_adapter(route.provider), route, spec, escaped), p.est_input_tokens, p.est_output_tokens)
        del escaped  # one document in memory at a time
    for writer in writers.values():
        writer.finish()
