"""Benchmark: how long `batchrun --help` and `batchrun status` take to start, against Python itself,
and how much of `batchrun demo`'s CPU goes into importing modules.

    python bench/startup.py [--repeat N] [--demo-repeat N] [--commands-repeat N] [--profile]

Issue 15's start-up target: `batchrun --help` and `batchrun status` on a fresh project within 3x of
`python -c "import click, sqlite3"` (the interpreter plus the two libraries every command needs).
Issue 30's: each command imports only the SDKs of the providers it uses, and the demo's share of
CPU in imports <= 35%.

The project is the built-in demo's (batchrun/cli/demo: 5 contestant routes and a 3-judge panel, 30
tasks) copied to a temporary folder, after one `batchrun plan` (not timed): state.db exists and
nothing has been sent, so `status` opens state.db read-only and prints every route's cells and the
planned batches, as on the morning after a first plan. No network, no keys.

Every child keeps compiled bytecode (bench/_common.compiled_env): this machine sets
PYTHONDONTWRITEBYTECODE, which would make each batchrun command compile its own modules from
source again, as no installed batchrun does; the baseline runs with the same setting.

Timed, interleaved in every round (so a burst of load on this shared machine hits all three
alike), each in a child process, spawn to exit (bench/_common.run_measured):

  baseline  `python -c "import click, sqlite3"` (the same interpreter as batchrun's)
  --help    `batchrun --help` (the console script pip installed beside that interpreter)
  status    `batchrun status` in the project folder

Then, `--demo-repeat` times (default 3), `batchrun demo` in a new folder, in a child started
through bench/_import_cpu.py, which adds up the CPU time (per thread) of every outermost import
by top-level package and reads the process's CPU time at exit. The demo runs the emulator
in-process and uses all three SDKs (5 contestant routes and a 3-judge panel over OpenAI,
Anthropic, Gemini and OpenAI-compatible routes), so its imports are the SDKs', the emulator's
and batchrun's own.

Then, `--commands-repeat` times (default 3, after one uncounted round that fills the bytecode
cache), the real commands on a single-provider project (the demo's dataset and corpus; two
OpenAI contestant routes and a panel of three OpenAI judges), each in a child through
bench/_import_cpu.py, so that "each command imports only the SDKs of the providers it uses"
(issue 30, item 4) is shown with numbers: `plan` and `status` on a fresh project (offline), then
against a `batchrun emulator` on loopback (its own process, latency 0, started and stopped here)
`refresh` (plan, preflight, submit, poll, collect and judging until done: the OpenAI SDK does
the work), `status`, `collect` with nothing new and `report`. For each: its CPU, its CPU in
imports and their share, the SDKs' imports, and which SDKs it loaded (sys.modules at exit).

Output: a table (median wall time, min-max, CPU time: user + system, which a loaded machine
inflates less than wall time; peak RSS) with `startup_ratio=<the slower of the two commands'
median seconds / the baseline's median seconds>` (target <= 3); the single-provider commands'
table and whether each loaded only the OpenAI SDK or none; the demo's CPU, its CPU in imports by
package (medians), the same with the three SDKs' imports counted apart from the rest (batchrun's
own, the others), and, last, `ratio=<the demo's CPU in imports / its CPU>` (median; target <= 0.35).
`--profile` prints `python -X importtime` of both commands, the 25 costliest imports, to stderr.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import REPO_ROOT, child_env, compiled_env, load_line, machine_line, mb, median, note, print_table, remove_tree, run_measured

TARGET = 3.0


def batchrun_argv() -> list[str]:
    """The console script a user runs; `python -m batchrun` where none is installed."""
    script = Path(sys.executable).parent / "batchrun"
    return [str(script)] if script.exists() else [sys.executable, "-m", "batchrun"]


def make_project(work: Path) -> Path:
    demo = REPO_ROOT / "batchrun" / "cli" / "demo"
    project = work / "project"
    (project / "data").mkdir(parents=True)
    shutil.copy(demo / "batchrun.toml", project / "batchrun.toml")
    shutil.copy(demo / "dataset.json", project / "data" / "dataset.json")
    shutil.copytree(demo / "corpus", project / "corpus")
    run_measured([*batchrun_argv(), "-q", "plan"], env=child_env(), cwd=project)
    return project


def import_profile(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=cwd, env=env, capture_output=True, text=True)
    rows = []
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|", 2)
            if cumulative.strip().isdigit():
                rows.append((int(cumulative), name.rstrip()))
    rows.sort(reverse=True)
    return "\n".join(f"{us / 1000:8.1f} ms  {name}" for us, name in rows[:25])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15, help="rounds (default 15); medians reported")
    ap.add_argument("--demo-repeat", type=int, default=3, help="demo runs (default 3); medians reported")
    ap.add_argument("--commands-repeat", type=int, default=3,
                    help="rounds of the single-provider commands (default 3; 0 skips them); medians reported")
    ap.add_argument("--profile", action="store_true", help="also print each command's costliest imports to stderr")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="batchrun-bench-startup-"))
    br = batchrun_argv()
    commands = {
        "baseline": ([sys.executable, "-c", "import click, sqlite3"], 'python -c "import click, sqlite3"'),
        "help": ([*br, "--help"], "batchrun --help"),
        "status": ([*br, "status"], "batchrun status (fresh project, after a plan)"),
    }
    walls: dict[str, list[float]] = {k: [] for k in commands}
    cpus: dict[str, list[float]] = {k: [] for k in commands}
    rss: dict[str, list[int]] = {k: [] for k in commands}
    loads: list[str] = []
    try:
        project = make_project(work)
        env = compiled_env(work / "pycache")
        for cmd, _ in commands.values():  # fills the bytecode cache (not timed)
            run_measured(cmd, env=env, cwd=project)
        for i in range(args.repeat):
            if i % 5 == 0:
                loads.append(load_line())
                note(f"round {i + 1}/{args.repeat} ({loads[-1]})")
            for key, (cmd, _) in commands.items():
                run = run_measured(cmd, env=env, cwd=project)
                walls[key].append(run.wall)
                cpus[key].append(run.cpu_user + run.cpu_sys)
                rss[key].append(run.maxrss)
        single = run_single_provider(work, env, args.commands_repeat, loads) if args.commands_repeat else []
        demos = run_demos(work, env, args.demo_repeat, loads)
        if args.profile:
            for key in ("help", "status"):
                note(f"\n`python -X importtime` of {commands[key][1]}: cumulative, costliest first")
                note(import_profile(["-m", "batchrun", *commands[key][0][len(br):]], project, env))
    finally:
        remove_tree(work)

    print(f"bench/startup.py — {machine_line(Path(tempfile.gettempdir()))}")
    print("load during the rounds: " + "; ".join(loads))
    base = median(walls["baseline"])
    rows = []
    for key, (_, label) in commands.items():
        m = median(walls[key])
        cpu = median(cpus[key])
        rows.append([label, f"{m * 1000:.0f}", f"{min(walls[key]) * 1000:.0f}-{max(walls[key]) * 1000:.0f}", f"{m / base:.2f}",
                     f"{cpu * 1000:.0f}", f"{cpu / median(cpus['baseline']):.2f}", mb(max(rss[key]))])
    print_table(["command", "median ms", "min-max ms", "x baseline", "CPU ms", "CPU x baseline", "peak RSS"], rows)
    ratio = max(median(walls["help"]), median(walls["status"])) / base
    print(f"median of {args.repeat} interleaved rounds; target: each command within {TARGET:.0f}x of the baseline: "
          f"{ratio:.2f} ({'met' if ratio <= TARGET else 'MISSED'})")
    print(f"batchrun --help: {median(walls['help']) * 1000:.0f} ms wall, {median(cpus['help']) * 1000:.0f} ms CPU (medians)")
    print(f"startup_ratio={ratio:.3f}")
    if single:
        print_single_provider(single)
    share = print_demos(demos)
    print(f"ratio={share:.3f}")
    return 0


def run_demos(work: Path, env: dict[str, str], repeat: int, loads: list[str]) -> list[dict]:
    """`batchrun demo` `repeat` times, each in a new folder, through bench/_import_cpu.py."""
    launcher = Path(__file__).resolve().parent / "_import_cpu.py"
    out = []
    for i in range(repeat + 1):  # the first run (not counted) compiles the emulator's modules into the bytecode cache
        loads.append(load_line())
        note(f"demo {i}/{repeat} ({loads[-1]})")
        folder, report = work / f"demo-{i}", work / f"demo-{i}.json"
        run = run_measured([sys.executable, launcher, report, "-q", "demo", "--dir", folder], env=env, cwd=work)
        data = json.loads(report.read_text(encoding="utf-8"))
        data["wall"] = run.wall
        remove_tree(folder)
        if i:
            out.append(data)
    return out


SDKS = {"anthropic": "anthropic", "openai": "openai", "google": "google-genai (and google-auth)"}

# --- the real commands on a single-provider project (issue 30, item 4) ---------------------------

SINGLE_KEY_ENV = "BENCH_OPENAI_KEY"  # a made-up key for the emulator (it accepts any key by default)
SINGLE_PROVIDER_TOML = f"""# bench/startup.py: one provider's routes only (OpenAI), the demo's dataset and corpus.
[paths]
dataset = "data/dataset.json"
corpus = "corpus"

