"""The documentation as tests read it: README.md and docs/*.md, their sections and code blocks.

Tests that run documented commands and code find them here, on whichever page holds them,
so a section can move between pages without its test losing it.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

DOCS = REPO / "docs"
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def pages() -> list[Path]:
    """Return the documentation pages: README.md first, then docs/*.md in name order."""
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def read(page: Path) -> str:
    """Return a page's text."""
    return page.read_text(encoding="utf-8")


def text() -> str:
    """Return every page's text, README.md first, pages separated by a blank line."""
    return "\n\n".join(read(page) for page in pages())


def page_containing(needle: str) -> str:
    """Return the text of the first page that contains ``needle``."""
    for page in pages():
        content = read(page)
        if needle in content:
            return content
    raise AssertionError(f"no documentation page contains {needle!r}")


def headings(content: str) -> list[tuple[int, str, int]]:
    """Return ``(level, title, line index)`` of each Markdown heading outside code fences."""
    found = []
    fence = ""
    for index, line in enumerate(content.splitlines()):
        opened = FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
            continue
        if opened:
            fence = opened.group(1)
            continue
        match = HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2), index))
    return found


def section(heading: str) -> str:
    """Return the section under ``heading`` from the first page that has it.

    ``heading`` is the title, with or without its ``#`` marks (``"## Scaling out"`` also
    finds ``# Scaling out``: a README section may become a page of its own). The section
    runs to the next heading of the same or a higher level, or to the end of the page.
    """
    title = heading.lstrip("#").strip()
    for page in pages():
        content = read(page)
        lines = content.splitlines()
        marks = headings(content)
        for position, (level, name, index) in enumerate(marks):
            if name != title:
                continue
            end = next((i for lv, _, i in marks[position + 1 :] if lv <= level), len(lines))
            return "\n".join(lines[index + 1 : end]) + "\n"
    raise AssertionError(f"no documentation page has the heading {title!r}")


def code_blocks(content: str, language: str) -> list[str]:
    """Return the fenced code blocks of ``language`` in ``content``, in order."""
    blocks: list[str] = []
    body: list[str] = []
    fence, info = "", ""
    for line in content.splitlines():
        opened = FENCE.match(line)
        if not fence:
            if opened:
                fence, info, body = opened.group(1), line.strip()[len(opened.group(1)) :], []
            continue
        if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
            if info.strip().split(" ")[0] == language:
                blocks.append("\n".join(body) + "\n")
            fence = ""
            continue
        body.append(line)
    return blocks


def code_lines(content: str) -> list[str]:
    """Return every line of every code block: fenced, or indented four spaces after a blank line.

    Indented lines are returned without their four spaces.
    """
    lines = content.splitlines()
    out: list[str] = []
    fence = ""
    previous_blank = True
    in_block = False
    for line in lines:
        opened = FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
            else:
                out.append(line)
            previous_blank = False
            continue
        if opened:
            fence = opened.group(1)
            in_block = False
            continue
        if not line.strip():
            previous_blank = True
            continue
        if line.startswith("    ") and (in_block or previous_blank):
            in_block = True
            out.append(line[4:])
        else:
            in_block = False
        previous_blank = False
    return out
