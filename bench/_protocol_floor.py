"""The protocol floor of bench/ingest.py: the least any collect that follows the protocol must
write for the same result lines, done the cheapest plain way (standard library only).

bench/ingest.py's floor row (issue 30's yardstick) inserts one `results` row per line and stops
there. A collect that follows spec 001 and ARCHITECTURE.md cannot stop there; this row adds what
they require it to write for the same lines, and nothing else:

- **the floor's work**, unchanged: each line decoded (UTF-8, json.loads), its custom_id and answer
  taken by its shape (bench/_lines.id_and_answer), one `results` row per line with state.db's own
  DDL (its columns, UNIQUE key and indexes). Each row gets its id from a counter here, so the rows
  below name it without a lookup. Required: ARCHITECTURE, "state.db ... result lines (raw JSON
  kept)".
- **one `judgments` row per verdict line** (a judge line with a reply), state.db's own DDL: the
  reply parsed the plain way (from its first '{' to its last '}', json.loads, `total` a number;
  anything else is a parse error, kept as such), score = clamp(total / the task's rubric points,
  0, 1). Required: spec 001 §4 "Parse the `total` field and normalize by the sum of rubric
  points"; ARCHITECTURE "Parse `total`; score = clamp(...)", "state.db ...: judgments", and "a
  judge call that ... cannot be parsed is an infrastructure failure" (so an unparseable reply is a
  row with its error, not a dropped line).
- **one judge request row per valid answer and judge** (a generation line with a non-empty
  answer, times each judge of the panel), `requests` with state.db's own DDL and its two
  indexes (by route, and by parent/route/policy: how a store finds what a judge still lacks),
  not its triggers (those keep batchrun's per-cell state, left out below). Each row's custom_id
  is derived from one sha256 per answer (its parent's custom_id, the task's graded checksum and
  the answer's bytes) and the judge's policy fingerprint; prompt_chars is the task's judge prompt
  without the answer (measured once per task before the clock) plus min(len(answer), 5000);
  est_input_tokens = prompt_chars // 4; est_output_tokens = the judges' 16,384. Required:
  ARCHITECTURE "Judging (one request per valid answer x judge route of the panel ...)", the data
  flow "collect ... valid answers -> judge requests", "custom_id: deterministic, derived from a
  hash of the exact request", and spec 001 §4 (three judges per answer; the response cut at
  5,000 characters). The custom_id of batchrun (`ledger.ids.judge_custom_id`) hashes those parts
  once per judge; one hash per answer is the least that makes ids differ where answers differ.
- The DB part in **one transaction** (WAL, synchronous=NORMAL, the 64 MB page cache of ingest):
  ARCHITECTURE "Result ingestion is batched into transactions".
- **the results files' bytes**: the same content the measured collect wrote into results/ on each
  night (every responses and scores file and the manifest on night 1; on night 2 only the files
  it wrote again, told apart by their inode, as `os.replace` gives a new one), each rendered from
  its parsed content (parsed before the clock: the content stands for what collect has computed)
  by json.dumps with its C encoder (compact, ensure_ascii=False, UTF-8) and written the plain way,
  one open/write/close per file. Not fsync'ed: collect does not fsync its results files
  (publish.results_files._write_atomic writes and renames). Required: ARCHITECTURE's data flow
  "scores -> results/<route>.responses.json, results/<route>.scores.json" and its engineering
  contract from spec 002 (a manifest); spec 001 §5-6 (the per-model responses and scores files,
  `overall` in them).
- **two bare interpreter start-ups** (`python -c pass`, the same interpreter, in a child each):
  collect is a command, run once a night, and each of the two nights starts one.

What it still leaves out, all of which `batchrun collect` does and the protocol or the
architecture also asks for: reading errors, usage and finish reasons from each line by provider
(and costs from them: "cost per route and per night"); classifying a line's kind (refusal, empty,
transient, invalid, expired) and acting on it (retries, blocked routes); attributing lines to the
requests and batches that asked for them, refusing a changed result file (resume check) and
marking the batches collected; the input sync of each command (dataset, corpus, config, policies);
the per-cell state kept current ("kept as a per-cell state updated in the same transaction"); the
leaderboard and every aggregation that makes the results files' content (it is given here, not
computed); the manifest's checksums of each file; the lock, the run record and crash-safe
commits in pieces; batchrun's imports beyond the bare interpreter. So it is a floor: collect can
be no faster than this with the same store, and nothing here is optional under the protocol.
"""

