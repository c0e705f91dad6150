"""The semantic chunkers: exact spans, the size cap, coverage, breakpoints, the DP optimum.

Most tests use the deterministic hash encoder (their subject is the chunking, not the
model); one embeds a real file with the bundled all-MiniLM-L6-v2 and checks the topical
breakpoint it finds.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.common.config import IngestParams
from tasks.common.documents import Document
from tasks.embed.cache import EmbeddingCache
from tasks.embed.model import Embedder, register_encoder
from tasks.split import ClusterSemanticChunker, SemanticChunker
from tasks.split.base import TextSplitter
from tasks.split.cluster import mean_similarity, segment
from tasks.split.factory import SEMANTIC_SPLITTERS, build_splitter
from tasks.split.invariants import check_spans
from tasks.split.semantic import BREAKPOINT_DEFAULTS, Vectors, sentence_spans
from tasks.split.units import tiktoken_unit
from tests.conftest import CORPORA, corpus_files
from tests.fake_encoder import HashEncoder

ENCODE = HashEncoder().encode
FAKE_MODEL = "fake-hash-semantic"
register_encoder(FAKE_MODEL, HashEncoder)

LIGHT = ["lamp", "beam", "lens", "keeper", "tower", "light", "signal", "night"]
BAKE = ["flour", "yeast", "dough", "oven", "crust", "loaf", "knead", "butter"]


def topic(words: list[str], n: int, seed: int) -> list[str]:
    """Return ``n`` sentences made of ``words`` only."""
    rng = np.random.default_rng(seed)
    return [" ".join([*words[:4], *rng.choice(words[4:], size=2)]) + " ." for _ in range(n)]


def two_topics(n: int = 10) -> tuple[str, int]:
    """Return a text of ``n`` lighthouse sentences then ``n`` baking ones, and the join."""
    first = " ".join(topic(LIGHT, n, 1))
    return first + " " + " ".join(topic(BAKE, n, 2)), len(first) + 1


def chunkers(size: int, length: Any = len) -> list[TextSplitter]:
    return [
        SemanticChunker(ENCODE, chunk_size=size, length_function=length),
        SemanticChunker(ENCODE, chunk_size=size, length_function=length, buffer_size=0),
        SemanticChunker(ENCODE, chunk_size=size, length_function=length, min_chunk_size=size // 2),
        SemanticChunker(ENCODE, chunk_size=size, length_function=length, number_of_chunks=3),
        ClusterSemanticChunker(ENCODE, chunk_size=size, length_function=length),
        ClusterSemanticChunker(
            ENCODE, chunk_size=size, length_function=length, piece_size=max(1, size // 3)
        ),
    ]


def assert_invariants(splitter: TextSplitter, text: str, length: Any = len) -> None:
    spans = splitter.split_spans(text)
    found = check_spans(text, spans, splitter.max_size, length)
    assert not found, found
    assert all(s.end <= t.start for s, t in itertools.pairwise(spans))  # no overlap
    assert splitter.split_spans(text) == spans  # deterministic


# -- generated text -------------------------------------------------------------------------

PIECES = [
    "lamp", "beam", "flour", "yeast", "Title", "x", "12", " ", "  ", "\t", "\n", "\n\n",
    ". ", "? ", "! ", ".\n", '." ', ") ", "# ", "- ", "é", "字字", "😀", "\u00a0", "...",
]  # fmt: skip
TEXTS = st.lists(st.sampled_from(PIECES), max_size=120).map("".join)


@settings(max_examples=60, deadline=None)
@given(text=TEXTS, size=st.integers(1, 60))
def test_invariants_on_generated_text(text: str, size: int) -> None:
    for splitter in chunkers(size):
        assert_invariants(splitter, text)


@settings(max_examples=15, deadline=None)
@given(text=TEXTS, size=st.integers(2, 20))
def test_invariants_in_tokens(text: str, size: int) -> None:
    unit = tiktoken_unit()
    for splitter in chunkers(size, unit):
        assert_invariants(splitter, text, unit)


@settings(max_examples=40, deadline=None)
@given(text=TEXTS)
def test_sentences_are_exact_and_cover_the_text(text: str) -> None:
    spans = sentence_spans(text)
    assert not check_spans(text, spans)
    assert all(text[s.start : s.end] == text[s.start : s.end].strip() for s in spans)


# -- real corpora ---------------------------------------------------------------------------

FILES = corpus_files("markdown", ("*.md",))[::40][:3] + corpus_files("text", ("*.txt",))[::8][:3]


@pytest.mark.skipif(not FILES, reason="../shared/corpora is absent here")
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(CORPORA).as_posix())
def test_corpus_files_keep_the_size_cap_and_exact_spans(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")[:60_000]
    document = Document(text, {"source": path.name})
    for splitter in chunkers(400):
        chunks = splitter.chunk_document(document)
        assert chunks or not text.strip()
        assert all(text[c.start_index : c.end_index] == c.text for c in chunks)
        assert all(len(c.text) <= 400 for c in chunks)
        assert not check_spans(text, [_span(c) for c in chunks], 400)
    unit = tiktoken_unit()
    splitter = SemanticChunker(ENCODE, chunk_size=120, length_function=unit)
    chunks = splitter.chunk_document(document)
    assert all(c.n_tokens is not None and c.n_tokens <= 120 for c in chunks)
    assert all(unit(c.text) == c.n_tokens for c in chunks)


def _span(chunk: Any) -> Any:
    from tasks.split.base import Span

    return Span(chunk.start_index, chunk.end_index)


# -- breakpoints ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(BREAKPOINT_DEFAULTS))
def test_every_threshold_type_finds_the_topic_change(kind: Any) -> None:
    text, join = two_topics()
    splitter = SemanticChunker(
        ENCODE, breakpoint_threshold_type=kind, chunk_size=10_000, buffer_size=0
    )
    assert splitter.breakpoint_threshold_amount == BREAKPOINT_DEFAULTS[kind]
    spans = splitter.split_spans(text)
    assert len(spans) >= 2
    units = splitter.units(text, None)
    join_unit = next(i for i, u in enumerate(units) if u.start >= join)
    starts = [next(i for i, u in enumerate(units) if u.start == s.start) for s in spans[1:]]
    assert any(abs(i - join_unit) <= 1 for i in starts), (kind, starts, join_unit)


def test_threshold_amounts_follow_langchain() -> None:
    distances = np.array([0.1, 0.2, 0.15, 0.9, 0.3, 0.05, 0.4])
    expected = {
        "percentile": np.percentile(distances, 95),
        "standard_deviation": distances.mean() + 3 * distances.std(),
        "interquartile": distances.mean()
        + 1.5 * (np.percentile(distances, 75) - np.percentile(distances, 25)),
        "gradient": np.percentile(np.gradient(distances), 95),
    }
    for kind, value in expected.items():
        splitter = SemanticChunker(ENCODE, breakpoint_threshold_type=kind)  # type: ignore[arg-type]
        assert splitter.threshold(distances)[1] == pytest.approx(value)
    with pytest.raises(ValueError, match="breakpoint_threshold_type"):
        SemanticChunker(ENCODE, breakpoint_threshold_type="median")  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 19, 20, 50])
def test_number_of_chunks(n: int) -> None:
    text, join = two_topics()
    splitter = SemanticChunker(ENCODE, number_of_chunks=n, chunk_size=10_000)
    spans = splitter.split_spans(text)
    assert len(spans) == min(n, 20)
    if n == 2:  # the one break is the largest distance: at the change of topic, ± a sentence
        assert abs(spans[1].start - join) < 50


def test_min_chunk_size_is_honoured_while_under_the_cap() -> None:
    text = " ".join(topic(LIGHT + BAKE, 60, 3))
    cap, minimum = 300, 150
    plain = SemanticChunker(ENCODE, chunk_size=cap, breakpoint_threshold_amount=50)
    assert any(s.end - s.start < minimum for s in plain.split_spans(text))
    merged = SemanticChunker(
        ENCODE, chunk_size=cap, breakpoint_threshold_amount=50, min_chunk_size=minimum
    )
    spans = merged.split_spans(text)
    assert not check_spans(text, spans, cap)
    for i, s in enumerate(spans):
        if s.end - s.start < minimum:  # only where both merges would pass the cap
            assert i == 0 or s.end - spans[i - 1].start > cap
            assert i == len(spans) - 1 or spans[i + 1].end - s.start > cap
    assert sum(s.end - s.start < minimum for s in spans) <= 1


def test_a_long_sentence_is_cut_to_the_cap() -> None:
    text = "word " * 500 + "end."
    for splitter in chunkers(64):
        spans = splitter.split_spans(text)
        assert len(spans) > 1 and not check_spans(text, spans, 64)


def test_empty_and_tiny_texts() -> None:
    for splitter in chunkers(100):
        assert splitter.split_spans("") == []
        assert splitter.split_spans("  \n ") == []
        assert splitter.split_text(" One sentence. ") == ["One sentence."]


# -- the clustering chunker -----------------------------------------------------------------


def brute_force(vectors: np.ndarray, lo: list[int]) -> float:
    """Return the best total reward over every allowed segmentation."""
    n, baseline = len(vectors), mean_similarity(vectors)
    sims = vectors @ vectors.T - baseline

    def reward(a: int, b: int) -> float:
        return float(sum(sims[j, k] for j in range(a, b + 1) for k in range(j + 1, b + 1)))

    best = -np.inf
    for cuts in itertools.product([False, True], repeat=n - 1):
        runs, first = [], 0
        for i, cut in enumerate(cuts):
            if cut:
                runs.append((first, i))
                first = i + 1
        runs.append((first, n - 1))
        if all(a >= lo[b] for a, b in runs):
            best = max(best, sum(reward(a, b) for a, b in runs))
    return best


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 9),
    width=st.integers(1, 9),
    dim=st.sampled_from([2, 8]),
)
def test_segment_is_the_optimum(seed: int, n: int, width: int, dim: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, dim))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    lo = [max(0, i - width + 1) for i in range(n)]
    runs = segment(vectors, lo)
    assert runs[0][0] == 0 and runs[-1][1] == n - 1
    assert all(b + 1 == c for (_, b), (c, _) in itertools.pairwise(runs))
    assert all(a >= lo[b] for a, b in runs)
    sims = vectors @ vectors.T - mean_similarity(vectors)
    total = sum(sims[j, k] for a, b in runs for j in range(a, b + 1) for k in range(j + 1, b + 1))
    assert total == pytest.approx(brute_force(vectors, lo))


def test_mean_similarity_is_the_mean_over_pairs() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(7, 5))
    sims = vectors @ vectors.T
    assert mean_similarity(vectors) == pytest.approx(sims[~np.eye(7, dtype=bool)].mean())


def test_cluster_chunks_follow_the_topics() -> None:
    text, join = two_topics(8)
    splitter = ClusterSemanticChunker(ENCODE, chunk_size=10_000, piece_size=60)
    spans = splitter.split_spans(text)
    assert any(abs(s.start - join) < 60 for s in spans[1:])
    light, bake = set(LIGHT), set(BAKE)
    mixed = [
        s
        for s in spans
        if {w.strip(".").lower() for w in text[s.start : s.end].split()} & light
        and {w.strip(".").lower() for w in text[s.start : s.end].split()} & bake
    ]
    assert len(mixed) <= 1  # at most the chunk holding the piece that straddles the join


# -- embedding sources, the factory, fingerprints -------------------------------------------


def test_embedder_with_cache(tmp_path: Path) -> None:
    cache = EmbeddingCache.open(tmp_path)
    try:
        vectors = Vectors(Embedder(FAKE_MODEL), cache)
        first = vectors(["a b", "c d", "a b"])
        assert np.allclose(first, ENCODE(["a b", "c d", "a b"]))
        assert cache.get(FAKE_MODEL, ["a b", "c d"])[0] is not None
        assert np.array_equal(vectors(["a b", "c d", "a b"]), first)
        splitter = SemanticChunker(Embedder(FAKE_MODEL), cache=cache, chunk_size=200)
        text, _ = two_topics()
        assert splitter.split_spans(text) == SemanticChunker(ENCODE, chunk_size=200).split_spans(
            text
        )
    finally:
        cache.close()


@pytest.mark.parametrize("name", sorted(SEMANTIC_SPLITTERS))
def test_factory_builds_the_semantic_splitters(name: str) -> None:
    # model_copy skips validation: config.py's SplitterName may not list these names yet
    params = IngestParams(model=FAKE_MODEL, chunk_size=300, length_unit="chars").model_copy(
        update={"splitter": name}
    )
    splitter = build_splitter(params)
    assert isinstance(splitter, SemanticChunker if name == "semantic" else ClusterSemanticChunker)
    assert splitter.max_size == 300
    text, _ = two_topics()
    chunks = splitter.chunk_document(Document(text, {"source": "x.txt"}))
    assert chunks and all(c.n_chars <= 300 for c in chunks)
    assert [c.chunk_id for c in chunks] == [
        c.chunk_id
        for c in build_splitter(params).chunk_document(Document(text, {"source": "x.txt"}))
    ]


def test_settings_change_the_fingerprint() -> None:
    prints = {
        SemanticChunker(ENCODE).fingerprint(),
        SemanticChunker(ENCODE, buffer_size=2).fingerprint(),
        SemanticChunker(ENCODE, breakpoint_threshold_type="gradient").fingerprint(),
        SemanticChunker(ENCODE, min_chunk_size=10).fingerprint(),
        SemanticChunker(ENCODE, number_of_chunks=4).fingerprint(),
        SemanticChunker(Embedder(FAKE_MODEL)).fingerprint(),
        ClusterSemanticChunker(ENCODE).fingerprint(),
        ClusterSemanticChunker(ENCODE, piece_size=100).fingerprint(),
    }
    assert len(prints) == 8
    assert SemanticChunker(ENCODE).fingerprint() == SemanticChunker(ENCODE).fingerprint()


# -- the real model -------------------------------------------------------------------------

NRC = CORPORA / "text" / "nrc-event-notification-rpt-lastmonth.txt"
PEP8 = CORPORA / "text" / "peps" / "pep-0008.txt"


def first_sentences(text: str, n: int) -> str:
    spans = sentence_spans(text)
    return text[spans[0].start : spans[n - 1].end]


@pytest.mark.skipif(not (NRC.exists() and PEP8.exists()), reason="../shared/corpora is absent")
def test_real_model_breaks_between_two_subjects() -> None:
    """Nuclear event reports, then PEP 8's introduction: the break is at the join."""
    rows = NRC.read_text(encoding="utf-8", errors="replace").splitlines()[1:6]
    reactor = first_sentences(" ".join(row.rsplit("|", 2)[-2] for row in rows), 8)
    pep = PEP8.read_text(encoding="utf-8")
    style = first_sentences(pep[pep.index("A Foolish Consistency") :], 8)
    text = reactor + "\n\n" + style
    embedder = Embedder("all-MiniLM-L6-v2")
    for kind in ("percentile", "interquartile"):
        splitter = SemanticChunker(embedder, breakpoint_threshold_type=kind, chunk_size=5000)
        spans = splitter.split_spans(text)
        units = splitter.units(text, None)
        join = next(i for i, u in enumerate(units) if u.start > len(reactor))
        starts = [next(i for i, u in enumerate(units) if u.start == s.start) for s in spans[1:]]
        assert any(abs(i - join) <= 1 for i in starts), (kind, starts, join)
    splitter = SemanticChunker(embedder, number_of_chunks=2, chunk_size=5000)
    units = splitter.units(text, None)
    join = next(i for i, u in enumerate(units) if u.start > len(reactor))
    (_, second) = splitter.split_spans(text)
    assert abs(next(i for i, u in enumerate(units) if u.start == second.start) - join) <= 1
