"""Benchmark: peak memory of submitting maximum-size batches (OpenAI 200 MB, Anthropic 256 MB).

    python bench/submit.py [--requests-openai N] [--requests-anthropic N] [--profile]

1. The emulator runs as its own process (`python -m batchrun.emulator --port 0 --latency 0`).
2. For each provider, a synthetic project is built in a temporary folder outside the repository:
   one ASCII document of about 1 MB and N tasks on it, sized so that `batchrun plan` writes
   exactly one request file just under the provider's file limit (OpenAI 200,000,000 bytes;
   Anthropic 255,000,000, the 256 MB create body minus framing). The file is planned by
   `batchrun plan` in a child process (not measured).
3. A child process per provider runs the library's submit path, `batchrun.run.submit.submit(store,
   config)` on that state.db with the planned batch (nothing left to plan, so it goes straight to
   checking the file's checksum (BLAKE3), the upload (OpenAI) and the create: for Anthropic the create body
   is the request file itself, streamed). Its peak RSS is that child's ru_maxrss. The batch must
   come back `in_flight`, and the emulator must have logged every request of it.
4. An idle child (same imports and SDK client, nothing sent) gives the fixed floor.

Target (issue 8): peak RSS <= 1.5 x the file + 100 MB. `ratio=` is the worst provider's peak RSS
divided by its target (<= 1 is good). `--profile` reruns each submit child under tracemalloc and
cProfile and prints where the Python-level peak and time went, to stderr.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from _common import (
    MB, child_env, machine_line, mb, note, print_table, refuse_inside_repo, remove_tree, run_measured,
)

KEY_ENV = "BATCHRUN_BENCH_KEY"
PROVIDERS = {
    # provider: (route name, model, file byte limit batchrun uses, default number of requests)
    "openai": ("gpt-5.5", "gpt-5.5", 200_000_000, 200),
    "anthropic": ("claude-opus-4.8", "claude-opus-4-8", 255_000_000, 255),  # route, model id (Anthropic's hyphens)
}
MARGIN = 50_000  # "just under" the limit
WORDS = ("archive harbor ledger engine council river bridge market lantern signal garden tower valve "
         "circuit letter journal station village province mill furnace orchard vessel cargo treaty canal").split()


# --- the synthetic project --------------------------------------------------------------------


def _question(i: int) -> str:
    return f"Question {i:04d}: what does the document record about item {i:04d} and who signed it?"


def build_project(root: Path, provider: str, n_requests: int, fraction: float = 1.0) -> Path:
    """A one-document project whose single request file lands just under the provider's limit."""
    from batchrun.base import jsonl
    from batchrun.protocol.config_file import parse_config
    from batchrun.protocol.policy import generation_decoding
    from batchrun.protocol.prompts import generation_prompt
    from batchrun.providers import RequestSpec, get_adapter

    route_name, model, limit, _ = PROVIDERS[provider]
    (root / "corpus").mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    config = {
        "paths": {"dataset": str(root / "data" / "tasks.json"), "corpus": str(root / "corpus"),
                  "state": str(root / "state.db"), "jobs": str(root / "jobs"), "results": str(root / "results")},
        "judging": {"panel": []},
        # No judges: submit's memory is the measurement. The config says so (spec 001 §4's panel of
        # three is the default, and a config without one is refused unless it declares another).
        "protocol": "custom",
        "routes": {route_name: {"provider": provider, "model": model, "api_key_env": KEY_ENV}},
    }
    config_path = root / "batchrun.json"
    config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    cfg = parse_config(config, config_path)
    route = cfg.routes[route_name]
    # Every line has the same overhead (fixed-width question, 42-character custom_id).
    temperature, max_tokens = generation_decoding(cfg, route)
    spec = RequestSpec("g-" + "0" * 40, model, generation_prompt(_question(0), ""), max_tokens, temperature)
    overhead = len(jsonl.dumps(get_adapter(provider).build_line(route, spec)).encode()) + 1
    target = int((limit - MARGIN) * fraction) // n_requests - overhead  # escaped document bytes per line
    # ~1 MB of ASCII prose with a newline every few sentences; trimmed to the exact escaped size.
    parts, size, i = [], 0, 0
    while size < target + 1000:
        sentence = f"The {WORDS[i % len(WORDS)]} of lot {i:06d} was inspected by clerk {i * 7 % 9973:04d}."
        sentence += "\n" if i % 5 == 4 else " "
        parts.append(sentence)
        size += len(sentence)
        i += 1
    text = "".join(parts)
    for _ in range(10):
        escaped = len(jsonl.escape_str(text).encode())
        if escaped == target:
            break
        text = text[: len(text) - (escaped - target)] if escaped > target else text + "x" * (target - escaped)
    (root / "corpus" / "doc.txt").write_text(text, encoding="utf-8", newline="")
    tasks = [{"task_id": f"t{i:04d}", "question_text": _question(i), "corpus_file": "doc.txt",
              "ground_truth": {"answer": "-", "scoring_rubric": [{"points": 100, "correct_criterion": "names the clerk"}]}}
             for i in range(n_requests)]
    (root / "data" / "tasks.json").write_text(json.dumps(tasks), encoding="utf-8")
    return config_path


