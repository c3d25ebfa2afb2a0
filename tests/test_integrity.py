"""What a published leaderboard must not let through (issue 26), through the CLI, the real SDKs
and the emulator: a judge panel other than the protocol's, a comparison of unequal runs, and
accepted infrastructure failures published as the model's zeros. (A forged `verify` is in
test_manifest.py, the probe's CJK sample in test_probe.py.)

Spec 001 §4: three judges that are not on the leaderboard; §5: infrastructure failures are not
model failures and leave `overall` null. Spec 002's
engineering contract: a comparison refuses runs whose task sets differ.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import DEFAULT_ROUTES, PROTOCOL_JUDGES, PROTOCOL_PANEL, Project, route, small_project

from batchrun.emulator import Emulator


@pytest.fixture
def emu() -> Any:
    e = Emulator(host="127.0.0.1", port=0, latency=0.0).start()
    yield e
    e.stop()


CONTESTANTS = {k: DEFAULT_ROUTES[k] for k in ("gpt", "claude", "gemini")}
TWO_JUDGES = {k: PROTOCOL_JUDGES[k] for k in ("judge-a", "judge-g")}


# --- 1. the panel ------------------------------------------------------------------------------------

PANELS = {
    "one judge": ({**CONTESTANTS, "judge-a": route("anthropic", "claude-sonnet-4-6")}, ["judge-a"], "names 1 judge route(s)"),
    "no judge": (CONTESTANTS, [], "names no judge route"),
    "two judges": ({**CONTESTANTS, **TWO_JUDGES}, ["judge-a", "judge-g"], "names 2 judge route(s)"),
    # The same model through two routes and two spellings (caps.normalise_model): one judge twice.
    "one model twice": ({**CONTESTANTS, **TWO_JUDGES,
                         "judge-a2": route("openai-compatible", "anthropic/claude-sonnet-4.6-20260217")},
                        ["judge-a", "judge-a2", "judge-g"], "which are the same model (claude-sonnet-4.6)"),
}


@pytest.mark.parametrize("case", list(PANELS))
def test_a_panel_other_than_three_judges_of_three_models_is_a_config_error(project: Project, case: str) -> None:
    routes, panel, problem = PANELS[case]
    small_project(project, routes=routes, panel=panel, protocol=None)  # no protocol key: not the test helper's "custom"
    r = project.run("plan")
    assert r.exit_code == 1, r.output
    assert "`judging.panel`" in r.output and problem in r.output and "spec 001 §4" in r.output
    assert 'add protocol = "custom" at the top of the config' in r.output  # the fix, and the deliberate way out
    assert "Traceback" not in r.output and not project.state_path.exists()


def test_a_custom_panel_is_declared_and_every_output_says_its_numbers_are_not_protocol_numbers(
        project: Project, emu: Any, tmp_path: Path) -> None:
    small_project(project, protocol="custom")  # two judges
    r = project.run("refresh", "--interval", "0", emulator=emu)
    assert r.exit_code == 0, r.output
    note = "Not WildTrace-protocol numbers: the config declares protocol = \"custom\""
    assert f"# {note}" in r.stdout  # refresh prints the report
    md = project.run("report", emulator=emu).stdout
    assert md.startswith("# Rehearsal on the emulator") and f"# {note}" in md
    assert all(line.endswith("| no: custom protocol |") for line in md.splitlines() if re.match(r"\| \d", line))
    rows = list(csv.DictReader(io.StringIO(project.run("report", "--format", "csv", emulator=emu).stdout)))
    assert len(rows) == 3 and {(x["protocol"], x["protocol_number"]) for x in rows} == {("custom", "0")}
    assert all(x["non_protocol"].startswith("custom protocol") for x in rows)
    data = json.loads(project.run("report", "--format", "json", emulator=emu).stdout)
    assert data["protocol"] == "custom" and data["protocol_note"].startswith(note)
    assert "judge-a (claude-sonnet-4-6), judge-g (gemini-2.5-flash)" in data["protocol_note"]
    assert all(x["protocol_number"] is False and x["provenance"]["protocol"] == "custom" for x in data["routes"])
    site = tmp_path / "site"
    assert project.run("report", "--format", "html", "--out", str(site), emulator=emu).exit_code == 0
    for page in (site / "index.html", next((site / "tasks").glob("*.html"))):
        assert '<div class="custom">Not WildTrace-protocol numbers' in page.read_text(encoding="utf-8")
    for name in ("gpt", "claude", "gemini"):
        scores = json.loads((project.results_dir / f"{name}.scores.json").read_text())
        assert scores["protocol_number"] is False and scores["provenance"]["protocol_note"].startswith(note)
        assert json.loads((project.results_dir / f"{name}.responses.json").read_text())["protocol"] == "custom"
    manifest = json.loads((project.results_dir / "manifest.json").read_text())
    assert manifest["protocol"] == "custom" and manifest["protocol_note"].startswith(note)
    v = project.run("verify", emulator=emu)
    assert v.exit_code == 0 and f"note: {note}" in v.output, v.output


# --- 4 and 5: unequal runs and accepted failures, on the protocol's panel ----------------------------

# claude's t3 fails for infrastructure, for good (an overloaded provider): it waits, never a zero.
STUCK = {"kind": "request_error", "status": 529, "model": "claude-opus-4-8", "prompt_contains": "freezer", "count": -1}


def test_compare_refuses_unequal_runs_unless_provisional_and_never_compares_nothing(project: Project, emu: Any) -> None:
    small_project(project, routes={**CONTESTANTS, **PROTOCOL_JUDGES}, panel=PROTOCOL_PANEL)
    assert "protocol" not in json.loads(project.config_path.read_text())  # the protocol's panel, nothing declared

    # Nothing finished yet: refused, naming what is open; n = 0 is refused even provisionally.
    assert project.run("plan", emulator=emu).exit_code == 0
    r = project.run("compare", "gpt", "claude", emulator=emu)
    assert r.exit_code == 2 and r.stdout == "", r.output
    assert "gpt: 4 task(s) unfinished (t1, t2, t3, t4)" in r.stderr and "claude: 4 task(s) unfinished" in r.stderr
    r = project.run("compare", "gpt", "claude", "--provisional", emulator=emu)
    assert r.exit_code == 2 and "nothing to compare (n = 0)" in r.stderr and r.stdout == "", r.output

    emu.add_fault(STUCK)
    r = project.run("refresh", "--interval", "0", emulator=emu)
    assert r.exit_code == 2, r.output
    # claude is incomplete: compare names what is open, exit 2 (run again later), in either order and format.
    r = project.run("compare", "gpt", "claude", emulator=emu)
    assert r.exit_code == 2 and r.stdout == "", r.output
    assert "claude: 1 task(s) unfinished (t3)" in r.stderr and "gpt:" not in r.stderr and "--provisional" in r.stderr
    r = project.run("compare", "claude", "gpt", "--json", emulator=emu)
    assert r.exit_code == 2 and r.stdout == "" and "claude: 1 task(s) unfinished (t3)" in r.stderr
    # --provisional: the tasks both finished, said in every format.
    text = project.run("compare", "gpt", "claude", "--provisional", emulator=emu)
    assert text.exit_code == 0, text.output
    assert "# PROVISIONAL comparison" in text.stdout and "n = 3" in text.stdout
    assert "PROVISIONAL: compared on the 3 of 4 task(s) both routes have finished" in text.stdout
    j = json.loads(project.run("compare", "gpt", "claude", "--provisional", "--json", emulator=emu).stdout)
    assert j["provisional"] is True and j["all_tasks"]["n"] == 3 and j["notes"][0].startswith("PROVISIONAL")
    assert j["protocol"] == "wildtrace" and j["protocol_note"] is None
    # Two complete routes: compared as before, nothing provisional.
    complete = json.loads(project.run("compare", "gpt", "gemini", "--json", emulator=emu).stdout)
    # (The small project has 3 documents: the only notes are the few-documents ones, issue 27.)
    assert complete["provisional"] is False and complete["all_tasks"]["n"] == 4
    assert complete["notes"] and not any("PROVISIONAL" in n for n in complete["notes"])
    asked = json.loads(project.run("compare", "gpt", "gemini", "--json", "--provisional", emulator=emu).stdout)
    assert asked["provisional"] is False and asked["notes"] == complete["notes"]  # nothing provisional about equal complete runs


def test_accepted_failures_are_not_model_failures_nor_protocol_numbers(project: Project, emu: Any, tmp_path: Path) -> None:
    small_project(project, routes={**CONTESTANTS, **PROTOCOL_JUDGES}, panel=PROTOCOL_PANEL)
    emu.add_fault(STUCK)
    assert project.run("refresh", "--interval", "0", emulator=emu).exit_code == 2
    # The maintainer stops waiting: accepted, never the model's failure, never a protocol number.
    assert project.run("accept-failures", "--route", "claude", "--reason", "overloaded all week", emulator=emu).exit_code == 0
    r = project.run("refresh", "--interval", "0", emulator=emu)
    assert r.exit_code == 0, r.output
    board = {x["route"]: x for x in project.sql("SELECT * FROM leaderboard")}
    claude = board["claude"]
    # Spec 001 §5: infrastructure failures leave All-tasks null; the decision's figure is apart.
    assert (claude["complete"], claude["failed_n"], claude["accepted_n"], claude["all_tasks_overall"]) == (1, 0, 1, None)
    assert claude["accepted_overall"] == pytest.approx(claude["scored_overall"] * 3 / 4, abs=1e-6)
    assert [x["route"] for x in project.sql("SELECT route FROM leaderboard")][-1] == "claude"  # after the protocol numbers
    for name in ("gpt", "gemini"):
        assert board[name]["all_tasks_overall"] is not None and board[name]["accepted_n"] == 0

    # Markdown: its own column; left out of the groups and comparisons.
    md = project.run("report", emulator=emu).stdout
    lines = {line.split("|")[2].strip(): line for line in md.splitlines() if re.match(r"\| (\d|—)", line)}
    assert lines["claude"].startswith("| — |")  # no protocol All-tasks: listed, not ranked
    assert lines["gpt"].endswith("| yes |") and lines["gemini"].endswith("| yes |")
    assert "| — | — | — | no: 1 accepted failure(s) (All-tasks" in lines["claude"]
    assert re.search(r"\| claude \| claude-opus-4-8 \| — \| [0-9.]+ \(3\) \| 0 \| 0 \| 0 \|", lines["claude"])  # Failed: 0
    groups = next(line for line in md.splitlines() if line.startswith("Statistically indistinguishable groups"))
    assert "claude" not in groups and "gpt" in groups
    assert "Not protocol numbers: claude (accepted infrastructure failures" in md
    # CSV and JSON: the flag on the route's row.
    rows = {x["route"]: x for x in csv.DictReader(io.StringIO(project.run("report", "--format", "csv", emulator=emu).stdout))}
    assert (rows["claude"]["protocol_number"], rows["claude"]["all_tasks_overall"], rows["claude"]["group"]) == ("0", "", "")
    assert float(rows["claude"]["accepted_overall"]) == pytest.approx(claude["accepted_overall"])
    assert "accepted infrastructure failure" in rows["claude"]["non_protocol"] and rows["claude"]["failed_n"] == "0"
    assert (rows["gpt"]["protocol"], rows["gpt"]["protocol_number"], rows["gpt"]["non_protocol"]) == ("wildtrace", "1", "")
    data = json.loads(project.run("report", "--format", "json", emulator=emu).stdout)
    routes = {x["route"]: x for x in data["routes"]}
    assert (data["protocol"], data["protocol_note"]) == ("wildtrace", None)
    assert routes["claude"]["protocol_number"] is False and routes["claude"]["overall"] is None
    assert routes["gpt"]["protocol_number"] is True and routes["gpt"]["non_protocol"] == []
    assert "claude" not in data["statistics"]["pairwise"]["routes"] and data["statistics"]["routes"]["claude"]["group"] is None
    # The results files and the site.
    scores = json.loads((project.results_dir / "claude.scores.json").read_text())
    assert scores["protocol_number"] is False and scores["all_tasks_overall"] is None and scores["failed_n"] == 0
    assert {t["task_id"]: t["status"] for t in scores["tasks"]}["t3"] == "accepted"
    site = tmp_path / "site"
    assert project.run("report", "--format", "html", "--out", str(site), emulator=emu).exit_code == 0
    html = (site / "index.html").read_text(encoding="utf-8")
    row = re.search(r'<tr class="route-row" data-route="claude">.*?</tr>', html, re.S)
    assert row and 'class="nonprotocol"' in row.group(0) and "not a protocol number" in row.group(0)
    gpt_row = re.search(r'<tr class="route-row" data-route="gpt">.*?</tr>', html, re.S)
    assert gpt_row and 'class="nonprotocol"' not in gpt_row.group(0)

    # compare: refused (exit 1: not incomplete, a decision) unless provisional.
    r = project.run("compare", "gpt", "claude", emulator=emu)
    assert r.exit_code == 1 and "claude has 1 accepted infrastructure failure(s)" in r.stderr, r.output
    j = json.loads(project.run("compare", "gpt", "claude", "--provisional", "--json", emulator=emu).stdout)
    assert j["provisional"] is True and j["all_tasks"]["n"] == 4 and any("claude has 1 accepted" in n for n in j["notes"])
    # report --provisional ranks and groups it, and says so.
    prov = project.run("report", "--provisional", emulator=emu).stdout
    assert "This report is PROVISIONAL" in prov
    assert "claude" in next(line for line in prov.splitlines() if line.startswith("Statistically indistinguishable groups"))
    prov_json = json.loads(project.run("report", "--format", "json", "--provisional", emulator=emu).stdout)
    assert prov_json["statistics"]["provisional"] is True and "claude" in prov_json["statistics"]["pairwise"]["routes"]
