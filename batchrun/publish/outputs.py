"""What batchrun publishes: results/ files, the leaderboard and the report's data, with provenance.

Nothing is scored here. Judge requests are queued by the ledger (ledger.queue_judgments),
verdicts are parsed and normalised by grading.py at collect, and the views in state.db
(`cell_status`, `leaderboard`) aggregate them: they are the definition. This module only shapes
them into results/<route>.responses.json, results/<route>.scores.json and the report's rows,
adding per-judge details, the matched panel (a robustness view) and the provenance block that
must accompany every published number.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..ledger.inputs import Inputs, as_inputs
from ..ledger import kept
from ..ledger.pending import drop_temp, evaluate_requests, view_sql
from ..ledger.store import Store
from ..protocol.config import Config, results_stem
from ..protocol.policy import generation_decoding
from ..protocol.grading import score as normalised_score
from ..protocol.prompts import GENERATION_TEMPLATE_SHA256, JUDGE_TEMPLATE_SHA256

RESPONSE_STATUS = {"judging": "ok"}
# Cell statuses that count 0 in All-tasks: the model's own failures, out of context, and
# infrastructure failures the maintainer accepted (batchrun accept-failures). An accepted one
# makes the route's All-tasks not a protocol number (spec 001 §5: `overall` stays null): it is
# published apart, as `accepted_overall`, marked (non_protocol).
ZERO_FILLED = ("out_of_context_scope", "refusal", "empty", "accepted")


def _batchrun_version() -> str:
    # Imported when a results file is written, not with this module: `status` reads cells_now
    # through snapshot_cells, and reading the installed version costs importlib.metadata (~20 ms).
    from ..base.version import __version__

    return __version__


def snapshot_cells(store: Store) -> None:
    """Evaluate the views once, into temporary tables: `requests_now` (request_status, for the
    requests the current config wants), `cells_now` (cell_status, indexed by route) and
    `judged_now` (the judge requests that have their verdict).

    A view is evaluated again by every query that reads it, and SQLite pushes no filter into
    request_outcomes (an aggregate over every result ever collected, history included): cell_status
    read it twice, and each per-route query against the views re-read all of it. Here the views'
    own SQL (view_sql) runs once, each over the table the one before filled, and only over the
    requests the current config wants (ledger.current_requests_sql) and their results, found by
    index: the only rows cell_status reads. So a command's cost follows the current cells and
    their attempts, neither the number of routes nor the history kept beside them
    (bench/scale.py)."""
    db = store.db
    for table in ("cells_now", "judged_now", "judging_now", "requests_now"):  # judging_now: built from these when first read
        drop_temp(store, table)
    if kept.available(store) and (not store.readonly or kept.is_current(store)):
        # The state kept current in state.db (ledger/kept.py): brought up to date by a writer,
        # read as it is by a reader when it is current. The same rows, under the same names.
        if not store.readonly:
            kept.keep_current(store)
        db.execute("CREATE TEMP VIEW requests_now AS SELECT * FROM main.kept_requests")
        db.execute("CREATE TEMP VIEW cells_now AS SELECT * FROM main.kept_cells")
        db.execute("CREATE TEMP VIEW judged_now AS SELECT custom_id, ok_result_id FROM main.kept_requests "
                   "WHERE stage = 'judge' AND state = 'ok'")
        return
    evaluate_requests(store)
    # Indexed only after cells_now is built: without it SQLite plans cell_status over the table
    # exactly as over the view (an automatic index per join), so each score's average over the
    # judges adds them in the same order and the report stays the same to the last bit
    # (tests/test_report_fixture.py).
    db.execute(f"CREATE TEMP TABLE cells_now AS {view_sql(store, 'cell_status', request_status='temp.requests_now')}")
    db.execute("CREATE UNIQUE INDEX temp.requests_now_id ON requests_now (custom_id)")
    db.execute("CREATE INDEX temp.cells_now_route ON cells_now (route)")
    db.execute("""CREATE TEMP TABLE judged_now AS SELECT custom_id, ok_result_id FROM requests_now
                  WHERE stage = 'judge' AND state = 'ok'""")
    db.execute("CREATE UNIQUE INDEX temp.judged_now_id ON judged_now (custom_id)")


def leaderboard(store: Store, *, snapshot: bool = True) -> list[dict[str, Any]]:
    """The `leaderboard` view's rows, read from `cells_now`. snapshot_cells fills that first
    (`snapshot=False`: the caller just did)."""
    if snapshot:
        snapshot_cells(store)
    rows = store.rows(view_sql(store, "leaderboard", cell_status="temp.cells_now"))
    for r in rows:
        r["complete"] = bool(r["complete"])
        r["overall"] = r["all_tasks_overall"]
        r.setdefault("accepted_overall", None)  # a state.db read before m020 (verify reads any schema)
        for k in ("scored_n", "out_of_context_n", "failed_n", "pending_n", "waiting_n", "blocked_n", "accepted_n"):
            r[k] = r[k] or 0
    return rows


def non_protocol(config: Config, row: dict[str, Any]) -> list[str]:
    """Why a route's numbers are not WildTrace-protocol numbers (empty: they are), for every
    format to show beside them: a panel the config declares custom, accepted failures."""
    reasons = []
    if config.protocol != "wildtrace":
        reasons.append('custom protocol: the config declares protocol = "custom" (another judge panel than the protocol\'s)')
    if row.get("accepted_n"):
        reasons.append(f"{row['accepted_n']} accepted infrastructure failure(s): zero-filled by the maintainer's decision "
                       "(accept-failures), not the model's failures; the protocol leaves All-tasks null (spec 001 §5)")
    return reasons


def matched_panel(store: Store) -> dict[str, Any]:
    """Tasks scored by every contestant route, and each route's mean over them (robustness only)."""
    rows = store.db.execute("SELECT route, task_id, status, score FROM cells_now").fetchall()
    routes = sorted({route for route, _, _, _ in rows})
    scored: dict[str, dict[str, float]] = defaultdict(dict)
    for route, task_id, status, score in rows:
        if status == "ok" and score is not None:  # no score without a judge panel
            scored[route][task_id] = score
    common = set.intersection(*(set(scored[r]) for r in routes)) if routes else set()
    return {
        "n_tasks": len(common),
        "routes": {r: (round(sum(scored[r][t] for t in common) / len(common), 6) if common else None) for r in routes},
    }