def plan_project(config_path: Path) -> dict:
    run = run_measured([sys.executable, "-m", "batchrun", "--config", config_path, "-q", "plan", "--json"],
                       env=child_env(), cwd=config_path.parent)
    summary = json.loads(run.stdout)
    if len(summary["batches"]) != 1:
        raise RuntimeError(f"expected exactly one request file, plan wrote {summary['batches']}")
    (route,) = summary["routes"]
    return {"bytes": route["bytes"], "requests": route["to_send"], "batch": summary["batches"][0]}


# --- the emulator -----------------------------------------------------------------------------


class EmulatorProcess:
    def __init__(self, folder: Path):
        self.log = folder / "emulator.log"
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> "EmulatorProcess":
        self._log = open(self.log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "batchrun.emulator", "--port", "0", "--latency", "0"],
                                     stdout=subprocess.DEVNULL, stderr=self._log, env=child_env())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            for line in text.splitlines():
                if "listening on " in line:
                    self.url = line.split("listening on ", 1)[1].strip()
                    return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"the emulator exited: {text[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError("the emulator did not start within 30 s")

    def requests_for(self, batch_id: str) -> int:
        with urllib.request.urlopen(f"{self.url}/_emulator/requests", timeout=60) as r:
            log = json.load(r)["requests"]
        return sum(1 for e in log if e.get("batch") == batch_id)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


# --- the child --------------------------------------------------------------------------------


def child(config_path: Path, url: str, idle: bool, profile: bool) -> int:
    """Runs in its own process: submit the planned batch (or, idle, only load what submit loads)."""
    from batchrun.providers.clients import make_client
    from batchrun.protocol.config_file import load_config
    from batchrun.ledger.store import Store
    from batchrun.run.submit import submit

    config = load_config(config_path).with_emulator(url)
    route = next(iter(config.routes.values()))
    make_client(route)  # imports the SDK, builds a client
    if idle:
        print(json.dumps({"idle": True}))
        return 0
    store = Store(config.paths.state)
    store.start_run("submit")
    if profile:
        import cProfile
        import io
        import pstats
        import tracemalloc

        tracemalloc.start(25)
        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    result = submit(store, config)
    seconds = time.perf_counter() - t0
    if profile:
        prof.disable()
        current, peak = tracemalloc.get_traced_memory()
        snap = tracemalloc.take_snapshot()
        tracemalloc.stop()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(20)
        print(f"tracemalloc: Python-level peak {peak / MB:.1f} MB (still held after submit: {current / MB:.1f} MB)", file=sys.stderr)
        print("cProfile, top 20 by cumulative time:", file=sys.stderr)
        print("\n".join(l for l in out.getvalue().splitlines() if l.strip()), file=sys.stderr)
        for stat in snap.statistics("lineno")[:8]:
            print(f"  held: {stat}", file=sys.stderr)
    batch = store.one("SELECT id, status, provider_batch_id, n_requests, bytes FROM batches ORDER BY seq DESC LIMIT 1")
    store.end_run("ok")
    print(json.dumps({"created": result.created, "bytes_uploaded": result.bytes_uploaded, "seconds": seconds, "batch": batch, "held": result.held, "preflight": [c.describe() for c in result.preflight]}))
    return 0