[judging]
panel = ["judge-gpt-5.1", "judge-gpt-4.1", "judge-gpt-4o"]

[routes."gpt-5.5"]
provider = "openai"
model = "gpt-5.5"
reasoning = true
api_key_env = "{SINGLE_KEY_ENV}"
price = {{ input = 1.25, output = 10.0 }}

[routes."gpt-5.4"]
provider = "openai"
model = "gpt-5.4"                 # rejects temperature: omitted (built-in list)
api_key_env = "{SINGLE_KEY_ENV}"
price = {{ input = 2.5, output = 15.0 }}
""" + "".join(f"""
[routes."judge-{m}"]
provider = "openai"
model = "{m}"
role = "judge"
send_temperature = true
caps = {{ en = 2850000, cjk = 850000 }}
api_key_env = "{SINGLE_KEY_ENV}"
""" for m in ("gpt-5.1", "gpt-4.1", "gpt-4o"))
PROVIDER_SDK = "openai"  # the SDK module of the one provider the project uses


def single_provider_project(folder: Path) -> Path:
    demo = REPO_ROOT / "batchrun" / "cli" / "demo"
    (folder / "data").mkdir(parents=True)
    (folder / "batchrun.toml").write_text(SINGLE_PROVIDER_TOML, encoding="utf-8")
    shutil.copy(demo / "dataset.json", folder / "data" / "dataset.json")
    shutil.copytree(demo / "corpus", folder / "corpus")
    return folder


def start_emulator(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """`batchrun emulator` on a free loopback port, latency 0, as its own process; (process, URL)."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([*batchrun_argv(), "emulator", "--port", str(port), "--latency", "0"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("batchrun emulator did not start listening")