from __future__ import annotations

import hashlib
import json
import resource
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import connect_like_state, remove_state, remove_tree
from _lines import id_and_answer

RESPONSE_CUT = 5_000  # spec 001 §4: {response[:5000]} in the judge prompt
JUDGE_MAX_TOKENS = 16_384  # spec 001 §4


@dataclass
class ProtocolInputs:
    """What the protocol floor is given before its clock starts (as the floor is given the lines)."""

    ddl: list[str]  # state.db's CREATE TABLE and CREATE INDEX of results, judgments and requests
    stage_task: dict[str, tuple[str, str]]  # custom_id -> (stage, task_id), every request of both nights
    tasks: dict[str, tuple[float, str | None, int]]  # task_id -> (rubric points, graded checksum, judge prompt chars without the answer)
    judges: list[tuple[str, str, int, int]]  # the panel: (route, policy_fp, retry budget, resubmit budget)
    files: list[list[tuple[str, Any]]] = field(default_factory=list)  # per night: (results/ file name, parsed content) written


def read_inputs(state: Path, judge_prompt_chars: dict[str, int]) -> ProtocolInputs:
    """Read the protocol floor's inputs from a state.db holding every request of both nights
    (night 2's, before its collect). `judge_prompt_chars`: task_id -> its judge prompt's length
    with an empty answer."""
    con = sqlite3.connect(state)
    try:
        ddl = [sql for (sql,) in con.execute(
            """SELECT sql FROM sqlite_master WHERE tbl_name IN ('results', 'judgments', 'requests')
               AND type IN ('table', 'index') AND sql IS NOT NULL ORDER BY type DESC, name""")]
        stage_task = {cid: (stage, task) for cid, stage, task in con.execute("SELECT custom_id, stage, task_id FROM requests")}
        tasks = {t: (total, graded, judge_prompt_chars[t]) for t, total, graded in
                 con.execute("SELECT task_id, rubric_total, graded_sha256 FROM tasks")}
        judges = con.execute("""SELECT route, policy_fp, coalesce(retry_budget, 5), coalesce(resubmit_budget, 3)
                                FROM config_routes WHERE role = 'judge' AND panel_position IS NOT NULL
                                ORDER BY panel_position""").fetchall()
    finally:
        con.close()
    return ProtocolInputs(ddl, stage_task, tasks, [tuple(j) for j in judges])


def results_listing(folder: Path) -> dict[str, int]:
    """Each file of a results/ folder and its inode (a file written again by os.replace has a new one)."""
    return {p.name: p.stat().st_ino for p in sorted(folder.iterdir()) if p.is_file()} if folder.is_dir() else {}


def plain_verdict(text: str) -> tuple[Any, Any, str | None]:
    """(total, points_awarded, parse error) the plain way: the text from its first '{' to its last '}'."""
    i, j = text.find("{"), text.rfind("}")
    if i < 0 or j < i:
        return None, None, "no JSON object in the reply"
    try:
        obj = json.loads(text[i:j + 1])
    except ValueError:
        return None, None, "unparseable JSON in the reply"
    total = obj.get("total") if isinstance(obj, dict) else None
    if isinstance(total, bool) or not isinstance(total, (int, float)):
        return None, None, "no numeric total"
    points = obj.get("points_awarded")
    return total, (points if isinstance(points, list) else None), None


@dataclass
class FloorRun:
    seconds: float
    cpu: float  # user + system seconds: this process's and its start-up children's
    parts: dict[str, float]  # start-ups, rows (decode + one transaction), files
    rows: dict[str, int]  # results, judgments, judge requests, as counted back from the tables
    files: int
    bytes: int  # results files' bytes written


