"""RecursiveCharacterTextSplitter: invariants (hypothesis, real corpora) and deviations."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.common.documents import Document
from tasks.split import RecursiveCharacterTextSplitter
from tasks.split.base import KeepSeparator
from tests.conftest import corpus_files

CORPUS = (
    corpus_files("markdown", ("*.md",))
    + corpus_files("text", ("*.txt", "*.rst"))
    + corpus_files("code", ("*.py", "*.go", "*.rs", "*.java", "*.js", "*.ts", "*.tsx"))
)

# text built from the characters the separators care about, so every branch is reached
ALPHABET = st.sampled_from(list("ab cd\n\n\n  é字\t.x"))
TEXTS = st.lists(ALPHABET, max_size=400).map("".join)


def assert_invariants(text: str, splitter: RecursiveCharacterTextSplitter) -> None:
    spans = splitter.split_spans(text)
    # 1. exact spans, in order
    for span in spans:
        assert 0 <= span.start < span.end <= len(text)
    assert [s.start for s in spans] == sorted(s.start for s in spans)
    # 2. size limit
    assert all(span.end - span.start <= splitter.chunk_size for span in spans)
    # 3. coverage: every non-whitespace character lies in some chunk
    covered = bytearray(len(text))
    for span in spans:
        covered[span.start : span.end] = b"\x01" * (span.end - span.start)
    missing = [i for i, ch in enumerate(text) if not ch.isspace() and not covered[i]]
    assert not missing, f"uncovered characters at {missing[:5]}"


@settings(max_examples=300, deadline=None)
@given(
    text=TEXTS,
    chunk_size=st.integers(1, 60),
    overlap_ratio=st.floats(0, 1),
    keep=st.sampled_from([True, False, "start", "end"]),
    strip=st.booleans(),
)
def test_invariants_on_generated_text(
    text: str, chunk_size: int, overlap_ratio: float, keep: bool | str, strip: bool
) -> None:
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=chunk_size,
        chunk_overlap=int(chunk_size * overlap_ratio),
        keep_separator=keep,  # type: ignore[arg-type]
        strip_whitespace=strip,
    )
    assert_invariants(text, splitter)


@settings(max_examples=100, deadline=None)
@given(text=TEXTS, chunk_size=st.integers(1, 30))
def test_cuts_pieces_when_separators_run_out(text: str, chunk_size: int) -> None:
    # no "" separator: LangChain would return oversize pieces whole; we cut them
    splitter = RecursiveCharacterTextSplitter(
        separators=["\n\n", " "], chunk_size=chunk_size, chunk_overlap=0
    )
    assert_invariants(text, splitter)


@pytest.mark.skipif(not CORPUS, reason="../shared/corpora is absent here")
@pytest.mark.parametrize("chunk_size,chunk_overlap", [(1024, 100), (200, 20), (50, 0)])
def test_invariants_on_every_real_file(chunk_size: int, chunk_overlap: int) -> None:
    splitter = RecursiveCharacterTextSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    for path in CORPUS:
        assert_invariants(path.read_text(encoding="utf-8", errors="replace"), splitter)


def test_chunks_are_deterministic_and_exact() -> None:
    text = "Repeat me.\n\n" * 50
    doc = Document(text, {"source": "a.md", "lang": "en"})
    splitter = RecursiveCharacterTextSplitter(chunk_size=40, chunk_overlap=12)
    first, second = splitter.chunk_document(doc), splitter.chunk_document(doc)
    assert [c.chunk_id for c in first] == [c.chunk_id for c in second]
    assert len({c.chunk_id for c in first}) == len(first)  # repeated text, distinct spans
    assert [c.chunk_index for c in first] == list(range(len(first)))
    for c in first:
        assert text[c.start_index : c.end_index] == c.text
        assert c.metadata["lang"] == "en" and c.source == "a.md" and c.n_chars == len(c.text)


def test_chunk_ids_change_with_settings_and_source() -> None:
    text = "alpha beta gamma delta " * 20
    a = RecursiveCharacterTextSplitter(chunk_size=50, chunk_overlap=0)
    b = RecursiveCharacterTextSplitter(chunk_size=50, chunk_overlap=10)
    ids_a = {c.chunk_id for c in a.chunk_document(Document(text, {"source": "x.txt"}))}
    ids_b = {c.chunk_id for c in b.chunk_document(Document(text, {"source": "x.txt"}))}
    ids_c = {c.chunk_id for c in a.chunk_document(Document(text, {"source": "y.txt"}))}
    assert ids_a.isdisjoint(ids_b) and ids_a.isdisjoint(ids_c)


def test_start_index_is_exact_for_repeated_text() -> None:
    text = "same line\n" * 30
    splitter = RecursiveCharacterTextSplitter(chunk_size=25, chunk_overlap=10, add_start_index=True)
    docs = splitter.create_documents([text], [{"source": "r.txt"}])
    starts = [d.metadata["start_index"] for d in docs]
    assert starts == sorted(set(starts))
    for d in docs:
        s = d.metadata["start_index"]
        assert text[s : s + len(d.page_content)] == d.page_content
        assert d.metadata["source"] == "r.txt"


def test_split_documents_accepts_langchain_documents() -> None:
    from langchain_core.documents import Document as LCDocument

    splitter = RecursiveCharacterTextSplitter(chunk_size=10, chunk_overlap=0)
    out = splitter.split_documents(
        [LCDocument(page_content="one two three four", metadata={"k": 1})]
    )
    assert [d.page_content for d in out] == ["one two", "three", "four"]  # as LangChain
    assert all(d.metadata == {"k": 1} for d in out)


def test_dropped_separators_stay_in_the_span() -> None:
    # LangChain drops the empty piece between "\n\n\n\n" and re-joins with one "\n\n",
    # producing "a\n\nb", which is not in the source. We return the real slice.
    text = "a\n\n\n\nb"
    ours = RecursiveCharacterTextSplitter(chunk_size=10, chunk_overlap=0, keep_separator=False)
    assert ours.split_text(text) == ["a\n\n\n\nb"]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"chunk_size": 0}, "chunk_size must be > 0"),
        ({"chunk_overlap": -1}, "chunk_overlap must be >= 0"),
        ({"chunk_size": 10, "chunk_overlap": 11}, "larger chunk overlap"),
    ],
)
def test_rejects_bad_sizes(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RecursiveCharacterTextSplitter(**kwargs)


def test_fingerprint_is_stable_and_setting_sensitive() -> None:
    a = RecursiveCharacterTextSplitter(chunk_size=100, chunk_overlap=10)
    assert (
        a.fingerprint()
        == RecursiveCharacterTextSplitter(chunk_size=100, chunk_overlap=10).fingerprint()
    )
    assert (
        a.fingerprint()
        != RecursiveCharacterTextSplitter(chunk_size=100, chunk_overlap=11).fingerprint()
    )
    assert (
        a.fingerprint()
        != RecursiveCharacterTextSplitter(
            chunk_size=100, chunk_overlap=10, separators=["\n", ""]
        ).fingerprint()
    )


def test_corpus_list_is_real() -> None:
    if not CORPUS:
        pytest.skip("../shared/corpora is absent here")
    assert len(CORPUS) > 200 and all(isinstance(p, Path) for p in CORPUS)


@settings(max_examples=150, deadline=None)
@given(
    text=st.lists(
        st.sampled_from(["ab", " ", "\n", "\n\n", "é", "字", "😀", "."]), max_size=60
    ).map("".join),
    size=st.integers(2, 80),
    keep=st.sampled_from([True, "end", False]),
)
def test_short_text_in_tokens_is_the_general_result(
    text: str, size: int, keep: KeepSeparator
) -> None:
    """A text with fewer bytes than chunk_size tokens is one chunk without a span counter;
    the general path gives the same spans and token counts."""
    from tasks.split.units import TiktokenUnit, span_counter

    unit = TiktokenUnit()
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=size, chunk_overlap=size // 4, length_function=unit, keep_separator=keep
    )
    general = splitter.split_range(text, 0, len(text), span_counter(unit, text))
    assert splitter.split_spans(text) == general
