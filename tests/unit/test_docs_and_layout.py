"""Project rules that are easy to break silently: CLI documented, Prefect only at the edges,
a README that stays a front door, and docs whose links, paths and commands are real."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import shlex
from pathlib import Path

import click
import pytest

from flows.cli import cli
from tests import docs
from tests.conftest import REPO

EDGE_MARKER = "# --- Prefect edge ---"
README_MAX_LINES = 300
PAGES = (
    "configuration",
    "loaders",
    "splitters",
    "retrieval",
    "incremental",
    "deployments",
    "scaling-out",
    "performance",
    "development",
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
REPO_PATH = re.compile(r"(?<![\w/.-])((?:tasks|flows|deployments|tests)/[\w./*-]*)")
DOTTED = re.compile(r"(?<![\w/.-])((?:tasks|flows|tests|docflow)(?:\.[A-Za-z_]\w*)+)")
FILE_SUFFIX = re.compile(r"\.(md|py|ya?ml|toml|txt|db|sqlite|lock|parquet|png)$")
PLACEHOLDER = re.compile(r"\.\.\.|…|\[[^\]]*\]")
DOCFLOW_LINE = re.compile(r"^(?:\.venv/bin/)?docflow(?:\s|$)")


def _page_id(path: Path) -> str:
    return str(path.relative_to(REPO))


def _prose(content: str) -> str:
    """Return ``content`` without its fenced code blocks (links there are code, not links)."""
    return re.sub(r"^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1\s*$", "", content, flags=re.M | re.S)


def slug(title: str) -> str:
    """Return GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def anchors(content: str) -> set[str]:
    """Return the anchors of a page's headings, numbered as GitHub numbers repeats."""
    seen: dict[str, int] = {}
    found = set()
    for _, title, _ in docs.headings(content):
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


# --- the CLI and the stages ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_every_command_is_documented_and_has_help(name: str) -> None:
    command = cli.commands[name]
    assert f"docflow {name}" in docs.text()
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
    page = docs.page_containing("    docflow query ")
    synopsis = page[page.index("    docflow query ") :]
    synopsis = synopsis[: synopsis.index("    docflow inspect")]
    for param in cli.commands["query"].params:
        if isinstance(param, click.Option):
            assert any(o in synopsis for o in param.opts), param.opts


# --- the README is a front door, the manual is in docs/ ------------------------------------


def test_the_readme_is_a_front_door() -> None:
    lines = docs.read(REPO / "README.md").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


@pytest.mark.parametrize("name", PAGES)
def test_each_docs_page_exists_and_the_readme_links_to_it(name: str) -> None:
    assert (docs.DOCS / f"{name}.md").is_file(), f"docs/{name}.md is missing"
    targets = {t.split("#")[0] for t in LINK.findall(_prose(docs.read(REPO / "README.md")))}
    assert f"docs/{name}.md" in targets, f"README.md does not link to docs/{name}.md"


def _broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(_prose(docs.read(page))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path_part, _, anchor = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        if not path.exists():
            broken.append(f"{target}: no file {path_part}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(docs.read(path)):
            broken.append(f"{target}: no heading #{anchor} in {path_part or page.name}")
    return broken


@pytest.mark.parametrize("page", docs.pages(), ids=_page_id)
def test_every_relative_link_resolves(page: Path) -> None:
    assert _broken_links(page) == []


def test_the_link_check_finds_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other page\n\n## Its `first` section, really\n")
    page.write_text(
        "# Page\n\n[ok](other.md#its-first-section-really) [self](#page)\n"
        "[gone](missing.md) [bad anchor](other.md#nope)\n"
        "```\n[in code](nowhere.md)\n```\n"
    )
    assert _broken_links(page) == [
        "missing.md: no file missing.md",
        "other.md#nope: no heading #nope in other.md",
    ]


def _written_paths(content: str) -> list[str]:
    found = []
    for match in REPO_PATH.findall(content):
        path = match.rstrip(".")
        if "__pycache__" not in path:  # made by Python at run time
            found.append(path)
    return found


@pytest.mark.parametrize("page", docs.pages(), ids=_page_id)
def test_every_repository_path_in_the_docs_exists(page: Path) -> None:
    paths = _written_paths(docs.read(page))
    missing = [p for p in paths if not (any(REPO.glob(p)) if "*" in p else (REPO / p).exists())]
    assert missing == [], f"{_page_id(page)} names paths that do not exist"


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module of this repository, or a name in one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            if importlib.util.find_spec(module_name) is None:
                continue
        except ModuleNotFoundError:
            continue
        obj: object = importlib.import_module(module_name)
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("page", docs.pages(), ids=_page_id)
def test_every_dotted_python_name_in_the_docs_exists(page: Path) -> None:
    names = {n for n in DOTTED.findall(docs.read(page)) if not FILE_SUFFIX.search(n)}
    assert sorted(n for n in names if not _resolves(n)) == []


def documented_commands(content: str) -> list[str]:
    """Return the ``docflow ...`` command lines of a page's code blocks, continuations joined.

    Synopsis lines (``[OPTIONS]``-style brackets) and lines with ``...`` placeholders are
    left out: they show a command's shape, not a command.
    """
    commands = []
    pending = ""
    for line in docs.code_lines(content):
        line = pending + line.strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        if DOCFLOW_LINE.match(line) and not PLACEHOLDER.search(line):
            commands.append(line)
    return commands


def parse(command: str) -> click.Context:
    """Parse a documented command line with the real CLI, as its shell would split it.

    Nothing runs: the group's context is made, the command resolved and its options and
    arguments parsed (an unknown option, a bad choice or a missing argument raises).
    """
    args = shlex.split(command, comments=True)[1:]
    group = cli.make_context("docflow", list(args))
    name, found, rest = cli.resolve_command(group, list(args))
    assert found is not None and name is not None, f"no command {args[:1]}"
    return found.make_context(name, rest, parent=group)


def test_the_docs_show_many_commands() -> None:
    assert len([c for page in docs.pages() for c in documented_commands(docs.read(page))]) >= 20


@pytest.mark.parametrize("page", docs.pages(), ids=_page_id)
def test_every_documented_command_line_parses(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the commands' relative paths are the checkout's
    failures = []
    for command in documented_commands(docs.read(page)):
        try:
            parse(command)
        except click.ClickException as exc:
            failures.append(f"{command}: {exc.format_message()}")
    assert failures == []


def test_a_command_that_does_not_parse_is_caught() -> None:
    content = "Run:\n\n    .venv/bin/docflow query 'x' \\\n        --no-such-option\n"
    (command,) = documented_commands(content)
    assert command == ".venv/bin/docflow query 'x' --no-such-option"
    with pytest.raises(click.NoSuchOption):
        parse(command)
    synopsis = "\n    docflow query   TEXT [-k N] [--json]\n    docflow split FILE ...\n"
    assert documented_commands(synopsis) == []


def test_the_docs_give_a_server_the_sqlite_batch_sizes_commands_use() -> None:
    """docs/deployments.md's exports for ``prefect server start`` are flows/env.py's sizes."""
    from flows.env import SQLITE_SERVER_BATCHES

    lines = docs.code_lines(docs.section("## Deployments"))
    exported = dict(
        line.removeprefix("export ").split("=", 1)
        for line in lines
        if line.startswith("export PREFECT_SERVER_SERVICES_")
    )
    assert exported == SQLITE_SERVER_BATCHES
