"""HTMLHeaderTextSplitter and `auto` on HTML: sections of the page text, exact spans."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.common.documents import FileRef, Header, file_sha256
from tasks.load import load_file
from tasks.load.html import html_to_text
from tasks.split import AutoSplitter, HTMLHeaderTextSplitter
from tasks.split.invariants import check_spans
from tests.conftest import corpus_files

HEADERS = [("h1", "Header 1"), ("h2", "Header 2"), ("h3", "Header 3")]
PAGE = """<html><head><title>Bees</title><script>var x = "<h1>no</h1>";</script></head>
<body><nav><a href="/">Home</a></nav>
<main><p>Before any header.</p>
<h1>Colonies</h1><p>A colony has <b>one</b> queen.</p>
<h2>Workers</h2><p>Workers forage.</p><ul><li>pollen</li><li>nectar</li></ul>
<h3>Age</h3><p>Young bees nurse.</p>
<h2>Drones</h2><p>Drones mate.</p>
<h1>Honey</h1><article><p>Honey is stored.</p></article></main></body></html>"""


def load(path: Path, source: str) -> list:  # type: ignore[type-arg]
    ref = FileRef(str(path), source, path.stat().st_size, 0.0, file_sha256(path))
    return [r.document for r in load_file(ref) if r.document is not None]


def test_split_text_gives_langchains_documents() -> None:
    docs = HTMLHeaderTextSplitter(HEADERS).split_text(PAGE)
    assert [(d.page_content, d.metadata) for d in docs] == [
        ("Before any header.", {}),
        ("Colonies", {"Header 1": "Colonies"}),
        ("A colony has one queen.", {"Header 1": "Colonies"}),
        ("Workers", {"Header 1": "Colonies", "Header 2": "Workers"}),
        ("Workers forage.\n\npollen\nnectar", {"Header 1": "Colonies", "Header 2": "Workers"}),
        ("Age", {"Header 1": "Colonies", "Header 2": "Workers", "Header 3": "Age"}),
        ("Young bees nurse.", {"Header 1": "Colonies", "Header 2": "Workers", "Header 3": "Age"}),
        ("Drones", {"Header 1": "Colonies", "Header 2": "Drones"}),
        ("Drones mate.", {"Header 1": "Colonies", "Header 2": "Drones"}),
        ("Honey", {"Header 1": "Honey"}),
        ("Honey is stored.", {"Header 1": "Honey"}),
    ]


def test_spans_are_exact_slices_of_the_page_text() -> None:
    page = html_to_text(PAGE)
    for header_chunks in (True, False):
        splitter = HTMLHeaderTextSplitter(HEADERS, header_chunks=header_chunks)
        spans = splitter.split_spans(page.text, page.headings)
        assert not check_spans(page.text, spans)
    merged = HTMLHeaderTextSplitter(HEADERS, header_chunks=False).split_spans(
        page.text, page.headings
    )
    texts = [page.text[s.start : s.end] for s in merged]
    assert texts[1] == "Colonies\n\nA colony has one queen."
    assert merged[3].headers == (Header(1, "Colonies"), Header(2, "Workers"), Header(3, "Age"))


def test_only_configured_levels_split() -> None:
    docs = HTMLHeaderTextSplitter([("h1", "Top")]).split_text(PAGE)
    assert {tuple(d.metadata.items()) for d in docs} == {(), (("Top", "Colonies"),), (
        ("Top", "Honey"),
    )}  # fmt: skip
    assert any("Workers\n\nWorkers forage." in d.page_content for d in docs)


def test_return_each_element_gives_one_chunk_per_line() -> None:
    docs = HTMLHeaderTextSplitter(HEADERS, return_each_element=True).split_text(PAGE)
    assert ("pollen", {"Header 1": "Colonies", "Header 2": "Workers"}) in [
        (d.page_content, d.metadata) for d in docs
    ]


def test_size_cap_splits_sections_and_keeps_the_path() -> None:
    long_page = "<h1>Long</h1>" + "".join(f"<p>Sentence {i} about bees.</p>" for i in range(80))
    page = html_to_text(long_page)
    spans = HTMLHeaderTextSplitter(HEADERS, chunk_size=120, chunk_overlap=20).split_spans(
        page.text, page.headings
    )
    assert len(spans) > 10 and not check_spans(page.text, spans, 120)
    assert all(s.headers == (Header(1, "Long"),) for s in spans[1:])


def test_stale_headings_are_ignored() -> None:
    text = "Intro\n\nBody"
    bad = [{"level": 1, "text": "x", "start": 50, "end": 60}, {"level": 9, "start": 0, "end": 1}]
    spans = HTMLHeaderTextSplitter(HEADERS).split_spans(text, bad)
    assert [(s.start, s.end, s.headers) for s in spans] == [(0, len(text), ())]


def test_auto_splits_an_html_loaded_document_by_its_headings(tmp_path: Path) -> None:
    path = tmp_path / "bees.html"
    path.write_text(PAGE, encoding="utf-8")
    (doc,) = load(path, "bees.html")
    assert doc.metadata["file_type"] == "html" and doc.metadata["headings"]
    splitter = AutoSplitter(chunk_size=60, chunk_overlap=10)
    chunks = splitter.chunk_document(doc)
    assert splitter.strategy_for(doc) is splitter.html
    for c in chunks:
        assert doc.page_content[c.start_index : c.end_index] == c.text
    paths = {tuple(h.text for h in c.headers) for c in chunks}
    assert ("Colonies", "Workers", "Age") in paths and ("Honey",) in paths
    assert "Home" not in doc.page_content  # navigation dropped by the loader
    # chunks keep the page's metadata but not its list of every heading (their own headers)
    assert all("headings" not in c.metadata and c.metadata["title"] for c in chunks)


HTML_FILES = corpus_files("html", ("*.html",))


@pytest.mark.skipif(not HTML_FILES, reason="../shared/corpora is absent here")
def test_auto_on_the_html_corpus_uses_the_pages_headings() -> None:
    splitter = AutoSplitter(chunk_size=500, chunk_overlap=50)
    with_headers = 0
    for path in HTML_FILES:
        for doc in load(path, path.name):
            chunks = splitter.chunk_document(doc)
            assert all(doc.page_content[c.start_index : c.end_index] == c.text for c in chunks)
            with_headers += sum(bool(c.headers) for c in chunks)
    assert with_headers > 500


def test_split_text_from_file(tmp_path: Path) -> None:
    path = tmp_path / "p.html"
    path.write_text(PAGE, encoding="utf-8")
    splitter = HTMLHeaderTextSplitter(HEADERS)
    from_path = splitter.split_text_from_file(str(path))
    with path.open(encoding="utf-8") as fh:
        from_file = splitter.split_text_from_file(fh)
    assert from_path == from_file == splitter.split_text(PAGE)
