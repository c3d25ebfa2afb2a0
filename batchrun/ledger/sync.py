"""The ledger: what the current config needs and what is still owed, in state.db.

- ids (ids.py): custom_ids are deterministic, a hash of everything that makes a request what it
  is. Re-planning an unchanged cell yields the same id and, because the request is already live
  or done, writes nothing.
- sync (`sync_state`): the current dataset, corpus and config recorded in one transaction:
  tasks, documents, policies, the config snapshot (`config_routes`), one cell per (route, task)
  with its CJK rule, cap and scope, and one request per cell that is sent; then one judge request
  per valid answer under the current panel (`queue_judgments`).
- owed: `current_requests_sql` is the one definition of "a request the current config wants";
  `scan_pending` lists those with nothing live and something left to try, split into the ones
  due now and the ones backing off after a failure; `observed_output_tokens` replaces the output
  budget by what a route really returned once it has returned enough.

plan.py writes the pending requests into request files; collect, refresh, diagnosis and
decisions read the same bookkeeping from here.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..base.backoff import round_backoff
from ..base.errors import ConfigError
from ..protocol.caps import CJK_WINDOW, is_cjk
from ..protocol.config import Config, ConfigWarning, Route, fingerprint
from ..protocol.corpus import READING, Corpus, cacheable, scan_corpus
from ..protocol.dataset import RubricItem
from ..protocol.prompts import generation_prompt_overhead, judge_graded_sha256, judge_prompt
from .cost import observed_usage
from .ids import digest, generation_custom_id, judge_custom_id
from .lifecycle import Status, move_all
from .resume import refuse_changed_inputs
from .store import Store


# --- estimates ----------------------------------------------------------------------


def estimate_tokens(chars: int, cjk: bool, route: Route) -> int:
    en, zh = route.chars_per_token
    return math.ceil(chars / (zh if cjk else en))


# --- sync ------------------------------------------------------------------------------------


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


def sync_state(store: Store, config: Config, corpus: Corpus | None = None, *, queue: bool = True) -> Corpus:
    """Record the current dataset, corpus and config in state.db; queue judgments. Idempotent.
    `queue=False`: the caller queues them itself, later (collect, after reading new answers)."""
    corpus = corpus or scan_corpus(store, config)
    now = time.time()
    db = store.db
    ds = corpus.dataset
    with db.atomic():
        # First, before anything is written: a refusal rolls the transaction back untouched.
        check_role_changes(store, config)
        # Likewise an input changed under work already sent (resume.py): refused, naming it.
        refuse_changed_inputs(store, config, corpus)
        db.execute("INSERT OR IGNORE INTO datasets (sha256, path, n_tasks, first_seen) VALUES (?, ?, ?, ?)",
                   [ds.sha256, str(ds.path), len(ds.tasks), now])
        store.set_meta("dataset_sha256", ds.sha256)
        for cf, info in corpus.docs.items():
            db.execute("INSERT OR IGNORE INTO documents (sha256, name, chars, bytes, cjk) VALUES (?, ?, ?, ?, ?)",
                       [info.sha256, info.name, info.chars, info.nbytes, int(info.cjk)])
            db.execute("""INSERT OR IGNORE INTO document_readings (sha256, reading, chars, cjk, measured_at, newlines_translated)
                          VALUES (?, ?, ?, ?, ?, ?)""", [info.sha256, READING, info.chars, int(info.cjk), now, int(info.newlines_translated)])
            st = corpus.paths[cf].stat()
            if cacheable(st):  # see corpus._measured: a racy file is not cached
                db.execute("INSERT OR REPLACE INTO document_files (path, size, mtime_ns, sha256) VALUES (?, ?, ?, ?)",
                           [str(corpus.paths[cf]), st.st_size, st.st_mtime_ns, info.sha256])
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
            cells, requests = [], []  # one executemany each per route (30 routes x 481 tasks per collect)
            for t in ds.tasks:
                info = corpus.docs[t.corpus_file]
                cap = route.caps.cjk if info.cjk else route.caps.en
                scope = "send" if info.chars <= cap else "out_of_context_scope"
                custom_id = generation_custom_id(fp, t, info) if scope == "send" else None
                cells.append((fp, t.task_id, route.name, info.sha256, info.chars, int(info.cjk), cap, route.caps.source, scope,
                              custom_id, t.sha256, now))
                if custom_id:
                    prompt_chars = info.chars + generation_prompt_overhead(t.question)
                    requests.append((custom_id, route.name, t.task_id, fp, config.generation.max_retries, config.generation.max_resubmits,
                                     prompt_chars, estimate_tokens(prompt_chars, info.cjk, route), max_tokens, now))
            db.conn.executemany(
                """INSERT OR REPLACE INTO cells (policy_fp, task_id, route, doc_sha256, doc_chars, cjk, cap, cap_source, scope,
                   custom_id, task_sha256, planned_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""", cells)
            db.conn.executemany(
                """INSERT OR IGNORE INTO requests (custom_id, stage, route, task_id, policy_fp, max_retries, max_resubmits,
                   prompt_chars, est_input_tokens, est_output_tokens, created_at) VALUES (?, 'gen', ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                requests)
        for position, route in enumerate(config.judges):
            policy = config.judge_policy(route)
            fp = fingerprint(policy)
            _record_policy(store, fp, "judge", route, policy, now)
            _record_config_route(store, route, "judge", fp, position, config.judging.max_retries_per_run, config.generation.max_resubmits)
        # Idle judges are remembered as 'idle' (every view reads only 'contestant' and 'judge'
        # rows), so deleting their role line later is caught as a flip too (check_role_changes).
        for route in config.idle:
            _record_config_route(store, route, "idle", fingerprint(config.judge_policy(route)), None, 0, 0)
        if queue:
            queue_judgments(store, config)
        supersede_stale_batches(store)  # reads no judge request that is not in a batch already
    return corpus


def _record_config_route(store: Store, route: Route, role: str, fp: str, panel_position: int | None,
                         retry_budget: int, resubmit_budget: int) -> None:
    # The retry budgets are per run (the protocol: "retry up to 5x"); the views read them from here.
    store.db.execute(
        """INSERT INTO config_routes (route, role, policy_fp, provider, model, transport, endpoint_host, panel_position,
           retry_budget, resubmit_budget) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [route.name, role, fp, route.provider, route.model, route.transport, route.endpoint_host, panel_position,
         retry_budget, resubmit_budget])


def _record_policy(store: Store, fp: str, stage: str, route: Route, policy: dict[str, Any], now: float) -> None:
    store.db.execute("INSERT OR IGNORE INTO policies (fingerprint, stage, route, provider, model, policy_json, first_seen) VALUES (?, ?, ?, ?, ?, ?, ?)",
                     [fp, stage, route.name, route.provider, route.model, json.dumps(policy, sort_keys=True), now])


def queue_judgments(store: Store, config: Config) -> int:
    """One judge request per valid answer x judge route of the current panel. Returns how many were new.

    Only answers still missing a request from a judge are read (prompts are built only for them).
    A cell's answer is the first ok result of its generation request (request_status: a request
    with an ok result is ok, and its ok_result_id is the first), found by one probe of the
    results_outcome index per current cell: the view, which derives every request's state from
    all results, is not evaluated, so a collect with nothing new to judge costs a few index
    probes per cell and judge, whatever the size of the history."""
    judges = {r["route"]: r["policy_fp"] for r in store.rows("SELECT route, policy_fp FROM config_routes WHERE role = 'judge'")}
    if not judges:
        return 0
    now = time.time()
    new = 0
    # The judge prompt is the same for every judge of an answer: built (to measure it) and the
    # answer hashed (for the custom_id) once per answer, not once per judge. Its text is read
    # once too: each judge's query returns only ids (reading the 2-6 KB answers with every
    # judge's rows was ~0.2 s per judge for a night's 15,000 answers, bench/ingest.py).
    measured: dict[int, tuple[int, bool, str]] = {}
    # Every current cell's answer, found once (one scan of the cells, one probe per cell), kept in
    # the scan's order; each judge then only probes its own requests for the answers it lacks.
    # Before, each judge's query scanned the cells and probed the results again (~0.1 s a judge
    # at 15,000 cells). Inserting only requests, queue_judgments changes no answer meanwhile.
    store.db.execute("DROP TABLE IF EXISTS temp.judge_answers")
    store.db.execute(
        """CREATE TEMP TABLE judge_answers AS
           SELECT a.custom_id, a.task_id, t.question, t.rubric_json, t.graded_sha256, res.id AS result_id
           FROM (SELECT c.custom_id, c.task_id, c.task_sha256,
                        (SELECT min(r.id) FROM results r WHERE r.custom_id = c.custom_id AND r.kind = 'ok') AS ok_id
                 FROM cells c
                 JOIN config_routes cr ON cr.route = c.route AND cr.policy_fp = c.policy_fp AND cr.role = 'contestant'
                 WHERE c.custom_id IS NOT NULL) a
           JOIN tasks t ON t.task_id = a.task_id AND t.task_sha256 = a.task_sha256
           JOIN results res ON res.id = a.ok_id""")
    for judge_name, jfp in judges.items():
        route = config.routes[judge_name]
        answers = store.db.execute(
            """SELECT a.custom_id, a.task_id, a.question, a.rubric_json, a.graded_sha256, a.result_id FROM temp.judge_answers a
               WHERE NOT EXISTS (SELECT 1 FROM requests jr WHERE jr.parent_custom_id = a.custom_id
                                 AND jr.route = ? AND jr.policy_fp = ? AND jr.parent_result_id = a.result_id
                                 AND jr.graded_sha256 = a.graded_sha256)
               ORDER BY a.rowid""",
            [judge_name, jfp]).fetchall()
        unseen = {a[5]: a for a in answers if a[5] not in measured}
        if unseen:
            texts = store.db.execute("SELECT id, text FROM results WHERE id IN (SELECT value FROM json_each(?))",
                                     [json.dumps(list(unseen))])
            for result_id, text in texts:
                _, _, question, rubric_json, _, _ = unseen[result_id]
                rubric = [RubricItem(i["points"], i["correct_criterion"]) for i in json.loads(rubric_json)]
                measured[result_id] = (len(judge_prompt(question, rubric, text)), is_cjk(question + text[:CJK_WINDOW]), digest(text))
        rows = []
        for custom_id, task_id, _, _, graded_sha256, result_id in answers:
            prompt_chars, cjk, answer_sha = measured[result_id]
            cid = judge_custom_id(jfp, custom_id, "", graded_sha256, answer_sha=answer_sha)  # the hash stands for the text
            rows.append((cid, judge_name, task_id, jfp, custom_id, result_id,
                         config.judging.max_retries_per_run, config.generation.max_resubmits, prompt_chars,
                         estimate_tokens(prompt_chars, cjk, route), config.judging.max_tokens, now, graded_sha256))
        if rows:
            cur = store.db.conn.executemany(
                """INSERT OR IGNORE INTO requests (custom_id, stage, route, task_id, policy_fp, parent_custom_id,
                   parent_result_id, max_retries, max_resubmits, prompt_chars, est_input_tokens, est_output_tokens,
                   created_at, graded_sha256) VALUES (?, 'judge', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""", rows)
            new += cur.rowcount  # the rows inserted (an id already there is ignored)
    store.db.execute("DROP TABLE temp.judge_answers")
    return new


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


def view_sql(store: Store, view: str, **tables: str) -> str:
    """The SELECT of one of state.db's views as its newest migration defined it, with the views it
    reads (keys) replaced by tables already evaluated (values). The views stay the one definition
    of every state; this only lets a command evaluate each of them once."""
    sql = store.scalar("SELECT sql FROM sqlite_master WHERE type = 'view' AND name = ?", [view])
    match = re.match(rf"\s*CREATE\s+VIEW\s+{view}\s+AS\s", sql or "", re.IGNORECASE)
    if match is None:
        raise RuntimeError(f"state.db has no view {view!r} of the expected form")
    body = sql[match.end():]
    for name, table in tables.items():
        body = re.sub(rf"\b{name}\b", table, body)
    return body


def evaluate_requests(store: Store) -> None:
    """request_status evaluated once, into the temporary table `requests_now`, for the requests
    the current config wants (current_requests_sql) and only their results, found by index.

    A view is evaluated again by every query that reads it, and SQLite pushes no filter into
    request_outcomes (an aggregate over every result ever collected, history included), so a
    query of request_status costs all of history. This runs the views' own SQL (view_sql) once,
    over just the rows they need: plan's scan and outputs.snapshot_cells read `requests_now`."""
    db = store.db
    for table in ("requests_now", "outcomes_now", "requests_wanted", "results_wanted", "wanted"):
        db.execute(f"DROP TABLE IF EXISTS temp.{table}")
    db.execute("CREATE TEMP TABLE wanted (custom_id TEXT PRIMARY KEY) WITHOUT ROWID")
    db.execute(f"INSERT OR IGNORE INTO temp.wanted {current_requests_sql()}")
    # The columns request_outcomes reads (a migration that reads another one fails here, loudly).
    db.execute("""CREATE TEMP TABLE results_wanted AS SELECT res.id, res.custom_id, res.kind, res.collected_at, res.run_id
                  FROM temp.wanted w JOIN results res ON res.custom_id = w.custom_id ORDER BY res.id""")
    db.execute("""CREATE TEMP TABLE requests_wanted AS SELECT r.* FROM temp.wanted w JOIN requests r ON r.custom_id = w.custom_id
                  ORDER BY r.rowid""")
    db.execute("CREATE UNIQUE INDEX temp.requests_wanted_id ON requests_wanted (custom_id)")  # request_status's parent lookup
    db.execute(f"CREATE TEMP TABLE outcomes_now AS {view_sql(store, 'request_outcomes', results='temp.results_wanted')}")
    db.execute(f"""CREATE TEMP TABLE requests_now AS {view_sql(store, 'request_status', request_outcomes='temp.outcomes_now',
                                                              requests='temp.requests_wanted')}""")


def supersede_stale_batches(store: Store) -> None:
    """Batches not created at a provider, holding requests the inputs no longer want, are dropped.

    Planned ones were never uploaded. Uploaded ones (or a crashed upload) have a file at the
    provider but no batch: every create refused certainly (a quota hold, a refused key) leaves
    them there, and nothing of them was sent to a model, so nothing is lost by planning the cells
    again from the new inputs (resume.py refuses only where a provider has the batch)."""
    stale = f"""EXISTS (SELECT 1 FROM batch_requests br WHERE br.batch_id = batches.id
                        AND br.custom_id NOT IN ({current_requests_sql()}))"""
    move_all(store, Status.PLANNED, Status.SUPERSEDED, stale, error="config changed before upload")
    for status in (Status.UPLOADING, Status.UPLOADED):
        move_all(store, status, Status.SUPERSEDED, stale, error="inputs changed before the batch was created (nothing was sent to a model)")


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
    evaluate_requests(store)  # request_status of the current requests only: not all of history
    cur = store.db.execute(
        """SELECT s.custom_id, s.stage, s.route, s.task_id, r.parent_result_id, r.est_input_tokens, r.est_output_tokens,
                   p.route AS judged_route, s.retry_run_n + s.resubmit_run_n AS run_failures, s.reopened_at,
                   last.collected_at AS failed_at, last.retry_after, b.transport, last.batch_id
            FROM temp.requests_now s JOIN requests r ON r.custom_id = s.custom_id
            JOIN tasks t ON t.task_id = s.task_id
            LEFT JOIN requests p ON p.custom_id = r.parent_custom_id
            LEFT JOIN results last ON last.id = s.last_result_id
            LEFT JOIN batches b ON b.id = last.batch_id
            WHERE s.state = 'pending'
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
    """Average output tokens per (route, stage) over its successful results, once there are enough
    (billed output: with the reasoning tokens of providers that report them apart)."""
    return {key: math.ceil(u.billed_ok / u.n_ok) for key, u in observed_usage(store).items() if u.n_ok >= OBSERVED_MIN_RESULTS}