def single_provider_commands(url: str) -> list[tuple[str, list[str]]]:
    return [("plan (fresh project, offline)", ["plan"]),
            ("status (after the plan, offline)", ["status"]),
            ("refresh (emulator: submit, poll, collect, judging)", ["--emulator", url, "refresh", "--interval", "0.05", "--timeout", "120s"]),
            ("status (after the refresh)", ["--emulator", url, "status"]),
            ("collect (nothing new)", ["--emulator", url, "collect"]),
            ("report", ["--emulator", url, "report"])]


def run_single_provider(work: Path, env: dict[str, str], repeat: int, loads: list[str]) -> list[dict[str, dict]]:
    """The single-provider commands `repeat` times (plus one uncounted round), each round in a new
    project; per round {command label: _import_cpu's report}."""
    launcher = Path(__file__).resolve().parent / "_import_cpu.py"
    env = {**env, SINGLE_KEY_ENV: "bench-key-not-a-secret"}
    emulator, url = start_emulator(env)
    rounds = []
    try:
        for i in range(repeat + 1):
            loads.append(load_line())
            note(f"single-provider commands {i}/{repeat} ({loads[-1]})")
            project = single_provider_project(work / f"single-{i}")
            got = {}
            for label, args in single_provider_commands(url):
                report = work / f"single-{i}.json"
                run = run_measured([sys.executable, launcher, report, "-q", *args], env=env, cwd=project, timeout=300, ok_codes=(0, 2))
                if run.timed_out:
                    raise RuntimeError(f"batchrun {' '.join(args)} timed out")
                got[label] = {**json.loads(report.read_text(encoding="utf-8")), "wall": run.wall, "rc": run.rc}
            remove_tree(project)
            if i:
                rounds.append(got)
    finally:
        emulator.terminate()
        emulator.wait(timeout=30)
    return rounds


