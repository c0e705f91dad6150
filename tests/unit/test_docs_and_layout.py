"""Project rules that are easy to break silently: CLI documented, Prefect only at the edges."""

from __future__ import annotations

import ast
from pathlib import Path

import click
import pytest

from flows.cli import cli
from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
EDGE_MARKER = "# --- Prefect edge ---"


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_every_command_is_documented_and_has_help(name: str) -> None:
    command = cli.commands[name]
    assert f"docflow {name}" in README
    assert command.help and "Example:" in command.help
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{name} {param.opts} has no help text"


def _prefect_import_lines(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == "prefect" for a in node.names
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "prefect":
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize(
    "path", sorted((REPO / "tasks").rglob("*.py")), ids=lambda p: str(p.relative_to(REPO))
)
def test_prefect_is_imported_only_at_stage_edges(path: Path) -> None:
    lines = _prefect_import_lines(path)
    if not lines or path.name == "task.py":
        return
    source = path.read_text(encoding="utf-8").splitlines()
    assert EDGE_MARKER in source, f"{path.name} imports prefect without an edge section"
    marker = source.index(EDGE_MARKER) + 1
    assert min(lines) > marker, f"{path.name} imports prefect above the edge marker"


def test_the_query_synopsis_lists_every_option() -> None:
    synopsis = README[README.index("    docflow query ") :]
    synopsis = synopsis[: synopsis.index("    docflow inspect")]
    for param in cli.commands["query"].params:
        if isinstance(param, click.Option):
            assert any(o in synopsis for o in param.opts), param.opts
