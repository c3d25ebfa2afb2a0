"""Benchmark: `batchrun plan` writing the request files of 3 routes over the synthetic corpus.

    python bench/plan.py [--scale small|full] [--corpus DIR] [--repeat N] [--profile]
    python bench/plan.py --both-scales

What runs, in one process tree, in this order for each repeat:

1. batchrun: `python -m batchrun plan --json` in a child process, on a fresh state.db, for three
   routes (openai gpt-5.5, anthropic claude-opus-4.8, gemini gemini-2.5-pro) and an empty judge
   panel. Config, state.db and jobs/ live in a temporary folder outside the repository; the
   config points at the corpus with absolute paths. Timed from spawn to exit (so interpreter
   start-up, the corpus scan and state.db writes are included); peak RSS is that child's
   ru_maxrss. The request files it wrote are measured (sizes, lines) and then deleted.
2. raw: the same number of bytes, file for file, written to the same folder in 1 MiB chunks,
   each file fsync'ed before close (what batchrun does at the end of a file). The disk's limit.
3. naive: what existing batch tools do: for each of the same (route, task) lines, the whole
   request dict is built with the full document inside, serialised with one `json.dumps`
   (ensure_ascii=False, so the bytes match), the line hashed with sha256, and written; one file
   per route, fsync'ed at the end. Documents are read once per document (as batchrun does) and
   the naive writer is timed in-process (no interpreter start-up, no corpus scan): both favour
   the naive baseline.

The page cache is warmed with the corpus first, so no run pays for cold reads.

Output: one table, then the targets, then `ratio=<batchrun throughput / raw throughput>` (for
--both-scales, the full scale's). `--profile` prints cProfile's top entries for an in-process
plan to stderr. Targets (issue 8): >= 0.6x raw, >= 2x naive, peak RSS <= 300 MB at full scale and
within 10% of the small-scale figure.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import os
import pstats
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    MB, MiB, bench_corpus, child_env, machine_line, mb, median, note, print_table, refuse_inside_repo,
    remove_state, remove_tree, run_measured, warm_page_cache,
)

ROUTES = {
    "gpt-5.5": {"provider": "openai", "model": "gpt-5.5"},
    "claude-opus-4.8": {"provider": "anthropic", "model": "claude-opus-4.8"},
    "gemini-2.5-pro": {"provider": "gemini", "model": "gemini-2.5-pro"},
}
TARGET_VS_RAW = 0.6
TARGET_VS_NAIVE = 2.0
TARGET_RSS = 300 * MB
TARGET_RSS_GROWTH = 0.10


@dataclass
class Measure:
    seconds: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    bytes: int = 0
    lines: int = 0
    files: int = 0

    @property
    def s(self) -> float:
        return median(self.seconds)

    @property
    def throughput(self) -> float:
        return self.bytes / self.s


@dataclass
class ScaleResult:
    scale: str
    corpus: Path
    batchrun: Measure
    raw: Measure
    naive: Measure
    startup: Measure


def write_config(work: Path, corpus_root: Path) -> Path:
    config = {
        "paths": {
            "dataset": str(corpus_root / "data" / "wildtrace_synth.json"),
            "corpus": str(corpus_root / "corpus"),
            "state": str(work / "state.db"),
            "jobs": str(work / "jobs"),
            "results": str(work / "results"),
        },
        "judging": {"panel": []},
        "routes": ROUTES,
    }
    path = work / "batchrun.json"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


# --- 1. batchrun ------------------------------------------------------------------------------


def run_batchrun(work: Path, config_path: Path, m: Measure) -> tuple[list[int], list[tuple[str, str]]]:
    """One `batchrun plan` in a child; returns the file sizes and the (route, task_id) lines written."""
    remove_tree(work / "jobs")
    remove_state(work / "state.db")
    run = run_measured([sys.executable, "-m", "batchrun", "--config", config_path, "-q", "plan", "--json"],
                       env=child_env(), cwd=work)
    summary = json.loads(run.stdout)
    files = sorted((work / "jobs").glob("*/requests.jsonl"))
    sizes = [f.stat().st_size for f in files]
    written = sum(r["bytes"] for r in summary["routes"])
    if sum(sizes) != written:
        raise RuntimeError(f"plan reported {written} bytes but jobs/ holds {sum(sizes)}")
    con = sqlite3.connect(work / "state.db")
    try:
        lines = con.execute(
            """SELECT b.route, q.task_id FROM batch_requests br JOIN batches b ON b.id = br.batch_id
               JOIN requests q ON q.custom_id = br.custom_id WHERE b.status = 'planned' ORDER BY b.seq, br.position"""
        ).fetchall()
    finally:
        con.close()
    m.seconds.append(run.wall)
    m.rss.append(run.maxrss)
    m.cpu.append(run.cpu_user + run.cpu_sys)
    m.bytes, m.lines, m.files = written, len(lines), len(files)
    # The files are GBs at full scale: measured, now deleted.
    remove_tree(work / "jobs")
    remove_state(work / "state.db")
    return sizes, lines


# --- 2. raw -----------------------------------------------------------------------------------


def run_startup(work: Path, m: Measure) -> None:
    """The fixed cost of any batchrun command: interpreter, click and the CLI module."""
    run = run_measured([sys.executable, "-m", "batchrun", "--version"], env=child_env(), cwd=work)
    m.seconds.append(run.wall)
    m.rss.append(run.maxrss)
    m.cpu.append(run.cpu_user + run.cpu_sys)


def run_raw(work: Path, sizes: list[int], m: Measure) -> None:
    folder = work / "raw"
    remove_tree(folder)
    folder.mkdir()
    chunk = memoryview(os.urandom(MiB))
    t0 = time.perf_counter()
    for i, size in enumerate(sizes):
        with open(folder / f"raw-{i:04d}.jsonl", "wb", buffering=0) as f:
            left = size
            while left > 0:
                n = min(left, MiB)
                f.write(chunk[:n])
                left -= n
            os.fsync(f.fileno())
    m.seconds.append(time.perf_counter() - t0)
    m.bytes, m.files = sum(sizes), len(sizes)
    remove_tree(folder)


# --- 3. naive ---------------------------------------------------------------------------------


def run_naive(work: Path, config_path: Path, lines: list[tuple[str, str]], m: Measure) -> None:
    from batchrun.config_file import load_config
    from batchrun.dataset import load_dataset
    from batchrun.prompts import generation_prompt
    from batchrun.providers import RequestSpec, get_adapter

    config = load_config(config_path)
    tasks = {t.task_id: t for t in load_dataset(config.paths.dataset).tasks}
    by_doc: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for route, task_id in lines:
        by_doc[tasks[task_id].corpus_file].append((route, task_id))
    folder = work / "naive"
    remove_tree(folder)
    folder.mkdir()
    adapters = {name: get_adapter(r.provider) for name, r in config.routes.items()}
    t0 = time.perf_counter()
    files = {name: open(folder / f"{name}.jsonl", "wb", buffering=MiB) for name in config.routes}
    digests: list[str] = []  # a per-line content hash, kept like a manifest
    total = 0
    for corpus_file in sorted(by_doc):
        with open(config.paths.corpus / corpus_file, encoding="utf-8") as f:
            document = f.read()
        for route_name, task_id in by_doc[corpus_file]:
            route = config.routes[route_name]
            task = tasks[task_id]
            custom_id = "n-" + hashlib.sha256(f"{route_name}\x00{task_id}".encode()).hexdigest()[:40]
            spec = RequestSpec(custom_id, route.model, generation_prompt(task.question, document),
                               config.generation_max_tokens(route), config.generation_temperature(route))
            request = adapters[route_name].build_line(route, spec)
            data = (json.dumps(request, ensure_ascii=False) + "\n").encode()
            digests.append(hashlib.sha256(data).hexdigest())
            files[route_name].write(data)
            total += len(data)
        del document
    for f in files.values():
        f.flush()
        os.fsync(f.fileno())
        f.close()
    m.seconds.append(time.perf_counter() - t0)
    m.bytes, m.lines, m.files = total, len(digests), len(files)
    remove_tree(folder)


# --- profile ----------------------------------------------------------------------------------


def profile_plan(work: Path, config_path: Path, top: int = 15) -> None:
    from batchrun.config_file import load_config
    from batchrun.plan import plan
    from batchrun.store import Store

    remove_tree(work / "jobs")
    remove_state(work / "state.db")
    config = load_config(config_path)
    store = Store(config.paths.state)
    store.start_run("plan")
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    plan(store, config)
    prof.disable()
    wall = time.perf_counter() - t0
    store.close()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    note(f"\ncProfile of an in-process plan ({wall:.2f} s wall), top {top} by own time:")
    note("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])
    remove_tree(work / "jobs")
    remove_state(work / "state.db")


# --- driver -----------------------------------------------------------------------------------


def warm_disk(work: Path, nbytes: int) -> None:
    """Write and delete a scratch file of about the size the runs will write (unmeasured).

    On a VM whose memory is backed lazily by the host, the first run to fill the page cache pays
    for touching fresh guest memory; this puts that cost here instead of on whichever writer
    happens to run first.
    """
    run_raw(work, [MiB * 256] * max(1, nbytes // (MiB * 256)), Measure())


def measure_scale(scale: str, corpus_root: Path, work_root: Path, repeat: int, profile: bool) -> ScaleResult:
    work = work_root / scale
    work.mkdir(parents=True, exist_ok=True)
    config_path = write_config(work, corpus_root)
    note(f"[{scale}] corpus {corpus_root}; warming the page cache ...")
    warm_page_cache(sorted((corpus_root / "corpus").glob("*")) + [corpus_root / "data" / "wildtrace_synth.json"])
    corpus_bytes = sum(p.stat().st_size for p in (corpus_root / "corpus").glob("*"))
    warm_disk(work, corpus_bytes * 8)  # the request files are ~7.5x the corpus for 3 routes
    res = ScaleResult(scale, corpus_root, Measure(), Measure(), Measure(), Measure())
    for i in range(repeat):
        note(f"[{scale}] run {i + 1}/{repeat}: batchrun plan (child) ...")
        sizes, lines = run_batchrun(work, config_path, res.batchrun)
        note(f"[{scale}]   {res.batchrun.bytes:,} bytes in {res.batchrun.seconds[-1]:.2f} s; raw baseline ...")
        run_raw(work, sizes, res.raw)
        note(f"[{scale}]   raw {res.raw.seconds[-1]:.2f} s; naive baseline ...")
        run_naive(work, config_path, lines, res.naive)
        note(f"[{scale}]   naive {res.naive.seconds[-1]:.2f} s")
        run_startup(work, res.startup)
    if profile:
        profile_plan(work, config_path)
    remove_tree(work)
    return res


def rows_for(r: ScaleResult) -> list[list[str]]:
    b = r.batchrun
    out = []
    for name, m, rss in (
        ("batchrun plan (child, CLI)", r.batchrun, max(r.batchrun.rss)),
        ("raw write (1 MiB chunks, fsync)", r.raw, None),
        ("naive (json.dumps + sha256 a line)", r.naive, None),
    ):
        out.append([
            r.scale, name, f"{m.lines:,}" if m.lines else "-", f"{m.files}", f"{m.bytes:,}", f"{m.s:.2f}", f"{min(m.seconds):.2f}-{max(m.seconds):.2f}",
            f"{m.throughput / MB:,.1f}", f"{b.throughput / m.throughput:.2f}", mb(rss),
            f"{median(m.cpu):.2f}" if m.cpu else "-",
        ])
    st = r.startup
    out.append([r.scale, "(batchrun start-up only: --version)", "-", "-", "-", f"{st.s:.2f}", f"{min(st.seconds):.2f}-{max(st.seconds):.2f}", "-", "-", mb(max(st.rss)),
                f"{median(st.cpu):.2f}"])
    return out


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", choices=("small", "full"), default="small")
    ap.add_argument("--corpus", type=Path, help="make_corpus.py output folder (default /tmp/bench-<scale>, generated if missing)")
    ap.add_argument("--both-scales", action="store_true", help="run small then full and compare peak RSS")
    ap.add_argument("--repeat", type=int, help="runs per measurement, median reported (default 3)")
    ap.add_argument("--workdir", type=Path, help="where config, state.db and jobs/ go (default: a new folder in /tmp)")
    ap.add_argument("--profile", action="store_true", help="also print a cProfile of an in-process plan to stderr")
    args = ap.parse_args(argv)
    if args.both_scales and args.corpus:
        ap.error("--corpus applies to one scale; --both-scales uses /tmp/bench-small and /tmp/bench-full")

    work_root = Path(tempfile.mkdtemp(prefix="batchrun-bench-plan-", dir=args.workdir))
    refuse_inside_repo(work_root)
    scales = ["small", "full"] if args.both_scales else [args.scale]
    results = []
    try:
        for scale in scales:
            corpus_root = bench_corpus(scale, args.corpus)
            repeat = args.repeat or 3
            results.append(measure_scale(scale, corpus_root, work_root, repeat, args.profile))
    finally:
        remove_tree(work_root)

    rows = [row for r in results for row in rows_for(r)]
    print(f"bench/plan.py — {machine_line(Path(tempfile.gettempdir()))}")
    print("3 routes (openai gpt-5.5, anthropic claude-opus-4.8, gemini gemini-2.5-pro), no judges; median of "
          + ", ".join(f"{len(r.batchrun.seconds)} run(s) at {r.scale}" for r in results))
    print_table(["scale", "writer", "lines", "files", "bytes", "median s", "min-max s", "MB/s", "batchrun x", "peak RSS", "CPU s"], rows)
    head = results[-1]
    vs_raw = head.batchrun.throughput / head.raw.throughput
    vs_naive = head.batchrun.throughput / head.naive.throughput
    rss_full = max(head.batchrun.rss)
    print(f"target batchrun/raw >= {TARGET_VS_RAW}: {vs_raw:.2f} ({verdict(vs_raw >= TARGET_VS_RAW)}); "
          f"batchrun/naive >= {TARGET_VS_NAIVE}: {vs_naive:.2f} ({verdict(vs_naive >= TARGET_VS_NAIVE)}); "
          f"peak RSS at {head.scale} {mb(rss_full)}" + (f" (<= 300 MB: {verdict(rss_full <= TARGET_RSS)})" if head.scale == "full" else ""))
    if len(results) == 2:
        small_rss = max(results[0].batchrun.rss)
        growth = rss_full / small_rss - 1
        print(f"peak RSS full vs small: {mb(rss_full)} vs {mb(small_rss)} = {growth:+.0%} "
              f"(target within {TARGET_RSS_GROWTH:.0%}: {verdict(abs(growth) <= TARGET_RSS_GROWTH)})")
    print(f"ratio={vs_raw:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
