"""Benchmark: ingesting 100,000 result lines through collect, against a raw SQLite baseline.

    python bench/ingest.py [--lines N] [--repeat N] [--full-collect] [--profile]

Setup (not timed), in a temporary folder outside the repository:

- a dataset of 481 tasks over 24 small documents, a config with 32 contestant routes (openai,
  anthropic and gemini, priced so collect computes costs) and a panel of 6 judge routes;
- `sync_state` (batchrun's own) records tasks, cells and the generation requests; judge requests
  (custom_ids from `judge_custom_id`, as queue_judgments makes them) are inserted for ~85,000
  (answer, judge) pairs; one batch per route and stage, status 'downloaded', with its members in
  batch_requests and its result files in jobs/<batch>/ in that provider's native result shape
  (OpenAI output.jsonl + errors.jsonl, Anthropic results.jsonl, Gemini results.jsonl with key).
- The lines: ~15% generation answers of 2-6 KB (about a fifth in Chinese), ~85% judge replies
  (`{"points_awarded":[...],"total":N}`, some fenced in ```json, some with prose around them, ~1%
  with no parseable total), and ~5% per-request errors (429/500/overloaded/400) across all of them.
  Seeded: the same lines every run.

Timed, in this process, each repeat on a fresh copy of the prepared state.db:

- batchrun: `batchrun.collect.ingest`, the ingestion step of `collect` (every downloaded batch in
  collect's order: read, parse, classify, parse verdicts, cost, insert results and judgments in
  20,000-line transactions, mark the batch collected; with its page cache, background WAL
  checkpoints and the garbage collector paused, and the last checkpoint before it returns).
- raw: the same raw lines read from the same files and inserted into a fresh SQLite table
  (`line TEXT`) with one executemany in one transaction (same folder, same WAL/synchronous
  pragmas as state.db).
- (informational, only with --full-collect) full `collect(store, config, write_outputs=False)`:
  sync_state, ingestion, queue_judgments for the new answers, the leaderboard view. Off by
  default (see docs/performance.md).

Output: one table, the target, and `ratio=<raw seconds / batchrun seconds>` (target >= 0.25).
`--profile` prints cProfile's top entries for one ingestion to stderr.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine_line, median, note, print_table, refuse_inside_repo, remove_state, remove_tree

N_TASKS = 481
N_DOCS = 24
N_GEN_ROUTES = 32
# Judges of other models than the contestants (GEN_MODELS): the config refuses a panel that would
# grade its own model.
JUDGES = [("judge-openai-a", "openai", "gpt-5.4"), ("judge-anthropic-a", "anthropic", "claude-sonnet-4.6"),
          ("judge-gemini-a", "gemini", "gemini-2.5-flash"), ("judge-openai-b", "openai", "gpt-4.1"),
          ("judge-anthropic-b", "anthropic", "claude-opus-4.6"), ("judge-gemini-b", "gemini", "gemini-3.1")]
GEN_MODELS = {"openai": "gpt-5.5", "anthropic": "claude-opus-4.8", "gemini": "gemini-2.5-pro"}
PROVIDER_CYCLE = ("openai", "anthropic", "gemini")
ERROR_RATE = 0.05
TARGET = 0.25

EN_WORDS = ("the report states that clerk inspected harbor ledger on march with receipts signed by the "
            "council after river bridge repairs costing francs recorded in volume and witnessed by "
            "engineer at station seven whose journal notes the delay caused by flooding").split()
ZH_CHARS = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严"
JUDGE_PROSE = ("The response names the clerk and the date but omits the amount. ",
               "Criterion 1 is satisfied; criterion 2 is only partly addressed. ",
               "Only the first rubric item is supported by specific details. ")


# --- setup ------------------------------------------------------------------------------------


def write_inputs(root: Path) -> Path:
    (root / "corpus").mkdir(parents=True)
    (root / "data").mkdir()
    for d in range(N_DOCS):
        words = " ".join(EN_WORDS[(d + i) % len(EN_WORDS)] for i in range(400))
        (root / "corpus" / f"doc_{d:02d}.txt").write_text(f"Document {d}. {words}\n", encoding="utf-8")
    tasks = []
    for t in range(N_TASKS):
        n_items = 2 + t % 4
        points = [100 // n_items] * n_items
        points[0] += 100 - sum(points)
        tasks.append({
            "task_id": f"task-{t:04d}", "question_text": f"Question {t}: what did the clerk record about item {t} and when?",
            "corpus_file": f"doc_{t % N_DOCS:02d}.txt",
            "ground_truth": {"answer": "-", "scoring_rubric": [{"points": p, "correct_criterion": f"names detail {k} of item {t}"}
                                                              for k, p in enumerate(points)]},
        })
    (root / "data" / "tasks.json").write_text(json.dumps(tasks), encoding="utf-8")
    routes: dict[str, Any] = {}
    for i in range(N_GEN_ROUTES):
        provider = PROVIDER_CYCLE[i % 3]
        routes[f"gen-{provider}-{i:02d}"] = {"provider": provider, "model": GEN_MODELS[provider],
                                             "price": {"input": 2.0, "output": 10.0}}
    for name, provider, model in JUDGES:
        routes[name] = {"provider": provider, "model": model, "price": {"input": 1.0, "output": 4.0}}
    config = {
        "paths": {"dataset": str(root / "data" / "tasks.json"), "corpus": str(root / "corpus"),
                  "state": str(root / "state.db"), "jobs": str(root / "jobs"), "results": str(root / "results")},
        "judging": {"panel": [j[0] for j in JUDGES]},
        "routes": routes,
    }
    path = root / "batchrun.json"
    path.write_text(json.dumps(config, indent=1), encoding="utf-8")
    return path


class Lines:
    """Seeded provider-native result lines."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.now = 1_760_000_000

    def hexid(self, n: int) -> str:
        return f"{self.rng.getrandbits(4 * n):0{n}x}"

    def answer(self) -> str:
        rng = self.rng
        target = rng.randint(2_000, 6_000)  # bytes
        if rng.random() < 0.2:
            n = target // 3
            return "".join(rng.choice(ZH_CHARS) for _ in range(n))
        out, size = [], 0
        while size < target:
            s = " ".join(rng.choice(EN_WORDS) for _ in range(rng.randint(8, 20))).capitalize() + f" ({rng.randint(1800, 2024)})."
            if rng.random() < 0.15:
                s += "\n\n- " + rng.choice(EN_WORDS) + ": \"" + rng.choice(EN_WORDS) + "\""
            out.append(s)
            size += len(s) + 1
        return " ".join(out)[:target]

    def verdict(self, rubric: list[int]) -> str:
        rng = self.rng
        awarded = [p if rng.random() < 0.5 else 0 for p in rubric]
        core = json.dumps({"points_awarded": awarded, "total": sum(awarded)})
        r = rng.random()
        if r < 0.01:
            return "I cannot grade this response without the document."  # no parseable total
        if r < 0.70:
            return core
        if r < 0.90:
            return f"```json\n{core}\n```"
        return rng.choice(JUDGE_PROSE) + rng.choice(JUDGE_PROSE) + "\n" + core

    def error(self) -> tuple[int, str]:
        return self.rng.choice([(500, "The server had an error while processing your request."),
                                (429, "Rate limit reached for requests."), (529, "Overloaded"),
                                (400, "Invalid request: prompt is too long.")])

    def line(self, provider: str, model: str, custom_id: str, text: str | None, prompt_chars: int) -> tuple[dict, bool]:
        """(line, goes to the error file). text None: an error line."""
        in_tok = prompt_chars // 4
        out_tok = 0 if text is None else max(1, len(text) // 4)
        if provider == "openai":
            if text is None:
                status, message = self.error()
                status = 500 if status == 529 else status
                body = {"error": {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error",
                                  "param": None, "code": None}}
                return {"id": "batch_req_" + self.hexid(32), "custom_id": custom_id,
                        "response": {"status_code": status, "request_id": "req_" + self.hexid(32), "body": body}, "error": None}, True
            body = {
                "id": "chatcmpl-" + self.hexid(29), "object": "chat.completion", "created": self.now, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None, "annotations": []},
                             "logprobs": None, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": in_tok, "completion_tokens": out_tok, "total_tokens": in_tok + out_tok,
                          "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                          "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                                        "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
                "service_tier": "default", "system_fingerprint": "fp_" + self.hexid(10),
            }
            return {"id": "batch_req_" + self.hexid(32), "custom_id": custom_id,
                    "response": {"status_code": 200, "request_id": "req_" + self.hexid(32), "body": body}, "error": None}, False
        if provider == "anthropic":
            if text is None:
                status, message = self.error()
                etype = {500: "api_error", 429: "rate_limit_error", 529: "overloaded_error", 400: "invalid_request_error"}[status]
                return {"custom_id": custom_id, "result": {"type": "errored", "error": {
                    "type": "error", "error": {"type": etype, "message": message}, "request_id": "req_011C" + self.hexid(20)}}}, False
            message = {
                "id": "msg_01" + self.hexid(22), "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": in_tok, "output_tokens": out_tok, "cache_creation_input_tokens": 0,
                          "cache_read_input_tokens": 0, "service_tier": "batch"},
            }
            return {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}, False
        if text is None:
            status, message = self.error()
            status = 503 if status == 529 else status
            gstatus = {500: "INTERNAL", 503: "UNAVAILABLE", 429: "RESOURCE_EXHAUSTED", 400: "INVALID_ARGUMENT"}[status]
            return {"key": custom_id, "error": {"code": status, "message": message, "status": gstatus}}, False
        response = {
            "candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": in_tok, "candidatesTokenCount": out_tok, "totalTokenCount": in_tok + out_tok,
                              "thoughtsTokenCount": 0, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": in_tok}]},
            "modelVersion": model, "responseId": self.hexid(22),
        }
        return {"key": custom_id, "response": response}, False


