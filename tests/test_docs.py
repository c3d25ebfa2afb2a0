"""Docs that cannot drift: the schema doc, the README's commands, CI running the README's command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from batchrun.cli import cli
from batchrun.ledger.schema_doc import schema_markdown

ROOT = Path(__file__).resolve().parent.parent


def test_schema_doc_is_generated_from_migrations() -> None:
    assert (ROOT / "docs" / "schema.md").read_text(encoding="utf-8") == schema_markdown(), (
        "docs/schema.md is stale: run `python -m batchrun.ledger.schema_doc > docs/schema.md`"
    )


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_every_command_has_help_and_is_documented(name: str) -> None:
    command = cli.commands[name]
    assert command.help and command.help.strip()
    assert f"`{name}" in (ROOT / "README.md").read_text(encoding="utf-8")


def _quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section)


def test_quick_start_has_exactly_two_commands() -> None:
    commands = _quick_start_commands()
    assert len(commands) == 2
    assert "batchrun demo" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert _quick_start_commands()[1] in ci.splitlines()


def test_shipped_paper_config_is_valid() -> None:
    from batchrun.protocol.config_file import load_config

    config = load_config(ROOT / "batchrun.toml")
    assert list(config.judging.panel) == ["judge-sonnet", "judge-qwen", "judge-flash"]
    assert len(config.contestants) >= 15
    assert config.routes["gpt-5.4"].send_temperature is False
    assert config.routes["claude-opus-4.8"].api_version == "2023-06-01"
    assert not config.routes["gpt-5.5"].price.known  # unknown, never $0


def test_shipped_paper_config_names_provider_ids_and_keeps_the_papers_rows() -> None:
    """Issue 25 item 6: each model is the provider's id form (Anthropic's hyphenated, MiniMax's
    capitals, Gemini's and Model Studio's real codes), while each contestant route still gets the
    paper's caps row and temperature rule for the model its (display) name says."""
    from batchrun.protocol import caps as capslib
    from batchrun.protocol.config_file import load_config

    config = load_config(ROOT / "batchrun.toml")
    models = {name: r.model for name, r in config.routes.items()}
    assert models["claude-opus-4.6"] == "claude-opus-4-6" and models["claude-opus-4.8"] == "claude-opus-4-8"
    assert models["gemini-3.1"] == "gemini-3.1-pro-preview" and models["minimax-m2.7"] == "MiniMax-M2.7"
    assert all("." not in r.model for r in config.routes.values() if r.provider == "anthropic")
    for route in config.contestants:
        row = capslib.PAPER_CAPS[route.name]  # the route names are the paper's display names
        assert (route.caps.en, route.caps.cjk) == row, route.name
        if route.name != "kimi-k2.6":  # Moonshot's fact beyond the paper's list: it takes no temperature
            assert route.send_temperature is not capslib.rejects_temperature(route.name), route.name
