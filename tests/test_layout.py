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


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> list[tuple[str, str, int]]:
    """(importing module, imported module, line) for every import in batchrun/: at the top, in a
    function or under `if TYPE_CHECKING:` alike. `from X import name` counts as an import of the
    module X.name where that is a module of the package, else of X."""
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    found = []
    for path in paths:
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target != "batchrun" and not target.startswith("batchrun."):
                    continue
                submodules = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
                for t in submodules or [target]:
                    found.append((name, t, node.lineno))
            elif isinstance(node, ast.Import):
                found += [(name, a.name, node.lineno) for a in node.names if a.name.startswith("batchrun.")]
    return found


def test_nothing_imports_back_into_plan() -> None:
    """plan.py writes request files; the bookkeeping later steps need is the ledger's."""
    # The library's export, the plan and submit commands, submit = plan + send.
    allowed = {"batchrun", "batchrun.cli", "batchrun.run.submit"}
    importers = {src for src, target, _ in imports() if target == "batchrun.run.plan"}
    assert "batchrun.run.submit" in importers  # the walk sees them
    assert {m for m in importers if m not in allowed and not m.startswith("batchrun.cli.")} == set(), importers


@pytest.mark.parametrize("provider", PROVIDER_NAMES)
def test_every_adapter_declares_the_whole_protocol(provider: str) -> None:
    adapter = get_adapter(provider)
    members = [m for m in Adapter.__annotations__] + [m for m in vars(Adapter) if not m.startswith("_")]
    missing = [m for m in members if not hasattr(adapter, m)]
    assert not missing, f"{provider}: {missing}"
    assert adapter.name == provider
