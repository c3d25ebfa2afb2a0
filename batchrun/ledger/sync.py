"""Sync: the current dataset, corpus and config recorded in state.db, and the judge requests they
call for.

`sync_state` records them in one transaction: tasks, documents, policies, the config snapshot
(`config_routes`), one cell per (route, task) with its CJK rule, cap and scope, and one request
per cell that is sent (its custom_id: ids.py); then one judge request per valid answer under the
current panel (`queue_judgments`). Before it writes anything it refuses a judge the config would
silently turn into a contestant (`check_role_changes`) and an input changed under work already
sent (resume.py). pending.py then says what of it is still owed.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from typing import Any

from ..base.errors import ConfigError
from ..protocol.caps import CJK_WINDOW, is_cjk
from ..protocol.config import Config, ConfigWarning, Route
from ..protocol.dataset import RubricItem
from ..protocol.prompts import generation_prompt_overhead, judge_graded_sha256, judge_prompt, judge_prompt_chars
from .ids import digest, generation_custom_id, judge_custom_id
from .inputs import Inputs, record_documents
from .pending import supersede_stale_batches
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


def sync_state(store: Store, inputs: Inputs, *, queue: bool = True) -> None:
    """Record the command's inputs (its dataset, corpus and config) in state.db; queue judgments.
    Idempotent. `queue=False`: the caller queues them itself, later (collect, after reading new answers)."""
    config, corpus = inputs.config, inputs.require_corpus()
    now = time.time()
    db = store.db
    ds = corpus.dataset
    with db.atomic():
        # First, before anything is written: a refusal rolls the transaction back untouched.
        check_role_changes(store, config)
        # Likewise an input changed under work already sent (resume.py): refused, naming it.
        refuse_changed_inputs(store, inputs)
        db.execute("INSERT OR IGNORE INTO datasets (sha256, path, n_tasks, first_seen) VALUES (?, ?, ?, ?)",
                   [ds.sha256, str(ds.path), len(ds.tasks), now])
        store.set_meta("dataset_sha256", ds.sha256)
        record_documents(store, corpus, now)
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
            p = inputs.policy(route.name)
            fp, max_tokens = p.fingerprint, p.max_tokens
            _record_policy(store, fp, "gen", route, p.policy, now)
            _record_config_route(store, route, "contestant", fp, None, config.generation.max_retries, config.generation.max_resubmits)
            cells, requests = [], []  # one executemany each per route (30 routes x 481 tasks per collect)
            # Only the cells that are new or differ are written: nearly every sync (each collect's)
            # finds them as the last one left them, and rewriting all 15,392 of bench/ingest.py's
            # cost ~0.1 s a night (a REPLACE deletes and inserts the row and its two index entries).
            # planned_at is then when the cell was planned as it is, not the last sync.
            recorded = {row[0]: row[1:] for row in db.execute(
                """SELECT task_id, route, doc_sha256, doc_chars, cjk, cap, cap_source, scope, custom_id, task_sha256
                   FROM cells WHERE policy_fp = ?""", [fp])}
            for t in ds.tasks:
                info = corpus.docs[t.corpus_file]
                cap = route.caps.cjk if info.cjk else route.caps.en
                scope = "send" if info.chars <= cap else "out_of_context_scope"
                custom_id = generation_custom_id(fp, t, info) if scope == "send" else None
                cell = (route.name, info.sha256, info.chars, int(info.cjk), cap, route.caps.source, scope, custom_id, t.sha256)
                if recorded.get(t.task_id) != cell:
                    cells.append((fp, t.task_id, *cell, now))
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
            p = inputs.policy(route.name)
            _record_policy(store, p.fingerprint, "judge", route, p.policy, now)
            _record_config_route(store, route, "judge", p.fingerprint, position, config.judging.max_retries_per_run,
                                 config.generation.max_resubmits)
        # Idle judges are remembered as 'idle' (every view reads only 'contestant' and 'judge'
        # rows), so deleting their role line later is caught as a flip too (check_role_changes).
        for route in config.idle:
            _record_config_route(store, route, "idle", inputs.policy(route.name).fingerprint, None, 0, 0)
        if queue:
            queue_judgments(store, config)
        supersede_stale_batches(store)  # reads no judge request that is not in a batch already


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
    # The judge prompt is the same for every judge of an answer: measured and the
    # answer hashed (for the custom_id) once per answer, not once per judge. Its text is read
    # once too: each judge's query returns only ids (reading the 2-6 KB answers with every
    # judge's rows was ~0.2 s per judge for a night's 15,000 answers, bench/ingest.py).
    measured: dict[int, tuple[int, bool, str]] = {}
    # Its length is measured without building it (prompts.judge_prompt_chars): the prompt's
    # length without the answer, once per task.
    empty_prompt: dict[str, int] = {}
    # Every current cell's answer, found once (one scan of the cells, one probe per cell), kept in
    # the scan's order; each judge then only probes its own requests for the answers it lacks.
    # Before, each judge's query scanned the cells and probed the results again (~0.1 s a judge
    # at 15,000 cells). Inserting only requests, queue_judgments changes no answer meanwhile.
    store.db.execute("DROP TABLE IF EXISTS temp.judge_answers")
    store.db.execute(
        """CREATE TEMP TABLE judge_answers AS
           SELECT a.custom_id, a.task_id, t.graded_sha256, res.id AS result_id
           FROM (SELECT c.custom_id, c.task_id, c.task_sha256,
                        (SELECT min(r.id) FROM results r WHERE r.custom_id = c.custom_id AND r.kind = 'ok') AS ok_id
                 FROM cells c
                 JOIN config_routes cr ON cr.route = c.route AND cr.policy_fp = c.policy_fp AND cr.role = 'contestant'
                 WHERE c.custom_id IS NOT NULL) a
           JOIN tasks t ON t.task_id = a.task_id AND t.task_sha256 = a.task_sha256
           JOIN results res ON res.id = a.ok_id""")
    # Each task's question and rubric, read once (not with every answer, for every judge).
    tasks = {task_id: (question, rubric_json) for task_id, question, rubric_json in
             store.db.execute("SELECT task_id, question, rubric_json FROM tasks")}
    every_answer: list[Any] | None = None  # judge_answers in full, read once for every judge with no request yet
    for judge_name, jfp in judges.items():
        route = config.routes[judge_name]
        if store.db.execute("SELECT 1 FROM requests WHERE route = ? AND stage = 'judge' AND policy_fp = ? LIMIT 1",
                            [judge_name, jfp]).fetchone():
            answers = store.db.execute(
                """SELECT a.custom_id, a.task_id, a.graded_sha256, a.result_id FROM temp.judge_answers a
                   WHERE NOT EXISTS (SELECT 1 FROM requests jr WHERE jr.parent_custom_id = a.custom_id
                                     AND jr.route = ? AND jr.policy_fp = ? AND jr.parent_result_id = a.result_id
                                     AND jr.graded_sha256 = a.graded_sha256)
                   ORDER BY a.rowid""",
                [judge_name, jfp]).fetchall()
        else:
            # No request of this judge's policy yet (a night's first answers, a judge added or
            # changed): every answer lacks one, without a probe per answer (6 x 14,977 probes
            # were 0.2 s of bench/ingest.py's night 1; the same rows in the same order). Read
            # once for all such judges: only requests are inserted meanwhile, never an answer.
            if every_answer is None:
                every_answer = store.db.execute(
                    "SELECT a.custom_id, a.task_id, a.graded_sha256, a.result_id FROM temp.judge_answers a ORDER BY a.rowid").fetchall()
            answers = every_answer
        unseen = {result_id: task_id for _, task_id, _, result_id in answers if result_id not in measured}
        if unseen:
            texts = store.db.execute("SELECT id, text FROM results WHERE id IN (SELECT value FROM json_each(?))",
                                     [json.dumps(list(unseen))])
            for result_id, text in texts:
                task_id = unseen[result_id]
                question, rubric_json = tasks[task_id]
                if task_id not in empty_prompt:
                    rubric = [RubricItem(i["points"], i["correct_criterion"]) for i in json.loads(rubric_json)]
                    empty_prompt[task_id] = len(judge_prompt(question, rubric, ""))
                measured[result_id] = (judge_prompt_chars(empty_prompt[task_id], text), is_cjk(question + text[:CJK_WINDOW]), digest(text))
        rows = []
        max_retries, max_resubmits, max_tokens = config.judging.max_retries_per_run, config.generation.max_resubmits, config.judging.max_tokens
        for custom_id, task_id, graded_sha256, result_id in answers:
            prompt_chars, cjk, answer_sha = measured[result_id]
            cid = judge_custom_id(jfp, custom_id, "", graded_sha256, answer_sha=answer_sha)  # the hash stands for the text
            rows.append((cid, judge_name, task_id, jfp, custom_id, result_id, max_retries, max_resubmits, prompt_chars,
                         estimate_tokens(prompt_chars, cjk, route), max_tokens, now, graded_sha256))
        if rows:
            cur = store.db.conn.executemany(
                """INSERT OR IGNORE INTO requests (custom_id, stage, route, task_id, policy_fp, parent_custom_id,
                   parent_result_id, max_retries, max_resubmits, prompt_chars, est_input_tokens, est_output_tokens,
                   created_at, graded_sha256) VALUES (?, 'judge', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""", rows)
            new += cur.rowcount  # the rows inserted (an id already there is ignored)
    store.db.execute("DROP TABLE temp.judge_answers")
    return new