def judging_now(store: Store) -> str:
    """The temporary table `judging_now`, filled on first use after snapshot_cells (which drops
    it): for every current cell, its judge requests under the current panel that have their
    verdict (route, task_id, judge, graded_sha256, ok_result_id), in the order of `requests`.
    judge_scores and provenance_sources both read this join; evaluated once, it costs about
    half of what the two cost apart at 32 routes x 100k results (issue 15). Without any verdict
    yet nothing is joined: bench/ingest.py's night 1 went through its 86,082 judge requests for
    none (0.19 s)."""
    # Without any verdict yet, the table's columns alone (LIMIT 0: nothing is joined).
    none_yet = store.db.execute("SELECT 1 FROM judged_now LIMIT 1").fetchone() is None
    store.db.execute(
        f"""CREATE TEMP TABLE IF NOT EXISTS judging_now AS
           SELECT cs.route, cs.task_id, jr.route AS judge, jr.graded_sha256, s.ok_result_id
           FROM cells_now cs
           JOIN requests jr ON jr.parent_custom_id = cs.custom_id AND jr.parent_result_id = cs.result_id AND jr.stage = 'judge'
           JOIN config_routes j ON j.route = jr.route AND j.policy_fp = jr.policy_fp AND j.role = 'judge'
           JOIN judged_now s ON s.custom_id = jr.custom_id
           ORDER BY jr.rowid{' LIMIT 0' if none_yet else ''}""")
    return "temp.judging_now"


def judge_scores(store: Store, *, with_text: bool = False) -> list[dict[str, Any]]:
    """Every current judgment of a current cell: route, task, judge, total, normalised score,
    points awarded (and the verdict text), in the order of the judge requests. Reads `cells_now`
    and `judged_now` (snapshot_cells), through judging_now."""
    text = ", res.text AS verdict" if with_text else ""
    join = "JOIN results res ON res.id = g.ok_result_id" if with_text else ""
    # Only judgments of the question and rubric as they are now (graded_sha256).
    rows = store.rows(
        f"""SELECT g.route, g.task_id, g.judge, jm.total, t.rubric_total, jm.points_awarded_json{text}
           FROM {judging_now(store)} g
           JOIN tasks t ON t.task_id = g.task_id AND t.graded_sha256 = g.graded_sha256
           JOIN judgments jm ON jm.result_id = g.ok_result_id {join}
           ORDER BY g.rowid""")
    for r in rows:
        # Normalised by the current rubric (the judgment graded exactly it: graded_sha256).
        r["score"] = None if r["total"] is None else normalised_score(r["total"], r["rubric_total"])
    return rows


