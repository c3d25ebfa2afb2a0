"""Shared helpers for the benchmark scripts in bench/ (standard library only).

- `run_measured(argv)`: run a command in a child process and return its wall time, CPU time and
  peak RSS (`ru_maxrss` from `wait4`). The child is started from a small launcher process: on
  Linux a child started by vfork/posix_spawn inherits its parent's RSS high-water mark at exec,
  so a child started directly from a benchmark that has allocated memory would report the
  benchmark's RSS, not its own. The launcher is a fresh interpreter (~10 MB), below anything
  batchrun uses.
- `machine_info()`: the machine the figures came from.
- `print_table()`: one aligned plain-text table.
- `bench_corpus()`: the synthetic corpus of bench/make_corpus.py for a scale, generated if missing.
- `lib()`: every batchrun library function a benchmark uses, imported here and nowhere else, so a
  function that moves between modules (plan.py -> ledger.py, scoring.py -> outputs.py) is a
  one-line fix in this file. The benchmarks time the CLI; the library is only used to build
  inputs (custom_ids, policies, result rows) exactly as batchrun would.
- `raw_executemany()`: the raw SQLite baseline for ingestion (the same lines, one executemany).
- `load_line()`: the load average, printed with every figure (the machine is shared).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO_ROOT / "bench"
MB = 1_000_000
MiB = 1 << 20

_LAUNCHER = r"""
import json, os, sys, time
spec = json.loads(sys.argv[1])
os.chdir(spec["cwd"])
out = os.open(spec["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
err = os.open(spec["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
t0 = time.perf_counter()
pid = os.posix_spawn(spec["argv"][0], spec["argv"], spec["env"],
                     file_actions=[(os.POSIX_SPAWN_DUP2, out, 1), (os.POSIX_SPAWN_DUP2, err, 2)])
timed_out = False
if spec.get("timeout"):
    import signal, threading
    def _kill():
        global timed_out
        timed_out = True
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    timer = threading.Timer(spec["timeout"], _kill)
    timer.daemon = True
    timer.start()
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
if spec.get("timeout"):
    timer.cancel()
print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "wall": wall, "maxrss_kb": ru.ru_maxrss,
                  "utime": ru.ru_utime, "stime": ru.ru_stime, "timed_out": timed_out}))
"""


@dataclass
class ChildRun:
    argv: list[str]
    rc: int
    wall: float  # seconds, spawn to exit
    maxrss: int  # bytes (ru_maxrss of that one child)
    cpu_user: float
    cpu_sys: float
    stdout: str
    stderr: str
    timed_out: bool = False  # killed (SIGKILL) after `timeout` seconds: wall is then a lower bound


def run_measured(argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
                 check: bool = True, timeout: float | None = None, ok_codes: Sequence[int] = (0,)) -> ChildRun:
    """Run argv in a child (through the launcher) and measure that child alone.

    `timeout`: kill the child after that many seconds (the run is then `timed_out`, never an
    error). `ok_codes`: exit codes that are not failures (`batchrun collect` exits 2 while any
    route is incomplete)."""
    argv = [str(a) for a in argv]
    if not os.path.isabs(argv[0]):
        found = shutil.which(argv[0])
        if found is None:
            raise FileNotFoundError(argv[0])
        argv[0] = found
    with tempfile.TemporaryDirectory(prefix="batchrun-bench-child-") as tmp:
        spec = {
            "argv": argv,
            "env": dict(os.environ if env is None else env),
            "cwd": str(cwd or os.getcwd()),
            "stdout": os.path.join(tmp, "stdout"),
            "stderr": os.path.join(tmp, "stderr"),
            "timeout": timeout,
        }
        launched = subprocess.run([sys.executable, "-I", "-c", _LAUNCHER, json.dumps(spec)],
                                  capture_output=True, text=True)
        if launched.returncode != 0:
            raise RuntimeError(f"launcher failed: {launched.stderr.strip()}")
        info = json.loads(launched.stdout)
        with open(spec["stdout"], encoding="utf-8", errors="replace") as f:
            out = f.read()
        with open(spec["stderr"], encoding="utf-8", errors="replace") as f:
            err = f.read()
    run = ChildRun(argv, info["rc"], info["wall"], info["maxrss_kb"] * 1024, info["utime"], info["stime"], out, err,
                   info.get("timed_out", False))
    if check and not run.timed_out and run.rc not in ok_codes:
        raise RuntimeError(f"{' '.join(argv)} exited {run.rc}:\n{err[-4000:]}")
    return run


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a batchrun child: ours, minus anything that would redirect it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHRUN_")}
    env.update(extra)
    return env


def compiled_env(cache_dir: Path, **extra: str) -> dict[str, str]:
    """child_env() that keeps compiled bytecode, in `cache_dir`, as an installed batchrun has.

    A machine that sets PYTHONDONTWRITEBYTECODE (this one does) makes every child compile
    batchrun's modules from source again (~0.1 s a command), which a user's pip install never
    does. The cache goes to a folder of the benchmark's (PYTHONPYCACHEPREFIX), not into the
    source tree; run each command once untimed to fill it."""
    env = child_env(**extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(cache_dir)
    return env


# --- the machine ------------------------------------------------------------------------------


def _mem_total_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _disk_of(path: Path) -> str:
    """Device, filesystem type and whether it is rotational, for the folder the benchmark writes to."""
    path = path.resolve()
    best = ("?", "?", "")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype = line.split()[:3]
                if (str(path) + "/").startswith(mnt.rstrip("/") + "/") and len(mnt) >= len(best[2]):
                    best = (dev, fstype, mnt)
    except OSError:
        pass
    dev, fstype, mnt = best
    kind = ""
    name = os.path.basename(dev)
    for candidate in (name, name.rstrip("0123456789"), name.rstrip("0123456789").rstrip("p")):
        rot = Path(f"/sys/block/{candidate}/queue/rotational")
        if rot.exists():
            kind = f"queue/rotational={rot.read_text().strip()}"
            if "virtio" in os.path.realpath(f"/sys/block/{candidate}/device"):
                kind = "virtio block device, " + kind
            break
    usage = shutil.disk_usage(path)
    return f"{dev} ({fstype}, mounted on {mnt or '?'}; {kind or 'type unknown'}; {usage.free / 1e9:.0f} GB free of {usage.total / 1e9:.0f} GB)"


def machine_info(folder: Path) -> dict[str, str]:
    mem = _mem_total_bytes()
    return {
        "nproc": str(os.cpu_count()),
        "memory": f"{mem / 2**30:.1f} GiB" if mem else "?",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "kernel": platform.release(),
        "disk": _disk_of(folder),
    }


def machine_line(folder: Path) -> str:
    m = machine_info(folder)
    return (f"machine: {m['nproc']} CPUs, {m['memory']} RAM, Python {m['python']}, {m['machine']}, "
            f"Linux {m['kernel']}; disk {m['disk']}")


# --- output -----------------------------------------------------------------------------------


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, file: Any = None) -> None:
    """Plain-text table, first column left-aligned, the others right-aligned."""
    file = file or sys.stdout
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def fmt(r: list[str]) -> str:
        return "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)).rstrip()

    print(fmt(cells[0]), file=file)
    print("  ".join("-" * w for w in widths), file=file)
    for r in cells[1:]:
        print(fmt(r), file=file)


def mb(n: float | None) -> str:
    return "-" if n is None else f"{n / MB:,.1f} MB"


def note(*parts: Any) -> None:
    """Progress, to stderr (stdout carries only the table and the ratio line)."""
    print(*parts, file=sys.stderr, flush=True)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


# --- the synthetic corpus ---------------------------------------------------------------------


def refuse_inside_repo(path: Path) -> None:
    p = path.resolve()
    if p == REPO_ROOT or REPO_ROOT in p.parents:
        raise SystemExit(f"error: {path} is inside the repository {REPO_ROOT}; benchmarks write outside it (use /tmp).")


def bench_corpus(scale: str, explicit: Path | None = None) -> Path:
    """The make_corpus.py output for a scale (default /tmp/bench-<scale>), generated when missing."""
    root = (explicit or Path(tempfile.gettempdir()) / f"bench-{scale}").resolve()
    refuse_inside_repo(root)
    dataset = root / "data" / "wildtrace_synth.json"
    if not dataset.exists() or not (root / "corpus").is_dir():
        note(f"generating the {scale} corpus in {root} (bench/make_corpus.py) ...")
        subprocess.run([sys.executable, str(BENCH_DIR / "make_corpus.py"), str(root), "--scale", scale], check=True,
                       stdout=subprocess.DEVNULL)
    return root


def warm_page_cache(paths: Sequence[Path]) -> int:
    """Read files once so every measured run sees them cached (the first run is not penalised)."""
    total = 0
    for p in paths:
        with open(p, "rb") as f:
            while chunk := f.read(8 * MiB):
                total += len(chunk)
    return total


def remove_tree(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)


def sqlite_files(path: Path) -> list[Path]:
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"), path.with_name(path.name + ".lock")]


def remove_state(path: Path) -> None:
    for p in sqlite_files(path):
        if p.exists():
            p.unlink()


def connect_like_state(db_path: Path) -> Any:
    """A new SQLite file opened as batchrun opens state.db: WAL, synchronous=NORMAL (the baselines
    write under the same durability as the command they are measured against)."""
    import sqlite3

    con = sqlite3.connect(db_path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    return con


def floor_insert(state: Path, db_path: Path, rows: Any, *, or_ignore: bool = False) -> tuple[float, int]:
    """The floor collect is measured against (bench/ingest.py's docstring): a fresh table made with
    `state`'s own `results` DDL and indexes at `db_path`, WAL, ingest's page cache, and `rows(now)`
    (the benchmark's lines, each decoded and its custom_id and answer taken by its shape) inserted
    in one transaction. Seconds (from opening the new file to closing it), rows."""
    import sqlite3
    import time

    con = sqlite3.connect(state)
    ddl = [sql for (sql,) in con.execute(
        "SELECT sql FROM sqlite_master WHERE tbl_name = 'results' AND type IN ('table', 'index') AND sql IS NOT NULL "
        "ORDER BY type DESC, name")]
    con.close()
    remove_state(db_path)
    t0 = time.perf_counter()
    con = connect_like_state(db_path)
    con.execute("PRAGMA cache_size=-65536")
    for sql in ddl:
        con.execute(sql)
    with con:
        con.executemany(f"""INSERT {'OR IGNORE ' if or_ignore else ''}INTO results
                            (batch_id, custom_id, kind, text, raw_json, collected_at, run_id) VALUES (?, ?, ?, ?, ?, ?, ?)""",
                        rows(time.time()))
    n = con.execute("SELECT count(*) FROM results").fetchone()[0]
    con.close()
    seconds = time.perf_counter() - t0
    remove_state(db_path)
    return seconds, n


def load_line() -> str:
    """The 1/5/15-minute load averages and the CPU count: the figures are only comparable with it."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def load1() -> float:
    return os.getloadavg()[0]


# --- the batchrun library (imported here only) ------------------------------------------------


class _Lib:
    """The library functions the benchmarks use to build inputs as batchrun would, imported once.

    Functions other branches are moving keep a fallback import from the old home: ids, sync and
    judge queueing are moving from plan.py to ledger.py; scoring.py is being renamed outputs.py.
    """

    def __init__(self) -> None:
        from batchrun.base import jsonl
        from batchrun.protocol.caps import CJK_WINDOW, is_cjk
        from batchrun.run.collect import CollectResult, collect_batch
        from batchrun.protocol.policy import fingerprint, generation_policy, judge_policy, route_policies
        from batchrun.ledger.inputs import resolve_inputs
        from batchrun.ledger.cost import request_cost
        from batchrun.protocol.prompts import generation_prompt, judge_prompt
        from batchrun.providers import RequestSpec, get_adapter
        from batchrun.ledger.store import Store

        # Moving from plan.py to ledger.py (branch i14-core): each name from its new home if it is there.
        # config.py's file reading moved to config_file.py (branch i14-core) likewise.
        load_config, parse_config = (_first_of(("batchrun.protocol.config_file", "batchrun.config_file", "batchrun.config"), name)
                                     for name in ("load_config", "parse_config"))
        estimate_tokens, generation_custom_id, judge_custom_id, sync_state = (
            _first_of(("batchrun.ledger.sync", "batchrun.ledger.ids", "batchrun.ledger", "batchrun.plan"), name)
            for name in ("estimate_tokens", "generation_custom_id", "judge_custom_id", "sync_state"))

        self.jsonl = jsonl
        self.CJK_WINDOW, self.is_cjk = CJK_WINDOW, is_cjk
        self.CollectResult, self.collect_batch = CollectResult, collect_batch
        self.fingerprint, self.load_config, self.parse_config = fingerprint, load_config, parse_config
        # A route's policy and the command's resolved inputs (issue 28: built once per command).
        self.generation_policy, self.judge_policy, self.route_policies = generation_policy, judge_policy, route_policies
        self.resolve_inputs = resolve_inputs
        self.request_cost = request_cost
        self.generation_prompt, self.judge_prompt = generation_prompt, judge_prompt
        self.RequestSpec, self.get_adapter = RequestSpec, get_adapter
        self.Store = Store
        self.estimate_tokens, self.generation_custom_id = estimate_tokens, generation_custom_id
        self.judge_custom_id, self.sync_state = judge_custom_id, sync_state


def _first_of(modules: Sequence[str], name: str) -> Any:
    import importlib

    for module in modules:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"{name} is in none of {', '.join(modules)}: update bench/_common.py")


_lib: _Lib | None = None


def lib() -> _Lib:
    global _lib
    if _lib is None:
        _lib = _Lib()
    return _lib


# --- the raw ingestion baseline ---------------------------------------------------------------


def raw_executemany(files: Sequence[Path], db_path: Path) -> tuple[float, int]:
    """The same raw result lines into a fresh table (`line TEXT`): one executemany, one
    transaction, WAL and synchronous=NORMAL as state.db. Returns (seconds, lines)."""
    import time

    remove_state(db_path)
    t0 = time.perf_counter()
    con = connect_like_state(db_path)
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
    remove_state(db_path)
    return seconds, n
