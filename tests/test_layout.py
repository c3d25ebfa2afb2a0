"""The layout's rules, checked on the source: the stages of batchrun/ form a stack (no import
circle, no stage importing a later one, each package saying what it may import), the top level
stays small, no module grows past 600 lines, provider facts live in providers/, nothing imports
back into plan.py, every registered adapter declares the whole Adapter protocol.

How imports count: every `import` and `from ... import` anywhere in a module, at the top, inside a
function, or under `if TYPE_CHECKING:`. A type-only import never runs, but it is still a dependency
a reader (and mypy) follows; the one that went up the stack (providers naming config.Route) became
providers.RouteView, a Protocol, so none is needed. `from X import name` counts as an import of the
module X.name where that is a module, else of X (a package's __init__).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

from batchrun.providers import PROVIDER_NAMES, Adapter, get_adapter

PACKAGE = Path(__file__).resolve().parent.parent / "batchrun"

# The stages, bottom to top (docs/architecture.md): a stage may import its own modules and the
# stages below it. The emulator stands beside them: it models the providers, not batchrun's
# client, so it may import only base and protocol, and only the CLI imports it. The package's own
# __init__.py (the library's lazy exports) and __main__.py sit above everything.
STACK = ("base", "providers", "protocol", "ledger", "publish", "run", "cli")
MAY_IMPORT = {stage: set(STACK[:i]) for i, stage in enumerate(STACK)}
MAY_IMPORT["emulator"] = {"base", "protocol"}
MAY_IMPORT["cli"] |= {"emulator"}
# What stays at the top of batchrun/ besides the stages: the public entry points and data.
TOP_FILES = {"__init__.py", "__main__.py", "py.typed", "datasette-metadata.json"}
MAX_LINES = 600


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


def _stage(module: str) -> str | None:
    """The stage a module belongs to (None: the package's own __init__ and __main__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in MAY_IMPORT else None


def test_the_imports_form_no_circle() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for src, target, _ in imports():
        if src != target:
            graph[src].add(target)
    # Depth-first search: a module reached again while still on the path closes a circle.
    state: dict[str, int] = {}  # 1: on the path, 2: done
    circles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(graph.get(module, ())):
            if state.get(nxt) == 1:
                circles.append(path[path.index(nxt):] + [nxt] if nxt in path else [module, nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_each_stage_imports_only_the_stages_below_it() -> None:
    wrong = []
    stages_seen = set()
    for src, target, line in imports():
        a, b = _stage(src), _stage(target)
        stages_seen.update(s for s in (a, b) if s)
        if a is None or b is None or a == b:
            continue
        if b not in MAY_IMPORT[a]:
            wrong.append(f"{src} ({a}) imports {target} ({b}), line {line}")
    assert not wrong, "imports up (or across) the stack:\n" + "\n".join(wrong)
    assert stages_seen == set(MAY_IMPORT)  # every stage is a package with imports to check


def test_only_the_cli_imports_the_emulator() -> None:
    importers = {src for src, target, _ in imports() if _stage(target) == "emulator" and _stage(src) != "emulator"}
    assert importers and all(_stage(m) == "cli" for m in importers), importers


def test_each_package_says_what_it_owns_and_what_it_may_import() -> None:
    """Each stage's __init__ docstring ends with `May import: ...` naming exactly the stages it may
    (a reader finds the rule where the package is; this test keeps the two the same)."""
    for stage, allowed in MAY_IMPORT.items():
        doc = ast.get_docstring(ast.parse((PACKAGE / stage / "__init__.py").read_text(encoding="utf-8"))) or ""
        found = re.search(r"^May import: (.+?)\.?$", doc, re.MULTILINE)
        assert found, f"batchrun/{stage}/__init__.py: no 'May import:' line in its docstring"
        named = set() if found.group(1).startswith("nothing") else {n.strip() for n in found.group(1).split(",")}
        assert named == allowed, f"batchrun/{stage}/__init__.py says it may import {sorted(named)}; the stack says {sorted(allowed)}"
        assert len(doc.split()) > 30, f"batchrun/{stage}/__init__.py: say what the package owns"


def test_the_top_level_keeps_at_most_a_dozen_entries() -> None:
    entries = {p.name for p in PACKAGE.iterdir() if p.name != "__pycache__"}
    assert TOP_FILES <= entries  # the entry points and the Datasette metadata path are public
    assert entries - TOP_FILES == set(MAY_IMPORT), sorted(entries - TOP_FILES - set(MAY_IMPORT))
    assert len(entries) <= 12, sorted(entries)



def test_no_module_is_over_600_lines() -> None:
    long = {p.relative_to(PACKAGE).as_posix(): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"split by theme: {long}"


def test_the_library_names_resolve_to_their_homes() -> None:
    """`from batchrun import load_config, Store, refresh` (the package docstring): every name of
    __all__ is found in the module batchrun/__init__.py's lazy table sends it to."""
    import batchrun

    for name in batchrun.__all__:
        assert getattr(batchrun, name) is not None, name
