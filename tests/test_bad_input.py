"""Hostile or broken input and a broken disk, through the CLI (issue 13, "Bad input and broken
disks"): each is a named error (file, record, field and the fix), exit 1, no traceback, and
state.db untouched (not created when absent: same rows and bytes when present).

The disk cases use real filesystems: a small tmpfs that fills up, a read-only bind mount. They
need root (as in CI) and skip, saying why, where mount is not allowed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import cliproc
from conftest import KEY_ENV, Project, route, small_project
from test_cli_errors import _gt, _mutate_records, _set, assert_clean_error, edit_config, prepare, set_route, snapshot

REPO = Path(__file__).resolve().parents[1]
WITH_STATE = pytest.mark.parametrize("with_state", [False, True], ids=["no-state", "existing-state"])


def run_subprocess(project: Project, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process: where the bug is a hang or a traceback only a real process shows
    (forked warm: see tests/cliproc.py)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return cliproc.run(["--config", str(project.config_path), *args], timeout=timeout, env=env, cwd=project.root)


# --- the dataset ----------------------------------------------------------------------------------


def _raw_dataset(edit: Any) -> Any:
    def apply(p: Project) -> None:
        p.dataset_path.write_text(edit(p.dataset_path.read_text(encoding="utf-8")), encoding="utf-8")
    return apply


def _deep(p: Project) -> None:
    p.dataset_path.write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")


def _deep_in_record(p: Project) -> None:
    # Shallow enough for the json module, deep enough to break whatever walks it later.
    recs = json.loads(p.dataset_path.read_text(encoding="utf-8"))
    recs[1]["notes"] = json.loads("[" * 900 + "]" * 900)
    p.dataset_path.write_text(json.dumps(recs), encoding="utf-8")


def _deep_jsonl(p: Project) -> None:
    p.tasks(json.loads(p.dataset_path.read_text(encoding="utf-8")), fmt="jsonl")
    lines = p.dataset_path.read_text(encoding="utf-8").split("\n")
    lines[1] = "{" + '"a":{' * 100_000 + "}" * 100_000 + "}"
    p.dataset_path.write_text("\n".join(lines), encoding="utf-8")


BAD_DATASETS: dict[str, tuple[Any, tuple[str, ...]]] = {
    # name: (break the project, strings the message must contain beyond the dataset path)
    "points_nan": (_raw_dataset(lambda t: t.replace('"points": 60', '"points": NaN', 1)),
                   ("record 1 (task t1)", "`ground_truth.scoring_rubric[0].points`", "is NaN", "finite number")),
    "points_infinity": (_raw_dataset(lambda t: t.replace('"points": 40', '"points": Infinity', 1)),
                        ("record 1 (task t1)", "`ground_truth.scoring_rubric[1].points`", "is Infinity", "finite number")),
    "points_overflow": (_raw_dataset(lambda t: t.replace('"points": 70', '"points": 1e999', 1)),
                        ("task t3", "scoring_rubric[0].points", "is Infinity")),
    "nan_in_another_field": (_mutate_records(_set(2, difficulty=float("-inf"))), ("task t3", "`difficulty`", "-Infinity")),
    "nan_in_rubric_string_jsonl": (_mutate_records(_gt(1, scoring_rubric='[{"points": NaN, "correct_criterion": "x"}]'), "jsonl"),
                                   ("line 2 (task t2)", "`ground_truth.scoring_rubric[0].points`", "is NaN")),
    "task_id_object": (_mutate_records(_set(1, task_id={"a": 1})), ("record 2", "`task_id`", "must be a string (or an integer)", "dict")),
    "task_id_boolean": (_mutate_records(_set(2, task_id=True)), ("record 3", "`task_id`", "must be a string", "bool True")),
    "task_id_float": (_mutate_records(_set(2, task_id=1.5)), ("record 3", "`task_id`", "float")),
    "task_id_newline": (_mutate_records(_set(0, task_id="t1\nt9")), ("record 1", "`task_id`", "line break")),
    "nested_200000_deep": (_deep, ("nested too deeply",)),
    "nested_deep_jsonl_line": (_deep_jsonl, ("tasks.jsonl, line 2", "nested too deeply")),
    "nested_deep_in_a_record": (_deep_in_record, ("record 2 (task t2)", "`notes[0]", "nests more than 64 levels")),
    "corpus_file_nul": (_mutate_records(_set(0, corpus_file="harbor.txt\x00.pdf")), ("task t1", "`corpus_file`", "control character")),
    "dataset_is_a_folder": (lambda p: (p.dataset_path.unlink(), p.dataset_path.mkdir()), ("is a folder", "[paths] dataset")),
}


@WITH_STATE
@pytest.mark.parametrize("case", list(BAD_DATASETS))
def test_bad_dataset_is_a_clear_error_and_leaves_state_untouched(project: Project, case: str, with_state: bool) -> None:
    before = prepare(project, with_state)
    breaker, needles = BAD_DATASETS[case]
    breaker(project)
    result = project.run("plan")
    assert_clean_error(result, str(project.dataset_path), *needles)
    assert snapshot(project) == before


def test_task_ids_stay_strings_or_integers(project: Project) -> None:
    """The decision above, kept: an integer id (some exports write them) is still the string "42"."""
    small_project(project)
    _mutate_records(_set(1, task_id=42))(project)
    assert project.run("plan").exit_code == 0
    assert {r["task_id"] for r in project.sql("SELECT task_id FROM tasks")} == {"t1", "42", "t3", "t4"}


@WITH_STATE
def test_corpus_file_that_is_a_fifo_is_refused_without_hanging(project: Project, with_state: bool) -> None:
    """Opening a FIFO for reading blocks until someone writes to it: in cron, forever. A child
    process with a timeout, so that the bug shows as a failure, not a hung suite."""
    before = prepare(project, with_state)
    lab = project.root / "corpus" / "lab.txt"
    lab.unlink()
    os.mkfifo(lab)
    try:
        result = run_subprocess(project, "plan")
    except subprocess.TimeoutExpired:
        pytest.fail("plan blocked on the FIFO")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert str(lab) in result.stderr and "a FIFO (named pipe), not a regular file" in result.stderr
    assert "task t3" in result.stderr and "\nHint: " in result.stderr
    assert snapshot(project) == before


# --- the config -----------------------------------------------------------------------------------


def _rename_route(old: str, new: str) -> Any:
    def mutate(cfg: dict[str, Any]) -> None:
        cfg["routes"][new] = cfg["routes"].pop(old)
    return mutate


BAD_CONFIGS: dict[str, tuple[Any, tuple[str, ...]]] = {
    "route_name_nul": (_rename_route("gpt", "g\x00pt"), ("routes.'g\\x00pt'", "printable", "Rename the route")),
    "route_name_newline": (_rename_route("claude", "claude\n| fake | row |"), ("routes.'claude\\n| fake | row |'", "on one line")),
    "route_name_empty": (_rename_route("gemini", ""), ("routes.''", "non-empty")),
    "model_with_newline": (set_route("gpt", model="gpt-5.5\nextra"), ('routes."gpt".model', "line break")),
    "temperature_1e9": (lambda cfg: cfg.update(generation={"temperature": 1e9}),
                        ("generation.temperature", "at most 2", "1000000000.0", "Use a value <= 2")),
    "judge_temperature_3": (lambda cfg: cfg.update(judging={"panel": ["judge-a", "judge-g"], "temperature": 3}),
                            ("judging.temperature", "at most 2")),
    "temperature_nan": (lambda cfg: cfg.update(generation={"temperature": float("nan")}), ("generation.temperature", "finite", "nan")),
    "price_infinity": (set_route("gpt", price={"input": float("inf"), "output": 1.0}), ('routes."gpt".price.input', "finite")),
    "budget_nan": (lambda cfg: cfg.update(budget=float("nan")), ("`budget`", "finite")),
    "batch_discount_above_1": (set_route("gpt", batch_discount=5), ('routes."gpt".batch_discount', "at most 1")),
    "max_retries_huge": (lambda cfg: cfg.update(generation={"max_retries": 10**30}), ("generation.max_retries", "at most 9,007,199,254,740,992")),
    "state_path_nul": (lambda cfg: cfg["paths"].update(state="state\x00.db"), ("paths.state", "control character")),
}


@WITH_STATE
@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_config_is_a_clear_error_and_leaves_state_untouched(project: Project, case: str, with_state: bool) -> None:
    before = prepare(project, with_state)
    mutate, needles = BAD_CONFIGS[case]
    edit_config(project, mutate)
    result = project.run("plan")
    assert_clean_error(result, str(project.config_path), *needles)
    assert snapshot(project) == before


@WITH_STATE
def test_json_config_with_a_duplicate_key_is_refused(project: Project, with_state: bool) -> None:
    before = prepare(project, with_state)
    text = project.config_path.read_text()
    # Two "gpt" routes: json.loads would keep the second, silently.
    project.config_path.write_text(text.replace('"routes": {', '"routes": {\n  "gpt": {"provider": "openai", "model": "gpt-4.1"},', 1))
    assert_clean_error(project.run("plan"), str(project.config_path), "'gpt' appears twice", "Remove one of the two")
    assert snapshot(project) == before


def test_toml_nan_and_inf_are_refused(project: Project) -> None:
    small_project(project)
    toml = project.root / "batchrun.toml"
    toml.write_text(f'[paths]\ndataset = "data/tasks.json"\n[generation]\ntemperature = nan\n'
                    f'[routes.gpt]\nprovider = "openai"\nmodel = "gpt-5.5"\napi_key_env = "{KEY_ENV}"\n', encoding="utf-8")
    project.config_path = toml
    assert_clean_error(project.run("plan"), str(toml), "generation.temperature", "finite")
    toml.write_text(toml.read_text().replace("nan", "0.1") + "price = { input = inf, output = 1.0 }\n")
    assert_clean_error(project.run("plan"), 'routes."gpt".price.input', "finite")
    assert not project.state_path.exists()


def test_config_that_is_a_fifo_is_refused_without_hanging(project: Project) -> None:
    small_project(project)
    project.config_path.unlink()
    os.mkfifo(project.config_path)
    try:
        result = run_subprocess(project, "status")
    except subprocess.TimeoutExpired:
        pytest.fail("batchrun blocked reading the config FIFO")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "a FIFO (named pipe), not a regular file" in result.stderr


# --- paths of the wrong kind ----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["plan", "status", "report"])
def test_state_path_that_is_a_folder(project: Project, command: str) -> None:
    small_project(project)
    project.state_path.mkdir()
    result = project.run(command)
    assert_clean_error(result, str(project.config_path), "paths.state", "is a folder", "must be the SQLite database file",
                       f'state = "{project.state_path / "state.db"}"')
    assert project.state_path.is_dir() and not any(project.state_path.iterdir())


@WITH_STATE
@pytest.mark.parametrize("key", ["jobs", "results"])
def test_jobs_or_results_path_that_is_a_file(project: Project, key: str, with_state: bool) -> None:
    prepare(project, with_state)
    folder = project.root / key
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    folder.write_text("not a folder")
    before = snapshot(project)
    result = project.run("plan")
    assert_clean_error(result, str(project.config_path), f"paths.{key}", "is a file", "must be a folder")
    assert snapshot(project) == before


# --- where keys may be sent -----------------------------------------------------------------------

BAD_BASE_URLS = {
    "file_url": ("file:///etc/passwd", "must be an http:// or https:// URL with a host"),
    "not_a_url": ("not a url", "must be an http:// or https:// URL"),
    "no_host": ("https:///v1", "with a host"),
    "bad_port": ("https://api.example.com:99999/v1", "is not a valid URL"),
    "plain_http_remote": ("http://api.example.com/v1", "plain http to api.example.com", "unencrypted", "allow_insecure_http = true"),
    "plain_http_private_ip": ("http://10.1.2.3:8000/v1", "plain http to 10.1.2.3"),
}


@pytest.mark.parametrize("case", list(BAD_BASE_URLS))
@pytest.mark.parametrize("provider", ["openai-compatible", "anthropic"])
def test_base_url_must_be_https_unless_loopback(project: Project, case: str, provider: str) -> None:
    """Refused when the config is read: before, `file://` and `not a url` were retried for 100 s
    and the run ended with exit 0, and plain http sent `Authorization: Bearer <key>` readable."""
    before = prepare(project, True)
    url, *needles = BAD_BASE_URLS[case]
    model = "qwen3.6-plus" if provider == "openai-compatible" else "claude-opus-4-8"
    edit_config(project, lambda cfg: cfg["routes"].update(extra=route(provider, model, base_url=url)))
    result = project.run("submit")
    assert_clean_error(result, str(project.config_path), 'routes."extra".base_url', *needles)
    assert snapshot(project) == before


def test_plain_http_is_allowed_to_loopback_and_where_the_route_says_so(project: Project) -> None:
    small_project(project)
    edit_config(project, lambda cfg: cfg["routes"].update(
        local=route("openai-compatible", "qwen3.6-plus", base_url="http://localhost:8000/v1"),
        local6=route("openai-compatible", "glm-5", base_url="http://[::1]:8000/v4"),
        lan=route("openai-compatible", "kimi-k2.5", base_url="http://10.1.2.3:8000/v1", allow_insecure_http=True)))
    result = project.run("plan")
    assert result.exit_code == 0, result.output
    edit_config(project, set_route("lan", allow_insecure_http="yes"))
    assert_clean_error(project.run("plan"), 'routes."lan".allow_insecure_http', "must be true or false")


def test_emulator_url_follows_the_same_rule(project: Project) -> None:
    """A rehearsal sends the real keys to --emulator: plain http only to this machine."""
    small_project(project)
    base = ["--config", str(project.config_path)]
    from click.testing import CliRunner

    from batchrun.cli import cli

    for url in ("http://192.0.2.7:8765", "ftp://127.0.0.1:8765"):
        result = CliRunner().invoke(cli, [*base, "--emulator", url, "plan"], catch_exceptions=False)
        assert_clean_error(result, "--emulator")
    assert not project.state_path.exists()


# --- the emulator listens on loopback only, and says where ----------------------------------------


def _start_emulator_process(*args: str) -> tuple[subprocess.Popen[str], str]:
    """python -m batchrun.emulator; returns the process and its first stderr line."""
    proc = subprocess.Popen([sys.executable, "-m", "batchrun.emulator", "--port", "0", *args],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stderr is not None
    return proc, proc.stderr.readline()


@pytest.mark.parametrize("host", ["0.0.0.0", "", "::", "192.0.2.1", "example.com"])
def test_both_emulator_entry_points_refuse_a_non_loopback_host(host: str) -> None:
    """Before, `python -m batchrun.emulator --host 0.0.0.0` served every interface while printing
    127.0.0.1, and only `batchrun emulator` refused. Now one rule (emulator.server.check_loopback)."""
    from click.testing import CliRunner

    from batchrun.cli import cli
    from batchrun.emulator import Emulator

    proc, first = _start_emulator_process("--host", host)
    try:
        assert proc.wait(timeout=30) == 1, first
    finally:
        proc.kill()
    assert "is not a loopback address" in first and "Traceback" not in first
    result = CliRunner().invoke(cli, ["emulator", "--host", host, "--port", "0"], catch_exceptions=False)
    assert_clean_error(result, "is not a loopback address", "127.0.0.1")
    with pytest.raises(ValueError, match="not a loopback address"):
        Emulator(host=host, port=0)


@pytest.mark.parametrize("host, bound", [("localhost", "127.0.0.1"), ("127.0.0.2", "127.0.0.2"), ("::1", "[::1]")])
def test_emulator_prints_the_address_really_bound(host: str, bound: str) -> None:
    import socket

    if ":" in host and not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    proc, first = _start_emulator_process("--host", host)
    try:
        if ":" in host and "Cannot assign requested address" in first:
            pytest.skip("IPv6 loopback is not configured here")
        assert first.startswith(f"listening on http://{bound}:"), first
        port = int(first.rsplit(":", 1)[1])
        import urllib.request

        with urllib.request.urlopen(f"http://{bound}:{port}/_emulator/requests", timeout=10) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# --- a damaged state.db ---------------------------------------------------------------------------


@pytest.fixture
def finished(project: Project, emulator: Any) -> Project:
    """A project whose refresh completed: every route scored, state.db checkpointed and closed."""
    small_project(project)
    project.point_at(emulator)  # a real run (its own state.db), answered by the emulator
    result = project.run("refresh")
    assert result.exit_code == 0, result.output
    return project


def _not_a_database(data: bytes) -> bytes:
    return b"this is a text file someone saved over state.db\n" * 100


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _corrupted(data: bytes) -> bytes:
    import random

    b = bytearray(data)
    rnd = random.Random(13)
    for i in range(4096, 4096 * 4):  # pages 2-4: the schema's tables and their first rows
        b[i] = rnd.randrange(256)
    return bytes(b)


DAMAGE = {"not_a_database": (_not_a_database, "not an SQLite database"), "truncated": (_truncated, "truncated"),
          "corrupted": (_corrupted, "malformed")}


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("command", ["status", "report", "cost", "plan", "refresh"])
def test_damaged_state_db_is_named_with_how_to_recover(finished: Project, emulator: Any, damage: str, command: str) -> None:
    """Before: a traceback (sqlite3.DatabaseError) from every command."""
    assert not Path(f"{finished.state_path}-wal").exists()
    breaker, detail = DAMAGE[damage]
    finished.state_path.write_bytes(breaker(finished.state_path.read_bytes()))
    before = finished.state_path.read_bytes()
    result = finished.run(command)
    assert_clean_error(result, f"The state database {finished.state_path} is damaged", detail,
                       f'sqlite3 {finished.state_path} ".recover" | sqlite3 recovered.db', "backup")
    assert finished.state_path.read_bytes() == before


# --- read-only media ------------------------------------------------------------------------------


def _mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here (needs root and CAP_SYS_ADMIN, as in CI): {proc.stderr.strip()}")


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def read_only_copy(finished: Project, tmp_path: Path) -> Any:
    """The finished project seen through a read-only bind mount: really read-only, even to root
    (chmod is not: root writes through it), and os.access reports EROFS there."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    _mount("--bind", str(finished.root), str(mnt))
    try:
        _mount("-o", "remount,bind,ro", str(mnt))
        ro = Project.__new__(Project)
        ro.root, ro.config_path, ro.dataset_path = mnt, mnt / finished.config_path.name, mnt / "data" / "tasks.json"
        with pytest.raises(OSError):
            (mnt / "probe").write_text("x")
        yield finished, ro
    finally:
        _umount(mnt)


