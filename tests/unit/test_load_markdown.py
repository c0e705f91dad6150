"""Unit tests for the Markdown loader: YAML front matter becomes metadata, not text."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.load import load_file
from tasks.load.markdown import split_front_matter
from tests.conftest import shared_path
from tests.load_helpers import ref_for, write_file

PAGE = """---
title: Fog signals
tags: [safety, sound]
date: 2024-05-06
weight: 3
source: not-the-path.md
---
# Fog signals

A diaphone sounds every thirty seconds.
"""


def test_front_matter_becomes_metadata_and_leaves_the_text(tmp_path: Path) -> None:
    [row] = load_file(write_file(tmp_path, "fog.md", PAGE))
    assert row.status == "loaded" and row.document is not None
    doc = row.document
    assert doc.page_content == "# Fog signals\n\nA diaphone sounds every thirty seconds.\n"
    meta = doc.metadata
    assert meta["title"] == "Fog signals"
    assert meta["tags"] == ["safety", "sound"]
    assert meta["date"] == "2024-05-06"  # YAML dates become ISO text (JSON-ready)
    assert meta["weight"] == 3
    assert meta["source"] == "fog.md"  # the loader's own keys win
    assert (meta["file_type"], meta["encoding"]) == ("markdown", "utf-8")


@pytest.mark.parametrize(
    ("text", "front", "rest"),
    [
        pytest.param("---\na: 1\n---\nbody\n", {"a": 1}, "body\n", id="plain"),
        pytest.param("---\r\na: 1\r\n---\r\nbody", {"a": 1}, "body", id="crlf"),
        pytest.param("---\na: 1\n...\nbody", {"a": 1}, "body", id="dots-close"),
        pytest.param("---\n---\nbody", {}, "---\n---\nbody", id="empty-block"),
        pytest.param("---\njust a line\n---\nbody", {}, "---\njust a line\n---\nbody", id="scalar"),
        pytest.param("---\na: [1, 2\n---\nbody", {}, "---\na: [1, 2\n---\nbody", id="bad-yaml"),
        pytest.param("text\n---\na: 1\n---\n", {}, "text\n---\na: 1\n---\n", id="not-at-start"),
        pytest.param("---\n\nSection\n", {}, "---\n\nSection\n", id="thematic-break"),
    ],
)
def test_split_front_matter(text: str, front: dict[str, object], rest: str) -> None:
    assert split_front_matter(text) == (front, rest)


def test_yaml_alias_bomb_is_not_expanded() -> None:
    names = "abcdefghij"
    bomb = ["a: &a [" + ", ".join(["x"] * 10) + "]"]
    for prev, name in zip(names, names[1:], strict=False):
        bomb.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    text = "---\n" + "\n".join(bomb) + "\n---\nbody\n"
    front, rest = split_front_matter(text)  # 10**10 nodes if expanded
    assert front == {} and rest == text


def test_front_matter_only_fails_with_reason(tmp_path: Path) -> None:
    [row] = load_file(write_file(tmp_path, "only.md", "---\ntitle: x\n---\n\n"))
    assert row.status == "failed"
    assert row.error == "empty file: no text after the front matter"


def test_real_prefect_docs_front_matter() -> None:
    path = shared_path("markdown", "prefect-docs", "index.md")
    [row] = load_file(ref_for(path))
    assert row.document is not None
    assert row.document.metadata["title"] == "Welcome to Prefect"
    assert "getting started" in row.document.metadata["tags"]
    assert row.document.page_content.startswith("\n# **Welcome to Prefect**")