def protocol_floor(files_by_batch: dict[str, list[Path]], inputs: ProtocolInputs, db_path: Path, out_dir: Path,
                   *, python: str = sys.executable, env: dict[str, str] | None = None) -> FloorRun:
    """The protocol floor (module docstring): everything from the first start-up to the last file closed, timed."""
    remove_state(db_path)
    remove_tree(out_dir)
    stage_task, tasks, judges = inputs.stage_task, inputs.tasks, inputs.judges
    judgments: list[tuple[Any, ...]] = []
    requests: list[tuple[Any, ...]] = []

    def rows(now: float) -> Any:
        rid = 0
        for batch_id, paths in files_by_batch.items():
            for path in paths:
                with open(path, "rb") as f:
                    for raw in f:
                        line = raw.rstrip(b"\n").decode("utf-8")
                        if not line:
                            continue
                        custom_id, text = id_and_answer(json.loads(line))
                        rid += 1
                        yield (rid, batch_id, custom_id, "ok" if text is not None else "error", text, line, now, 1)
                        if text is None:
                            continue
                        stage, task_id = stage_task[custom_id]
                        rubric_total, graded, prompt_chars = tasks[task_id]
                        if stage == "judge":
                            total, points, error = plain_verdict(text)
                            score = None if total is None else (min(max(total / rubric_total, 0.0), 1.0) if rubric_total > 0 else 0.0)
                            judgments.append((rid, custom_id, total, rubric_total, score, None if points is None else repr(points), error))
                        elif text:
                            h = hashlib.sha256(f"{custom_id}\n{graded}\n".encode() + text.encode("utf-8")).hexdigest()[:40]
                            chars = prompt_chars + min(len(text), RESPONSE_CUT)
                            for route, fp, retries, resubmits in judges:
                                requests.append((f"j-{fp[:20]}-{h}", route, task_id, fp, custom_id, rid, retries, resubmits, chars,
                                                 chars // 4, JUDGE_MAX_TOKENS, now, graded))

    parts: dict[str, float] = {}
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for _ in range(2):  # one command a night
        subprocess.run([python, "-c", "pass"], env=env, check=True)
    t1 = time.perf_counter()
    parts["start-ups"] = t1 - t0
    con = connect_like_state(db_path)
    con.execute("PRAGMA cache_size=-65536")
    for sql in inputs.ddl:
        con.execute(sql)
    with con:
        con.executemany("""INSERT INTO results (id, batch_id, custom_id, kind, text, raw_json, collected_at, run_id)
                           VALUES (?, ?, ?, ?, ?, ?, ?, ?)""", rows(time.time()))
        con.executemany("""INSERT INTO judgments (result_id, custom_id, total, rubric_total, score, points_awarded_json, parse_error)
                           VALUES (?, ?, ?, ?, ?, ?, ?)""", judgments)
        con.executemany("""INSERT INTO requests (custom_id, stage, route, task_id, policy_fp, parent_custom_id, parent_result_id,
                           max_retries, max_resubmits, prompt_chars, est_input_tokens, est_output_tokens, created_at, graded_sha256)
                           VALUES (?, 'judge', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""", requests)
    con.close()
    t2 = time.perf_counter()
    parts["rows"] = t2 - t1
    n_files = n_bytes = 0
    out_dir.mkdir(parents=True)
    for night in inputs.files:
        for name, data in night:
            content = (json.dumps(data, ensure_ascii=False) + "\n").encode("utf-8")
            with open(out_dir / name, "wb") as f:
                f.write(content)
            n_files += 1
            n_bytes += len(content)
    t3 = time.perf_counter()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time() - cpu0 + (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    parts["files"] = t3 - t2
    con = sqlite3.connect(db_path)
    counted = {table: con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in ("results", "judgments", "requests")}
    con.close()
    remove_state(db_path)
    remove_tree(out_dir)
    return FloorRun(t3 - t0, cpu, parts, counted, n_files, n_bytes)


def load_written(folder: Path, names: list[str]) -> list[tuple[str, Any]]:
    """Parse the results files a collect wrote (before the clock)."""
    out = []
    for name in names:
        with open(folder / name, "rb") as f:
            out.append((name, json.loads(f.read())))
    return out


def written_on(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """The files of `after` a command wrote: new, or with another inode than `before`."""
    return [name for name, ino in after.items() if before.get(name) != ino]


def collected_rows(state: Path, before: Path) -> dict[str, int]:
    """Rows the measured collects added, counted as the protocol floor counts its own: results,
    judgments and judge requests in `state` (after night 2's collect) less those in `before`
    (night 1's state.db before its collect)."""
    def counts(db: Path) -> dict[str, int]:
        con = sqlite3.connect(db)
        try:
            return {"results": con.execute("SELECT count(*) FROM results").fetchone()[0],
                    "judgments": con.execute("SELECT count(*) FROM judgments").fetchone()[0],
                    "requests": con.execute("SELECT count(*) FROM requests WHERE stage = 'judge'").fetchone()[0]}
        finally:
            con.close()

    a, b = counts(state), counts(before)
    return {k: a[k] - b[k] for k in a}

