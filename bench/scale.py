"""Benchmark: the commands that read state.db, as a user runs them, at 4-96 routes and 10k-300k results.

    python bench/scale.py                      # 4, 32, 96 routes x 10k, 100k, 300k results
    python bench/scale.py --quick              # 4, 32 routes x 10k, 30k results (a few minutes)
    python bench/scale.py --routes 32 --results 100000,300000 [--timeout 600] [--repeat 1]

For each (routes, results) this builds a realistic state.db (below), then times, each as a child
process from spawn to exit, on a fresh copy of that state.db for the commands that write:

    status       `batchrun status`
    report       `batchrun report` (Markdown, to stdout)
    collect      `batchrun collect` with nothing new downloaded (sync, ingest nothing,
                 queue_judgments with nothing to queue, the leaderboard, write_results, manifest),
                 after an untimed collect: as in a project, results/ and state.db's record of it
                 (m016) are those the collect before left, so unchanged files are not rewritten
    collect+new  `batchrun collect` with every live batch downloaded (the night's answers and
                 verdicts arrive; reconciled, new judge requests queued, results written)
    raw          (in-process) the same result lines as collect+new, one executemany into a fresh
                 table: collect+new's baseline
    plan         `batchrun plan` with no judge request left to queue. It still writes the retries
                 of the cells that were *waiting*: a new run gives them a fresh retry budget, by
                 design (it writes a few hundred lines, reported).

Each command is killed after --timeout seconds (default 900) and shown as "timeout > N s"; a command that timed
out is not run at larger result counts for the same routes ("not run").

The state.db. A real sync (`sync_state`, batchrun's own) of a 481-task dataset over 38 small
documents plus two longer than every route's cap (English 5.06 M characters, Chinese 1.28 M: the
shared corpus's complete Shakespeare and yuanqu when /work/shared/corpus is there, synthetic text
of the same lengths otherwise), and a config of N contestant routes (openai, anthropic, gemini
models in turn, priced) and a 3-judge panel. Then, per cell, a scripted history of attempts that
batchrun's own `collect_batch` reconciles from provider-native result files (so results and
judgments rows are exactly what collect writes), with judge requests queued as `queue_judgments`
queues them (custom_id, parent_custom_id, parent_result_id, graded_sha256, estimates), batches and
batch_requests as plan/submit/poll leave them, and one `runs` row per night:

- even-numbered routes are complete: ~95% ok (~12% of them after a transient error, ~2% after
  a line missing from the result file, some judges after an unparseable verdict or a transient
  error), ~3% refusals, ~2% empty answers;
- odd-numbered routes still have open cells: ~62% ok (retried likewise; on every other one ~6%
  after their first batch expired, on the others after it was cancelled), ~9% judging (judge
  requests in a live batch), ~9% pending (generation in a live batch, some after a transient
  error), ~4% refusal or empty, ~4% blocked (a 400 on the answer, or a 400 or a refused key on
  one judge), ~4% waiting (this run's retries used up: 6 transient failures of the answer, or 4
  of a judge, in the last run);
- every route: the tasks on the two long documents are out of context scope (24 of 481).

So results hold every kind collect writes: ok, refusal, empty, transient, unparseable, invalid,
auth, expired, cancelled, missing and (in the history, a batch that failed validation)
batch_failed.

When the current round holds more results than asked for (96 routes at 10k or 100k), only part
of it has happened: the other cells are pending, their requests in live batches. When it holds
fewer, the rest is history, as a long-lived state.db accumulates it, all invisible to the
current views: first the answers judged by an earlier panel (an older judge policy), then, in
turn, retired routes (no longer in the config) and older policies of current routes (another
max_tokens), each a complete round of 481 cells, the last one cut to hit the count exactly.
Timestamps are moved back so that the last night ended hours ago (retry backoffs are over).

Validation (every configuration): `batchrun status --json` must give, per route, exactly the cell
statuses the builder scripted; collect with nothing new must queue 0 judge requests; plan must
write exactly the waiting requests. On the first configuration `batchrun report --format json`
is checked too (complete routes complete with a headline, each ok cell with 3 judges' details).

Output: a table per command (with the child's peak RSS), the ratios of time at the largest
result count to the next (300k ÷ 100k, or 30k ÷ 10k with --quick) per command and route count,
the peak RSS at both counts, the targets, `noop=<collect with nothing new ÷ the floor>` and
`status=<status ÷ the floor>` at 32 routes and 100k results (issue 30: <= 0.5 and <= 0.25), and
last `ratio=<the worst of those ratios>` (issue 15: <= 3.3; issue 30: <= 1.7). A ratio whose
larger run timed out is a lower bound and is marked so. The floor is bench/ingest.py's, over the
state.db's own result lines (each decoded and inserted as one row into a fresh table with
results' DDL and indexes), timed in-process once per repeat. Each built state.db has its kept
per-cell state brought up to date, as a project's last batchrun writer leaves it (ledger/kept.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from _common import (
    child_env, lib, load1, load_line, machine_line, median, note, print_table, raw_executemany, refuse_inside_repo,
    remove_state, remove_tree, run_measured,
)
from _common import floor_insert as common_floor_insert
from _lines import EN_WORDS, ZH_CHARS, Lines, age_state, id_and_answer, mark_downloaded, write_result_files

N_TASKS = 481
N_SMALL_DOCS = 38
N_LONG_TASKS = 12  # tasks on each of the two long documents (out of context for every route)
SHARED_CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus"
MODELS = (("openai", "gpt-5.5"), ("anthropic", "claude-opus-4.8"), ("gemini", "gemini-2.5-pro"), ("openai", "gpt-5.4"),
          ("anthropic", "claude-opus-4.6"), ("gemini", "gemini-3.1"), ("openai", "gpt-4.1"))
JUDGES = (("judge-gpt", "openai", "gpt-5.1"), ("judge-sonnet", "anthropic", "claude-sonnet-4-6"),
          ("judge-flash", "gemini", "gemini-2.5-flash"))
# Attempts that leave no line in the result file, and the provider state of their batch.
NO_LINE = {"expired": "expired", "cancelled": "cancelled", "batch_failed": "failed", "missing": "done"}
MAX_PER_BATCH = 50_000  # the smallest provider limit (OpenAI requests per file)
COMMANDS = ("status", "report", "collect", "collect+new", "plan")
TARGET_RATIO = 3.3
TARGET_REPORT_VS_STATUS = 2.0
TARGET_COLLECT_VS_RAW = 0.5
# Issue 30: the commands against the floor (the least any collect does with the same lines:
# decode each, insert one row into results' table; bench/ingest.py), at 32 routes and 100k.
TARGET_RATIO_30 = 1.7
TARGET_NOOP_VS_FLOOR = 0.5
TARGET_STATUS_VS_FLOOR = 0.25
DAY = 86_400.0


# --- inputs -----------------------------------------------------------------------------------


def _text_en(rng: random.Random, chars: int) -> str:
    out, n = [], 0
    while n < chars:
        s = " ".join(rng.choice(EN_WORDS) for _ in range(rng.randint(8, 20))).capitalize() + f" ({rng.randint(1800, 2024)}).\n"
        out.append(s)
        n += len(s)
    return "".join(out)


def _text_zh(rng: random.Random, chars: int) -> str:
    out, n = [], 0
    while n < chars:
        s = "".join(rng.choice(ZH_CHARS) for _ in range(rng.randint(10, 30))) + "。\n"
        out.append(s)
        n += len(s)
    return "".join(out)


def write_inputs(root: Path) -> dict[str, Any]:
    """Corpus and dataset, shared by every configuration (documents are measured once)."""
    corpus, data = root / "corpus", root / "data"
    dataset = data / "tasks.json"
    if dataset.exists():
        return {"corpus": corpus, "dataset": dataset}
    corpus.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    rng = random.Random(15)
    long_en, long_zh = SHARED_CORPUS / "en" / "shakespeare_complete.txt", SHARED_CORPUS / "zh" / "yuanqu.txt"
    if long_en.exists() and long_zh.exists():
        shutil.copyfile(long_en, corpus / "long_en.txt")
        shutil.copyfile(long_zh, corpus / "long_zh.txt")
    else:
        (corpus / "long_en.txt").write_text(_text_en(rng, 5_060_000), encoding="utf-8")
        (corpus / "long_zh.txt").write_text(_text_zh(rng, 1_282_000), encoding="utf-8")
    for d in range(N_SMALL_DOCS):
        zh = d % 5 == 4  # about a fifth in Chinese
        text = _text_zh(rng, rng.randint(1_500, 6_000)) if zh else _text_en(rng, rng.randint(3_000, 15_000))
        (corpus / f"doc_{d:02d}.txt").write_text(f"Document {d}.\n{text}", encoding="utf-8")
    tasks = []
    for t in range(N_TASKS):
        if t < N_LONG_TASKS:
            doc = "long_en.txt"
        elif t < 2 * N_LONG_TASKS:
            doc = "long_zh.txt"
        else:
            doc = f"doc_{t % N_SMALL_DOCS:02d}.txt"
        n_items = 2 + t % 4
        points = [100 // n_items] * n_items
        points[0] += 100 - sum(points)
        tasks.append({
            "task_id": f"task-{t:04d}", "question_text": f"Question {t}: what did the clerk record about item {t} and when?",
            "corpus_file": doc,
            "ground_truth": {"answer": "-", "scoring_rubric": [{"points": p, "correct_criterion": f"names detail {k} of item {t}"}
                                                              for k, p in enumerate(points)]},
        })
    dataset.write_text(json.dumps(tasks), encoding="utf-8")
    return {"corpus": corpus, "dataset": dataset}


def route_spec(i: int) -> tuple[str, dict[str, Any]]:
    provider, model = MODELS[i % len(MODELS)]
    return f"r{i:03d}-{model}", {"provider": provider, "model": model, "price": {"input": 2.0, "output": 10.0}}


def config_dict(project: Path, inputs: dict[str, Any], n_routes: int, retired: int = 0) -> dict[str, Any]:
    routes = dict(route_spec(i) for i in range(n_routes))
    for k in range(retired):  # only in the build config: what collect priced them with back then
        provider, model = MODELS[k % len(MODELS)]
        routes[f"retired-{k:03d}-{model}"] = {"provider": provider, "model": model, "price": {"input": 3.0, "output": 15.0}}
    for name, provider, model in JUDGES:
        routes[name] = {"provider": provider, "model": model, "price": {"input": 1.0, "output": 4.0}}
    return {
        "paths": {"dataset": str(inputs["dataset"]), "corpus": str(inputs["corpus"]), "state": str(project / "state.db"),
                  "jobs": str(project / "jobs"), "results": str(project / "results")},
        "judging": {"panel": [j[0] for j in JUDGES]},
        "routes": routes,
    }


# --- scripts: what happened to each cell --------------------------------------------------------
#
# An attempt is (kind, night, round): kind ok | refusal | empty | transient | invalid | expired |
# unparseable (judges) | live (in a batch still running: no result yet). Nights: "C1" (the first
# night of the current round), "C2" (its judging), "L" (the last night), or a history night.


@dataclass
class Cell:
    unit: int  # 0 = the current round; k > 0 = the k-th history unit
    route: str
    fp: str
    task_id: str
    gen_cid: str
    prompt_chars: int
    gen: list[tuple[str, str, int]] = field(default_factory=list)
    judges: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)  # judge fp key -> attempts
    expected: str = ""  # the cell_status the builder means (current cells only)

    def results(self) -> int:
        return sum(1 for k, _, _ in self.gen if k != "live") + sum(1 for a in self.judges.values() for k, _, _ in a if k != "live")


def _u(rng: random.Random) -> float:
    return rng.random()


def script_cell(rng: random.Random, c: Cell, judge_keys: list[str], complete_route: bool, expired_route: bool, night1: str,
                night2: str, last: str, lost: str = "missing", failed_batch: bool = False) -> None:
    """Fill a cell's attempts and its expected status. `expired_route`: its first batch ended
    `lost` (expired or cancelled) before ~6% of its requests ran; otherwise ~2% of the answers are
    missing from the first result file. `failed_batch`: the first batch failed validation as a
    whole (every request batch_failed, then resubmitted)."""
    def judged_ok() -> list[tuple[str, str, int]]:
        r = _u(rng)
        if r < 0.04:
            return [("unparseable", night2, 1), ("ok", night2, 2)]
        if r < 0.07:
            return [("transient", night2, 1), ("ok", night2, 2)]
        return [("ok", night2, 1)]

    first = 2 if failed_batch else 1

    def answered() -> list[tuple[str, str, int]]:
        r = _u(rng)
        if expired_route and r < 0.06:
            out = [(lost, night1, first), ("ok", night1, first + 1)]
        elif not expired_route and r < 0.02:
            out = [("missing", night1, first), ("ok", night1, first + 1)]
        elif r < 0.14:
            out = [("transient", night1, first), ("ok", night1, first + 1)]
        else:
            out = [("ok", night1, first)]
        return ([("batch_failed", night1, 1)] if failed_batch else []) + out

    r = _u(rng)
    if complete_route:
        kind = "ok" if r < 0.95 else "refusal" if r < 0.98 else "empty"
    else:
        table = (("ok", 0.62), ("judging", 0.09), ("pending", 0.09), ("refusal", 0.03), ("empty", 0.01),
                 ("blocked_gen", 0.025), ("blocked_judge", 0.015), ("waiting_gen", 0.025), ("waiting_judge", 0.015))
        kind = "ok"
        for k, share in table:
            if r < share:
                kind = k
                break
            r -= share
    if kind in ("refusal", "empty"):
        c.gen, c.expected = ([("batch_failed", night1, 1)] if failed_batch else []) + [(kind, night1, first)], kind
        return
    if kind == "pending":
        c.gen = ([("transient", night1, 1)] if _u(rng) < 0.4 else []) + [("live", last, 0)]
        c.expected = "pending"
        return
    if kind == "blocked_gen":
        c.gen, c.expected = [("invalid", night1, 1)], "blocked"
        return
    if kind == "waiting_gen":
        c.gen, c.expected = [("transient", night1, 1)] + [("transient", last, i) for i in range(1, 7)], "waiting"
        return
    c.gen = answered()
    c.judges = {j: judged_ok() for j in judge_keys}
    c.expected = "ok"
    if kind == "judging":
        live = judge_keys[1:] if _u(rng) < 0.5 else judge_keys[1:2]
        for j in live:
            c.judges[j] = [("live", last, 0)]
        c.expected = "judging"
    elif kind == "blocked_judge":  # a 400 on one judge's request, or that judge's key refused
        c.judges[judge_keys[rng.randrange(len(judge_keys))]] = [("invalid" if _u(rng) < 0.5 else "auth", night2, 1)]
        c.expected = "blocked"
    elif kind == "waiting_judge":
        c.judges[judge_keys[rng.randrange(len(judge_keys))]] = [("transient", last, i) for i in range(1, 5)]
        c.expected = "waiting"


def cut(c: Cell, n: int) -> None:
    """Keep the first n results of a (history) cell's attempts, in the order they happened."""
    gen = [a for a in c.gen if a[0] != "live"][:n]
    n -= len(gen)
    c.gen = gen
    judges = {}
    if gen and gen[-1][0] == "ok":
        for j, attempts in c.judges.items():
            if n <= 0:
                break
            judges[j] = attempts[:n]
            n -= len(judges[j])
    c.judges = judges


