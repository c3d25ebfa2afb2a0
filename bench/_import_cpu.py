"""Run the batchrun CLI and write how much of its CPU time went into importing modules.

    python bench/_import_cpu.py OUT.json [batchrun arguments ...]

bench/startup.py runs `batchrun demo` through this. Every import of a module not yet loaded goes
through importlib._bootstrap._find_and_load (the `import` statement, importlib.import_module and
lazy imports inside functions alike); it is wrapped here to add up, per thread, the CPU time
(time.thread_time) of each outermost import, by the top-level package it imported (an import
nested inside another counts for the outer one). At exit the process's CPU time (getrusage:
user + system, every thread), those sums and which provider SDKs the process loaded (`sdks`: each
of openai, anthropic and google.genai found in sys.modules) are written to OUT.json. The wrapper's own cost is
a few microseconds per module imported (~0.01 s for the demo's ~5,000).
"""

from __future__ import annotations

import atexit
import importlib._bootstrap as _bootstrap
import json
import resource
import sys
import threading
import time
from typing import Any

_real_find_and_load = _bootstrap._find_and_load  # type: ignore[attr-defined]
_local = threading.local()
_lock = threading.Lock()
_by_package: dict[str, float] = {}
SDK_MODULES = ("openai", "anthropic", "google.genai")  # the three provider SDKs, as imported


def _find_and_load(name: str, import_: Any) -> Any:
    if getattr(_local, "depth", 0):
        _local.depth += 1
        try:
            return _real_find_and_load(name, import_)
        finally:
            _local.depth -= 1
    _local.depth = 1
    start = time.thread_time()
    try:
        return _real_find_and_load(name, import_)
    finally:
        spent = time.thread_time() - start
        _local.depth = 0
        top = name.partition(".")[0]
        with _lock:
            _by_package[top] = _by_package.get(top, 0.0) + spent


def _write(out: str) -> None:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    with _lock:
        packages = dict(sorted(_by_package.items(), key=lambda kv: -kv[1]))
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"cpu": ru.ru_utime + ru.ru_stime, "imports": sum(packages.values()), "packages": packages,
                   "sdks": [m for m in SDK_MODULES if m in sys.modules]}, f)


def main() -> None:
    out, args = sys.argv[1], sys.argv[2:]
    _bootstrap._find_and_load = _find_and_load  # type: ignore[attr-defined]
    atexit.register(_write, out)
    from batchrun.cli import cli

    cli(args, prog_name="batchrun")


if __name__ == "__main__":
    main()
