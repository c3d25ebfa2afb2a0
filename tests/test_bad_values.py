"""Issue 24, items 8 and 11: values that raised a traceback, or were taken silently, are clear errors.

Through the CLI (in process, as test_cli_errors; the emulator's own commands as real processes,
since an accepted bad value makes them serve forever): a config or dataset holding a number
past Python's int-string limit (5,001 digits) or too large to store, `price.tiers` that is not a
list, an `api_key_env` that cannot name an environment variable, and command-line values that
are NaN, infinite, out of range or an unusable path. Each: exit 1, the file or option, the value
and the fix, no traceback, state.db untouched.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

import cliproc
from batchrun.emulator import Emulator
from batchrun.emulator.faults import normalize_fault
from conftest import Project, small_project
from test_cli_errors import WITH_STATE, assert_clean_error, edit_config, prepare, set_route, snapshot

BIG = "9" * 5001  # past Python's default int-string limit (4,300 digits)


def no_traceback(result: Any, *needles: str) -> None:
    """A usage error: exit 1, what was wrong and with which option, never a traceback."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "Exception" not in result.output
    for needle in needles:
        assert needle in result.output, f"{needle!r} not in:\n{result.output}"


# --- the config -------------------------------------------------------------------------------------

CONFIG_VALUES: dict[str, tuple[Callable[[dict[str, Any]], None], tuple[str, ...]]] = {
    "tiers_not_a_list": (set_route("gemini", price={"input": 1.25, "output": 10.0, "tiers": 5}),
                         ('routes."gemini".price.tiers', "must be a list (got 5)", "tiers = [{ above_input_tokens")),
    "tiers_a_table": (set_route("gemini", price={"input": 1.25, "output": 10.0, "tiers": {"input": 1}}),
                      ('routes."gemini".price.tiers', "must be a list")),
    "key_env_with_space": (set_route("gpt", api_key_env="A B"),
                           ('routes."gpt".api_key_env', "'A B'", "not the name of an environment variable", "letters, digits and underscores")),
    "key_env_with_equals": (set_route("gpt", api_key_env="A=B"),
                            ('routes."gpt".api_key_env', "'A=B'", "not the name of an environment variable")),
    "key_env_leading_digit": (set_route("claude", api_key_env="1KEY"), ('routes."claude".api_key_env', "'1KEY'")),
}


@pytest.mark.parametrize("case", list(CONFIG_VALUES))
def test_config_values_are_clear_errors(project: Project, case: str) -> None:
    before = prepare(project, True)  # an existing state.db: untouched, byte for byte
    mutate, needles = CONFIG_VALUES[case]
    edit_config(project, mutate)
    assert_clean_error(project.run("plan"), str(project.config_path), *needles)
    assert snapshot(project) == before


@WITH_STATE
@pytest.mark.parametrize("fmt", ["json", "toml"])
def test_a_5001_digit_integer_in_the_config_is_a_clear_error(project: Project, fmt: str, with_state: bool) -> None:
    before = prepare(project, with_state)
    if fmt == "json":
        text = project.config_path.read_text()
        project.config_path.write_text(text.replace('"paths": {', f'"budget": {BIG},\n "paths": {{', 1))
        where = "line 2, column 12"
    else:
        cfg = json.loads(project.config_path.read_text())
        toml = project.root / "batchrun.toml"
        toml.write_text(f'budget = 1_{BIG}\n[paths]\ndataset = "{cfg["paths"]["dataset"]}"\n'
                        '[routes.gpt]\nprovider = "openai"\nmodel = "gpt-5.5"\n', encoding="utf-8")
        project.config_path = toml
        where = "line 1, column 10"
    assert_clean_error(project.run("plan"), str(project.config_path), where, "an integer of 5,002 digits" if fmt == "toml"
                       else "an integer of 5,001 digits", "4,300", "Write that value with a few digits")
    assert snapshot(project) == before


# --- the dataset ------------------------------------------------------------------------------------


def _big_in_record(field: str, digits: str, fmt: str = "json") -> Callable[[Project], None]:
    """Put an integer of `digits` (raw JSON text) as the first record's task_id or first rubric points."""
    def apply(p: Project) -> None:
        recs = json.loads(p.dataset_path.read_text(encoding="utf-8"))
        if field == "task_id":
            recs[0]["task_id"] = 123456789
        else:
            recs[0]["ground_truth"]["scoring_rubric"][0]["points"] = 123456789
        p.tasks(recs, fmt=fmt)
        p.dataset_path.write_text(p.dataset_path.read_text(encoding="utf-8").replace("123456789", digits, 1), encoding="utf-8")
    return apply


DATA_VALUES: dict[str, tuple[Callable[[Project], None], tuple[str, ...]]] = {
    "task_id_5001_digits": (_big_in_record("task_id", BIG), ("line 3", "an integer of 5,001 digits", "write ids as strings")),
    "points_5001_digits": (_big_in_record("points", BIG), ("an integer of 5,001 digits", "4,300")),
    "points_5001_digits_jsonl": (_big_in_record("points", BIG, "jsonl"), ("tasks.jsonl, line 1", "an integer of 5,001 digits")),
    "points_4000_digits": (_big_in_record("points", "9" * 4000),
                           ("record 1 (task t1)", "`ground_truth.scoring_rubric[0].points`", "an integer of 4,000 digits")),
    "task_id_30_digits": (_big_in_record("task_id", "1" + "0" * 29), ("record 1", "field `task_id`", "an integer of 30 digits")),
}


