"""Benchmark: the report at WildTrace scale, `report --format html` (the static site) against
`report --format md`, on the same state.db.

    python bench/report_site.py [--repeat N] [--routes N] [--keep DIR] [--profile]

Setup (not timed), in a temporary folder outside the repository:

- 481 tasks over 214 documents (1k-120k characters; a fifth Chinese, so the CJK breakdown has two
  rows), each task with categorical fields (language, category, paradigm, difficulty) like the
  WildTrace release; 30 contestant routes (every fifth with 30,000 / 10,000-character caps, so
  the long documents are out of context) and a 3-judge panel;
- batchrun's own sync_state (tasks, cells, generation requests) and queue_judgments (one judge
  request per valid answer and judge); answers (1.5-4 KB; ~2% refusals, ~2% empty, ~3% after a
  transient failure) and verdicts (a route quality, a task difficulty and a judge's own leniency
  and noise; ~2% after a transient failure, ~1% after an unparseable reply) inserted as results
  and judgments rows, in collected batches: every route complete, ~14,000 answers, ~41,000
  judgments.

Timed, each in a child process (bench/_common.run_measured), median of --repeat runs:

- `batchrun report --format md` (the leaderboard with its statistics: intervals with the document
  as the unit, all 435 pairs with sign and permutation tests over documents, breakdowns, judge
  agreement);
- `batchrun report --format html --out DIR` (the same, plus the site: the index, 30 route pages
  and 481 task pages holding every answer and verdict);
- (informational) the Markdown report as it was before the statistics: `render(report_data())`.

Output: one table, and last `ratio=<html seconds / md seconds>`.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import child_env, machine_line, median, note, print_table, refuse_inside_repo, remove_tree, run_measured

N_TASKS = 481
N_DOCS = 214
CONTESTANT_MODELS = [("openai", "gpt-5.5"), ("anthropic", "claude-opus-4.8"), ("gemini", "gemini-2.5-pro")]
JUDGES = [("judge-sonnet", "anthropic", "claude-sonnet-4-6", 0.0, 0.04), ("judge-qwen", "openai-compatible", "qwen3.5-plus", 0.06, 0.08),
          ("judge-flash", "gemini", "gemini-2.5-flash", -0.03, 0.12)]  # (route, provider, model, leniency, noise)
WORDS = ("the report states that clerk inspected harbor ledger on march with receipts signed by the council after "
         "river bridge repairs costing francs recorded in volume and witnessed by engineer at station seven whose "
         "journal notes the delay caused by flooding").split()
ZH = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严"
CATEGORIES = ["incident-forensics", "root-cause", "remediation", "decision-tracking", "recovery", "impact-assessment",
              "incident-response", "search-and-rescue", "maintenance-history", "stakeholder-positions", "navigation", "accountability"]
PARADIGMS = ["causal-chain", "multi-hop", "temporal", "aggregation", "detail-extraction", "comparison"]


def write_inputs(root: Path, n_routes: int, rng: random.Random) -> Path:
    (root / "corpus").mkdir(parents=True)
    (root / "data").mkdir()
    docs = []
    for d in range(N_DOCS):
        chars = int(min(120_000, max(1_000, rng.lognormvariate(9.4, 1.0))))
        if d % 5 == 4:
            text = "".join(rng.choice(ZH) for _ in range(chars // 1))  # CJK: the first 4,000 characters are ideographs
        else:
            words: list[str] = []
            size = 0
            while size < chars:
                w = rng.choice(WORDS)
                words.append(w)
                size += len(w) + 1
            text = " ".join(words)
        name = f"doc_{d:03d}.txt"
        (root / "corpus" / name).write_text(text[:chars] + "\n", encoding="utf-8")
        docs.append((name, d % 5 == 4))
    tasks = []
    for t in range(N_TASKS):
        name, zh = docs[t % N_DOCS]
        n_items = 2 + t % 4
        points = [100 // n_items] * n_items
        points[0] += 100 - sum(points)
        tasks.append({
            "task_id": f"wt-{t:04d}", "question_text": f"Question {t}: what did the clerk record about item {t}, when and why?",
            "corpus_file": name, "language": "zh" if zh else "en", "category": CATEGORIES[t % len(CATEGORIES)],
            "paradigm": PARADIGMS[(t // 3) % len(PARADIGMS)], "difficulty": ("easy", "medium", "hard")[t % 3],
            "ground_truth": {"answer": "-", "scoring_rubric": [{"points": p, "correct_criterion": f"names detail {k} of item {t}"}
                                                              for k, p in enumerate(points)]},
        })
    (root / "data" / "tasks.json").write_text(json.dumps(tasks, ensure_ascii=False), encoding="utf-8")
    routes: dict[str, Any] = {}
    for i in range(n_routes):
        provider, model = CONTESTANT_MODELS[i % 3]
        routes[f"route-{i:02d}-{model}"] = {"provider": provider, "model": model, "base_url": "http://127.0.0.1:9/v1",
                                            **({"caps": {"en": 30_000, "cjk": 10_000}} if i % 5 == 4 else {})}
    for name, provider, model, _, _ in JUDGES:
        routes[name] = {"provider": provider, "model": model, "base_url": "http://127.0.0.1:9/v1", "api_key_env": "BENCH_KEY"}
    config = {
        "paths": {"dataset": str(root / "data" / "tasks.json"), "corpus": str(root / "corpus"), "state": str(root / "state.db"),
                  "jobs": str(root / "jobs"), "results": str(root / "results")},
        "judging": {"panel": [j[0] for j in JUDGES]},
        "routes": routes,
    }
    path = root / "batchrun.json"
    path.write_text(json.dumps(config, indent=1), encoding="utf-8")
    return path


def prepare(root: Path, n_routes: int, seed: int) -> dict[str, Any]:
    from batchrun.protocol.config_file import load_config
    from batchrun.ledger.inputs import resolve_inputs
    from batchrun.ledger.sync import queue_judgments, sync_state
    from batchrun.ledger.store import Store

    rng = random.Random(seed)
    config_path = write_inputs(root, n_routes, rng)
    config = load_config(config_path)
    store = Store(config.paths.state)
    store.start_run("bench-setup")
    sync_state(store, resolve_inputs(store, config))
    db = store.db
    now = time.time()
    pool = []
    for _ in range(300):
        target = rng.randint(1_500, 4_000)
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < target:
            words.append(rng.choice(WORDS))
        pool.append(" ".join(words))
    quality = {r: rng.uniform(0.3, 0.85) for r in config.routes}
    difficulty = {t: rng.uniform(-0.25, 0.25) for (t,) in db.execute("SELECT task_id FROM tasks")}
    seq = 0

    def batch(route: str, stage: str) -> str:
        nonlocal seq
        seq += 1
        r = config.routes[route]
        bid = f"{seq:06d}-{route}-{stage}"
        db.execute(
            """INSERT INTO batches (id, seq, route, stage, provider, transport, model, status, dir, request_file, n_requests,
               provider_state, quota, endpoint_host, run_id, created_at, submitted_at, ended_at, downloaded_at, collected_at)
               VALUES (?, ?, ?, ?, ?, 'batch', ?, 'collected', ?, ?, 0, 'done', 0, ?, ?, ?, ?, ?, ?, ?)""",
            [bid, seq, route, stage, r.provider, r.model, str(root / "jobs" / bid), str(root / "jobs" / bid / "requests.jsonl"),
             r.endpoint_host, store.run_id, now, now, now + 600, now + 601, now + 602])
        return bid

    rows: list[tuple[Any, ...]] = []

    def result(bid: str, cid: str, kind: str, text: str | None, error: str | None = None) -> None:
        rows.append((bid, cid, kind, text, "stop" if kind == "ok" else None, 1000, 500 if text else 0, 0, 0,
                     None if kind == "ok" else kind, error, None, now, store.run_id, 0.001))

    def flush() -> None:
        db.conn.executemany(
            """INSERT INTO results (batch_id, custom_id, kind, text, finish_reason, input_tokens, output_tokens, reasoning_tokens,
               cached_tokens, error_type, error_message, raw_json, collected_at, run_id, cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            rows)
        rows.clear()

    with db.atomic():
        gen = store.rows("SELECT custom_id, route, task_id FROM requests WHERE stage = 'gen' ORDER BY route, task_id")
        # Two batches per route: the first attempts that failed transiently, then the final answers
        # (a result row is unique per batch and request).
        names = sorted({g["route"] for g in gen})
        first = {r: batch(r, "gen") for r in names}
        final = {r: batch(r, "gen") for r in names}
        for g in gen:
            if rng.random() < 0.03:
                result(first[g["route"]], g["custom_id"], "transient", None, "The server had an error while processing your request.")
            x = rng.random()
            if x < 0.02:
                result(final[g["route"]], g["custom_id"], "refusal", "I can't help with that.")
            elif x < 0.04:
                result(final[g["route"]], g["custom_id"], "empty", "")
            else:
                result(final[g["route"]], g["custom_id"], "ok", f"Task {g['task_id']}, {g['route']}: " + rng.choice(pool))
        flush()
    with db.atomic():
        queue_judgments(store, config)
    judges = {j[0]: j for j in JUDGES}
    verdicts: list[tuple[Any, ...]] = []
    with db.atomic():
        jreqs = store.rows("""SELECT jr.custom_id, jr.route AS judge, g.route, jr.task_id, t.rubric_json, t.rubric_total
                              FROM requests jr JOIN requests g ON g.custom_id = jr.parent_custom_id JOIN tasks t ON t.task_id = jr.task_id
                              WHERE jr.stage = 'judge' ORDER BY jr.route, g.route, jr.task_id""")
        jfirst = {j: batch(j, "judge") for j in judges}
        jfinal = {j: batch(j, "judge") for j in judges}
        for jr in jreqs:
            _, _, _, leniency, noise = judges[jr["judge"]]
            early, bid = jfirst[jr["judge"]], jfinal[jr["judge"]]
            x = rng.random()
            if x < 0.02:
                result(early, jr["custom_id"], "transient", None, "Overloaded")
            elif x < 0.03:
                result(early, jr["custom_id"], "unparseable", "I cannot grade this response.")
                verdicts.append((jr["custom_id"], early, None, jr["rubric_total"], None, None, "no total in the reply"))
            p = min(max(quality[jr["route"]] + difficulty[jr["task_id"]] + leniency + rng.gauss(0, noise), 0.0), 1.0)
            awarded = [item["points"] if rng.random() < p else 0 for item in json.loads(jr["rubric_json"])]
            total = sum(awarded)
            text = json.dumps({"points_awarded": awarded, "total": total})
            result(bid, jr["custom_id"], "ok", text)
            verdicts.append((jr["custom_id"], bid, total, jr["rubric_total"], min(max(total / jr["rubric_total"], 0.0), 1.0),
                             json.dumps(awarded), None))
        flush()
        # Each judgment points at its results row: the ok one, or the unparseable one.
        db.conn.executemany(
            """INSERT OR IGNORE INTO judgments (result_id, custom_id, total, rubric_total, score, points_awarded_json, parse_error)
               SELECT id, custom_id, ?, ?, ?, ?, ? FROM results WHERE custom_id = ? AND batch_id = ?
                 AND (kind = 'ok') = (? IS NOT NULL)""",
            [(total, rt, score, pts, err, cid, bid, total) for cid, bid, total, rt, score, pts, err in verdicts])
    store.end_run("ok")
    board = store.rows("SELECT route, complete FROM leaderboard")
    counts = {
        "answers": store.scalar("SELECT count(*) FROM results r JOIN requests q ON q.custom_id = r.custom_id WHERE q.stage = 'gen' AND r.kind = 'ok'"),
        "judgments": store.scalar("SELECT count(*) FROM judgments WHERE total IS NOT NULL"),
        "results": store.scalar("SELECT count(*) FROM results"),
        "complete": sum(1 for r in board if r["complete"]), "routes": len(board),
    }
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    counts["config"] = config_path
    counts["db_bytes"] = (root / "state.db").stat().st_size
    return counts