def judge_details(judgments: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """route -> task -> judge -> its verdict, from judge_scores' rows: one query for every route
    (the report reads the same rows for its statistics)."""
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(dict))
    # Parsed once per distinct text: verdicts repeat the same few point lists (37,000 judgments,
    # 60 distinct lists at 32 routes in bench/scale.py). And one verdict object per distinct
    # total, score and points (60 among 81,000 at bench/ingest.py's night 2), which the results
    # files hold as values. Keyed by repr, as json writes
    # them: 1 and 1.0, 0.0 and -0.0 stay apart. The lists and verdicts are shared; nothing edits them.
    parsed: dict[str, Any] = {}
    verdicts: dict[tuple[str | None, str, str], dict[str, Any]] = {}
    for r in judgments:
        text = r["points_awarded_json"]
        key = (text, repr(r["total"]), repr(r["score"]))
        verdict = verdicts.get(key)
        if verdict is None:
            if text and text not in parsed:
                parsed[text] = json.loads(text)
            verdict = verdicts[key] = {"total": r["total"], "score": r["score"], "points_awarded": parsed[text] if text else None}
        out[r["route"]][r["task_id"]][r["judge"]] = verdict
    return out


def _sent(temperature: float | None) -> float | str:
    return temperature if temperature is not None else "omitted"


@lru_cache(maxsize=4096)
def _iso(ts: float | None) -> str | None:
    # Remembered: every answer's batch's end is written beside it (15,392 answers, ~70 batches at
    # bench/ingest.py's night 2), and datetime.fromtimestamp costs ~5 us each.
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds") if ts else None


def _hosts(values: list[Any]) -> list[str]:
    # A sync batch resumed at another host records both, joined by ", " (poll.run_sync_batch).
    return sorted({h for v in values if v for h in str(v).split(", ")})


def rehearsal_of(store: Store, config: Config) -> str | None:
    """The emulator URL if these results come from a rehearsal (the store says so for good)."""
    return config.rehearsal or store.meta("rehearsal")


def json_header(config: Config, store: Store | None = None, *, rehearsal: str | None = None) -> dict[str, Any]:
    """The keys every JSON output of batchrun has at its top, as `report --format json` has them
    (README, "Machine-readable output"): `rehearsal` (the emulator's URL when the numbers come from
    a rehearsal, else null: the config's --emulator, or state.db's own mark, or `rehearsal` given
    by the caller, such as a manifest's), `protocol`, `protocol_note` and `batchrun_version`."""
    return {"rehearsal": rehearsal or (rehearsal_of(store, config) if store is not None else config.rehearsal),
            "protocol": config.protocol, "protocol_note": config.protocol_note, "batchrun_version": _batchrun_version()}


def provenance_sources(store: Store, route_name: str | None = None) -> dict[str, dict[str, Any]]:
    """route -> the batches its scored answers and their verdicts came from: `first`/`last`
    (earliest submitted, latest ended), `hosts` and `judge_hosts` (judge -> hosts). Reads
    `cells_now` (snapshot_cells). Without `route_name`, every route in three grouped queries,
    not three per route: at 32 routes that was ~0.2 s of `report` (issue 15)."""
    where, params = ("WHERE cs.route = ?", [route_name]) if route_name is not None else ("", [])
    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"first": None, "last": None, "hosts": [],
                                                          "judge_hosts": defaultdict(list)})
    for route, first, last in store.db.execute(
        f"""SELECT cs.route, min(b.submitted_at), max(b.ended_at) FROM cells_now cs
            JOIN results r ON r.id = cs.result_id JOIN batches b ON b.id = r.batch_id {where} GROUP BY cs.route""", params):
        out[route]["first"], out[route]["last"] = first, last
    # Hosts come from the batches that produced the results being scored, as recorded when they
    # were sent: not from today's config or flags, which may point elsewhere.
    for route, host in store.db.execute(
        f"""SELECT DISTINCT cs.route, b.endpoint_host FROM cells_now cs
            JOIN results r ON r.id = cs.result_id JOIN batches b ON b.id = r.batch_id {where}""", params):
        out[route]["hosts"].append(host)
    for route, judge, host in store.db.execute(
        f"""SELECT DISTINCT g.route, g.judge, b.endpoint_host FROM {judging_now(store)} g
            JOIN results res ON res.id = g.ok_result_id JOIN batches b ON b.id = res.batch_id {where.replace('cs.', 'g.')}""", params):
        out[route]["judge_hosts"][judge].append(host)
    return out