def test_readers_work_on_a_read_only_project(read_only_copy: Any) -> None:
    """status, report and cost open state.db read-only (mode=ro; immutable=1 where no -shm can be
    created); before, they failed because SQLite tried to create state.db-shm."""
    original, ro = read_only_copy
    for command in (["status"], ["report"], ["report", "--format", "json"], ["cost"]):
        got = ro.run(*command)
        assert got.exit_code == 0, got.output
        assert got.stdout == original.run(*command).stdout
    assert sorted(p.name for p in ro.root.iterdir()) == sorted(p.name for p in original.root.iterdir())


def test_readers_see_unmerged_wal_content_on_read_only_media(read_only_copy: Any) -> None:
    """With a -wal (and -shm) left by a writer, the read-only reader must read through it, not
    around it (immutable=1 would silently ignore it)."""
    import sqlite3

    original, ro = read_only_copy
    conn = sqlite3.connect(original.state_path)  # a writer still open: its commit lives in the -wal
    try:
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute("UPDATE config_routes SET model = 'renamed-in-wal' WHERE route = 'gpt'")
        conn.commit()
        assert Path(f"{original.state_path}-wal").stat().st_size > 0
        got = ro.run("report", "--format", "json")
        assert got.exit_code == 0, got.output
        assert {r["route"]: r["model"] for r in json.loads(got.stdout)["routes"]}["gpt"] == "renamed-in-wal"
    finally:
        conn.close()