BEFORE = """
import sys
from batchrun.protocol.config_file import load_config
from batchrun.publish.report import render
from batchrun.publish.outputs import report_data
from batchrun.ledger.store import Store
config = load_config(sys.argv[1])
store = Store.open(config.paths.state, rehearsal=None, readonly=True)
sys.stdout.write(render(report_data(store, config), "md"))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement, median reported (default 3)")
    ap.add_argument("--routes", type=int, default=30, help="contestant routes (default 30)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, help="build the project in this (new) folder and keep it, to look at the site")
    ap.add_argument("--profile", action="store_true", help="also print a cProfile of one html report to stderr")
    args = ap.parse_args(argv)

    work = args.keep or Path(tempfile.mkdtemp(prefix="batchrun-bench-report-"))
    refuse_inside_repo(work)
    python = sys.executable
    try:
        note(f"preparing {args.routes} routes x {N_TASKS} tasks x {len(JUDGES)} judges in {work} ...")
        t0 = time.perf_counter()
        info = prepare(work / "project", args.routes, args.seed)
        note(f"  {info['answers']:,} answers, {info['judgments']:,} judgments, {info['results']:,} results rows, "
             f"{info['complete']}/{info['routes']} routes complete, state.db {info['db_bytes'] / 1e6:.0f} MB "
             f"({time.perf_counter() - t0:.1f} s)")
        cfg = str(info["config"])
        env = child_env()
        runs: dict[str, list[Any]] = {"md": [], "html": [], "before": []}
        site = work / "site"
        for i in range(args.repeat):
            note(f"run {i + 1}/{args.repeat} ...")
            runs["md"].append(run_measured([python, "-m", "batchrun", "--config", cfg, "report", "--format", "md"], env=env))
            runs["html"].append(run_measured([python, "-m", "batchrun", "--config", cfg, "report", "--format", "html", "--out", str(site)], env=env))
            runs["before"].append(run_measured([python, "-c", BEFORE, cfg], env=env))
            note("  " + ", ".join(f"{k} {v[-1].wall:.2f} s" for k, v in runs.items()))
        pages = len(list(site.rglob("*.html")))  # the index, a page per route and per task
        site_bytes = sum(p.stat().st_size for p in site.rglob("*.html"))
        if args.profile:
            import cProfile
            import io
            import pstats

            from batchrun.publish.analysis import full_report
            from batchrun.protocol.config_file import load_config
            from batchrun.publish.site import write_site
            from batchrun.ledger.store import Store

            config = load_config(cfg)
            store = Store.open(config.paths.state, rehearsal=None, readonly=True)
            prof = cProfile.Profile()
            prof.enable()
            write_site(store, config, full_report(store, config), site)
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(25)
            note(out.getvalue())
    finally:
        if not args.keep:
            remove_tree(work)

    md, html, before = (median([r.wall for r in runs[k]]) for k in ("md", "html", "before"))

    def cpu(k: str) -> float:
        return median([r.cpu_user + r.cpu_sys for r in runs[k]])

    def spread(k: str) -> str:
        return f"{min(r.wall for r in runs[k]):.2f}-{max(r.wall for r in runs[k]):.2f}"

    def rss(k: str) -> str:
        return f"{median([r.maxrss for r in runs[k]]) / 1e6:.0f} MB"

    print(f"bench/report_site.py — {machine_line(Path(tempfile.gettempdir()))}")
    print(f"{args.routes} routes x {N_TASKS} tasks ({N_DOCS} documents) x {len(JUDGES)} judges: {info['answers']:,} answers, "
          f"{info['judgments']:,} judgments; state.db {info['db_bytes'] / 1e6:.0f} MB; median of {args.repeat} run(s)")
    rows = [
        ["report --format md (with statistics)", f"{md:.2f}", spread("md"), f"{cpu('md'):.2f}", rss("md"), "-"],
        ["report --format html --out DIR", f"{html:.2f}", spread("html"), f"{cpu('html'):.2f}", rss("html"),
         f"{pages} pages, {site_bytes / 1e6:.0f} MB"],
        ["(md before the statistics: render(report_data))", f"{before:.2f}", spread("before"), f"{cpu('before'):.2f}", rss("before"), "-"],
    ]
    print_table(["command", "median wall s", "min-max s", "CPU s", "peak RSS", "output"], rows)
    print(f"html / md: {html / md:.2f} wall, {cpu('html') / cpu('md'):.2f} CPU")
    print(f"ratio={html / md:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