def prepare(root: Path, total_lines: int, seed: int) -> dict[str, Any]:
    """Build state.db + jobs/ with `total_lines` downloaded result lines. Returns counts."""
    from batchrun import jsonl
    from batchrun.config import fingerprint
    from batchrun.config_file import load_config
    from batchrun.ledger import judge_custom_id, sync_state
    from batchrun.prompts import judge_prompt
    from batchrun.store import Store

    config_path = write_inputs(root)
    config = load_config(config_path)
    store = Store(config.paths.state)
    store.start_run("bench-setup")
    sync_state(store, config)
    db = store.db
    tasks = {r["task_id"]: r for r in store.rows("SELECT task_id, question, rubric_json, graded_sha256 FROM tasks")}
    gen = store.rows("SELECT custom_id, route, task_id, prompt_chars FROM requests WHERE stage = 'gen' ORDER BY route, task_id")
    gen_share = len(gen) / total_lines
    if gen_share > 0.5:
        raise SystemExit(f"--lines {total_lines} is too small for {len(gen)} generation requests")
    gen_lines = len(gen)
    judge_lines = total_lines - gen_lines
    lines = Lines(seed)
    rng = lines.rng
    now = time.time()

    # Generation answers (or errors), in memory only long enough to derive the judge requests.
    answers: dict[str, str | None] = {}
    for g in gen:
        answers[g["custom_id"]] = None if rng.random() < ERROR_RATE else lines.answer()
    ok_gen = [g for g in gen if answers[g["custom_id"]] is not None]
    judge_fps = {name: fingerprint(config.judge_policy(config.routes[name])) for name, _, _ in JUDGES}
    pairs = [(g, j) for g in ok_gen for j, _, _ in JUDGES]
    if len(pairs) < judge_lines:
        raise SystemExit(f"only {len(pairs)} (answer, judge) pairs for {judge_lines} judge lines")
    rng.shuffle(pairs)
    pairs = sorted(pairs[:judge_lines], key=lambda p: (p[1], p[0]["route"], p[0]["task_id"]))
    judge_rows, by_judge = [], {}
    for g, judge in pairs:
        task = tasks[g["task_id"]]
        cid = judge_custom_id(judge_fps[judge], g["custom_id"], answers[g["custom_id"]], task["graded_sha256"])
        rubric = json.loads(task["rubric_json"])
        prompt_chars = len(judge_prompt(task["question"], [_Item(i["points"], i["correct_criterion"]) for i in rubric],
                                        answers[g["custom_id"]]))
        judge_rows.append((cid, judge, g["task_id"], judge_fps[judge], g["custom_id"], prompt_chars, prompt_chars // 3, 16384, now,
                           task["graded_sha256"]))
        by_judge.setdefault(judge, []).append((cid, [int(i["points"]) for i in rubric], prompt_chars))

    routes = config.routes
    batches: list[tuple[str, str, str, list[tuple[str, str | None, int]]]] = []  # (route, stage, provider, members)
    by_route: dict[str, list] = {}
    for g in gen:
        by_route.setdefault(g["route"], []).append((g["custom_id"], answers[g["custom_id"]], g["prompt_chars"]))
    for route_name in sorted(by_route):
        batches.append((route_name, "gen", routes[route_name].provider, by_route[route_name]))
    for judge, members in by_judge.items():
        texts = [(cid, None if rng.random() < ERROR_RATE else lines.verdict(rubric), pc) for cid, rubric, pc in members]
        batches.append((judge, "judge", routes[judge].provider, texts))

    jobs = config.paths.jobs
    n_written = 0
    with db.atomic():
        db.conn.executemany(
            """INSERT INTO requests (custom_id, stage, route, task_id, policy_fp, parent_custom_id, parent_result_id, max_retries,
               max_resubmits, prompt_chars, est_input_tokens, est_output_tokens, created_at, graded_sha256)
               VALUES (?, 'judge', ?, ?, ?, ?, NULL, 0, 0, ?, ?, ?, ?, ?)""", judge_rows)
        for seq, (route_name, stage, provider, members) in enumerate(batches, start=1):
            route = routes[route_name]
            bid = f"{seq:06d}-{route_name}-{stage}"
            folder = jobs / bid
            folder.mkdir(parents=True)
            files = [folder / ("output.jsonl" if provider == "openai" else "results.jsonl")]
            if provider == "openai":
                files.append(folder / "errors.jsonl")
            handles = [open(f, "w", encoding="utf-8", newline="\n") for f in files]
            for cid, text, prompt_chars in members:
                obj, to_errors = lines.line(provider, route.model, cid, text, prompt_chars)
                handles[1 if to_errors else 0].write(jsonl.dumps(obj) + "\n")
                n_written += 1
            for h in handles:
                h.close()
            (folder / "requests.jsonl").write_text("")  # stands in for the request file (not read by collect)
            db.execute(
                """INSERT INTO batches (id, seq, route, stage, provider, transport, model, status, dir, request_file, bytes,
                   n_requests, provider_batch_id, provider_status, provider_state, quota, endpoint_host, run_id, created_at,
                   submitted_at, ended_at, downloaded_at, result_files_json)
                   VALUES (?, ?, ?, ?, ?, 'batch', ?, 'downloaded', ?, ?, 0, ?, ?, 'completed', 'done', 0, ?, ?, ?, ?, ?, ?, ?)""",
                [bid, seq, route_name, stage, provider, route.model, str(folder), str(folder / "requests.jsonl"), len(members),
                 f"pb-{seq}", route.endpoint_host, store.run_id, now, now, now, now, json.dumps([str(f) for f in files])])
            db.conn.executemany("INSERT INTO batch_requests (batch_id, custom_id, position) VALUES (?, ?, ?)",
                                [(bid, cid, i) for i, (cid, _, _) in enumerate(members)])
    store.end_run("ok")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    files = sorted(jobs.glob("*/*.jsonl"))
    result_files = [f for f in files if f.name != "requests.jsonl"]
    return {
        "config": config_path, "lines": n_written, "gen_lines": gen_lines, "judge_lines": judge_lines,
        "batches": len(batches), "files": result_files, "bytes": sum(f.stat().st_size for f in result_files),
    }


