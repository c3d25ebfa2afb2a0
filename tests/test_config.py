"""The config: TOML and JSON, path resolution, caps table, temperature and budget policy per provider.

Temperature and budgets are checked where they matter: in the request lines plan writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from batchrun.protocol import caps as capslib
from batchrun.cli import cli
from batchrun.protocol.config_file import load_config

from conftest import KEY_ENV, Project, route, small_project, task

REPO = Path(__file__).resolve().parents[1]


def read_lines(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


def lines_by_route(project: Project) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for b in project.sql("SELECT route, request_file FROM batches WHERE status = 'planned' ORDER BY seq"):
        out.setdefault(b["route"], []).extend(read_lines(Path(b["request_file"])))
    return out


def raw_by_route(project: Project) -> dict[str, bytes]:
    return {b["route"]: Path(b["request_file"]).read_bytes()
            for b in project.sql("SELECT route, request_file FROM batches WHERE status = 'planned'")}


def one_task_project(project: Project, routes: dict[str, Any], **sections: Any) -> Project:
    project.doc("d.txt", "The pump failed on Monday.\n")
    project.tasks([task("t1", "When did the pump fail?", "d.txt")])
    project.config(routes=routes, panel=[], **sections)
    result = project.run("plan")
    assert result.exit_code == 0, result.output
    return project


# --- temperature: absent (not null) vs present ---------------------------------------------------


def _temperature(provider_line: dict[str, Any]) -> tuple[bool, Any]:
    """(present, value) of the temperature key, wherever the provider puts it."""
    if "key" in provider_line:
        holder = provider_line["request"]["generationConfig"]
    else:
        holder = provider_line.get("params") or provider_line["body"]
    return ("temperature" in holder, holder.get("temperature"))


TEMPERATURE_ROUTES = {
    # name: (route, expected present)
    "oa-chat": (route("openai", "gpt-5.5"), True),
    "oa-chat-off": (route("openai", "gpt-5.5", send_temperature=False), False),
    "oa-gpt54": (route("openai", "gpt-5.4"), False),  # built-in: rejects temperature
    "oa-gpt54-forced": (route("openai", "gpt-5.4", send_temperature=True), True),  # config wins
    "oa-resp": (route("openai", "gpt-5.5", endpoint="responses"), True),
    "oa-resp-off": (route("openai", "gpt-5.5", endpoint="responses", send_temperature=False), False),
    "compat": (route("openai-compatible", "qwen3.6-plus"), True),
    "compat-off": (route("openai-compatible", "qwen3.6-plus", send_temperature=False), False),
    "anth": (route("anthropic", "claude-opus-4-6", send_temperature=True), True),
    "anth-opus48": (route("anthropic", "claude-opus-4-8"), False),  # built-in: rejects temperature
    "anth-off": (route("anthropic", "claude-opus-4-6", send_temperature=False), False),
    "anth-opus46": (route("anthropic", "claude-opus-4-6"), False),  # built-in
    "gem": (route("gemini", "gemini-2.5-pro"), True),
    "gem-off": (route("gemini", "gemini-2.5-pro", send_temperature=False), False),
}


def test_temperature_absent_or_present_per_route_and_provider(project: Project) -> None:
    one_task_project(project, {n: r for n, (r, _) in TEMPERATURE_ROUTES.items()})
    lines = lines_by_route(project)
    raw = raw_by_route(project)
    assert set(lines) == set(TEMPERATURE_ROUTES)
    for name, (_, present) in TEMPERATURE_ROUTES.items():
        (line,) = lines[name]
        has, value = _temperature(line)
        assert has is present, name
        if present:
            assert value == 0.1, name
        else:
            # Absent means absent: not null, not anywhere on the line.
            assert b'"temperature"' not in raw[name], name
            assert b"null" not in raw[name], name
    # Gemini keeps it inside generationConfig only.
    (gem,) = lines["gem"]
    assert "temperature" not in gem["request"]
    # The policy recorded in state.db says the same.
    policies = {p["route"]: json.loads(p["policy_json"]) for p in project.sql("SELECT route, policy_json FROM policies")}
    for name, (_, present) in TEMPERATURE_ROUTES.items():
        assert (policies[name]["temperature"] == 0.1) if present else (policies[name]["temperature"] is None), name


def test_generation_temperature_value_comes_from_the_config(project: Project) -> None:
    one_task_project(project, {"a": route("anthropic", "claude-opus-4-6", send_temperature=True), "g": route("gemini", "gemini-2.5-pro")},
                     generation={"temperature": 0.3})
    lines = lines_by_route(project)
    assert lines["a"][0]["params"]["temperature"] == 0.3
    assert lines["g"][0]["request"]["generationConfig"]["temperature"] == 0.3


def test_builtin_rejecting_models_and_source_are_reported() -> None:
    assert capslib.rejects_temperature("claude-opus-4.8") and capslib.rejects_temperature("gpt-5.4")
    assert capslib.rejects_temperature("models/GPT-5.4")  # provider prefix and case normalised
    assert not capslib.rejects_temperature("gpt-5.5") and not capslib.rejects_temperature("claude-sonnet-4-6")


def test_anthropic_routes_default_to_an_api_version_that_accepts_temperature(project: Project) -> None:
    project.doc("d.txt", "x\n")
    project.tasks([task("t1", "Q?", "d.txt")])
    project.config(routes={
        "a": route("anthropic", "claude-sonnet-4-6"),
        "b": route("anthropic", "claude-opus-4-8", api_version="2026-10-21"),  # rejects anyway: allowed
    }, panel=[])
    config = load_config(project.config_path)
    assert config.routes["a"].api_version == "2023-06-01" and config.routes["a"].send_temperature
    assert config.routes["b"].api_version == "2026-10-21" and not config.routes["b"].send_temperature


# --- completion budgets ----------------------------------------------------------------------

BUDGET_ROUTES = {
    # name: (route, path to the budget key, keys that must NOT be present in the same object)
    "oa-chat": (route("openai", "gpt-5.5"), ("body", "max_completion_tokens"), ("max_tokens", "max_output_tokens")),
    "oa-resp": (route("openai", "gpt-5.5", endpoint="responses"), ("body", "max_output_tokens"), ("max_tokens", "max_completion_tokens")),
    "compat": (route("openai-compatible", "qwen3.6-plus"), ("body", "max_tokens"), ("max_completion_tokens", "max_output_tokens")),
    "anth": (route("anthropic", "claude-opus-4-8"), ("params", "max_tokens"), ("max_completion_tokens", "max_output_tokens")),
    "gem": (route("gemini", "gemini-2.5-pro"), ("request", "generationConfig", "maxOutputTokens"), ("max_tokens", "max_output_tokens")),
}


@pytest.mark.parametrize("reasoning,budget", [(True, 32768), (False, 8192)])
def test_budget_parameter_per_provider_for_reasoning_and_plain_routes(project: Project, reasoning: bool, budget: int) -> None:
    routes = {n: {**r, "reasoning": reasoning} for n, (r, _, _) in BUDGET_ROUTES.items()}
    one_task_project(project, routes)
    lines = lines_by_route(project)
    for name, (_, path, forbidden) in BUDGET_ROUTES.items():
        (line,) = lines[name]
        holder: Any = line
        for key in path[:-1]:
            holder = holder[key]
        assert holder[path[-1]] == budget, name
        assert isinstance(holder[path[-1]], int)
        for key in forbidden:
            assert key not in holder, (name, key)
    # Gemini's budget lives in generationConfig, not at the top of the request.
    assert "maxOutputTokens" not in lines["gem"][0]["request"]


def test_budget_overrides_from_generation_section_and_route(project: Project) -> None:
    one_task_project(project, {
        "plain": route("openai", "gpt-5.5"),
        "thinker": route("openai", "gpt-5.5", reasoning=True),
        "fixed": route("anthropic", "claude-opus-4-8", reasoning=True, max_tokens=1234),
    }, generation={"max_tokens": 4000, "reasoning_max_tokens": 20000})
    lines = lines_by_route(project)
    assert lines["plain"][0]["body"]["max_completion_tokens"] == 4000
    assert lines["thinker"][0]["body"]["max_completion_tokens"] == 20000
    assert lines["fixed"][0]["params"]["max_tokens"] == 1234


# --- caps table ------------------------------------------------------------------------------


def test_caps_come_from_the_paper_table_config_or_default_with_warning(project: Project) -> None:
    project.doc("d.txt", "x\n")
    project.tasks([task("t1", "Q?", "d.txt")])
    project.config(routes={
        "paper": route("openai", "qwen3-max"),
        "prefixed": route("gemini", "models/Gemini-2.5-Pro"),
        "override": route("openai", "kimi-k2.6", caps={"en": 123_456, "cjk": 65_432}),
        "new": route("openai", "gpt-5.2"),
    }, panel=[])
    config = load_config(project.config_path)
    r = config.routes
    assert (r["paper"].caps.en, r["paper"].caps.cjk, r["paper"].caps.source) == (690_000, 210_000, "paper table")
    assert (r["prefixed"].caps.en, r["prefixed"].caps.cjk) == (2_850_000, 850_000)
    assert (r["override"].caps.en, r["override"].caps.cjk, r["override"].caps.source) == (123_456, 65_432, "config")
    assert (r["new"].caps.en, r["new"].caps.cjk) == capslib.DEFAULT_CAPS
    assert r["new"].caps.source.startswith("default")
    (warning,) = config.warnings
    assert "gpt-5.2" in warning and "new" in warning and "caps" in warning and str(project.config_path) in warning


def test_paper_caps_table_rows() -> None:
    assert capslib.builtin_caps("deepseek-v3.2").en == 1_200_000
    assert capslib.builtin_caps("gpt-5.1").cjk == 320_000
    assert capslib.builtin_caps("minimax-m2.7").en == 570_000
    assert capslib.builtin_caps("claude-opus-4.8").en == 2_850_000
    assert capslib.builtin_caps("some-unknown-model") is None


# --- TOML, JSON and paths ----------------------------------------------------------------------

TOML_CONFIG = """
protocol = "custom"  # a two-judge panel, as small_project's