def print_single_provider(rounds: list[dict[str, dict]]) -> None:
    """Each single-provider command's CPU in imports and the SDKs it loaded (medians over the rounds)."""
    print(f"the real commands on a single-provider project (OpenAI routes only), median of {len(rounds)} round(s):")
    rows, wrong = [], []
    for label in rounds[0]:
        runs = [r[label] for r in rounds]
        cpu = median([d["cpu"] for d in runs])
        imports = median([d["imports"] for d in runs])
        sdk = median([sum(d["packages"].get(p, 0.0) for p in SDKS) for d in runs])
        own = median([d["packages"].get("batchrun", 0.0) for d in runs])
        loaded = sorted({m for d in runs for m in d["sdks"]})
        wrong += [f"{label}: {m}" for m in loaded if m != PROVIDER_SDK]
        rows.append([label, f"{median([d['wall'] for d in runs]):.2f}", f"{cpu:.2f}", f"{imports:.2f}",
                     f"{median([d['imports'] / d['cpu'] for d in runs]):.0%}", f"{sdk:.2f}", f"{own:.2f}",
                     ", ".join(loaded) or "none", "/".join(sorted({str(d["rc"]) for d in runs}))])
    print_table(["command", "wall s", "CPU s", "imports s", "imports/CPU", "SDK imports s", "batchrun's own s", "SDKs loaded",
                 "exit"], rows)
    print("each command loads only the SDK of the provider its routes use (openai) or none: "
          + ("met" if not wrong else "MISSED (" + "; ".join(wrong) + ")"))



def print_demos(demos: list[dict]) -> float:
    """The demo's figures; returns the median share of its CPU spent importing."""
    cpu = median([d["cpu"] for d in demos])
    imports = median([d["imports"] for d in demos])
    shares = [d["imports"] / d["cpu"] for d in demos]
    packages = sorted({p for d in demos for p in d["packages"]}, key=lambda p: -median([d["packages"].get(p, 0.0) for d in demos]))
    print(f"batchrun demo (emulator in-process, all three SDKs), median of {len(demos)}: wall {median([d['wall'] for d in demos]):.2f} s, "
          f"CPU {cpu:.2f} s, of which imports {imports:.2f} s ({median(shares):.0%}; runs {', '.join(f'{s:.0%}' for s in shares)})")
    rows = []
    for p in packages[:10]:
        t = median([d["packages"].get(p, 0.0) for d in demos])
        rows.append([p + (f"  ({SDKS[p]})" if p in SDKS else ""), f"{t:.3f}", f"{t / cpu:.0%}"])
    print_table(["imported package (outermost imports)", "CPU s", "of the demo's CPU"], rows)
    sdk = median([sum(d["packages"].get(p, 0.0) for p in SDKS) / d["cpu"] for d in demos])
    # The SDKs' imports apart from the rest: the demo drives all three SDKs in one process, which
    # no real command on a one-provider project does (print_single_provider).
    sdk_s = median([sum(d["packages"].get(p, 0.0) for p in SDKS) for d in demos])
    own = median([d["packages"].get("batchrun", 0.0) for d in demos])
    rest = median([d["imports"] - sum(d["packages"].get(p, 0.0) for p in SDKS) for d in demos])
    rest_share = median([(d["imports"] - sum(d["packages"].get(p, 0.0) for p in SDKS)) / d["cpu"] for d in demos])
    rest_of_rest = median([(d["imports"] - sum(d["packages"].get(p, 0.0) for p in SDKS))
                           / (d["cpu"] - sum(d["packages"].get(p, 0.0) for p in SDKS)) for d in demos])
    print(f"the demo's imports counted apart: the three SDKs {sdk_s:.2f} s ({sdk:.0%} of its CPU); everything else "
          f"{rest:.2f} s ({rest_share:.0%} of its CPU; {rest_of_rest:.0%} of its CPU less the SDKs' imports), of which "
          f"batchrun's own {own:.2f} s ({median([d['packages'].get('batchrun', 0.0) / d['cpu'] for d in demos]):.0%})"
          + (f"; the SDKs' imports alone are above the 35% target" if sdk > 0.35 else ""))
    # The least share the demo could reach by import discipline: every import but the SDKs' at
    # zero, the rest of its work unchanged.
    floor = median([sum(d["packages"].get(p, 0.0) for p in SDKS) / (d["cpu"] - d["imports"] + sum(d["packages"].get(p, 0.0) for p in SDKS))
                    for d in demos])
    print(f"with every import but the three SDKs' at zero (the demo's other work unchanged), its CPU in imports would be {floor:.0%}")
    print(f"the three provider SDKs: {sdk:.0%} of the demo's CPU; target: all imports <= 35% of it: "
          f"{median(shares):.0%} ({'met' if median(shares) <= 0.35 else 'MISSED'})")
    return median(shares)


if __name__ == "__main__":
    sys.exit(main())