class _Item:
    def __init__(self, points: Any, criterion: str):
        self.points, self.criterion = points, criterion


# --- measurements -----------------------------------------------------------------------------


def fresh_copy(prepared: Path, dest: Path) -> Path:
    remove_state(dest)
    shutil.copyfile(prepared, dest)
    return dest


def run_batchrun(config_path: Path, state: Path, profile: bool = False) -> tuple[float, dict[str, int], int]:
    """collect's ingestion loop over every downloaded batch, timed."""
    from dataclasses import replace

    from batchrun.collect import CollectResult, ingest
    from batchrun.config_file import load_config
    from batchrun.store import Store

    config = load_config(config_path)
    config = replace(config, paths=replace(config.paths, state=state))
    store = Store(state)
    store.start_run("collect")
    result = CollectResult()
    prof = cProfile.Profile() if profile else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    ingest(store, config, result)
    if prof:
        prof.disable()
    seconds = time.perf_counter() - t0
    n_results = store.scalar("SELECT count(*) FROM results")
    judgments = store.scalar("SELECT count(*) FROM judgments")
    store.end_run("ok")
    store.close()
    if prof:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
        note(f"\ncProfile of ingest() over all batches ({seconds:.2f} s), top 18 by own time:")
        note("\n".join(l for l in out.getvalue().splitlines() if l.strip()))
    if n_results != result.lines:
        raise RuntimeError(f"{result.lines} lines parsed but {n_results} results rows")
    return seconds, result.by_kind, judgments


