"""Paired A/B of `batchrun plan` (generation stage, fresh state.db) between two source trees.

    git -C . archive <commit> | tar -x -C /tmp/plan-a      # each tree: a checkout of batchrun
    python bench/plan_ab.py /tmp/plan-a /tmp/plan-b [--routes 3|30] [--scale full|small] [--repeat N]

Runs `python -m batchrun plan` with PYTHONPATH set to each tree in turn, alternating (A, B, A, B,
...) so both see the same load, and prints each run's wall and CPU seconds and peak RSS, then
whether every request file was byte-identical across trees and runs (one combined checksum: the
sha256 of the files' sha256s in batch order). The config is bench/plan.py's (N contestant routes;
the judges have nothing to grade on a fresh state.db). Last line: `ratio=<A median wall / B
median wall>`.
"""

from __future__ import annotations

import argparse
import hashlib
import sqlite3
import sys
import tempfile
from pathlib import Path

from _common import bench_corpus, compiled_env, load_line, median, note, remove_tree, run_measured
from plan import write_config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--routes", type=int, default=3)
    ap.add_argument("--scale", choices=("small", "full"), default="full")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    corpus = bench_corpus(args.scale)
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    walls: dict[str, list[float]] = {k: [] for k in trees}
    sums: dict[str, set[str]] = {k: set() for k in trees}
    cache = Path(tempfile.mkdtemp(prefix="batchrun-bench-ab-cache-"))
    try:
        for i in range(args.repeat):
            for name, tree in trees.items():
                work = Path(tempfile.mkdtemp(prefix=f"batchrun-bench-ab-{name}-"))
                try:
                    config = write_config(work, corpus, args.routes)
                    env = compiled_env(cache / name, PYTHONPATH=str(tree))
                    load = load_line()
                    run = run_measured([sys.executable, "-m", "batchrun", "--config", str(config), "-q", "plan"], env=env, cwd=work)
                    con = sqlite3.connect(work / "state.db")
                    files = con.execute("SELECT request_file FROM batches WHERE status = 'planned' ORDER BY seq").fetchall()
                    con.close()
                    combined = hashlib.sha256()
                    nbytes = 0
                    for (f,) in files:
                        h = hashlib.sha256()
                        with open(f, "rb") as fh:
                            while chunk := fh.read(1 << 20):
                                h.update(chunk)
                                nbytes += len(chunk)
                        combined.update(h.digest())
                    sums[name].add(combined.hexdigest())
                    walls[name].append(run.wall)
                    print(f"{name} ({tree}) run {i + 1}: wall {run.wall:.2f} s, CPU {run.cpu_user + run.cpu_sys:.2f} s "
                          f"(user {run.cpu_user:.2f}, sys {run.cpu_sys:.2f}), peak RSS {run.maxrss / 1e6:.1f} MB, "
                          f"{nbytes:,} bytes in {len(files)} files; {load}", flush=True)
                finally:
                    remove_tree(work)
    finally:
        remove_tree(cache)
    identical = len(sums["A"] | sums["B"]) == 1
    print(f"request files byte-identical across trees and runs: {'yes' if identical else 'NO'}")
    note(f"combined checksums: {sums}")
    print(f"ratio={median(walls['A']) / median(walls['B']):.3f}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
