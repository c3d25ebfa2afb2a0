"""The CLI's conventions, as a newcomer meets them (issue 29 items 4-7 and 10-12): route filters
that filter and a misspelled route answered the same way everywhere; the group's options after
the command too; one duration syntax; JSON from every reading command with the same top-level
keys; every dataset problem at once; the config found from a folder below it; `--help` pointing
at the docs, exit codes and environment, and shell completion that works."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from batchrun.cli import cli
from batchrun.cli.support import Duration
from batchrun.emulator import Emulator
from conftest import Project, small_project, task

ROOT = Path(__file__).resolve().parent.parent
CONFIG_ORDER = "gpt, claude, gemini, judge-a, judge-g"  # conftest.DEFAULT_ROUTES, as the config lists them
JSON_KEYS = ("rehearsal", "protocol", "protocol_note", "batchrun_version")


def clean_exit_1(result: Any, *needles: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "Exception" not in result.output, result.output
    for needle in needles:
        assert needle in result.output, f"{needle!r} not in:\n{result.output}"


# --- item 4: route filters filter; a misspelled route gets one "Did you mean" -----------------------


def test_route_filters_filter_and_a_misspelled_route_is_answered_the_same_everywhere(project: Project) -> None:
    small_project(project)
    # Before any state.db: refused before the dataset is read, nothing created.
    clean_exit_1(project.run("plan", "--route", "gtp"), "--route 'gtp' is not a route", "Did you mean `gpt`?")
    assert not project.state_path.exists()

    plan = json.loads(project.run("plan", "--route", "gpt", "--json").stdout)
    assert {(r["route"], r["stage"]) for r in plan["routes"]} == {("gpt", "gen")}
    assert plan["routes"][0]["to_send"] == 4  # the four tasks, not zeros of other routes
    again = project.run("plan", "--route", "claude", "--stage", "gen")
    assert again.exit_code == 0, again.output
    rows = [line.split()[0] for line in again.stdout.splitlines()[1:] if line and not line.startswith(("total", "expected"))]
    assert rows == ["claude"], again.stdout
    status = project.run("status", "--route", "gemini", "--route", "gpt", "--json")
    assert list(json.loads(status.stdout)["cells"]) == ["gpt", "gemini"]  # config order, only those
    text = project.run("status").stdout
    assert [line.split(":")[0] for line in text.splitlines()[:3]] == ["gpt", "claude", "gemini"]  # config order, not a-z

    misspelled = [
        ["plan", "--route", "gtp"], ["submit", "--route", "gtp"], ["submit", "--dry-run", "--route", "GTP"],
        ["status", "--route", "gtp"], ["preflight", "--route", "gtp"], ["probe", "gtp", "--dry-run"],
        ["retry", "--route", "gtp"], ["accept-failures", "--route", "gtp", "--reason", "x"],
        # Last: cancel checks inside its run (a route gone from the config may still have live batches to cancel).
        ["cancel", "--route", "gtp"],
    ]
    runs = project.sql("SELECT count(*) AS n FROM runs")
    for args in misspelled:
        if args[0] == "cancel":
            assert project.sql("SELECT count(*) AS n FROM runs") == runs  # refused before any writer started a run
        r = project.run(*args)
        clean_exit_1(r, "'", "is not a route of", f"Known routes: {CONFIG_ORDER}.")
        assert r.output.count("Did you mean `gpt`?") == 1, (args, r.output)
    r = project.run("compare", "gtp", "claude")
    clean_exit_1(r, "'gtp' is not a contestant route", "Known contestant routes: gpt, claude, gemini.")
    assert r.output.count("Did you mean `gpt`?") == 1
    # Nothing close: no guess, still the list.
    r = project.run("plan", "--route", "zzzzzz")
    clean_exit_1(r, f"Known routes: {CONFIG_ORDER}.")
    assert "Did you mean" not in r.output


# --- item 5: the group's options after the command ------------------------------------------------


def test_global_options_work_after_the_command_with_the_same_meaning(project: Project) -> None:
    small_project(project)
    cfg, runner = str(project.config_path), CliRunner()
    # -q after the command silences the notice as before it does.
    assert runner.invoke(cli, ["plan", "--config", cfg]).exit_code == 0
    loud = runner.invoke(cli, ["plan", "--config", cfg])
    quiet = runner.invoke(cli, ["plan", "--config", cfg, "-q"])
    assert "Nothing new to write." in loud.stderr and quiet.exit_code == 0 and "Nothing new to write." not in quiet.stderr
    # --config after the command (no --config before, and the current folder's config would be another).
    before = runner.invoke(cli, ["--config", cfg, "status", "--json"])
    after = runner.invoke(cli, ["status", "--json", "--config", cfg])
    assert after.exit_code == 0 and json.loads(after.stdout) == json.loads(before.stdout)
    assert json.loads(after.stdout)["rehearsal"] is None
    # The later of two wins.
    clean_exit_1(runner.invoke(cli, ["--config", cfg, "status", "--config", str(project.root / "none.toml")]), "none.toml", "not found")
    # --emulator after the command: a rehearsal (its own state.db under rehearsal/); plan sends nothing.
    url = "http://127.0.0.1:9"
    r = runner.invoke(cli, ["plan", "--emulator", url, "--config", cfg])
    assert r.exit_code == 0, r.output
    assert (project.root / "rehearsal" / "state.db").exists()
    rehearsal = runner.invoke(cli, ["status", "--json", "--emulator", url, "--config", cfg])
    assert json.loads(rehearsal.stdout)["rehearsal"] == url
    same = runner.invoke(cli, ["--emulator", url, "--config", cfg, "status", "--json"])
    assert json.loads(same.stdout) == json.loads(rehearsal.stdout)
    # --version too, and a command's own option of the same name is not shadowed (none exists today).
    v = runner.invoke(cli, ["status", "--version"])
    assert v.exit_code == 0 and v.stdout.startswith("batchrun, version ")
    for command in cli.commands.values():
        names = [opt for p in command.params for opt in p.opts]
        assert all(names.count(o) == 1 for o in ("--config", "--emulator", "-q", "--version")), command.name


def test_a_global_option_after_the_command_still_needs_its_value(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    # `batchrun refresh --emulator` (the URL forgotten) must not run for real: after the command as
    # before it, an option that takes a value refuses to go without one (plan stands in for refresh).
    small_project(project)
    monkeypatch.chdir(project.root)
    monkeypatch.setenv("BATCHRUN_CONFIG", str(project.config_path))
    runner = CliRunner()
    for args in (["plan", "--emulator"], ["status", "--emulator"], ["status", "--config"], ["--emulator"]):
        clean_exit_1(runner.invoke(cli, args), "requires an argument")
    clean_exit_1(runner.invoke(cli, ["plan", "--emulator", "--json"]), "must be an http:// or https:// URL", "got '--json'")
    assert not project.state_path.exists() and not (project.root / "rehearsal").exists()


# --- item 6: one duration syntax ------------------------------------------------------------------


def test_every_duration_option_takes_the_same_syntax(project: Project) -> None:
    found = {(name, p.name) for name, c in cli.commands.items() for p in c.params if isinstance(p.type, Duration)}
    assert found == {("poll", "interval"), ("poll", "timeout"), ("refresh", "interval"), ("refresh", "timeout_"),
                     ("submit", "timeout_"), ("emulator", "latency")}
    # No option that means a time is left on another type.
    for name, command in cli.commands.items():
        for p in command.params:
            if any(w in (p.name or "") for w in ("timeout", "interval", "latency", "seconds", "delay")):
                assert isinstance(p.type, Duration), (name, p.name)
    d = Duration()
    assert [d.convert(v, None, None) for v in ("90", "0.5", "90s", "45m", "6h", "1d", " 2H ", 3)] == [
        90, 0.5, 90, 2700, 21600, 86400, 7200, 3]
    for bad in ("6x", "h", "", "nan", "inf", "-1", "1e999"):
        with pytest.raises(click.BadParameter, match="is not a duration: give .*90s, 45m, 6h or 1d"):
            d.convert(bad, None, None)
    # `python -m batchrun.emulator --latency` (argparse, beside the CLI) reads the same syntax.
    from batchrun.emulator.__main__ import _seconds

    assert _seconds("2m") == 120 and _seconds("0.5") == 0.5
    with pytest.raises(argparse.ArgumentTypeError, match="'6x' is not a duration"):
        _seconds("6x")
    # Through the CLI: poll --timeout 6h as refresh --timeout 6h (nothing in flight: it returns at once).
    small_project(project)
    assert project.run("plan").exit_code == 0
    r = project.run("poll", "--wait", "--timeout", "6h", "--interval", "1m")
    assert r.exit_code == 0 and "0 batch(es) in flight" in r.stdout, r.output
    clean_exit_1(project.run("poll", "--timeout", "6x"), "'--timeout'", "'6x' is not a duration", "6h")
    clean_exit_1(project.run("refresh", "--timeout", "6x"), "'--timeout'", "'6x' is not a duration", "6h")
    clean_exit_1(project.run("submit", "--timeout", "6x"), "'--timeout'", "'6x' is not a duration", "6h")
    help_text = project.run("poll", "--help").output
    assert "--timeout DURATION" in help_text and "--interval DURATION" in help_text and "[default: 30s]" in help_text


# --- item 7: JSON from every reading command, with report's top-level keys -------------------------


def test_every_reading_command_prints_json_with_the_report_keys(project: Project, emulator: Emulator) -> None:
    small_project(project)
    assert project.run("refresh", "--interval", "0.01", emulator=emulator).exit_code == 0
    report = json.loads(project.run("report", "--format", "json", emulator=emulator).stdout)
    outputs = {
        "status": project.run("status", "--json", emulator=emulator),
        "cost": project.run("cost", "--json", emulator=emulator),
        "verify": project.run("verify", "--json", emulator=emulator),
        "plan": project.run("plan", "--json", emulator=emulator),
        "compare": project.run("compare", "gpt", "claude", "--json", "--resamples", "100", emulator=emulator),
    }
    parsed = {}
    for name, r in outputs.items():
        assert r.exit_code == 0, (name, r.output)
        parsed[name] = data = json.loads(r.stdout)
        assert data["rehearsal"] == emulator.url == report["rehearsal"], name
        assert {k: data[k] for k in JSON_KEYS} == {k: report[k] for k in JSON_KEYS}, name
    # ... and the right values.
    status, cost, verify = parsed["status"], parsed["cost"], parsed["verify"]
    cells = {r["route"]: r["n"] for r in project.sql("SELECT route, count(*) AS n FROM cells GROUP BY route")}
    assert {route: sum(counts.values()) for route, counts in status["cells"].items()} == cells
    assert list(status["cells"]) == ["gpt", "claude", "gemini"] and status["in_flight"] == [] and status["problems"] == []
    batches = project.sql("SELECT count(*) AS n FROM batches WHERE status = 'collected'")[0]["n"]
    assert sum(r["batches"] for r in cost["nights"]) >= batches > 0
    night = cost["rows"][0]["night"]
    assert list(dict.fromkeys(r["route"] for r in cost["rows"] if r["night"] == night)) == CONFIG_ORDER.split(", ")
    text = project.run("verify", emulator=emulator).stdout
    assert verify["ok"] is True and verify["mismatches"] == [] and verify["state_db"] is True
    assert f"verified: {verify['checked']} checks against {verify['manifest']}" in text
    # A mismatch: the JSON still parses and names it; the exit is still 1.
    scores = next(project.results_dir.glob("*.scores.json"))
    scores.write_text(scores.read_text() + " ")
    bad = project.run("verify", "--json", emulator=emulator)
    assert bad.exit_code == 1 and "Traceback" not in bad.output
    failed = json.loads(bad.stdout)
    assert failed["ok"] is False and failed["checked"] == verify["checked"]
    assert any(scores.name in m for m in failed["mismatches"])
    # A real (not rehearsal) state.db: rehearsal is null in every form.
    assert project.run("plan").exit_code == 0
    for args in (["status", "--json"], ["cost", "--json"], ["plan", "--json"]):
        assert json.loads(project.run(*args).stdout)["rehearsal"] is None, args


def test_readme_documents_the_json_keys_of_every_reading_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Machine-readable output", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    for key in JSON_KEYS:
        assert f"`{key}`" in section
    for command in ("status --json", "cost --json", "verify --json", "compare --json", "plan --json", "report --format json"):
        assert f"`{command}`" in section
    for name in ("status", "cost", "verify", "compare", "plan", "preflight", "probe"):
        assert any(p.name == "as_json" for p in cli.commands[name].params), name


# --- item 10: every dataset problem at once --------------------------------------------------------


def test_every_dataset_problem_is_reported_at_once_with_close_keys(project: Project) -> None:
    small_project(project)
    records = json.loads(project.dataset_path.read_text())
    rubric = records[0]["ground_truth"]["scoring_rubric"]
    rubric[0]["criterion"] = rubric[0].pop("correct_criterion")   # record 1: the case
    records[1]["question"] = records[1].pop("question_text")     # record 2: a misspelt field
    records[1]["ground_truth"]["scoring_rubric"][1]["points"] = "50"  # ... and a second problem in it
    del records[2]["corpus_file"]                                # record 3: missing, nothing close
    records.append(task("t1", "Again?", "harbor.txt"))           # record 5: a duplicate id
    project.dataset_path.write_text(json.dumps(records))
    r = project.run("plan")
    path = str(project.dataset_path)
    clean_exit_1(r, f"{path}: 5 problems in the dataset:",
                 "1. record 1 (task t1): `ground_truth.scoring_rubric[0].correct_criterion` is missing (found `criterion`).",
                 "2. record 2 (task t2): field `question_text` is missing (found `question`).",
                 "3. record 2 (task t2): `ground_truth.scoring_rubric[1].points` must be a number (got '50').",
                 "4. record 3 (task t3): field `corpus_file` is missing.",
                 "5. record 5: duplicate task id 't1' (first seen at", "Fix them all")
    assert "Fix: " in r.output and not project.state_path.exists()
    # A .jsonl file: a broken line and a bad record, both.
    lines = [json.dumps({**t, "ground_truth": json.dumps(t["ground_truth"])}) for t in json.loads(project.dataset_path.read_text())[:4]]
    lines[1] = "{not json"
    lines[3] = lines[3].replace('"task_id"', '"taskid"')
    project.tasks([], "jsonl")
    project.dataset_path.write_text("\n".join(lines) + "\n")
    r = project.run("plan")
    clean_exit_1(r, "4 problems in the dataset", "1. line 1 (task t1): `ground_truth.scoring_rubric[0].correct_criterion` is missing",
                 "2. line 2: invalid JSON", "3. line 3 (task t3): field `corpus_file` is missing",
                 "4. line 4: missing field `task_id` (nor `question_id` or `id`) (found `taskid`)")
    # A file that is no WildTrace dataset at all: the first 50 problems, and how many there are.
    project.tasks([{"task_id": f"x{i}", "prompt": "?"} for i in range(60)])
    r = project.run("plan")
    clean_exit_1(r, "50 problems in the dataset (180 in all; the first 50 are listed):", "50. record 17 (task x16)")
    assert "51. " not in r.output


def test_every_corpus_file_problem_is_reported_at_once(project: Project) -> None:
    # The records are sound, but two name documents batchrun cannot read: both are said, in one
    # run (a release with many documents missing is not fixed one run per document).
    small_project(project)
    records = json.loads(project.dataset_path.read_text())
    records[1]["corpus_file"] = "../outside.txt"
    records[3]["corpus_file"] = "missing.txt"
    project.dataset_path.write_text(json.dumps(records))
    r = project.run("plan")
    # Each names the record as the dataset's problems do (a newcomer found the record left out).
    clean_exit_1(r, f"{project.dataset_path}: 2 problems in the corpus:",
                 f"1. record 2 (task t2, field corpus_file): corpus_file '../outside.txt' points outside the corpus folder",
                 "2. record 4 (task t4, field corpus_file): corpus file", "missing.txt does not exist. Fix: Put the document", "Fix them all")
    assert not project.state_path.exists()
    # One problem alone, in a .jsonl dataset: its line, as for the dataset's own problems.
    records[1]["corpus_file"] = "harbor.txt"
    project.tasks(records, fmt="jsonl")
    r = project.run("plan")
    clean_exit_1(r, f"{project.dataset_path}, line 4 (task t4, field corpus_file): corpus file")


# --- item 11: the config found from a folder below it ---------------------------------------------


def _toml(value: Any) -> str:
    return json.dumps(value)  # strings and lists of strings: JSON's form is TOML's


def test_the_config_is_found_upward_and_its_paths_stay_its_own(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    small_project(project)
    cfg = json.loads(project.config_path.read_text())
    lines = [f"protocol = {_toml(cfg['protocol'])}", "[paths]", f"dataset = {_toml(cfg['paths']['dataset'])}",
             "[judging]", f"panel = {_toml(cfg['judging']['panel'])}"]
    for name, r in cfg["routes"].items():
        lines += [f"[routes.{_toml(name)}]", *(f"{k} = {_toml(v)}" for k, v in r.items())]
    (project.root / "batchrun.toml").write_text("\n".join(lines) + "\n")
    project.config_path.unlink()
    below = project.root / "data"
    monkeypatch.chdir(below)
    runner = CliRunner()
    r = runner.invoke(cli, ["plan"])
    assert r.exit_code == 0, r.output
    assert f"Using the config {project.root / 'batchrun.toml'}" in r.stderr
    assert (project.root / "state.db").exists() and not (below / "state.db").exists()  # relative to the config's folder
    assert (project.root / "jobs").is_dir() and not (below / "jobs").exists()
    r = runner.invoke(cli, ["-q", "status", "--json"])
    assert r.exit_code == 0 and "Using the config" not in r.stderr and json.loads(r.stdout)["cells"]
    # In the config's own folder: nothing said. Where no folder up to / has one: not found, with the fix.
    monkeypatch.chdir(project.root)
    here = runner.invoke(cli, ["status"])
    assert here.exit_code == 0 and "Using the config" not in here.stderr
    nowhere = project.root.parent / "elsewhere"
    nowhere.mkdir()
    monkeypatch.chdir(nowhere)
    if not any((folder / "batchrun.toml").exists() for folder in nowhere.parents):  # this machine's /tmp has none
        clean_exit_1(runner.invoke(cli, ["status"]), "batchrun.toml not found", "or a folder below it")
    # One another user owns is refused when found above (git's "dubious ownership"), not when named.
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # only root can give a file away
        os.chown(project.root / "batchrun.toml", 65534, -1)
        monkeypatch.chdir(below)
        clean_exit_1(runner.invoke(cli, ["status"]), "belongs to another user (uid 65534)", f"pass --config {project.root / 'batchrun.toml'}")
        assert runner.invoke(cli, ["status", "--config", str(project.root / "batchrun.toml")]).exit_code == 0
        os.chown(project.root / "batchrun.toml", os.getuid(), -1)
        monkeypatch.chdir(nowhere)
    # An explicit --config (or BATCHRUN_CONFIG) is taken as given: no search.
    clean_exit_1(runner.invoke(cli, ["status", "--config", "batchrun.toml"]), "batchrun.toml not found")
    monkeypatch.setenv("BATCHRUN_CONFIG", str(project.root / "batchrun.toml"))
    r = runner.invoke(cli, ["status"])
    assert r.exit_code == 0 and "Using the config" not in r.stderr


# --- item 12: --help points onward; shell completion works -----------------------------------------


def test_help_names_the_docs_exit_codes_environment_and_completion() -> None:
    out = CliRunner().invoke(cli, ["--help"]).output
    for needle in ("README.md", "Exit codes:", "  0  done", "  1  a usage or user error", "  2  incomplete", "BATCHRUN_CONFIG",
                   "BATCHRUN_EMULATOR", "api_key_env", "OPENAI_API_KEY", "_BATCHRUN_COMPLETE=bash_source batchrun",
                   "after the command"):
        assert needle in out, needle
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for section in ("### Exit codes", "### Environment variables", "### Machine-readable output", "### Shell completion", "## Config reference",
                    "## Commands"):
        assert section in readme, section
    assert "_BATCHRUN_COMPLETE=bash_source batchrun" in readme
    for variable in ("BATCHRUN_CONFIG", "BATCHRUN_EMULATOR"):  # every BATCHRUN_ variable the help names is in the README's table
        assert f"| `{variable}` |" in readme


def test_readme_has_no_stale_test_count() -> None:
    quick_start = (ROOT / "README.md").read_text(encoding="utf-8").split("## Quick start", 1)[1].split("\n## ", 1)[0]
    import re

    assert not re.search(r"\d[\d,]* tests", quick_start), "a hard test count goes stale: the README says none"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_script_completes_commands_options_and_routes(tmp_path: Path, project: Project) -> None:
    batchrun = Path(sys.executable).parent / "batchrun"
    assert batchrun.exists(), "the venv's batchrun script"
    env = {**os.environ, "PATH": f"{batchrun.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    script = subprocess.run([str(batchrun)], env={**env, "_BATCHRUN_COMPLETE": "bash_source"}, capture_output=True, text=True,
                            timeout=60)
    assert script.returncode == 0 and "complete -o nosort -F _batchrun_completion batchrun" in script.stdout
    (tmp_path / "completion.bash").write_text(script.stdout)
    # Source it in a real bash and call the function bash would call on TAB.
    probe = (f"source {tmp_path / 'completion.bash'}\n"
             "COMPREPLY=(); COMP_WORDS=(batchrun sta); COMP_CWORD=1; _batchrun_completion batchrun; echo \"${COMPREPLY[*]}\"\n"
             "COMPREPLY=(); COMP_WORDS=(batchrun poll --ti); COMP_CWORD=2; _batchrun_completion batchrun; echo \"${COMPREPLY[*]}\"\n"
             # Route names from the config, in config order: the one --config names, and the one found upward.
             f"COMPREPLY=(); COMP_WORDS=(batchrun --config {project.config_path} plan --route g); COMP_CWORD=5; "
             "_batchrun_completion batchrun; echo \"${COMPREPLY[*]}\"\n"
             f"cd {project.root / 'data'}; COMPREPLY=(); COMP_WORDS=(batchrun compare c); COMP_CWORD=2; "
             "_batchrun_completion batchrun; echo \"${COMPREPLY[*]}\"\n")
    small_project(project)
    (project.root / "batchrun.toml").write_text('protocol = "custom"\n[judging]\npanel = []\n[routes.claude]\nprovider = "anthropic"\n'
                                                'model = "claude-opus-4-8"\n')
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["status", "--timeout", "gpt gemini", "claude"], r.stdout