@pytest.mark.parametrize("case", list(DATA_VALUES))
def test_dataset_numbers_too_long_are_clear_errors(project: Project, case: str) -> None:
    before = prepare(project, True)
    breaker, needles = DATA_VALUES[case]
    breaker(project)
    result = project.run("plan")
    assert_clean_error(result, str(project.dataset_path), *needles)
    assert len(result.output) < 2000, "the number itself is not printed"
    assert snapshot(project) == before


# --- command-line values -------------------------------------------------------------------------------


REPORT_VALUES: list[tuple[list[str], tuple[str, ...]]] = [
    (["report", "--resamples", "1000000000000"], ("'--resamples'", "1000000000000", "100<=x<=100000")),
    (["report", "--seed", "-1"], ("'--seed'", "-1", "0<=x")),
    (["compare", "gpt", "claude", "--seed", "-1"], ("'--seed'", "-1")),
    (["compare", "gpt", "claude", "--resamples", "1000000000000"], ("'--resamples'",)),
    (["report", "--format", "html", "--out", "/dev/null"], ("--out /dev/null", "Not a directory", "Pass --out a folder")),
    (["report", "--format", "html", "--out", "/proc/x"], ("--out /proc/x", "Pass --out a folder")),
]

COMMAND_VALUES: list[tuple[list[str], tuple[str, ...]]] = [
    (["poll", "--wait", "--timeout", "nan"], ("'--timeout'", "'nan' is not a duration")),
    (["poll", "--wait", "--interval", "inf"], ("'--interval'", "'inf' is not a duration")),
    (["poll", "--wait", "--timeout", "-5"], ("'--timeout'", "-5")),
    (["refresh", "--timeout", "nan"], ("'--timeout'", "'nan' is not a duration", "6h")),
    (["refresh", "--timeout", "inf"], ("'--timeout'", "'inf' is not a duration")),
    (["refresh", "--timeout", "-5m"], ("'--timeout'", "'-5m' is not a duration")),
    (["refresh", "--interval", "nan"], ("'--interval'", "'nan'")),
    (["refresh", "--budget", "nan"], ("'--budget'", "'nan'")),
    (["submit", "--budget", "-1"], ("'--budget'", "-1")),
    (["probe", "gpt", "--max-cost", "nan"], ("'--max-cost'", "'nan'")),
    (["demo", "--dir", "/proc/demo"], ("/proc/demo", "--dir", "Pass --dir a folder you can create")),
]


def test_report_and_command_values_are_clear_errors(project: Project, emulator: Any) -> None:
    # A rehearsal on the emulator: a value taken by mistake sends nothing beyond loopback.
    small_project(project)
    assert project.run("plan", emulator=emulator).exit_code == 0
    before = snapshot(project)
    for args, needles in COMMAND_VALUES:
        no_traceback(project.run(*args, emulator=emulator), *needles)
        assert snapshot(project) == before, args
    r = project.run("refresh", "--interval", "0.01", emulator=emulator)
    assert r.exit_code == 0, r.output
    before = snapshot(project)
    for args, needles in REPORT_VALUES:
        no_traceback(project.run(*args, emulator=emulator), *needles)
        assert snapshot(project) == before, args


EMULATOR_VALUES: list[tuple[list[str], tuple[str, ...]]] = [
    (["--port", "-1"], ("'--port'", "-1", "0<=x<=65535")),
    (["--port", "70000"], ("'--port'", "70000", "0<=x<=65535")),
    (["--latency", "nan"], ("'--latency'", "'nan' is not a duration")),
    (["--latency", "inf"], ("'--latency'", "'inf' is not a duration")),
    (["--latency", "-5"], ("'--latency'", "-5")),
]


def test_emulator_values_are_clear_errors() -> None:
    import subprocess
    import sys

    for args, needles in EMULATOR_VALUES:
        # A real process: an accepted value would serve until killed (the timeout says so).
        r = cliproc.run(["emulator", "--port", "0", *args], timeout=30)
        assert r.returncode == 1, (args, r.stderr)
        assert "Traceback" not in r.stderr and all(n in r.stderr for n in needles), (args, r.stderr)
    for args in (["--port", "70000"], ["--latency", "nan"]):
        r = subprocess.run([sys.executable, "-m", "batchrun.emulator", "--port", "0", *args], capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and "Traceback" not in r.stderr and args[0] in r.stderr, (args, r.stderr)


def test_the_emulator_never_takes_a_latency_that_would_never_end() -> None:
    for bad in (math.nan, math.inf, -5):
        with pytest.raises(ValueError, match="finite number of seconds"):
            Emulator(latency=bad)
        with pytest.raises(ValueError, match="finite number of seconds"):
            normalize_fault({"kind": "slow", "latency": bad})
    with Emulator(latency=0).start() as emu:
        for body in (b'{"latency": NaN}', b'{"latency": Infinity}', b'{"latency": -1}'):
            req = urllib.request.Request(emu.url + "/_emulator/latency", data=body, method="POST")
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=10)
            assert e.value.code == 400 and b"finite number of seconds" in e.value.read()
        assert emu.latency == 0