@pytest.mark.parametrize("command", ["plan", "collect", "refresh", "retry --route gpt", "cancel --all"])
def test_writers_say_the_project_is_read_only(read_only_copy: Any, command: str) -> None:
    _, ro = read_only_copy
    result = ro.run(*command.split())
    assert_clean_error(result, "read-only", "writable copy", "status, report and cost")


def test_unwritable_report_out_and_results_are_clear_errors(finished: Project, tmp_path: Path, emulator: Any) -> None:
    """--out into a read-only folder; results/ on read-only media while state.db is writable."""
    ro_dir = tmp_path / "ro-out"
    ro_dir.mkdir()
    _mount("--bind", str(ro_dir), str(ro_dir))
    try:
        _mount("-o", "remount,bind,ro", str(ro_dir))
        out = ro_dir / "board.md"
        assert_clean_error(finished.run("report", "--out", str(out)), f"--out {out}", "Read-only file system", "writable folder")
        assert_clean_error(finished.run("report", "--out", str(tmp_path / "no" / "such" / "dir" / "b.md")), "--out", "No such file")
        edit_config(finished, lambda cfg: cfg["paths"].update(results=str(ro_dir)))
        before = snapshot(finished)
        assert_clean_error(finished.run("collect"), str(ro_dir), "read-only")
        assert snapshot(finished) == before
    finally:
        _umount(ro_dir)


