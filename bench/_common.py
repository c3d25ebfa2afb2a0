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
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "wall": wall, "maxrss_kb": ru.ru_maxrss,
                  "utime": ru.ru_utime, "stime": ru.ru_stime}))
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


def run_measured(argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
                 check: bool = True) -> ChildRun:
    """Run argv in a child (through the launcher) and measure that child alone."""
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
    run = ChildRun(argv, info["rc"], info["wall"], info["maxrss_kb"] * 1024, info["utime"], info["stime"], out, err)
    if check and run.rc != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {run.rc}:\n{err[-4000:]}")
    return run


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a batchrun child: ours, minus anything that would redirect it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATCHRUN_")}
    env.update(extra)
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
