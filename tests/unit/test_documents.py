"""Unit tests for tasks/common/documents.py: document ids, chunk ids, header keys."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from tasks.common.documents import (
    Document,
    Header,
    header_keys,
    make_chunk_id,
    sha256_hex,
    shown_name,
)


def doc(text: str = "text", **metadata: Any) -> Document:
    return Document(text, metadata)


def test_sha256_hex_of_str_and_bytes() -> None:
    assert sha256_hex("héllo") == hashlib.sha256("héllo".encode()).hexdigest()
    assert sha256_hex(b"\x00\xff") == hashlib.sha256(b"\x00\xff").hexdigest()


def test_doc_id_is_stable_and_does_not_depend_on_content() -> None:
    a = doc("first version", source="guides/a.md", size=13)
    b = doc("a completely different body", source="guides/a.md", size=99, title="T")
    assert a.doc_id == b.doc_id
    assert a.doc_id == doc("x", source="guides/a.md").doc_id
    assert len(a.doc_id) == 32
    assert all(ch in "0123456789abcdef" for ch in a.doc_id)
    # a known value: the id must not change between releases, machines or runs
    assert a.doc_id == hashlib.sha256(b"guides/a.md").hexdigest()[:32]


@pytest.mark.parametrize(
    ("meta_a", "meta_b"),
    [
        pytest.param({"source": "a.md"}, {"source": "b.md"}, id="source"),
        pytest.param({"source": "a.md"}, {"source": "A.md"}, id="source-case"),
        pytest.param({"source": "a.md"}, {"source": "sub/a.md"}, id="source-folder"),
        pytest.param({"source": "a.pdf", "page": 1}, {"source": "a.pdf", "page": 2}, id="page"),
        pytest.param({"source": "a.pdf"}, {"source": "a.pdf", "page": 1}, id="page-vs-none"),
        pytest.param({"source": "a.csv", "row": 0}, {"source": "a.csv", "row": 1}, id="row"),
        pytest.param(
            {"source": "a.csv", "row": 3}, {"source": "a.csv", "page": 3}, id="row-vs-page"
        ),
        pytest.param({"source": "x", "page": 1}, {"source": "x", "page": 1, "row": 1}, id="both"),
    ],
)
def test_doc_id_depends_on_source_and_page_or_row(
    meta_a: dict[str, Any], meta_b: dict[str, Any]
) -> None:
    assert doc(**meta_a).doc_id != doc(**meta_b).doc_id


@pytest.mark.parametrize("key", ["title", "size", "mtime", "sha256", "file_path", "total_pages"])
def test_doc_id_ignores_other_metadata(key: str) -> None:
    assert doc(source="a.pdf", page=1).doc_id == doc(source="a.pdf", page=1, **{key: 7}).doc_id


def test_source_property() -> None:
    assert doc(source="a/b.md").source == "a/b.md"
    assert doc().source == ""
    assert doc().doc_id == doc("other").doc_id  # no source: still a stable id


BASE = ("0123456789abcdef0123456789abcdef", "recursive:1024:100", 42, "some chunk text")


def test_make_chunk_id_is_deterministic() -> None:
    first = make_chunk_id(*BASE)
    assert make_chunk_id(*BASE) == first
    assert len(first) == 32
    assert all(ch in "0123456789abcdef" for ch in first)
    doc_id, fp, start, text = BASE
    assert (
        first == hashlib.sha256(f"{doc_id}\x1f{fp}\x1f{start}\x1f{text}".encode()).hexdigest()[:32]
    )


@pytest.mark.parametrize(
    ("position", "other"),
    [
        pytest.param(0, "fedcba9876543210fedcba9876543210", id="doc_id"),
        pytest.param(1, "recursive:1024:101", id="fingerprint"),
        pytest.param(2, 43, id="start_index"),
        pytest.param(2, 0, id="start_index-zero"),
        pytest.param(3, "some chunk text ", id="text-trailing-space"),
        pytest.param(3, "Some chunk text", id="text-case"),
        pytest.param(3, "", id="text-empty"),
    ],
)
def test_make_chunk_id_changes_with_each_input(position: int, other: Any) -> None:
    args = list(BASE)
    args[position] = other
    assert make_chunk_id(*args) != make_chunk_id(*BASE)


def test_make_chunk_id_fields_do_not_run_together() -> None:
    # moving a character from one field to the next must give another id
    assert make_chunk_id("ab", "c", 1, "t") != make_chunk_id("a", "bc", 1, "t")
    assert make_chunk_id("d", "fp", 1, "2t") != make_chunk_id("d", "fp", 12, "t")


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        pytest.param((), {}, id="none"),
        pytest.param((Header(1, "Top"),), {"h1": "Top"}, id="one"),
        pytest.param(
            (Header(1, "Guide"), Header(2, "Install"), Header(3, "Linux")),
            {"h1": "Guide", "h2": "Install", "h3": "Linux"},
            id="path",
        ),
        pytest.param((Header(2, "Skipped h1"),), {"h2": "Skipped h1"}, id="starts-at-h2"),
        pytest.param((Header(1, "A"), Header(3, "C")), {"h1": "A", "h3": "C"}, id="gap"),
        pytest.param(
            tuple(Header(i, f"L{i} ünï") for i in range(1, 7)),
            {f"h{i}": f"L{i} ünï" for i in range(1, 7)},
            id="six-levels",
        ),
    ],
)
def test_header_keys(headers: tuple[Header, ...], expected: dict[str, str]) -> None:
    assert header_keys(headers) == expected


def test_header_to_dict() -> None:
    assert Header(2, "Install").to_dict() == {"level": 2, "text": "Install"}


def test_a_name_with_a_control_character_is_shown_on_one_line() -> None:
    """``docflow query`` printed a file name with a newline over two lines."""
    assert shown_name("guides/café au lait.md") == "guides/café au lait.md"
    assert shown_name("two\nlines.txt") == "'two\\nlines.txt'"
    assert "\n" not in shown_name("tab\there\r.md")
