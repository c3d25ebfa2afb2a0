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

from conftest import KEY_ENV, Project, route, small_project
from test_cli_errors import _gt, _mutate_records, _set, assert_clean_error, edit_config, prepare, set_route, snapshot

REPO = Path(__file__).resolve().parents[1]
WITH_STATE = pytest.mark.parametrize("with_state", [False, True], ids=["no-state", "existing-state"])


def run_subprocess(project: Project, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process: where the bug is a hang or a traceback only a real process shows."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "batchrun", "--config", str(project.config_path), *args],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=project.root)


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
                   ("record 0 (task t1)", "`ground_truth.scoring_rubric[0].points`", "is NaN", "finite number")),
    "points_infinity": (_raw_dataset(lambda t: t.replace('"points": 40', '"points": Infinity', 1)),
                        ("record 0 (task t1)", "`ground_truth.scoring_rubric[1].points`", "is Infinity", "finite number")),
    "points_overflow": (_raw_dataset(lambda t: t.replace('"points": 70', '"points": 1e999', 1)),
                        ("task t3", "scoring_rubric[0].points", "is Infinity")),
    "nan_in_another_field": (_mutate_records(_set(2, difficulty=float("-inf"))), ("task t3", "`difficulty`", "-Infinity")),
    "nan_in_rubric_string_jsonl": (_mutate_records(_gt(1, scoring_rubric='[{"points": NaN, "correct_criterion": "x"}]'), "jsonl"),
                                   ("line 2 (task t2)", "`ground_truth.scoring_rubric[0].points`", "is NaN")),
    "task_id_object": (_mutate_records(_set(1, task_id={"a": 1})), ("record 1", "`task_id`", "must be a string (or an integer)", "dict")),
    "task_id_boolean": (_mutate_records(_set(2, task_id=True)), ("record 2", "`task_id`", "must be a string", "bool True")),
    "task_id_float": (_mutate_records(_set(2, task_id=1.5)), ("record 2", "`task_id`", "float")),
    "task_id_newline": (_mutate_records(_set(0, task_id="t1\nt9")), ("record 0", "`task_id`", "line break")),
    "nested_200000_deep": (_deep, ("nested too deeply",)),
    "nested_deep_jsonl_line": (_deep_jsonl, ("tasks.jsonl, line 2", "nested too deeply")),
    "nested_deep_in_a_record": (_deep_in_record, ("record 1 (task t2)", "`notes[0]", "nests more than 64 levels")),
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
    model = "qwen3.6-plus" if provider == "openai-compatible" else "claude-opus-4.8"
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