def run_child(script: Path, config_path: Path, url: str, *, idle: bool = False, profile: bool = False):
    argv = [sys.executable, script, "--child", "--config", config_path, "--url", url]
    if idle:
        argv.append("--idle")
    if profile:
        argv.append("--profile")
    return run_measured(argv, env=child_env(**{KEY_ENV: "bench-key"}), cwd=config_path.parent)


# --- driver -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests-openai", type=int, default=PROVIDERS["openai"][3], help="requests in the OpenAI file (~1 MB each)")
    ap.add_argument("--requests-anthropic", type=int, default=PROVIDERS["anthropic"][3], help="requests in the Anthropic file")
    ap.add_argument("--fraction", type=float, default=1.0,
                    help="fill this fraction of each limit (default 1; 0.05 for a quick smoke run)")
    ap.add_argument("--workdir", type=Path, help="parent folder for the temporary projects (default /tmp)")
    ap.add_argument("--profile", action="store_true", help="also profile each submit (tracemalloc + cProfile) to stderr")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--idle", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.config, args.url, args.idle, args.profile)

    script = Path(__file__).resolve()
    work = Path(tempfile.mkdtemp(prefix="batchrun-bench-submit-", dir=args.workdir))
    refuse_inside_repo(work)
    counts = {"openai": max(1, round(args.requests_openai * args.fraction)),
              "anthropic": max(1, round(args.requests_anthropic * args.fraction))}
    rows, ratios = [], []
    try:
        with EmulatorProcess(work) as emu:
            note(f"emulator at {emu.url}")
            for provider in PROVIDERS:
                root = work / provider
                note(f"[{provider}] building and planning a {PROVIDERS[provider][2]:,}-byte-limit file ...")
                config_path = build_project(root, provider, counts[provider], args.fraction)
                planned = plan_project(config_path)
                idle = run_child(script, config_path, emu.url, idle=True)
                note(f"[{provider}] {planned['bytes']:,} bytes, {planned['requests']} requests; submitting in a child ...")
                run = run_child(script, config_path, emu.url)
                out = json.loads(run.stdout.strip().splitlines()[-1])
                b = out["batch"]
                if out["created"] != [planned["batch"]] or b["status"] != "in_flight":
                    raise RuntimeError(f"[{provider}] the batch was not created: {out}\n{run.stderr[-3000:]}")
                seen = emu.requests_for(b["provider_batch_id"])
                if seen != planned["requests"]:
                    raise RuntimeError(f"[{provider}] the emulator logged {seen} requests, expected {planned['requests']}")
                if args.profile:
                    # Fresh project state for the profiled rerun: plan again into a new folder.
                    proot = work / f"{provider}-profile"
                    pconfig = build_project(proot, provider, counts[provider], args.fraction)
                    plan_project(pconfig)
                    note(f"[{provider}] profiled rerun:")
                    prof = run_child(script, pconfig, emu.url, profile=True)
                    note(prof.stderr.rstrip())
                    remove_tree(proot)
                target = 1.5 * planned["bytes"] + 100 * MB
                ratio = run.maxrss / target
                ratios.append(ratio)
                rows.append([
                    provider, f"{planned['bytes']:,}", f"{planned['requests']}", f"{seen}", f"{out['seconds']:.2f}",
                    mb(run.maxrss), mb(idle.maxrss), mb(run.maxrss - idle.maxrss),
                    f"{(run.maxrss - idle.maxrss) / planned['bytes']:.2f}", mb(target), f"{ratio:.2f}",
                ])
                remove_tree(root / "jobs")
    finally:
        remove_tree(work)

    print(f"bench/submit.py — {machine_line(Path(tempfile.gettempdir()))}")
    print("library submit (checksum check, upload, create) in a child process against the emulator process; "
          "peak RSS = that child's ru_maxrss")
    print_table(["provider", "file bytes", "requests", "emulator got", "submit s", "peak RSS", "idle RSS",
                 "RSS - idle", "extra/file", "target", "RSS/target"], rows)
    worst = max(ratios)
    print(f"target peak RSS <= 1.5 x file + 100 MB: {'met' if worst <= 1 else 'MISSED'} (worst RSS/target {worst:.2f})")
    print(f"ratio={worst:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
