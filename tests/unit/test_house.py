"""The house holds its shape: what imports what in src/agentbox, read from the code.

Every import counts, at module level, inside functions and under TYPE_CHECKING alike:
a lazy or a typing-only import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "agentbox"


def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """Every module of agentbox, and the agentbox modules it imports."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                    + ([base] if base else []))
                submodules = {f"{base}.{a.name}" for a in node.names} & set(modules)
                # `from agentbox import config` imports the module, not the package's names
                found.update(submodules or {base})
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


GRAPH = _imports()


def _imported_by(prefix: str) -> set[str]:
    return {m for name, deps in GRAPH.items() if name.startswith(prefix) for m in deps}


def test_the_import_graph_has_no_circle() -> None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for dep in sorted(GRAPH[name]):
            if state.get(dep) == 1:
                circle = [*path[path.index(dep):], dep]
                pytest.fail("import circle: " + " -> ".join(circle))
            if dep not in state:
                visit(dep)
        path.pop()
        state[name] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name)


@pytest.mark.parametrize(("one", "other"), [
    ("agentbox.backends.sqlite", "agentbox.backends.postgres"),
    ("agentbox.backends.postgres", "agentbox.backends.sqlite")])
def test_no_backend_imports_the_other(one: str, other: str) -> None:
    assert not {m for m in _imported_by(one) if m.startswith(other)}


def test_the_ledger_imports_no_backend_and_nothing_above_it() -> None:
    above = ("agentbox.backends", "agentbox.location", "agentbox.cli", "agentbox.worker",
             "agentbox.dispatcher", "agentbox.pool", "agentbox.upkeep", "agentbox.render",
             "agentbox.serve", "agentbox.config")
    assert not {m for m in _imported_by("agentbox.ledger") if m.startswith(above)}


def test_the_rules_are_pure() -> None:
    below = ("agentbox.rules", "agentbox.errors", "agentbox.jsonutil", "agentbox.durations",
             "agentbox.calendar", "agentbox.clock")
    assert {m for m in _imported_by("agentbox.rules") if not m.startswith(below)} == set()


def test_only_the_face_imports_the_output_module() -> None:
    face = ("agentbox.cli", "agentbox.render")
    users = {name for name, deps in GRAPH.items() if "agentbox.render" in deps}
    assert {u for u in users if not u.startswith(face)} == set()


def test_every_package_ships_in_the_wheel() -> None:
    import tomllib

    listed = set(tomllib.loads((SRC.parent / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    found = {_module(init) for init in PACKAGE.rglob("__init__.py")}
    assert found - listed == set()
