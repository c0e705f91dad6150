"""Every splitter, every length unit: exact spans, size limit, coverage, stable ids.

Over the real corpora (loaded by docflow's own loaders, so HTML pages arrive with their
headings and code with its language) and over hypothesis text built from the characters
splitters and tokenizers care about.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.common.config import IngestParams
from tasks.common.documents import Document
from tasks.split import (
    AutoSplitter,
    CharacterTextSplitter,
    CodeTextSplitter,
    HTMLHeaderTextSplitter,
    MarkdownHeaderTextSplitter,
    RecursiveCharacterTextSplitter,
    Span,
    TokenTextSplitter,
)
from tasks.split.factory import SPLITTERS, build_splitter
from tasks.split.invariants import check_spans
from tasks.split.units import length_unit, model_tokens_unit, tiktoken_unit
from tests.conftest import corpus_files
from tests.load_helpers import load_corpus

SIZES = {"chars": (800, 80), "tokens": (200, 25), "model_tokens": (128, 16)}
UNITS = list(SIZES)
FILES = (
    corpus_files("markdown", ("*.md",))
    + corpus_files("text", ("*.txt", "*.rst"))
    + corpus_files("code", ("*.py", "*.go", "*.rs", "*.java", "*.js", "*.ts", "*.tsx"))
    + corpus_files("html", ("*.html",))
)


@cache
def corpus_documents() -> tuple[Document, ...]:
    """Load the corpora with docflow's loaders (bad files and non-UTF-8 ones drop out)."""
    return load_corpus(FILES)


def documents_for(unit: str) -> tuple[Document, ...]:
    """All documents in characters; a spread-out share of them in token units (time)."""
    step = {"chars": 1, "tokens": 2, "model_tokens": 6}[unit]
    return corpus_documents()[::step]


def assert_invariants(splitter: Any, doc: Document, unit: str, twice: bool = True) -> None:
    chunks = splitter.chunk_document(doc)
    text = doc.page_content
    measured = {c.text: c.n_tokens for c in chunks}  # n_tokens must be the real count
    unit_length = length_unit(unit)
    real = {piece: unit_length(piece) for piece in measured} if unit != "chars" else {}
    assert all(measured[piece] == n for piece, n in real.items()), doc.source
    spans = [Span(c.start_index, c.end_index) for c in chunks]
    found = check_spans(text, spans, splitter.max_size, real.get if real else len)  # type: ignore[arg-type]
    assert not found, (doc.source, found)
    assert all(text[c.start_index : c.end_index] == c.text for c in chunks)
    assert len({c.chunk_id for c in chunks}) == len(chunks)
    if twice:
        again = splitter.chunk_document(doc)
        assert [c.chunk_id for c in again] == [c.chunk_id for c in chunks]


@pytest.mark.skipif(not FILES, reason="../shared/corpora is absent here")
@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("name", sorted(SPLITTERS))
def test_every_splitter_keeps_the_invariants_on_the_corpora(name: str, unit: str) -> None:
    size, overlap = SIZES[unit]
    params = IngestParams(splitter=name, length_unit=unit, chunk_size=size, chunk_overlap=overlap)
    splitter = build_splitter(params)
    docs = documents_for(unit)
    assert len(docs) > {"chars": 300, "tokens": 150, "model_tokens": 50}[unit]
    measured_in = "tokens" if name == "token" and unit == "chars" else unit  # windows of tokens
    for i, doc in enumerate(docs):
        assert_invariants(splitter, doc, measured_in, twice=i % 5 == 0)


# -- generated text -------------------------------------------------------------------------

PIECES = [
    "word", "Title", "x", "12", " ", "  ", "\t", "\n", "\n\n", "\r\n", "# ", "## ", "### ",
    "```", "```py", "~~~", "====", "----", "    ", "- ", "> ", "| ", ".", ",", ";", "'s",
    "(", ")", "é", "字字", "😀", "\u00a0", "\u3000", "<|endoftext|>", "\ufeff",
]  # fmt: skip
TEXTS = st.lists(st.sampled_from(PIECES), max_size=80).map("".join)


def generated_splitters(unit: str, size: int) -> list[Any]:
    fn = length_unit(unit)
    overlap = size // 4
    sizes: dict[str, Any] = {"chunk_size": size, "chunk_overlap": overlap, "length_function": fn}
    headers = [("#", "H1"), ("##", "H2"), ("###", "H3")]
    window = tiktoken_unit() if unit != "model_tokens" else model_tokens_unit()
    return [
        RecursiveCharacterTextSplitter(**sizes),
        RecursiveCharacterTextSplitter(keep_separator="end", **sizes),
        RecursiveCharacterTextSplitter(keep_separator=False, **sizes),
        RecursiveCharacterTextSplitter.from_language("markdown", **sizes),
        RecursiveCharacterTextSplitter.from_language("python", **sizes),
        CharacterTextSplitter(**sizes),
        CharacterTextSplitter(separator=r"\n\s*", is_separator_regex=True, **sizes),
        TokenTextSplitter(chunk_size=size, chunk_overlap=overlap, tokenizer=window),
        MarkdownHeaderTextSplitter(headers, strip_headers=False, **sizes),
        MarkdownHeaderTextSplitter(headers, return_each_line=True, strip_headers=False, **sizes),
        HTMLHeaderTextSplitter([("h1", "H1"), ("h2", "H2")], header_chunks=False, **sizes),
        CodeTextSplitter("js", **sizes),
        AutoSplitter(size, overlap, fn),
    ]


@settings(max_examples=50, deadline=None)
@given(text=TEXTS, size=st.integers(4, 40), unit=st.sampled_from(UNITS))
def test_invariants_on_generated_text(text: str, size: int, unit: str) -> None:
    for splitter in generated_splitters(unit, size):
        spans = splitter.split_spans(text)
        found = check_spans(text, spans, splitter.max_size, splitter.length_function)
        assert not found, (type(splitter).__name__, found)
        assert splitter.split_spans(text) == spans


@settings(max_examples=60, deadline=None)
@given(text=TEXTS, data=st.data())
def test_html_splitter_on_generated_headings(text: str, data: st.DataObject) -> None:
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    chosen = sorted(data.draw(st.sets(st.sampled_from(starts), max_size=4)))
    headings = []
    for start in chosen:
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        level = data.draw(st.integers(1, 3))
        headings.append({"level": level, "text": text[start:end], "start": start, "end": end})
    for chunks in (True, False):
        splitter = HTMLHeaderTextSplitter(
            [("h1", "H1"), ("h2", "H2"), ("h3", "H3")], header_chunks=chunks, chunk_size=30
        )
        spans = splitter.split_spans(text, headings)
        assert not check_spans(text, spans, 30)
        for span in spans:  # the header path is that of the nearest enclosing headings
            above = [h for h in headings if h["start"] <= span.start]
            assert len(span.headers) <= len(above)


def test_chunk_ids_are_stable_across_runs_and_machines() -> None:
    doc = Document("# Bees\n\nThey dance.\n\n## Winter\n\nThey cluster.", {"source": "b.md"})
    chunks = AutoSplitter(1024, 100).chunk_document(
        Document(doc.page_content, {**doc.metadata, "file_type": "markdown"})
    )
    # a hash of source, splitter settings, start and text: pinned so any drift shows
    assert [(c.start_index, c.chunk_id) for c in chunks] == PINNED_IDS
    assert [h.text for h in chunks[1].headers] == ["Bees", "Winter"]


PINNED_IDS = [(0, "442c3eedc6e23f1a7ea0c9378728104b"), (21, "1332a8080aacbc87c29f584cbe3e5503")]