[paths]
dataset = "data/tasks.json"

[generation]
temperature = 0.1

[judging]
panel = ["judge-a", "judge-g"]

[routes.gpt]
provider = "openai"
model = "gpt-5.5"
api_key_env = "BATCHRUN_TEST_KEY"

[routes.claude]
provider = "anthropic"
model = "claude-opus-4-8"
api_key_env = "BATCHRUN_TEST_KEY"

[routes.gemini]
provider = "gemini"
model = "gemini-2.5-pro"
api_key_env = "BATCHRUN_TEST_KEY"

[routes.judge-a]
provider = "anthropic"
model = "claude-sonnet-4-6"
api_key_env = "BATCHRUN_TEST_KEY"

[routes.judge-g]
provider = "gemini"
model = "gemini-2.5-flash"
api_key_env = "BATCHRUN_TEST_KEY"
"""


def _plan_output(project: Project) -> tuple[dict[str, bytes], list[dict[str, Any]]]:
    files = {str(p.relative_to(project.root)): p.read_bytes() for p in project.jobs_files()}
    ids = project.sql("SELECT route, task_id, custom_id, scope, cap FROM cells ORDER BY route, task_id")
    return files, ids


def test_toml_and_equivalent_json_configs_give_the_same_plan(tmp_path: Path) -> None:
    js = small_project(Project(tmp_path / "json"))
    assert js.run("plan").exit_code == 0

    tm = small_project(Project(tmp_path / "toml"))
    tm.config_path.unlink()
    tm.config_path = tm.root / "batchrun.toml"
    tm.config_path.write_text(TOML_CONFIG, encoding="utf-8")
    result = tm.run("plan")
    assert result.exit_code == 0, result.output

    a, b = load_config(js.config_path), load_config(tm.config_path)
    assert a.routes == b.routes and a.judging == b.judging and a.generation == b.generation
    files_js, cells_js = _plan_output(js)
    files_tm, cells_tm = _plan_output(tm)
    assert len(files_js) == 3
    assert files_js == files_tm
    assert cells_js == cells_tm


def test_relative_paths_resolve_against_the_config_folder_not_the_cwd(project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small_project(project)
    cfg = json.loads(project.config_path.read_text())
    cfg["paths"].update({"state": "var/state.db", "jobs": "out/jobs"})
    project.config_path.write_text(json.dumps(cfg))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "corpus").mkdir()  # a decoy corpus folder in the cwd
    (elsewhere / "corpus" / "harbor.txt").write_text("DECOY", encoding="utf-8")
    monkeypatch.chdir(elsewhere)

    # Selected by the environment variable, from another folder.
    monkeypatch.setenv("BATCHRUN_CONFIG", str(project.config_path))
    result = CliRunner().invoke(cli, ["plan"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (project.root / "var" / "state.db").exists()
    gen_files = sorted((project.root / "out" / "jobs").glob("*/requests.jsonl"))
    assert len(gen_files) == 3
    assert not (project.root / "state.db").exists() and not (project.root / "jobs").exists()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["corpus"], "nothing written in the cwd"
    assert all(b"DECOY" not in f.read_bytes() for f in gen_files)
    assert all(b"harbor crane failed" in f.read_bytes() for f in gen_files)

    config = load_config(project.config_path)
    assert config.paths.dataset == project.root.resolve() / "data" / "tasks.json"
    assert config.paths.corpus == project.root.resolve() / "corpus"


def test_default_paths_are_relative_to_the_config(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "batchrun.toml"
    path.parent.mkdir()
    path.write_text('protocol = "custom"\n[routes.a]\nprovider = "openai"\nmodel = "gpt-5.5"\n', encoding="utf-8")
    config = load_config(path)
    root = path.parent.resolve()
    assert config.paths.dataset == root / "data" / "wildtrace_strict481.with_answers.json"
    assert (config.paths.corpus, config.paths.state, config.paths.jobs, config.paths.results) == (
        root / "corpus", root / "state.db", root / "jobs", root / "results")
    assert config.generation.temperature == 0.1 and config.generation.max_tokens == 8192
    assert config.generation.reasoning_max_tokens == 32768 and config.generation.max_retries == 5
    assert config.judging.temperature == 0.1 and config.judging.max_tokens == 16384
    assert config.routes["a"].api_key_env == "OPENAI_API_KEY"


def test_shipped_example_config_loads_with_the_papers_panel() -> None:
    config = load_config(REPO / "batchrun.toml")
    assert len(config.judging.panel) == 3
    assert all(name in config.routes for name in config.judging.panel)
    assert config.contestants, "the example lists contestant routes"
    assert {r.provider for r in config.routes.values()} >= {"openai", "anthropic", "gemini"}


def test_key_variable_is_route_config_not_policy(project: Project) -> None:
    """Moving a route to another key variable or base URL does not re-plan its cells."""
    small_project(project)
    assert project.run("plan").exit_code == 0
    before = project.sql("SELECT route, task_id, custom_id FROM cells ORDER BY route, task_id")
    cfg = json.loads(project.config_path.read_text())
    cfg["routes"]["gpt"]["base_url"] = "https://proxy.example/v1"
    cfg["routes"]["gpt"]["api_key_env"] = KEY_ENV + "_OTHER"
    project.config_path.write_text(json.dumps(cfg))
    result = project.run("plan", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["batches"] == []
    assert project.sql("SELECT route, task_id, custom_id FROM cells ORDER BY route, task_id") == before


# The spellings: each got temperature 0.1 sent and the default caps row before.
SPELLED_ROUTES = {
    "opus46-hyphen": (route("anthropic", "claude-opus-4-6"), "claude-opus-4.6"),
    "opus46-dated": (route("anthropic", "claude-opus-4-6-20260217"), "claude-opus-4.6"),
    "opus46-router": (route("openai-compatible", "mr.claude-opus-4.6"), "claude-opus-4.6"),
    "opus46-path": (route("openai-compatible", "anthropic/claude-opus-4.6"), "claude-opus-4.6"),
    "gpt54-dated": (route("openai", "gpt-5.4-2026-03-05"), "gpt-5.4"),
    "qwen3max-dated": (route("openai-compatible", "qwen/qwen3-max-2025-09-23"), "qwen3-max"),
    # Issue 26: a gateway's colon prefix, and every prefix form together.
    "gpt54-colon": (route("openai-compatible", "openai:gpt-5.4"), "gpt-5.4"),
    "opus48-colon-bedrock": (route("openai-compatible", "bedrock:us.anthropic.claude-opus-4-8-v1:0"), "claude-opus-4.8"),
    "opus46-colon-vertex": (route("openai-compatible", "vertex_ai:claude-opus-4-6@20260217"), "claude-opus-4.6"),
}


def test_builtin_rules_find_the_model_however_it_is_spelled(project: Project) -> None:
    one_task_project(project, {n: r for n, (r, _) in SPELLED_ROUTES.items()})
    raw = raw_by_route(project)
    caps = {c["route"]: (c["cap"], c["cap_source"]) for c in project.sql("SELECT route, cap, cap_source FROM cells")}
    for name, (_, model) in SPELLED_ROUTES.items():
        rejects = model in capslib.REJECTS_TEMPERATURE
        assert (b'"temperature"' in raw[name]) is not rejects, name
        assert caps[name] == (capslib.PAPER_CAPS[model][0], "paper table"), name
    assert caps["qwen3max-dated"][0] == 690_000  # its own row, not the default one
    config = load_config(project.config_path)
    assert not config.warnings, "every route is in the built-in tables"


# --- fallback warnings: once per route, only where the rule applies ------------------------------


def _warning_lines(result: Any, needle: str = "") -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("Warning: ") and needle in line]


def test_a_fallback_warning_is_shown_once_per_route_not_on_every_command(project: Project) -> None:
    small_project(project)
    cfg = json.loads(project.config_path.read_text())
    cfg["routes"]["gpt"]["model"] = "gpt-5.2"
    project.config_path.write_text(json.dumps(cfg))

    first = project.run("plan")
    assert first.exit_code == 0, first.output
    (w,) = _warning_lines(first, "'gpt'")
    assert "caps: default row 2,850,000 / 850,000 characters" in w
    assert "temperature: sent (not in the built-in list of models that reject it)" in w
    assert 'routes."gpt"' in w and "gpt-5.2" in w and str(project.config_path) in w
    keys = {r["key"] for r in project.sql("SELECT key FROM meta WHERE key LIKE 'warned:%'")}
    assert {"warned:gpt:caps:gpt-5.2", "warned:gpt:temperature:gpt-5.2"} <= keys

    for command in (("plan",), ("submit", "--dry-run"), ("collect",), ("plan",)):
        again = project.run(*command)
        assert again.exit_code in (0, 2), again.output
        assert _warning_lines(again) == [], command
    # --json still describes every current fallback: a document does not depend on what was read.
    data = json.loads(project.run("plan", "--json").stdout)
    assert any("gpt-5.2" in w and "caps: default row" in w for w in data["warnings"])

    # Another unlisted model on the route is news again; the same model respelled is not.
    cfg["routes"]["gpt"]["model"] = "gpt-9.1-preview"
    project.config_path.write_text(json.dumps(cfg))
    assert len(_warning_lines(project.run("plan"), "gpt-9.1-preview")) == 1
    cfg["routes"]["gpt"]["model"] = "openai/GPT-9-1-preview-2026-05-01"
    project.config_path.write_text(json.dumps(cfg))
    assert _warning_lines(project.run("plan"), "'gpt'") == []


def test_a_judge_with_an_unlisted_model_gets_no_caps_warning(project: Project) -> None:
    small_project(project)  # judge-a: claude-sonnet-4-6, not in the caps table (a judge never gets a document)
    config = load_config(project.config_path)
    (judge_a,) = [w for w in config.warnings if w.route == "judge-a"]
    assert [f.rule for f in judge_a.fallbacks] == ["temperature"]
    result = project.run("plan")
    assert result.exit_code == 0, result.output
    (line,) = _warning_lines(result, "'judge-a'")
    assert "temperature: sent" in line and "caps" not in line
    # Saying what the judge accepts leaves nothing to warn about.
    cfg = json.loads(project.config_path.read_text())
    for name in ("judge-a", "judge-g"):
        cfg["routes"][name]["send_temperature"] = True
    project.config_path.write_text(json.dumps(cfg))
    assert load_config(project.config_path).warnings == ()
    # The same model as a contestant does get the caps warning.
    project.config(routes={"sonnet": route("anthropic", "claude-sonnet-4-6")}, panel=[])
    (w,) = load_config(project.config_path).warnings
    assert [f.rule for f in w.fallbacks] == ["caps", "temperature"]


def test_quiet_silences_warnings_and_keeps_them_for_the_next_run(project: Project) -> None:
    small_project(project)
    quiet = project.run("-q", "plan")
    assert quiet.exit_code == 0, quiet.output
    assert "Warning" not in quiet.stderr
    assert project.sql("SELECT key FROM meta WHERE key LIKE 'warned:%'") == []
    loud = project.run("plan")
    assert len(_warning_lines(loud, "'judge-a'")) == 1