# --- a full disk ----------------------------------------------------------------------------------


def _leaderboard(project: Project) -> list[dict[str, Any]]:
    return project.sql("SELECT route, scored_n, all_tasks_overall, complete FROM leaderboard ORDER BY route")


def test_disk_full_at_any_moment_is_a_clear_error_and_the_rerun_completes(tmp_path: Path, emulator: Any) -> None:
    """A real full disk: the project on a small tmpfs, with a filler file leaving less and less
    room, so refresh runs out of space at a different moment each time (request files, state.db,
    downloads, results/). Each run ends with the full-disk message and exit 1, or makes progress;
    once there is room, the next refresh completes with the leaderboard of an undisturbed run,
    and state.db passes integrity_check. Before: a traceback (OSError / sqlite3 "database or disk
    is full") from whichever write came first."""
    reference = Project(tmp_path / "reference")
    small_project(reference)
    big = "The harbor crane failed at 03:14 on Tuesday; the operator was Mara Quist. " * 2000  # ~150 kB
    reference.doc("harbor.txt", big)
    assert reference.run("refresh", emulator=emulator).exit_code == 0
    expected = _leaderboard(reference)

    disk = tmp_path / "disk"
    disk.mkdir()
    # The room refresh needs varies with timing (how far the WAL grows before a checkpoint): on a
    # loaded machine a 3 MiB disk was sometimes too small even with no filler at all. The filler
    # still leaves only `free` bytes, so the moments exercised are the same on a bigger disk.
    size = 8 << 20
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk))
    try:
        project = Project(disk / "proj")
        small_project(project)
        project.doc("harbor.txt", big)
        filler = disk / "filler"
        outcomes = []
        free = 16 << 10
        while True:
            filler.unlink(missing_ok=True)
            st = os.statvfs(disk)
            room = st.f_bavail * st.f_frsize
            if room > free:
                with open(filler, "wb") as f:
                    f.write(b"\0" * (room - free))
            result = project.run("refresh", emulator=emulator)
            assert "Traceback" not in result.output
            outcomes.append(result.exit_code)
            if result.exit_code == 0:
                break
            # Progress lines may come first: the error is the last thing said, with its fix.
            assert result.exit_code == 1, result.output
            error = result.stderr[result.stderr.rindex("Error: "):]
            assert error.startswith("Error: The disk is full") and "\nHint: Free space" in error, result.output
            assert "run the same command again" in error
            free += 24 << 10
            assert free < size, "refresh never completed"
        assert 1 in outcomes, "the disk never filled up: the test proves nothing"
        assert len(outcomes) >= 4, f"too few moments exercised: {outcomes}"
        filler.unlink(missing_ok=True)  # the last round may have had room enough without one
        assert project.sql("PRAGMA integrity_check") == [{"integrity_check": "ok"}]
        assert _leaderboard(project) == expected
        assert not list(project.root.rglob("*.tmp")), "no half-written results file left behind"
        # Paid once: every request went out in exactly one batch that the emulator answered.
        dup = project.sql("SELECT custom_id, count(*) AS n FROM results WHERE kind = 'ok' GROUP BY custom_id HAVING n > 1")
        assert dup == []
        # Every failed plan stopped its checksum and fsync threads (a full disk refused the last flush once, leaking one each).
        import threading

        assert not [t.name for t in threading.enumerate() if t.name.startswith(("batchrun-checksum", "batchrun-fsync"))]
    finally:
        _umount(disk)


def test_unmerged_wal_without_shm_on_read_only_media_is_explained(finished: Project, tmp_path: Path) -> None:
    """The one read-only case SQLite cannot read correctly: log content and no -shm to index it.
    immutable=1 would silently read the database without the log; this says what to do."""
    import shutil
    import sqlite3

    copy = tmp_path / "copy"
    shutil.copytree(finished.root, copy)
    conn = sqlite3.connect(finished.state_path)
    try:
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute("UPDATE config_routes SET model = 'only-in-wal' WHERE route = 'gpt'")
        conn.commit()
        shutil.copy(f"{finished.state_path}-wal", copy / "state.db-wal")  # as if the -shm was lost
    finally:
        conn.close()
    _mount("--bind", str(copy), str(copy))
    try:
        _mount("-o", "remount,bind,ro", str(copy))
        ro = Project.__new__(Project)
        ro.root, ro.config_path = copy, copy / finished.config_path.name
        assert_clean_error(ro.run("status"), f"{copy / 'state.db'}", "write-ahead log", "writable copy")
    finally:
        _umount(copy)
