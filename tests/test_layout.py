"""The layout's rules, checked on the source: provider facts live in providers/, nothing imports
back into plan.py, every registered adapter declares the whole Adapter protocol."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from batchrun.providers import PROVIDER_NAMES, Adapter, get_adapter

PACKAGE = Path(__file__).resolve().parent.parent / "batchrun"


def _modules(*, skip: tuple[str, ...]) -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if not any(p.relative_to(PACKAGE).as_posix().startswith(s) for s in skip)]


def test_no_module_outside_providers_names_a_provider() -> None:
    """A provider's name as a string anywhere outside providers/ (a comparison, a dict key, SQL)
    is a provider fact in the wrong place: it belongs to the adapter, as a capability. Docstrings
    may describe providers."""
    found = []
    for path in _modules(skip=("providers/", "emulator/", "demo/")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(owner.body[0].value) for owner in ast.walk(tree)
                      if isinstance(owner, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and owner.body and isinstance(owner.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                words = {w.strip("'\"(),:;.=`") for w in node.value.replace("=", " ").split()}
                if hits := sorted(words & set(PROVIDER_NAMES)):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {hits}")
    assert not found, "provider names outside batchrun/providers/:\n" + "\n".join(found)


def test_nothing_imports_back_into_plan() -> None:
    """plan.py writes request files; the bookkeeping later steps need is the ledger's."""
    allowed = {"__init__.py", "cli.py", "submit.py"}  # the library's export, the plan command, submit = plan + send
    importers = []
    for path in _modules(skip=("emulator/",)):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "plan" and node.level >= 1:
                importers.append(path.relative_to(PACKAGE).as_posix())
    assert set(importers) <= allowed, importers


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
def test_every_adapter_declares_the_whole_protocol(provider: str) -> None:
    adapter = get_adapter(provider)
    members = [m for m in Adapter.__annotations__] + [m for m in vars(Adapter) if not m.startswith("_")]
    missing = [m for m in members if not hasattr(adapter, m)]
    assert not missing, f"{provider}: {missing}"
    assert adapter.name == provider
