"""Differential tests: our RecursiveCharacterTextSplitter gives LangChain's chunks.

Covers every file of ../shared/corpora/{markdown,text,code} and hypothesis text, for
several parameter sets. keep_separator=False is compared only where no separator run is
dropped (see test_recursive.test_dropped_separators_stay_in_the_span for the difference).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_text_splitters import RecursiveCharacterTextSplitter as LCRecursive

from tasks.split import RecursiveCharacterTextSplitter
from tests.conftest import corpus_files

CORPUS = (
    corpus_files("markdown", ("*.md",))
    + corpus_files("text", ("*.txt", "*.rst"))
    + corpus_files("code", ("*.py", "*.go", "*.rs", "*.java", "*.js", "*.ts", "*.tsx"))
)

PARAMETER_SETS: list[dict[str, Any]] = [
    {"chunk_size": 1024, "chunk_overlap": 100},  # the ingest default
    {"chunk_size": 1000, "chunk_overlap": 200},
    {"chunk_size": 200, "chunk_overlap": 0},
    {"chunk_size": 300, "chunk_overlap": 50, "keep_separator": "end"},
    {"chunk_size": 100, "chunk_overlap": 20, "strip_whitespace": False},
    {"chunk_size": 400, "chunk_overlap": 40, "separators": ["\n\n", "\n", ". ", " ", ""]},
    {
        "chunk_size": 500,
        "chunk_overlap": 60,
        "separators": [r"\n#{1,6} ", r"\n\n", r"\s", ""],
        "is_separator_regex": True,
    },
]


def lc_start_indices(params: dict[str, Any], text: str) -> list[int]:
    docs = LCRecursive(add_start_index=True, **params).create_documents([text])
    return [d.metadata["start_index"] for d in docs]


@pytest.mark.skipif(not CORPUS, reason="../shared/corpora is absent here")
@pytest.mark.parametrize(
    "params", PARAMETER_SETS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items())
)
def test_same_chunks_as_langchain_on_real_corpora(params: dict[str, Any]) -> None:
    ours, theirs = RecursiveCharacterTextSplitter(**params), LCRecursive(**params)
    for path in CORPUS:
        text = path.read_text(encoding="utf-8", errors="replace")
        assert ours.split_text(text) == theirs.split_text(text), path


@pytest.mark.skipif(not CORPUS, reason="../shared/corpora is absent here")
def test_start_indices_match_langchain_where_its_search_is_unambiguous() -> None:
    params = {"chunk_size": 300, "chunk_overlap": 30}
    ours = RecursiveCharacterTextSplitter(add_start_index=True, **params)
    compared = 0
    for path in CORPUS[:60]:
        text = path.read_text(encoding="utf-8", errors="replace")
        mine = [d.metadata["start_index"] for d in ours.create_documents([text])]
        theirs = lc_start_indices(params, text)
        for ours_start, lc_start, doc in zip(
            mine, theirs, ours.create_documents([text]), strict=True
        ):
            if text.count(doc.page_content) == 1:  # LangChain finds it by search: unique text only
                assert ours_start == lc_start
                compared += 1
    assert compared > 500


@settings(max_examples=200, deadline=None)
@given(
    text=st.lists(st.sampled_from(list("ab c\n\n\n  .é")), max_size=300).map("".join),
    chunk_size=st.integers(2, 50),
    overlap_ratio=st.floats(0, 0.9),
    keep=st.sampled_from([True, "start", "end"]),
)
def test_same_chunks_as_langchain_on_generated_text(
    text: str, chunk_size: int, overlap_ratio: float, keep: bool | str
) -> None:
    params = {
        "chunk_size": chunk_size,
        "chunk_overlap": int(chunk_size * overlap_ratio),
        "keep_separator": keep,
    }
    assert RecursiveCharacterTextSplitter(**params).split_text(text) == LCRecursive(
        **params
    ).split_text(text)


@settings(max_examples=200, deadline=None)
@given(
    words=st.lists(st.text(alphabet="abcé", min_size=1, max_size=8), max_size=60),
    seps=st.lists(st.sampled_from(["\n\n", "\n", " "]), min_size=60, max_size=60),
    chunk_size=st.integers(5, 60),
)
def test_keep_separator_false_matches_when_no_separator_is_dropped(
    words: list[str], seps: list[str], chunk_size: int
) -> None:
    text = "".join(w + s for w, s in zip(words, seps, strict=False)).strip()
    params = {"chunk_size": chunk_size, "chunk_overlap": chunk_size // 4, "keep_separator": False}
    assert RecursiveCharacterTextSplitter(**params).split_text(text) == LCRecursive(
        **params
    ).split_text(text)