def run_full_collect(config_path: Path, state: Path) -> float:
    from dataclasses import replace

    from batchrun.collect import collect
    from batchrun.config_file import load_config
    from batchrun.store import Store

    config = load_config(config_path)
    config = replace(config, paths=replace(config.paths, state=state))
    store = Store(state)
    store.start_run("collect")
    t0 = time.perf_counter()
    collect(store, config, write_outputs=False)
    seconds = time.perf_counter() - t0
    store.end_run("ok")
    store.close()
    return seconds


def run_raw(files: list[Path], db_path: Path) -> tuple[float, int]:
    """The same raw lines into a fresh table: one executemany, one transaction."""
    remove_state(db_path)
    t0 = time.perf_counter()
    con = sqlite3.connect(db_path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute("CREATE TABLE raw_lines (line TEXT NOT NULL)")

    def lines():
        for path in files:
            with open(path, "rb") as f:
                for raw in f:
                    raw = raw.rstrip(b"\n")
                    if raw:
                        yield (raw.decode("utf-8"),)

    with con:
        con.executemany("INSERT INTO raw_lines (line) VALUES (?)", lines())
    n = con.execute("SELECT count(*) FROM raw_lines").fetchone()[0]
    con.close()
    seconds = time.perf_counter() - t0
    return seconds, n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=100_000, help="result lines to ingest (default 100,000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement, median reported (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--full-collect", action="store_true", help="also time a full collect() once (~10 s at 100k lines)")
    ap.add_argument("--workdir", type=Path, help="parent folder for the temporary project (default /tmp)")
    ap.add_argument("--profile", action="store_true", help="also print a cProfile of one ingestion to stderr")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="batchrun-bench-ingest-", dir=args.workdir))
    refuse_inside_repo(work)
    try:
        note(f"preparing {args.lines:,} result lines in {work} ...")
        t0 = time.perf_counter()
        info = prepare(work / "project", args.lines, args.seed)
        note(f"  {info['lines']:,} lines, {info['bytes']:,} bytes in {len(info['files'])} files, {info['batches']} batches "
             f"({time.perf_counter() - t0:.1f} s)")
        prepared = work / "prepared.db"
        shutil.copyfile(work / "project" / "state.db", prepared)
        state = work / "project" / "state.db"
        b_times, r_times, c_times = [], [], []
        by_kind: dict[str, int] = {}
        judgments = 0
        for i in range(args.repeat):
            note(f"run {i + 1}/{args.repeat}: raw executemany ...")
            seconds, n = run_raw(info["files"], work / "raw.db")
            if n != info["lines"]:
                raise RuntimeError(f"raw baseline inserted {n} lines, expected {info['lines']}")
            r_times.append(seconds)
            note(f"  raw {seconds:.2f} s; batchrun ingest ...")
            seconds, by_kind, judgments = run_batchrun(info["config"], fresh_copy(prepared, state))
            b_times.append(seconds)
            note(f"  batchrun {seconds:.2f} s")
        if args.full_collect:
            note("full collect(write_outputs=False) ...")
            c_times.append(run_full_collect(info["config"], fresh_copy(prepared, state)))
            note(f"  {c_times[-1]:.2f} s")
        if args.profile:
            run_batchrun(info["config"], fresh_copy(prepared, state), profile=True)
    finally:
        remove_tree(work)

    n = info["lines"]
    raw_s, b_s = median(r_times), median(b_times)
    rows = [
        ["raw: one executemany, one transaction", f"{n:,}", f"{info['bytes']:,}", f"{raw_s:.2f}",
         f"{min(r_times):.2f}-{max(r_times):.2f}", f"{n / raw_s:,.0f}", f"{raw_s / raw_s:.2f}"],
        ["batchrun: collect's ingest()", f"{n:,}", f"{info['bytes']:,}", f"{b_s:.2f}",
         f"{min(b_times):.2f}-{max(b_times):.2f}", f"{n / b_s:,.0f}", f"{raw_s / b_s:.2f}"],
    ]
    if c_times:
        rows.append(["(batchrun: full collect, no outputs)", f"{n:,}", f"{info['bytes']:,}", f"{c_times[0]:.2f}",
                     f"{c_times[0]:.2f}-{c_times[0]:.2f}", f"{n / c_times[0]:,.0f}", f"{raw_s / c_times[0]:.2f}"])
    print(f"bench/ingest.py — {machine_line(Path(tempfile.gettempdir()))}")
    kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(by_kind.items()))
    print(f"{n:,} result lines ({info['gen_lines']:,} generation, {info['judge_lines']:,} judge) in {info['batches']} batches; "
          f"parsed as: {kinds}; {judgments:,} judgments; median of {args.repeat} run(s)")
    print_table(["ingestion", "lines", "bytes", "median s", "min-max s", "lines/s", "raw/this"], rows)
    ratio = raw_s / b_s
    print(f"target raw/batchrun >= {TARGET}: {ratio:.2f} ({'met' if ratio >= TARGET else 'MISSED'})")
    print(f"ratio={ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