def provenance(store: Store, inputs: Inputs, route_name: str, sources: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """`sources`: provenance_sources(store) for every route, if the caller has it. The decoding
    settings are the route's resolved policy's (what its requests carry)."""
    config = inputs.config
    policy = inputs.policy(route_name)
    route = policy.route
    src = (sources if sources is not None else provenance_sources(store, route_name))[route_name]
    dates = {"first": src["first"], "last": src["last"]}
    hosts = _hosts(src["hosts"])
    judge_hosts = src["judge_hosts"]
    # A route state.db still lists as a contestant that the config has made a judge since (a
    # report before the next sync): the generation settings its answers were asked with.
    temperature, max_tokens = (policy.temperature, policy.max_tokens) if policy.role == "contestant" else generation_decoding(config, route)
    return {
        "route": route.name,
        "model": route.model,
        "provider": route.provider,
        "transport": route.transport,
        "endpoint": route.endpoint_label,
        "endpoint_host": ", ".join(hosts) or None,  # None: nothing answered yet
        "endpoint_hosts": hosts,
        "configured_host": route.endpoint_host,
        "rehearsal": rehearsal_of(store, config),
        "protocol": config.protocol,
        "protocol_note": config.protocol_note,
        "api_version": route.api_version,
        "endpoint_dates": {"first_submitted": _iso(dates.get("first")), "last_ended": _iso(dates.get("last"))},
        "context_policy": {"en_cap": route.caps.en, "cjk_cap": route.caps.cjk, "source": route.caps.source,
                           "cjk_rule": ">20 ideographs U+4E00-U+9FFF in the first 4000 characters"},
        "decoding": {"temperature": temperature if temperature is not None else "omitted",
                     "temperature_source": route.send_temperature_source,
                     "max_tokens": max_tokens, "reasoning": route.reasoning},
        "retry_policy": {"max_retries": config.generation.max_retries, "max_resubmits": config.generation.max_resubmits},
        # The maintainer's decisions to zero-fill infrastructure failures (batchrun accept-failures),
        # for the route's current policy only.
        "accepted_failures": [
            {"reason": a["reason"], "cells": a["cells"], "at": _iso(a["created_at"])}
            for a in store.rows(
                """SELECT a.reason, a.cells, a.created_at FROM accepted_failures a
                   JOIN config_routes cr ON cr.route = a.route AND cr.policy_fp = a.policy_fp WHERE a.route = ? ORDER BY a.id""",
                [route_name])],
        "judge_panel": [{"route": j.name, "model": j.model, "provider": j.provider,
                         "temperature": _sent(inputs.policy(j.name).temperature),
                         "max_tokens": inputs.policy(j.name).max_tokens, "endpoint_hosts": _hosts(judge_hosts[j.name])}
                        for j in config.judges],
        "prompt_templates": {"generation_sha256": GENERATION_TEMPLATE_SHA256, "judge_sha256": JUDGE_TEMPLATE_SHA256},
        "dataset_sha256": store.meta("dataset_sha256"),
        "batchrun_version": _batchrun_version(),
    }


def route_scores(store: Store, inputs: Inputs, board_row: dict[str, Any],
                 details: dict[str, dict[str, dict[str, Any]]] | None = None,
                 sources: dict[str, dict[str, Any]] | None = None, *, with_tasks: bool = True) -> dict[str, Any]:
    """`details`: judge_details(), `sources`: provenance_sources(), if the caller has them for every
    route. `with_tasks=False`: without the `tasks` key (the per-task rows)."""
    route = board_row["route"]
    tasks = []
    if with_tasks:
        judges = (details if details is not None else judge_details(judge_scores(store))).get(route, {})
        # The three columns used, as tuples (not every column of cells_now as a dict: 15,000 of them at 32 routes).
        for task_id, cell_status, cell_score in store.db.execute(
                "SELECT cs.task_id, cs.status, cs.score FROM cells_now cs JOIN tasks t ON t.task_id = cs.task_id WHERE cs.route = ? "
                "ORDER BY t.position", [route]):
            status = "pending" if cell_status == "judging" else cell_status
            score = cell_score if status == "ok" else (0.0 if status in ZERO_FILLED else None)
            tasks.append({"task_id": task_id, "status": status, "score": score, "judges": judges.get(task_id, {})})
    keys = ("overall", "all_tasks_overall", "scored_overall", "scored_n", "n_tasks", "out_of_context_n", "failed_n", "pending_n",
            "waiting_n", "blocked_n", "accepted_n", "complete", "accepted_overall")
    reasons = non_protocol(inputs.config, board_row)
    return {"route": route, "model": board_row["model"], "provider": board_row["provider"], "score_scale": "0-1",
            **{k: board_row[k] for k in keys}, "protocol_number": not reasons, "non_protocol": reasons,
            **({"tasks": tasks} if with_tasks else {}),
            "provenance": provenance(store, inputs, route, sources)}


def route_responses(store: Store, config: Config, route: str) -> dict[str, Any]:
    r = config.routes[route]
    tasks = []
    for row in store.rows(
        """SELECT cs.task_id, cs.status, cs.custom_id, res.kind, res.text, res.finish_reason, res.input_tokens, res.output_tokens,
                  res.reasoning_tokens, res.cached_tokens, res.batch_id, b.ended_at, res.error_message,
                  (SELECT count(*) FROM results a WHERE a.custom_id = cs.custom_id) AS attempts
           FROM cells_now cs JOIN tasks t ON t.task_id = cs.task_id
           LEFT JOIN results res ON res.id = cs.result_id LEFT JOIN batches b ON b.id = res.batch_id
           WHERE cs.route = ? ORDER BY t.position""", [route]):
        # In the responses file an answer is ok whatever its judging (judging, waiting, blocked).
        status = "ok" if row["kind"] == "ok" else RESPONSE_STATUS.get(row["status"], row["status"])
        # A cell with a last attempt to show: an answer, or the failure that keeps it open (or accepted).
        has_answer = status in ("ok", "refusal", "empty", "accepted", "blocked", "waiting")
        tasks.append({
            "task_id": row["task_id"], "status": status, "custom_id": row["custom_id"],
            "response": row["text"] if has_answer else None,
            "finish_reason": row["finish_reason"] if has_answer else None,
            "error": row["error_message"] if status in ("accepted", "blocked", "waiting") else None,
            "usage": {"input_tokens": row["input_tokens"], "output_tokens": row["output_tokens"],
                      "reasoning_tokens": row["reasoning_tokens"], "cached_tokens": row["cached_tokens"]} if has_answer else None,
            "attempts": row["attempts"], "batch_id": row["batch_id"] if has_answer else None,
            "completed_at": _iso(row["ended_at"]) if has_answer else None,
        })
    return {"route": route, "model": r.model, "provider": r.provider, "protocol": config.protocol, "tasks": tasks}


def write_results(store: Store, inputs: Inputs, board: list[dict[str, Any]] | None = None) -> list[Path]:
    """Bring results/<route>.{responses,scores}.json and the manifest up to date, writing only the
    files whose bytes change (results_files.publish). `board`: the leaderboard as `leaderboard()`
    just read it, with nothing written since (its `cells_now` is then current and not evaluated again)."""
    from .results_files import publish

    config = inputs.config

    shas: dict[Path, str] = {}
    board = board if board is not None else leaderboard(store)
    stamp = _results_stamp(store, inputs)
    if stamp is not None and store.meta(_STAMP_KEY) == f"{stamp} {_records(store, config, board)}" and (
            kept_shas := _intact(store, config, board)) is not None:
        # Nothing any route file reads changed since they were all written, and each is still
        # the file written: their data is not built again (~1 s at 32 routes and 100k results).
        from . import manifest as manifest_

        return [*kept_shas, manifest_.write(store, config, kept_shas)]
    details = judge_details(judge_scores(store))
    sources = provenance_sources(store)
    for row in board:
        if row["route"] not in config.routes:
            continue
        responses, scores = _route_paths(config, row["route"])
        shas[responses] = publish(store, responses, route_responses(store, config, row["route"]))
        shas[scores] = publish(store, scores, route_scores(store, inputs, row, details, sources))
    if stamp is not None:
        with store.db.atomic():  # after every file is in place: a crash before leaves the old stamp
            store.set_meta(_STAMP_KEY, f"{stamp} {_records(store, config, board)}")
    from . import manifest

    return [*shas, manifest.write(store, config, shas)]


_STAMP_KEY = "results_stamp"


def _route_paths(config: Config, route: str) -> tuple[Path, Path]:
    base = config.paths.results / results_stem(route)
    return Path(f"{base}.responses.json"), Path(f"{base}.scores.json")


def _results_stamp(store: Store, inputs: Inputs) -> str | None:
    """A digest of everything the route files are made from, or None when it cannot be told
    cheaply (the kept state is not current: ledger/kept.py). The kept state's epoch grows with
    every change of a current cell's or request's state, which is what brings a new answer, a
    verdict, an attempt or a status into a file; the rest is read here: the config and each
    route's policy, the tasks' order, the batches (provenance's dates and hosts), the
    accepted failures, the dataset, the rehearsal, batchrun's version and how files are rendered."""
    if store.readonly or not kept.is_current(store):
        return None
    from .results_files import RENDERING

    h = hashlib.sha256()
    for part in (RENDERING, _batchrun_version(), repr(inputs.config), repr(sorted(inputs.policies.items())),
                 store.meta("dataset_sha256"), store.meta("rehearsal")):
        h.update(repr(part).encode() + b"\x00")
    for sql in ("SELECT epoch, inputs FROM kept_meta",
                "SELECT task_id, position, rubric_total FROM tasks ORDER BY task_id",
                "SELECT id, status, submitted_at, ended_at, endpoint_host FROM batches ORDER BY id",
                "SELECT * FROM accepted_failures ORDER BY id"):
        for row in store.db.execute(sql):
            h.update(repr(row).encode())
        h.update(b"\x00")
    return h.hexdigest()


def _records(store: Store, config: Config, board: list[dict[str, Any]]) -> str:
    """A digest of the route files' records in results_files as they were when the stamp was
    set: a record changed since (a crash between writing a file and recording it) takes the long way."""
    h = hashlib.sha256()
    for row in board:
        if row["route"] in config.routes:
            for path in _route_paths(config, row["route"]):
                h.update(repr(store.db.execute("SELECT path, fingerprint, sha256 FROM results_files WHERE path = ?",
                                               [str(path)]).fetchone()).encode())
    return h.hexdigest()


def _intact(store: Store, config: Config, board: list[dict[str, Any]]) -> dict[Path, str] | None:
    """Each route file's recorded sha256, if every one is still on disk as written (else None)."""
    from ..base.checksums import file_digest

    out: dict[Path, str] = {}
    for row in board:
        if row["route"] not in config.routes:
            continue
        for path in _route_paths(config, row["route"]):
            sha = store.scalar("SELECT sha256 FROM results_files WHERE path = ?", [str(path)])
            if sha is None or not path.is_file() or file_digest(path) != sha:
                return None
            out[path] = sha
    return out


def report_data(store: Store, config: Config | Inputs, board: list[dict[str, Any]] | None = None,
                judgments: list[dict[str, Any]] | None = None, *, with_tasks: bool = True) -> dict[str, Any]:
    """The same keys as the scores files (tasks included unless `with_tasks=False`: Markdown and
    CSV print no per-task rows), plus the matched panel. `board`: as for write_results (fills
    `cells_now` when not given); `judgments`: judge_scores() if already read. `config`: the
    command's resolved inputs (a Config's policies are resolved here; no dataset is read)."""
    inputs = as_inputs(store, config, corpus=False)
    config = inputs.config
    board = board if board is not None else leaderboard(store)
    details = judge_details(judgments if judgments is not None else judge_scores(store)) if with_tasks else None
    sources = provenance_sources(store)
    routes = [route_scores(store, inputs, row, details, sources, with_tasks=with_tasks)
              for row in board if row["route"] in config.routes]
    from ..ledger.diagnosis import open_problems

    return {"rehearsal": rehearsal_of(store, config), "protocol": config.protocol, "protocol_note": config.protocol_note,
            "score_scale": "0-1", "routes": routes, "matched_panel": matched_panel(store),
            "dataset_sha256": store.meta("dataset_sha256"), "batchrun_version": _batchrun_version(),
            "problems": [p.as_json() for p in open_problems(store, config, requests="requests_now")]}
