"""The layout shows the pipeline: stage packages in order, no import circle between them.

Checked on the source (AST), so a new module or import that breaks a rule fails here.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import REPO

TASKS = REPO / "tasks"
#: What ``ls tasks/`` shows: the stages in pipeline order, retrieval and evaluation, and
#: the shared plumbing (a newcomer opens the right folder first time).
STAGES = ["discover", "load", "split", "embed", "index", "retrieval", "evaluate", "common"]
#: Longest module without a stated reason (its docstring says why it is one module).
MAX_LINES = 410
REASON = "over ~400 lines on purpose"


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Return every ``tasks...`` module ``path`` imports (function-level and TYPE_CHECKING too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tasks"):
            names = [f"tasks.{a.name}" for a in node.names] if node.module == "tasks" else []
            found.update(names or [node.module])
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tasks."))
    return found


def package_graph() -> dict[str, set[str]]:
    """Return which stage package imports which other one."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in TASKS.rglob("*.py"):
        here = _module(path).split(".")
        if len(here) < 2:
            continue
        for target in _imports(path):
            there = target.split(".")[1]
            if there != here[1]:
                graph[here[1]].add(there)
    return graph


def test_tasks_holds_the_stages_and_one_plumbing_package() -> None:
    entries = sorted(p.name for p in TASKS.iterdir() if not p.name.startswith(("_", ".")))
    assert entries == sorted(STAGES), entries
    for name in STAGES:
        assert (TASKS / name / "__init__.py").is_file(), name


def circles(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Return the edges ``a -> b`` of ``graph`` from which ``a`` can be reached again."""

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    return sorted((a, b) for a in graph for b in graph[a] if reaches(b, a, {b}))


def test_no_import_circle_between_packages() -> None:
    graph = package_graph()
    assert not circles(graph), f"import circles between packages: {circles(graph)}"
    assert not graph.get("common"), f"the plumbing imports a stage: {graph.get('common')}"


def test_long_modules_say_why_they_are_one_module() -> None:
    for path in [*TASKS.rglob("*.py"), *(REPO / "flows").rglob("*.py")]:
        source = path.read_text(encoding="utf-8")
        if source.count("\n") > MAX_LINES:
            docstring = ast.get_docstring(ast.parse(source)) or ""
            assert REASON in " ".join(docstring.split()), f"{path}: {source.count(chr(10))} lines"


def test_the_circle_check_finds_circles() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ("a", "b"),
        ("b", "c"),
        ("c", "a"),
    ]
    assert circles({"discover": {"load", "common"}, "load": {"common"}}) == []
    assert "common" in package_graph()["index"]  # the graph is read from the real imports


def test_the_index_package_exports_lazily_and_completely() -> None:
    import tasks.index

    for name in tasks.index.__all__:
        assert getattr(tasks.index, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        tasks.index.nothing  # noqa: B018
