"""Spec §4: judges are never contestants, through the CLI.

A route in judging.panel is a judge; `role = "judge"` outside the panel is idle (sent nothing,
not on the leaderboard); any other route is a contestant. A judge must not silently become a
paying contestant when it leaves the panel, and no contestant is graded by its own model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from batchrun.protocol.config_file import load_config
from batchrun.emulator import Emulator
from batchrun.base.errors import ConfigError
from batchrun.ledger.inputs import resolve_inputs
from batchrun.ledger.sync import sync_state

from conftest import DEFAULT_ROUTES, Project, route, small_project
from test_cli_errors import assert_clean_error, edit_config, set_route, snapshot

ROOT = Path(__file__).resolve().parents[1]


def ok(result: Any) -> Any:
    assert result.exit_code == 0, result.output
    return result


def gen_requests(project: Project, name: str) -> int:
    return project.sql("SELECT count(*) AS n FROM requests WHERE route = ? AND stage = 'gen'", [name])[0]["n"]


def warning_lines(result: Any, needle: str) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("Warning: ") and needle in line]


# --- the silent flip ------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [("plan",), ("submit", "--dry-run"), ("collect",), ("refresh", "--timeout", "5s")])
def test_a_judge_removed_from_the_panel_is_not_silently_made_a_contestant(project: Project, command: tuple[str, ...]) -> None:
    small_project(project)
    ok(project.run("plan"))
    before = snapshot(project)
    edit_config(project, lambda cfg: cfg["judging"].update(panel=["judge-g"]))  # judge-a's route stays
    result = project.run(*command)
    assert_clean_error(result, str(project.config_path), "'judge-a'", "judging.panel", "contestant",
                       'role = "judge"', 'role = "contestant"', '[routes."judge-a"]')
    assert snapshot(project) == before, "state.db, its lock and jobs/ untouched"
    assert gen_requests(project, "judge-a") == 0


def test_the_flip_check_runs_inside_the_sync_transaction_and_rolls_back(project: Project) -> None:
    """The library path (no CLI pre-check): sync_state refuses before it writes anything."""
    small_project(project)
    ok(project.run("plan"))
    before = snapshot(project)
    edit_config(project, lambda cfg: cfg["judging"].update(panel=["judge-g"]))
    store = project.store()
    try:
        with pytest.raises(ConfigError, match="'judge-a' was a judge"):
            sync_state(store, resolve_inputs(store, load_config(project.config_path)))
        assert not store.db.conn.in_transaction
    finally:
        store.close()
    after = snapshot(project)
    assert after["state"][0] == before["state"][0], "every row as it was"
    assert project.sql("SELECT route, role FROM config_routes WHERE route = 'judge-a'") == [{"route": "judge-a", "role": "judge"}]


def test_the_two_fixes_the_flip_error_names(project: Project) -> None:
    small_project(project)
    ok(project.run("plan"))
    edit_config(project, lambda cfg: cfg["judging"].update(panel=["judge-g"]))
    assert project.run("plan").exit_code == 1

    # role = "judge": kept, idle, sent nothing.
    edit_config(project, set_route("judge-a", role="judge"))
    ok(project.run("plan"))
    assert gen_requests(project, "judge-a") == 0
    assert "judge-a" not in {r.name for r in load_config(project.config_path).contestants}
    # Deleting the role line later is the same flip: state.db remembers the idle judge.
    edit_config(project, lambda cfg: cfg["routes"]["judge-a"].pop("role"))
    assert_clean_error(project.run("plan"), "'judge-a'", 'role = "contestant"')

    # role = "contestant": on the leaderboard, deliberately.
    edit_config(project, set_route("judge-a", role="contestant"))
    ok(project.run("plan"))
    assert gen_requests(project, "judge-a") == 4
    assert project.sql("SELECT role FROM config_routes WHERE route = 'judge-a'") == [{"role": "contestant"}]


# --- idle judges ---------------------------------------------------------------------------------


def test_an_idle_judge_is_never_sent_anything_and_not_on_the_leaderboard(project: Project, emulator: Emulator) -> None:
    routes = {**DEFAULT_ROUTES, "judge-spare": route("openai", "gpt-4.1", role="judge")}
    small_project(project, routes=routes)
    config = load_config(project.config_path)
    assert [r.name for r in config.idle] == ["judge-spare"]
    assert "judge-spare" not in {r.name for r in config.contestants} | {r.name for r in config.judges}

    first = project.run("refresh", "--interval", "0.05", "--timeout", "60s", emulator=emulator)
    assert first.exit_code == 0, first.output
    assert gen_requests(project, "judge-spare") == 0
    assert project.sql("SELECT count(*) AS n FROM requests WHERE route = 'judge-spare'")[0]["n"] == 0
    models = {r["model"] for r in emulator.requests}
    assert models and "gpt-4.1" not in models
    assert {r["route"] for r in project.sql("SELECT route FROM leaderboard")} == {"gpt", "claude", "gemini"}
    assert "judge-spare" not in first.stdout  # the printed leaderboard
    (notice,) = warning_lines(first, "judge-spare")
    assert "idle" in notice and "judging.panel" in notice and "caps" not in notice

    second = project.run("refresh", "--interval", "0.05", "--timeout", "60s", emulator=emulator)
    assert second.exit_code == 0, second.output
    assert warning_lines(second, "judge-spare") == [], "said once"


# --- config errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("contestant", [
    route("anthropic", "claude-sonnet-4-6"),
    route("anthropic", "claude-sonnet-4-6-20260217"),
    route("openai-compatible", "anthropic/claude-sonnet-4.6"),  # via a router: provider-agnostic
    route("openai-compatible", "mr.claude-sonnet-4-6-20260217"),
], ids=["same-id", "dated", "router-path", "router-prefix"])
@pytest.mark.parametrize("with_state", [False, True], ids=["no-state", "existing-state"])
def test_a_contestant_with_a_judges_model_is_refused(project: Project, contestant: dict[str, Any], with_state: bool) -> None:
    small_project(project)
    if with_state:
        ok(project.run("plan"))
    before = snapshot(project)
    edit_config(project, lambda cfg: cfg["routes"].update(sonnet=contestant))
    result = project.run("plan")
    assert_clean_error(result, str(project.config_path), 'routes."sonnet".model', "'judge-a'", "same model",
                       "judging.panel", "spec §4", 'Remove route "sonnet"')
    assert snapshot(project) == before


def test_a_contestant_may_share_a_family_but_not_the_model(project: Project) -> None:
    small_project(project)
    edit_config(project, lambda cfg: cfg["routes"].update(opus=route("anthropic", "claude-opus-4-6"),
                                                          flash2=route("gemini", "gemini-2.5-flash-lite")))
    ok(project.run("plan"))
    # Declared judge (idle) with a panel judge's model is not a contestant: allowed.
    edit_config(project, lambda cfg: cfg["routes"].update(spare=route("anthropic", "claude-sonnet-4-6", role="judge")))
    ok(project.run("plan"))


@pytest.mark.parametrize("with_state", [False, True], ids=["no-state", "existing-state"])
def test_role_contestant_on_a_panel_route_is_refused(project: Project, with_state: bool) -> None:
    small_project(project)
    if with_state:
        ok(project.run("plan"))
    before = snapshot(project)
    edit_config(project, set_route("judge-g", role="contestant"))
    assert_clean_error(project.run("plan"), str(project.config_path), 'routes."judge-g".role', '"contestant"',
                       "judging.panel", 'Set role = "judge"', 'remove "judge-g" from judging.panel')
    assert snapshot(project) == before


def test_role_must_be_contestant_or_judge(project: Project) -> None:
    small_project(project)
    edit_config(project, set_route("judge-g", role="referee"))
    assert_clean_error(project.run("plan"), 'routes."judge-g".role', "'referee'", "contestant, judge")
    assert not project.state_path.exists()


def test_panel_routes_may_say_role_judge(project: Project) -> None:
    small_project(project)
    edit_config(project, set_route("judge-a", role="judge"))
    edit_config(project, set_route("gpt", role="contestant"))
    ok(project.run("plan"))
    roles = {r["route"]: r["role"] for r in project.sql("SELECT route, role FROM config_routes")}
    assert roles == {"gpt": "contestant", "claude": "contestant", "gemini": "contestant", "judge-a": "judge", "judge-g": "judge"}


@pytest.mark.parametrize("path", ["batchrun.toml", "batchrun/cli/demo/batchrun.toml"])
def test_shipped_configs_declare_their_judges(path: str) -> None:
    config = load_config(ROOT / path)
    assert config.judging.panel and all(config.routes[j].role == "judge" for j in config.judging.panel)
    assert config.idle == [] and config.warnings == (), "the paper's routes are all in the built-in tables"