# --- building ---------------------------------------------------------------------------------


@dataclass
class Night:
    name: str
    run_id: int = 0
    start: float = 0.0


class Builder:
    def __init__(self, project: Path, inputs: dict[str, Any], n_routes: int, n_results: int, seed: int):
        self.project, self.inputs, self.n_routes, self.n_results = project, inputs, n_routes, n_results
        self.rng = random.Random(seed * 1_000_003 + n_routes * 1009 + n_results)
        self.lines = Lines(seed, answer_pool=500)
        self.L = lib()
        self.seq = 0
        self.batch_rows: list[tuple[str, float, str]] = []  # (batch id, planned time offset, night)
        self.nights: dict[str, Night] = {}
        self.live_batches: list[str] = []
        self.expected: dict[str, Counter] = defaultdict(Counter)
        self.waiting_requests = 0
        self.history_units: list[str] = []

    # -- helpers ---------------------------------------------------------------------------------

    def night(self, name: str) -> Night:
        if name not in self.nights:
            cur = self.store.db.execute(
                "INSERT INTO runs (command, started_at, ended_at, pid, batchrun_version, outcome) VALUES ('refresh', 0, 0, 1, ?, 'ok')",
                [__import__("batchrun").__version__])
            self.nights[name] = Night(name, cur.lastrowid)
        return self.nights[name]

    def new_batch(self, route: str, stage: str, members: list[str], night: str, rnd: int, live: bool = False) -> str:
        r = self.cfg.routes[route]
        self.seq += 1
        bid = f"{self.seq:06d}-{route[:40]}-{stage}"
        folder = self.project / "jobs" / bid
        n = self.night(night)
        est_in = sum(self.est_in[m] for m in members)
        est_out = sum(self.est_out[m] for m in members)
        cost = self.L.request_cost(r, est_in, est_out)
        self.store.db.execute(
            """INSERT INTO batches (id, seq, route, stage, provider, transport, model, status, dir, request_file, sha256, bytes,
               n_requests, est_input_tokens, est_output_tokens, est_cost, provider_file_id, provider_batch_id, provider_status,
               provider_state, quota, counts_json, endpoint_host, run_id, created_at, creating_at, submitted_at)
               VALUES (?, ?, ?, ?, ?, 'batch', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 0, ?, ?, ?, 0, 0, 0)""",
            [bid, self.seq, route, stage, r.provider, r.model, "in_flight" if live else "downloaded", str(folder),
             str(folder / "requests.jsonl"), hashlib.sha256(bid.encode()).hexdigest(), sum(self.prompt_chars[m] + 400 for m in members),
             len(members), est_in, est_out, cost, f"file-{self.seq:08x}" if r.provider == "openai" else None,
             f"batch_{hashlib.md5(bid.encode()).hexdigest()[:24]}", "in_progress" if live else "completed",
             json.dumps({"total": len(members)}), r.endpoint_host, n.run_id])
        self.store.db.conn.executemany("INSERT INTO batch_requests (batch_id, custom_id, position) VALUES (?, ?, ?)",
                                       [(bid, cid, i) for i, cid in enumerate(members)])
        self.batch_rows.append((bid, rnd, night))
        if live:
            self.live_batches.append(bid)
        return bid

    def run_batches(self, attempts: dict[tuple[str, str, str, int], list[tuple[str, str, str | None]]]) -> None:
        """attempts: (route, stage, night, round) -> [(custom_id, kind, text)]: one batch (or more,
        at the provider's limit) per key, its result file written and reconciled by collect_batch."""
        for (route, stage, night, rnd), members in sorted(attempts.items(), key=lambda kv: (kv[0][2] != "C1", kv[0][3], kv[0][1], kv[0][0])):
            for start in range(0, len(members), MAX_PER_BATCH):
                chunk = members[start:start + MAX_PER_BATCH]
                if rnd == 0:  # live: no result yet
                    self.new_batch(route, stage, [m[0] for m in chunk], night, 99, live=True)
                    continue
                bid = self.new_batch(route, stage, [m[0] for m in chunk], night, rnd)
                r = self.cfg.routes[route]
                out = []
                state = "done"
                for cid, kind, text in chunk:
                    if kind in NO_LINE:
                        # No line for it: the batch expired or was cancelled before it ran, failed
                        # validation as a whole, or its line is missing from the file.
                        state = NO_LINE[kind] if NO_LINE[kind] != "done" else state
                        continue
                    if kind == "unparseable":
                        out.append(self.lines.line(r.provider, r.model, cid, "ok", self.lines.verdict([1], parseable=False), self.prompt_chars[cid]))
                    else:
                        out.append(self.lines.line(r.provider, r.model, cid, kind, text, self.prompt_chars[cid]))
                folder = self.project / "jobs" / bid
                files = write_result_files(folder, r.provider, out) if state != "failed" else []  # a failed batch has no file
                mark_downloaded(self.store.db.conn, bid, files, provider_state=state, at=0.0)
                if state == "failed":
                    self.store.db.execute("UPDATE batches SET error = ? WHERE id = ?",
                                          ["validation failed: the input file is not valid JSONL (line 3)", bid])
                row = self.store.one("SELECT * FROM batches WHERE id = ?", [bid])
                self.store.run_id = self.nights[night].run_id
                self.L.collect_batch(self.store, self.cfg, row, self.L.CollectResult())
                remove_tree(folder)  # reconciled; only state.db is measured (a user may prune jobs/ too)

    def verdict_text(self, task_id: str) -> str:
        return self.lines.verdict(self.rubric_points[task_id])

    # -- the build -------------------------------------------------------------------------------

    def build(self) -> dict[str, Any]:
        L = self.L
        self.project.mkdir(parents=True, exist_ok=True)
        config_path = self.project / "batchrun.json"
        config_path.write_text(json.dumps(config_dict(self.project, self.inputs, self.n_routes), indent=1), encoding="utf-8")
        real = L.load_config(config_path)
        remove_state(real.paths.state)
        remove_tree(real.paths.jobs)
        remove_tree(real.paths.results)
        self.store = store = L.Store(real.paths.state)
        L.sync_state(store, L.resolve_inputs(store, real))  # tasks, documents, policies, config_routes, cells, generation requests: batchrun's own
        self.real = real

        tasks = {r["task_id"]: r for r in store.rows("SELECT task_id, question, rubric_json, graded_sha256, task_sha256, doc_sha256 FROM tasks")}
        self.rubric_points = {t: [int(i["points"]) for i in json.loads(r["rubric_json"])] for t, r in tasks.items()}
        self.rubric_items = {t: [SimpleNamespace(points=i["points"], criterion=i["correct_criterion"]) for i in json.loads(r["rubric_json"])]
                             for t, r in tasks.items()}
        docs = {r["sha256"]: r for r in store.rows("SELECT d.sha256, d.chars, d.cjk FROM documents d")}
        prompt_by_task = {r["task_id"]: r["prompt_chars"] for r in store.rows("SELECT task_id, max(prompt_chars) AS prompt_chars FROM requests GROUP BY task_id")}
        cells_now = store.rows("""SELECT c.route, c.task_id, c.policy_fp, c.scope, c.custom_id, r.prompt_chars, r.est_input_tokens, r.est_output_tokens
                                  FROM cells c LEFT JOIN requests r ON r.custom_id = c.custom_id ORDER BY c.route, c.task_id""")
        routes = sorted({c["route"] for c in cells_now})
        judge_fps = {name: fp for name, fp in store.db.execute("SELECT route, policy_fp FROM config_routes WHERE role = 'judge'")}
        judge_keys = [f"{name}|{judge_fps[name]}" for name, _, _ in JUDGES]

        # Scripts of the current round.
        self.prompt_chars: dict[str, int] = {}
        self.est_in: dict[str, int] = {}
        self.est_out: dict[str, int] = {}
        current: list[Cell] = []
        ooc: dict[str, int] = Counter()
        for c in cells_now:
            if c["scope"] != "send":
                ooc[c["route"]] += 1
                continue
            i = routes.index(c["route"])
            cell = Cell(0, c["route"], c["policy_fp"], c["task_id"], c["custom_id"], c["prompt_chars"])
            script_cell(self.rng, cell, judge_keys, complete_route=i % 2 == 0, expired_route=i % 4 in (1, 3),
                        night1="C1", night2="C2", last="L", lost="expired" if i % 4 == 1 else "cancelled")
            current.append(cell)
            self.prompt_chars[c["custom_id"]] = c["prompt_chars"]
            self.est_in[c["custom_id"]], self.est_out[c["custom_id"]] = c["est_input_tokens"], c["est_output_tokens"]
        order = list(range(len(current)))
        self.rng.shuffle(order)
        total = 0
        for k, idx in enumerate(order):
            n = current[idx].results()
            if total + n > self.n_results:
                for rest in order[k:]:  # not happened yet: their requests are in live batches
                    cell = current[rest]
                    cell.gen, cell.judges, cell.expected = [("live", "L", 0)], {}, "pending"
                break
            total += n
        budget = self.n_results - total

        # History: first an older judge panel over the current answers, then retired routes and
        # older policies of current routes, a complete round each, until the count is reached.
        old_judges: list[tuple[str, str]] = []
        answered = [c for c in current if c.gen and c.gen[-1][0] == "ok"]
        old_panel_size = 3 * len(answered)
        if 0 < old_panel_size <= budget:
            for name, _, _ in JUDGES:
                policy = {**L.judge_policy(real, real.routes[name]), "max_tokens": 8192}
                fp = L.fingerprint(policy)
                store.db.execute("INSERT OR IGNORE INTO policies VALUES (?, 'judge', ?, ?, ?, ?, 0)",
                                 [fp, name, real.routes[name].provider, real.routes[name].model, json.dumps(policy, sort_keys=True)])
                old_judges.append((name, fp))
            budget -= old_panel_size
            self.history_units.append(f"an earlier judge panel over the current answers ({old_panel_size:,} results)")
        per_unit = max(1, int(sum(c.results() for c in current if c.route == routes[0]) or 481 * 4))
        retired = budget // max(1, per_unit // 2) + 2 if budget else 0  # generous: a unit may hold fewer results
        self.cfg = L.parse_config(config_dict(self.project, self.inputs, self.n_routes, retired), config_path)
        history: list[list[Cell]] = []
        unit = 0
        while budget > 0:
            unit += 1
            if unit % 2 == 1:  # a retired route
                k = unit // 2
                name = [n for n in self.cfg.routes if n.startswith(f"retired-{k:03d}-")][0]
                route = self.cfg.routes[name]
                policy = L.generation_policy(self.cfg, route)
                what = f"retired route {name}"
            else:  # an older policy of a current route (each a different completion budget)
                k = unit // 2 - 1
                name = routes[k % len(routes)]
                route = self.cfg.routes[name]
                max_tokens = 4096 - 64 * (k // len(routes))
                policy = {**L.generation_policy(self.cfg, route), "max_tokens": max_tokens}
                what = f"older policy of {name} (max_tokens {max_tokens})"
            fp = L.fingerprint(policy)
            night = f"H{unit:03d}"
            store.db.execute("INSERT OR IGNORE INTO policies VALUES (?, 'gen', ?, ?, ?, ?, 0)",
                             [fp, name, route.provider, route.model, json.dumps(policy, sort_keys=True)])
            cells: list[Cell] = []
            rows = []
            for task_id, t in tasks.items():
                doc = docs[t["doc_sha256"]]
                cap = route.caps.cjk if doc["cjk"] else route.caps.en
                scope = "send" if doc["chars"] <= cap else "out_of_context_scope"
                cid = None
                if scope == "send":  # every cell of the policy is planned (sync_state); only some ran before it changed
                    cid = L.generation_custom_id(fp, SimpleNamespace(task_id=task_id, question=t["question"]),
                                                 SimpleNamespace(sha256=t["doc_sha256"], newlines_translated=False))
                    cell = Cell(unit, name, fp, task_id, cid, prompt_by_task[task_id])
                    if budget > 0:
                        script_cell(self.rng, cell, judge_keys, complete_route=True, expired_route=unit % 4 == 1,
                                    night1=night, night2=night, last=night, failed_batch=unit % 5 == 2)
                        n = cell.results()
                        if n > budget:
                            cut(cell, budget)
                            n = cell.results()
                        budget -= n
                        cells.append(cell)
                    self.prompt_chars[cid] = cell.prompt_chars
                    self.est_in[cid] = L.estimate_tokens(cell.prompt_chars, bool(doc["cjk"]), route)
                    self.est_out[cid] = policy["max_tokens"]
                    store.db.execute(
                        """INSERT INTO requests (custom_id, stage, route, task_id, policy_fp, max_retries, max_resubmits, prompt_chars,
                           est_input_tokens, est_output_tokens, created_at) VALUES (?, 'gen', ?, ?, ?, ?, ?, ?, ?, ?, 0)""",
                        [cid, name, task_id, fp, self.cfg.generation.max_retries, self.cfg.generation.max_resubmits,
                         cell.prompt_chars, self.est_in[cid], self.est_out[cid]])
                rows.append((fp, task_id, name, t["doc_sha256"], doc["chars"], doc["cjk"], cap, route.caps.source, scope, cid,
                             t["task_sha256"], 0.0))
            store.db.conn.executemany("INSERT INTO cells VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            history.append(cells)
            self.history_units.append(f"{what} ({sum(c.results() for c in cells):,} results)")

        # Run it, in the order it happened.
        for cells in history:
            self.play(cells, {k: k.split("|")[1] for k in judge_keys})
        self.play(current, {k: k.split("|")[1] for k in judge_keys}, old_judges=old_judges)

        for c in current:
            self.expected[c.route][c.expected] += 1
        for route, n in ooc.items():
            self.expected[route]["out_of_context_scope"] += n
        self.waiting_requests = sum(1 for c in current for a in [c.gen, *c.judges.values()]
                                    if a and a[-1][1] == "L" and a[-1][0] == "transient")
        self.set_times()
        store.db.conn.commit()
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        n_results = store.scalar("SELECT count(*) FROM results")
        counts = {
            "results": n_results,
            "judgments": store.scalar("SELECT count(*) FROM judgments"),
            "requests": store.scalar("SELECT count(*) FROM requests"),
            "batches": store.scalar("SELECT count(*) FROM batches"),
            "live": len(self.live_batches),
            "live_requests": store.scalar(f"SELECT count(*) FROM batch_requests WHERE batch_id IN ({','.join('?' * len(self.live_batches))})",
                                          self.live_batches) if self.live_batches else 0,
        }
        store.close()
        if n_results != self.n_results:
            raise RuntimeError(f"built {n_results} results, meant {self.n_results}")
        return {"config": config_path, "counts": counts, "history": self.history_units}

    def play(self, cells: list[Cell], judge_fp_of: dict[str, str], old_judges: list[tuple[str, str]] = ()) -> None:
        """Generation attempts, then judge requests for the answers (as queue_judgments queues
        them) and their attempts, night by night, round by round."""
        L, store = self.L, self.store
        gen: dict[tuple, list] = defaultdict(list)
        for c in cells:
            for kind, night, rnd in c.gen:
                gen[(c.route, "gen", night, rnd)].append((c.gen_cid, kind, self.lines.answer() if kind == "ok" else None))
        first = {k: v for k, v in gen.items() if k[2] != "L"}
        self.run_batches(first)
        # The answers, as collect stored them.
        ids = [c.gen_cid for c in cells if c.judges or old_judges]
        answers: dict[str, tuple[int, str]] = {}
        for start in range(0, len(ids), 20_000):
            part = ids[start:start + 20_000]
            for rid, cid, text in store.db.execute(
                    f"SELECT id, custom_id, text FROM results WHERE kind = 'ok' AND custom_id IN ({','.join('?' * len(part))})", part):
                answers.setdefault(cid, (rid, text))
        tasks = {r["task_id"]: r for r in store.rows("SELECT task_id, question, graded_sha256 FROM tasks")}
        panels = [("old", [(n, fp) for n, fp in old_judges])] if old_judges else []
        panels.append(("new", [(k.split("|")[0], fp) for k, fp in judge_fp_of.items()]))
        for panel, judges in panels:
            jobs: dict[tuple, list] = defaultdict(list)
            rows = []
            for c in cells:
                if c.gen_cid not in answers or not c.judges:
                    continue
                rid, text = answers[c.gen_cid]
                t = tasks[c.task_id]
                prompt_chars = len(L.judge_prompt(t["question"], self.rubric_items[c.task_id], text))
                cjk = L.is_cjk(t["question"] + text[:L.CJK_WINDOW])
                for (name, fp), key in zip(judges, judge_fp_of):
                    route = self.cfg.routes[name]
                    jcid = L.judge_custom_id(fp, c.gen_cid, text, t["graded_sha256"])
                    max_tokens = 8192 if panel == "old" else self.cfg.judging.max_tokens
                    self.prompt_chars[jcid] = prompt_chars
                    self.est_in[jcid] = L.estimate_tokens(prompt_chars, cjk, route)
                    self.est_out[jcid] = max_tokens
                    rows.append((jcid, name, c.task_id, fp, c.gen_cid, rid, self.cfg.judging.max_retries_per_run,
                                 self.cfg.generation.max_resubmits, prompt_chars, self.est_in[jcid], max_tokens, t["graded_sha256"]))
                    attempts = c.judges.get(key, []) if panel == "new" else [("ok", c.gen[-1][1], 1)]
                    for kind, night, rnd in attempts:
                        text_j = self.verdict_text(c.task_id) if kind == "ok" else None
                        jobs[(name, "judge", night, rnd)].append((jcid, kind, text_j))
            store.db.conn.executemany(
                """INSERT OR IGNORE INTO requests (custom_id, stage, route, task_id, policy_fp, parent_custom_id, parent_result_id,
                   max_retries, max_resubmits, prompt_chars, est_input_tokens, est_output_tokens, created_at, graded_sha256)
                   VALUES (?, 'judge', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?)""", rows)
            self.run_batches({k: v for k, v in jobs.items() if k[2] != "L"})
            if panel == "new":
                self.run_batches({k: v for k, v in jobs.items() if k[2] == "L"})
        self.run_batches({k: v for k, v in gen.items() if k[2] == "L"})

    def set_times(self) -> None:
        """Nights a day apart, the last one ended hours ago; every timestamp follows its batch."""
        db = self.store.db
        order = sorted(self.nights.values(), key=lambda n: n.run_id)
        now = time.time()
        for i, n in enumerate(order):
            n.start = now - (len(order) - i) * DAY + 2 * 3600  # the last night started 22 h ago
            db.execute("UPDATE runs SET started_at = ?, ended_at = ? WHERE id = ?", [n.start, n.start + 15 * 3600, n.run_id])
        for bid, rnd, night in self.batch_rows:
            start = self.nights[night].start + min(rnd, 7) * 7200
            live = bid in self.live_batches
            db.execute("""UPDATE batches SET created_at = ?, creating_at = ?, submitted_at = ?, ended_at = ?, downloaded_at = ?,
                          collected_at = ? WHERE id = ?""",
                       [start, start + 30, start + 60, None if live else start + 3600, None if live else start + 3660,
                        None if live else start + 3720, bid])
        db.execute("UPDATE results SET collected_at = (SELECT b.collected_at FROM batches b WHERE b.id = results.batch_id)")
        db.execute("""UPDATE requests SET created_at = coalesce((SELECT min(b.created_at) FROM batch_requests br JOIN batches b ON b.id = br.batch_id
                      WHERE br.custom_id = requests.custom_id) - 600, ?)""", [order[0].start])
        first = order[0].start - 3600
        db.execute("UPDATE cells SET planned_at = coalesce((SELECT r.created_at FROM requests r WHERE r.custom_id = cells.custom_id), ?)", [first])
        for table, col in (("policies", "first_seen"), ("datasets", "first_seen"), ("document_readings", "measured_at")):
            db.execute(f"UPDATE {table} SET {col} = ?", [first])


def make_downloaded(base: Path, new: Path, project: Path, live: list[str], seed: int) -> tuple[list[Path], int]:
    """A copy of state.db where every live batch ended and was downloaded (poll's work), with the
    night's result lines in jobs/: answers (~93% ok, 1% refusals, 5% transient, 1% invalid) and
    verdicts (95% ok, 1% unparseable, 4% transient)."""
    shutil.copyfile(base, new)
    lines = Lines(seed + 7, answer_pool=300)
    rng = lines.rng
    con = sqlite3.connect(new)
    rubric = {tid: [int(i["points"]) for i in json.loads(rj)] for tid, rj in con.execute("SELECT task_id, rubric_json FROM tasks")}
    files: list[Path] = []
    n = 0
    with con:
        for bid in live:
            provider, model, stage, folder = con.execute("SELECT provider, model, stage, dir FROM batches WHERE id = ?", [bid]).fetchone()
            out = []
            for cid, task_id, prompt_chars in con.execute(
                    """SELECT q.custom_id, q.task_id, q.prompt_chars FROM batch_requests br JOIN requests q ON q.custom_id = br.custom_id
                       WHERE br.batch_id = ? ORDER BY br.position""", [bid]):
                r = rng.random()
                if stage == "gen":
                    kind = "ok" if r < 0.93 else "refusal" if r < 0.94 else "transient" if r < 0.99 else "invalid"
                    out.append(lines.line(provider, model, cid, kind, lines.answer() if kind == "ok" else None, prompt_chars))
                elif r < 0.04:
                    out.append(lines.line(provider, model, cid, "transient", None, prompt_chars))
                else:
                    out.append(lines.line(provider, model, cid, "ok", lines.verdict(rubric[task_id], r >= 0.05), prompt_chars))
            written = write_result_files(Path(folder), provider, out)
            files += written
            n += len(out)
            mark_downloaded(con, bid, written, at=time.time() - 600)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return files, n


# --- measuring --------------------------------------------------------------------------------


@dataclass
class Timing:
    seconds: list[float] = field(default_factory=list)
    timed_out: bool = False
    loads: list[float] = field(default_factory=list)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    rss: list[int] = field(default_factory=list)  # the child's peak RSS, bytes

    @property
    def s(self) -> float:
        return median(self.seconds)

    def cell(self, timeout: float) -> str:
        if self.timed_out and not self.loads:
            return "not run"
        if self.timed_out:
            return f"timeout > {timeout:.0f} s"
        return f"{self.s:.2f}" if len(self.seconds) == 1 else f"{self.s:.2f} ({min(self.seconds):.2f}-{max(self.seconds):.2f})"


@dataclass
class Config:
    routes: int
    results: int
    counts: dict[str, Any] = field(default_factory=dict)
    history: list[str] = field(default_factory=list)
    timings: dict[str, Timing] = field(default_factory=dict)
    new_lines: int = 0
    raw: Timing = field(default_factory=Timing)
    floor: Timing = field(default_factory=Timing)
    validation: list[str] = field(default_factory=list)
    build_s: float = 0.0


def batchrun(config: Path, *args: str, timeout: float | None = None) -> Any:
    return run_measured([sys.executable, "-m", "batchrun", "--config", config, "-q", *args], env=child_env(), cwd=config.parent,
                        ok_codes=(0, 2), timeout=timeout)


def place(src: Path, state: Path) -> None:
    remove_state(state)
    shutil.copyfile(src, state)


def measure(cfg: Config, project: Path, config_path: Path, base: Path, new: Path, new_files: list[Path], expected: dict[str, Counter],
            waiting: int, args: argparse.Namespace, validate_report: bool, slow: dict[tuple[int, str], int]) -> None:
    state = project / "state.db"
    for c in COMMANDS:
        cfg.timings[c] = Timing()
    # A command that timed out at fewer results (same routes) would time out again: not run.
    skip: set[str] = {c for c in COMMANDS if (cfg.routes, c) in slow}
    for c in skip:
        cfg.timings[c].timed_out = True
        cfg.timings[c].note = f"not run: timed out at {slow[(cfg.routes, c)]:,} results"

    def run(name: str, *argv: str) -> Any:
        t = cfg.timings[name]
        t.loads.append(load1())
        r = batchrun(config_path, *argv, timeout=args.timeout)
        if r.timed_out:
            t.timed_out = True
            skip.add(name)  # one timeout is enough: the next repeat would take as long
            slow.setdefault((cfg.routes, name), cfg.results)
            note(f"    {name}: timeout > {args.timeout:.0f} s")
            return None
        t.seconds.append(r.wall)
        t.rss.append(r.maxrss)
        note(f"    {name}: {r.wall:.2f} s, peak RSS {r.maxrss / 2**20:.0f} MiB")
        return r

    floor_rows = floor_lines(base)
    for i in range(args.repeat):
        note(f"  [{cfg.routes} routes, {cfg.results:,} results] run {i + 1}/{args.repeat} ({load_line()})")
        cfg.floor.loads.append(load1())
        seconds, got = floor_insert(floor_rows, base, project / "floor.db")
        cfg.floor.seconds.append(seconds)
        note(f"    floor: {got:,} lines decoded and inserted as results rows: {seconds:.2f} s")
        place(base, state)
        if "status" not in skip and (r := run("status", "status", "--json")) is not None and i == 0:
            got = {route: Counter(counts) for route, counts in json.loads(r.stdout)["cells"].items()}
            want = {route: Counter(c) for route, c in expected.items()}
            if got != want:
                diff = {route: (dict(want.get(route, {})), dict(got.get(route, {}))) for route in set(got) | set(want)
                        if got.get(route) != want.get(route)}
                cfg.validation.append(f"FAILED: status cells differ from the built mix (route: (built, status)): {list(diff.items())[:3]}")
            else:
                cfg.validation.append("status: every route's cells match the built mix")
        if "report" not in skip:
            run("report", "report")
        if validate_report and i == 0:
            cfg.validation += check_report(config_path, expected)
        if "collect" not in skip:
            place(base, state)
            batchrun(config_path, "collect", timeout=args.timeout)  # untimed: the collect before (see the docstring)
            r = run("collect", "collect")
            if r is not None and i == 0:
                ok = r.stdout.strip().startswith("collected 0 batch(es), 0 result line(s); 0 judge request(s) queued")
                cfg.validation.append(("collect (nothing new): " if ok else "FAILED: collect (nothing new): ") + r.stdout.strip())
        if "plan" not in skip:
            place(base, state)
            before = set((project / "jobs").glob("*")) if (project / "jobs").exists() else set()
            r = run("plan", "plan", "--json")
            if r is not None:
                summary = json.loads(r.stdout)
                sent = sum(x["to_send"] for x in summary["routes"])
                nbytes = sum(x["bytes"] for x in summary["routes"])
                cfg.timings["plan"].note = f"wrote {sent} retries, {nbytes:,} bytes"
                if i == 0:
                    ok = sent == waiting
                    cfg.validation.append(("plan: " if ok else "FAILED: plan: ") + f"wrote {sent} request(s), the {waiting} waiting ones")
            for p in set((project / "jobs").glob("*")) - before:
                remove_tree(p)
        if "collect+new" not in skip:
            cfg.raw.loads.append(load1())
            seconds, got = raw_executemany(new_files, project / "raw.db")
            cfg.raw.seconds.append(seconds)
            note(f"    raw executemany of {got:,} lines: {seconds:.2f} s")
            place(new, state)
            r = run("collect+new", "collect")
            if r is not None:
                cfg.timings["collect+new"].note = r.stdout.strip()
    remove_state(state)
    remove_tree(project / "results")


def keep_current(state: Path) -> None:
    """ledger.kept.keep_current on `state` (a batchrun from before issue 30 keeps no state)."""
    try:
        from batchrun.ledger import kept
    except ImportError:
        return
    with lib().Store(state) as store:
        kept.keep_current(store)


def floor_lines(base: Path) -> list[tuple[str, str]]:
    """(batch_id, line) of every result of the built state.db that kept its line (raw_json)."""
    con = sqlite3.connect(base)
    rows = con.execute("SELECT batch_id, raw_json FROM results WHERE raw_json IS NOT NULL ORDER BY id").fetchall()
    con.close()
    return rows


def floor_insert(lines: list[tuple[str, str]], base: Path, db_path: Path) -> tuple[float, int]:
    """bench/ingest.py's floor over the state.db's own result lines: each decoded (json.loads), its
    custom_id and answer taken by its shape, one row each into a fresh table made with results'
    own DDL and indexes, one transaction, WAL, ingest's page cache. Seconds, rows."""

    def rows(now: float) -> Any:
        for batch_id, line in lines:
            custom_id, text = id_and_answer(json.loads(line))
            yield (batch_id, custom_id, "ok" if text is not None else "error", text, line, now, 1)

    return common_floor_insert(base, db_path, rows, or_ignore=True)


def check_report(config_path: Path, expected: dict[str, Counter]) -> list[str]:
    r = batchrun(config_path, "report", "--format", "json")
    data = json.loads(r.stdout)
    out = []
    problems = []
    for route in data["routes"]:
        want = expected[route["route"]]
        open_n = sum(want[k] for k in ("pending", "judging", "waiting", "blocked"))
        if route["complete"] != (open_n == 0):
            problems.append(f"{route['route']}: complete={route['complete']}, built {open_n} open cells")
        if (route["overall"] is None) != (open_n > 0):
            problems.append(f"{route['route']}: headline {route['overall']} with {open_n} open cells")
        if route["failed_n"] != want["refusal"] + want["empty"]:
            problems.append(f"{route['route']}: failed_n {route['failed_n']}, built {want['refusal'] + want['empty']}")
        for t in route["tasks"]:
            if t["status"] == "ok" and (len(t["judges"]) != 3 or t["score"] is None):
                problems.append(f"{route['route']} {t['task_id']}: ok with {len(t['judges'])} judge details")
                break
    complete = sum(1 for r in data["routes"] if r["complete"])
    if problems:
        out.append("FAILED: report: " + "; ".join(problems[:5]))
    else:
        out.append(f"report --format json: {complete} complete route(s) with a headline, {len(data['routes']) - complete} with open "
                   "cells and none; failed_n = refusals + empty; every ok cell has 3 judges' details and a score")
    return out


# --- driver -----------------------------------------------------------------------------------


def parse_list(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().lower().replace("_", "")
        mult = 1_000 if part.endswith("k") else 1
        out.append(int(float(part.rstrip("k")) * mult))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 and 32 routes x 10k and 30k results (a few minutes)")
    ap.add_argument("--routes", type=parse_list, help="route counts, e.g. 4,32,96 (default)")
    ap.add_argument("--results", type=parse_list, help="result counts, e.g. 10k,100k,300k (default); the ratio is the last ÷ the one before")
    ap.add_argument("--timeout", type=float, default=900, help="kill a command after this many seconds (default 900); a command "
                    "that timed out is not run again at more results for the same routes")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each command per configuration, median reported (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, help="parent folder for the temporary projects (default /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the built state.db files (and print where)")
    args = ap.parse_args(argv)
    routes_list = args.routes or ([4, 32] if args.quick else [4, 32, 96])
    results_list = args.results or ([10_000, 30_000] if args.quick else [10_000, 100_000, 300_000])

    work = Path(tempfile.mkdtemp(prefix="batchrun-bench-scale-", dir=args.workdir))
    refuse_inside_repo(work)
    inputs = write_inputs(work / "inputs")
    configs: list[Config] = []
    started = time.perf_counter()
    first = True
    slow: dict[tuple[int, str], int] = {}  # (routes, command) -> the result count it first timed out at
    try:
        for n_routes in routes_list:
            for n_results in results_list:
                cfg = Config(n_routes, n_results)
                project = work / f"r{n_routes}-n{n_results}"
                note(f"[{n_routes} routes, {n_results:,} results] building state.db ({load_line()}) ...")
                t0 = time.perf_counter()
                builder = Builder(project, inputs, n_routes, n_results, args.seed)
                built = builder.build()
                # As a project's last batchrun writer leaves it: the per-cell state kept current
                # (ledger/kept.py; the builder's own last writes are plain SQL).
                keep_current(project / "state.db")
                base = project / "base.db"
                shutil.move(project / "state.db", base)
                remove_state(project / "state.db")
                new = project / "new.db"
                new_files, cfg.new_lines = make_downloaded(base, new, project, builder.live_batches, args.seed)
                cfg.build_s = time.perf_counter() - t0
                cfg.counts, cfg.history = built["counts"], built["history"]
                note(f"  built in {cfg.build_s:.0f} s: " + ", ".join(f"{k} {v:,}" for k, v in cfg.counts.items())
                     + f"; {cfg.new_lines:,} new lines for collect+new")
                measure(cfg, project, built["config"], base, new, new_files, builder.expected, builder.waiting_requests, args,
                        validate_report=first, slow=slow)
                first = False
                for v in cfg.validation:
                    note(f"  {v}")
                configs.append(cfg)
                if args.keep:
                    note(f"  kept {base} and {new}")
                else:
                    remove_tree(project)
    finally:
        if not args.keep:
            remove_tree(work)

    report(configs, routes_list, results_list, args, time.perf_counter() - started)
    return 1 if any(v.startswith("FAILED") for c in configs for v in c.validation) else 0


def report(configs: list[Config], routes_list: list[int], results_list: list[int], args: argparse.Namespace, total_s: float) -> None:
    print(f"bench/scale.py — {machine_line(Path(tempfile.gettempdir()))}")
    print(f"{load_line()} at the end; whole run {total_s / 60:.1f} min; each command a child process, timed spawn to exit, "
          f"median of {args.repeat} run(s), killed after {args.timeout:.0f} s; 'load' is the 1-minute load average when it started")
    for c in configs:
        mix = ", ".join(f"{k} {v:,}" for k, v in c.counts.items())
        print(f"  {c.routes} routes, {c.results:,} results: {mix}; history: {'; '.join(c.history) or 'none'}; "
              f"built in {c.build_s:.0f} s; validation: {' | '.join(c.validation)}")
    by = {(c.routes, c.results): c for c in configs}
    for command in COMMANDS:
        print(f"\n{command}")
        rows = []
        for c in configs:
            t = c.timings[command]
            row = [c.routes, f"{c.results:,}", t.cell(args.timeout), f"{median(t.loads):.1f}" if t.loads else "-",
                   f"{max(t.rss) / 2**20:.0f}" if t.rss else "-"]
            if command == "collect+new":
                raw = c.raw
                ratio = "-" if t.timed_out or not t.seconds else f"{raw.s / t.s:.3f}"
                row += [f"{c.new_lines:,}", f"{raw.s:.2f}" if raw.seconds else "-", ratio, t.note]
            else:
                row.append(t.note)
            rows.append(row)
        head = ["routes", "results", "seconds", "load", "peak RSS MiB"] + (["new lines", "raw s", "collect/raw", "output"] if command == "collect+new" else ["note"])
        print_table(head, rows)
    if len(results_list) < 2:
        print("ratio needs two result counts")
        return
    hi, lo = results_list[-1], results_list[-2]
    print(f"\ntime at {hi:,} results ÷ time at {lo:,} results (target <= {TARGET_RATIO})")
    rows, worst, worst_what, bound = [], None, "", False
    for command in COMMANDS:
        row = [command]
        for n_routes in routes_list:
            a, b = by.get((n_routes, hi)), by.get((n_routes, lo))
            if not a or not b:
                row.append("-")
                continue
            ta, tb = a.timings[command], b.timings[command]
            if tb.timed_out or not tb.seconds:
                row.append("? (both slow)" if ta.timed_out else "?")
                continue
            num = args.timeout if ta.timed_out else ta.s
            r = num / tb.s
            row.append(f">= {r:.2f}" if ta.timed_out else f"{r:.2f}")
            if worst is None or r > worst:
                worst, worst_what, bound = r, f"{command} at {n_routes} routes", ta.timed_out
        rows.append(row)
    print_table(["command"] + [f"{r} routes" for r in routes_list], rows)
    c32 = by.get((32, 100_000)) or by.get((32, hi))
    if c32 and c32.timings["report"].seconds and c32.timings["status"].seconds:
        rs = c32.timings["report"].s / c32.timings["status"].s
        print(f"target report <= {TARGET_REPORT_VS_STATUS}x status at {c32.results:,} results, 32 routes: {rs:.2f}x "
              f"({'met' if rs <= TARGET_REPORT_VS_STATUS else 'MISSED'})")
    elif c32:
        print(f"target report <= {TARGET_REPORT_VS_STATUS}x status at 32 routes: report timed out (MISSED)")
    for c in configs:
        t = c.timings["collect+new"]
        if c.results == hi and t.seconds and c.raw.seconds:
            r = c.raw.s / t.s
            print(f"target collect+new >= {TARGET_COLLECT_VS_RAW}x raw executemany ({c.routes} routes, {c.results:,} results, "
                  f"{c.new_lines:,} lines): {r:.3f} ({'met' if r >= TARGET_COLLECT_VS_RAW else 'MISSED'})")
    print("\nfloor (bench/ingest.py's, over each state.db's own result lines): "
          + "; ".join(f"{c.routes} routes, {c.results:,}: {c.floor.s:.2f} s" for c in configs if c.floor.seconds))
    rss_rows = []
    for command in COMMANDS:
        row = [command]
        for n_routes in routes_list:
            a, b = by.get((n_routes, hi)), by.get((n_routes, lo))
            ra, rb = (a.timings[command].rss if a else []), (b.timings[command].rss if b else [])
            row.append(f"{max(rb) / 2**20:.0f} -> {max(ra) / 2**20:.0f} MiB ({max(ra) / max(rb):.2f})" if ra and rb else "-")
        rss_rows.append(row)
    print(f"peak RSS at {lo:,} -> {hi:,} results (x)")
    print_table(["command"] + [f"{r} routes" for r in routes_list], rss_rows)
    c100 = by.get((32, 100_000))
    noop = status = None
    if c100 and c100.floor.seconds:
        if c100.timings["collect"].seconds:
            noop = c100.timings["collect"].s / c100.floor.s
            print(f"target collect (nothing new) <= {TARGET_NOOP_VS_FLOOR} x the floor for the same 100k lines: {noop:.3f} "
                  f"({'met' if noop <= TARGET_NOOP_VS_FLOOR else 'MISSED'})")
        if c100.timings["status"].seconds:
            status = c100.timings["status"].s / c100.floor.s
            print(f"target status <= {TARGET_STATUS_VS_FLOOR} x that floor: {status:.3f} "
                  f"({'met' if status <= TARGET_STATUS_VS_FLOOR else 'MISSED'})")
    if noop is not None:
        print(f"noop={noop:.3f}")
    if status is not None:
        print(f"status={status:.3f}")
    if worst is None:
        print("no ratio: every larger run's smaller counterpart timed out")
        print("ratio=nan")
        return
    print(f"worst: {worst_what}" + (f" (a lower bound: the {hi:,} run timed out)" if bound else "")
          + f"; target <= {TARGET_RATIO}: {'met' if worst <= TARGET_RATIO and not bound else 'MISSED'}; "
          f"issue 30's <= {TARGET_RATIO_30}: {'met' if worst <= TARGET_RATIO_30 and not bound else 'MISSED'}")
    print(f"ratio={worst:.3f}")


if __name__ == "__main__":
    sys.exit(main())
