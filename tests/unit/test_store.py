"""Unit tests for tasks/index/store.py with a real embedded Chroma (PersistentClient) in tmp."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tasks.common.documents import Chunk, Header, make_chunk_id
from tasks.common.errors import StoreError
from tasks.index.store import ChromaStore, flatten_metadata, make_client

DIM = 8
MODEL = "test-model"


def unit_vectors(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def chunk(
    i: int,
    source: str = "doc.md",
    text: str | None = None,
    headers: tuple[Header, ...] = (),
    metadata: dict[str, Any] | None = None,
) -> Chunk:
    text = f"chunk {i}" if text is None else text
    return Chunk(
        chunk_id=make_chunk_id(f"doc-{source}", "fp", i, text),
        doc_id=f"doc-{source}",
        source=source,
        chunk_index=i,
        start_index=i * 10,
        end_index=i * 10 + len(text),
        text=text,
        n_chars=len(text),
        headers=headers,
        metadata={"source": source, **(metadata or {})},
    )


@pytest.fixture
def store(data_dir: Path) -> ChromaStore:
    s = ChromaStore.open(data_dir, "unit-test")
    s.collection(MODEL, DIM)
    return s


# -- collection and its model ---------------------------------------------------------------


def test_create_collection_records_model_and_dimension(data_dir: Path) -> None:
    col = ChromaStore.open(data_dir, "records").collection(MODEL, DIM)
    assert col.metadata["embedding_model"] == MODEL
    assert col.metadata["dimension"] == DIM
    # and it is persisted: a fresh client on the same folder reads it back
    reopened = ChromaStore.open(data_dir, "records").collection()
    assert reopened.metadata["embedding_model"] == MODEL
    assert reopened.metadata["dimension"] == DIM
    assert (data_dir / "chroma").is_dir()


def test_reopen_with_same_model_and_dimension(data_dir: Path) -> None:
    ChromaStore.open(data_dir, "same").collection(MODEL, DIM)
    col = ChromaStore.open(data_dir, "same").collection(MODEL, DIM)
    assert col.metadata["embedding_model"] == MODEL


@pytest.mark.parametrize(
    ("model", "dimension"),
    [("other-model", DIM), (MODEL, DIM * 2), ("other-model", 384)],
    ids=["other-model", "other-dimension", "both"],
)
def test_reopen_with_other_model_or_dimension_raises(
    data_dir: Path, model: str, dimension: int
) -> None:
    ChromaStore.open(data_dir, "guarded").collection(MODEL, DIM)
    with pytest.raises(StoreError, match="reingest") as info:
        ChromaStore.open(data_dir, "guarded").collection(model, dimension)
    assert MODEL in str(info.value) and model in str(info.value)
    # the refusal did not rewrite what the collection records
    col = ChromaStore.open(data_dir, "guarded").collection()
    assert (col.metadata["embedding_model"], col.metadata["dimension"]) == (MODEL, DIM)


def test_open_missing_collection_without_model_raises(data_dir: Path) -> None:
    store = ChromaStore.open(data_dir, "never-created")
    with pytest.raises(StoreError, match="does not exist"):
        store.collection()
    with pytest.raises(StoreError):
        store.count()
    assert ChromaStore.open(data_dir, "never-created").client.list_collections() == []


def test_make_client_needs_path_or_host() -> None:
    with pytest.raises(StoreError):
        make_client()


# -- upsert ---------------------------------------------------------------------------------


def test_upsert_more_than_max_batch_size(store: ChromaStore) -> None:
    max_batch = store.client.get_max_batch_size()
    n = max_batch + 539
    assert n > max_batch
    chunks = [chunk(i, text=f"t{i}") for i in range(n)]
    assert store.upsert(chunks, unit_vectors(n)) == n
    assert store.count() == n
    # the last chunk, past the first batch, carries its own text and metadata
    got = store.collection().get(ids=[chunks[-1].chunk_id], include=["documents", "metadatas"])
    assert got["documents"] == [f"t{n - 1}"]
    assert got["metadatas"][0]["chunk_index"] == n - 1


def test_upsert_is_idempotent(data_dir: Path, store: ChromaStore) -> None:
    chunks = [chunk(i) for i in range(20)]
    vectors = unit_vectors(20)
    store.upsert(chunks, vectors)
    store.upsert(chunks, vectors)
    assert store.count() == 20
    # same ids again with other text and vectors: replaced, not added
    changed = [replace(c, text=f"new {c.text}") for c in chunks]
    store.upsert(changed, unit_vectors(20, seed=1))
    assert store.count() == 20
    got = store.collection().get(ids=[chunks[4].chunk_id], include=["documents"])
    assert got["documents"] == ["new chunk 4"]
    # persisted: a new client on the same folder sees the same count
    assert ChromaStore.open(data_dir, store.name).count() == 20


def test_upsert_of_nothing(store: ChromaStore) -> None:
    assert store.upsert([], np.zeros((0, DIM), dtype=np.float32)) == 0
    assert store.count() == 0


# -- metadata -------------------------------------------------------------------------------


def _is_scalar(value: object) -> bool:
    return isinstance(value, str | int | float | bool)


def test_flatten_metadata_scalars_headers_and_none() -> None:
    c = chunk(
        3,
        source="guide/install.md",
        headers=(Header(1, "Guide"), Header(2, "Install — ünïcode"), Header(3, "Linux")),
        metadata={
            "title": "Guide",
            "page": 2,
            "score": 0.5,
            "draft": False,
            "missing": None,
            "tags": ["a", "b"],
            "nested": {"k": [1, None]},
        },
    )
    meta = flatten_metadata(c)
    assert all(_is_scalar(v) for v in meta.values()), meta
    assert "missing" not in meta
    assert None not in meta.values()
    assert (meta["title"], meta["page"], meta["score"], meta["draft"]) == ("Guide", 2, 0.5, False)
    assert json.loads(str(meta["tags"])) == ["a", "b"]
    assert json.loads(str(meta["nested"])) == {"k": [1, None]}
    assert json.loads(str(meta["headers"])) == [
        {"level": 1, "text": "Guide"},
        {"level": 2, "text": "Install — ünïcode"},
        {"level": 3, "text": "Linux"},
    ]
    assert (meta["h1"], meta["h2"], meta["h3"]) == ("Guide", "Install — ünïcode", "Linux")
    assert not {"h4", "h5", "h6"} & set(meta)
    assert meta["source"] == "guide/install.md"
    assert meta["doc_id"] == c.doc_id
    assert (meta["chunk_index"], meta["start_index"], meta["end_index"]) == (
        3,
        30,
        30 + len(c.text),
    )


def test_flatten_metadata_without_headers() -> None:
    meta = flatten_metadata(chunk(0))
    assert meta["headers"] == "[]"
    assert not {f"h{i}" for i in range(1, 7)} & set(meta)


def test_flatten_metadata_all_six_levels() -> None:
    headers = tuple(Header(i, f"L{i}") for i in range(1, 7))
    meta = flatten_metadata(chunk(0, headers=headers))
    assert {k: meta[k] for k in (f"h{i}" for i in range(1, 7))} == {
        f"h{i}": f"L{i}" for i in range(1, 7)
    }


def test_flattened_metadata_is_accepted_by_chroma(store: ChromaStore) -> None:
    c = chunk(
        0,
        headers=(Header(1, "Top"), Header(2, "Sub")),
        metadata={"tags": ["x"], "nested": {"a": 1}, "gone": None, "ok": True},
    )
    store.upsert([c], unit_vectors(1))
    got = store.collection().get(ids=[c.chunk_id], include=["metadatas"])
    assert got["metadatas"][0] == flatten_metadata(c)


# -- query ----------------------------------------------------------------------------------


def test_query_returns_nearest_first(store: ChromaStore) -> None:
    n = 50
    chunks = [chunk(i, source=f"s{i % 3}.md") for i in range(n)]
    vectors = unit_vectors(n, seed=7)
    store.upsert(chunks, vectors)
    for target in (0, 17, 49):
        hits = store.query(vectors[target], k=5)
        assert len(hits) == 5
        assert hits[0].chunk_id == chunks[target].chunk_id
        assert hits[0].score == pytest.approx(1.0, abs=1e-4)
        assert hits[0].text == chunks[target].text
        assert hits[0].source == chunks[target].source
        assert hits[0].metadata["chunk_index"] == target
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        expected = np.argsort(-(vectors @ vectors[target]))[:5]
        assert [h.chunk_id for h in hits] == [chunks[i].chunk_id for i in expected]


def test_query_score_is_cosine_similarity(store: ChromaStore) -> None:
    a = np.zeros(DIM, dtype=np.float32)
    a[0] = 1.0
    b = np.zeros(DIM, dtype=np.float32)
    b[1] = 1.0
    store.upsert([chunk(0), chunk(1)], np.stack([a, b]))
    hits = store.query(a, k=2)
    assert [h.chunk_id for h in hits] == [chunk(0).chunk_id, chunk(1).chunk_id]
    assert hits[0].score == pytest.approx(1.0, abs=1e-4)
    assert hits[1].score == pytest.approx(0.0, abs=1e-4)


@pytest.mark.parametrize(
    ("where", "allowed"),
    [
        pytest.param({"source": "s1.md"}, {1, 4, 7, 10, 13, 16, 19}, id="one-key"),
        pytest.param({"source": "s2.md", "h1": "Even"}, {2, 8, 14, 20}, id="two-keys"),
        pytest.param({"chunk_index": 5}, {5}, id="int-value"),
    ],
)
def test_query_honours_where(store: ChromaStore, where: dict[str, Any], allowed: set[int]) -> None:
    n = 21
    chunks = [
        chunk(i, source=f"s{i % 3}.md", headers=(Header(1, "Even" if i % 2 == 0 else "Odd"),))
        for i in range(n)
    ]
    vectors = unit_vectors(n, seed=3)
    store.upsert(chunks, vectors)
    outside = min(set(range(n)) - allowed)  # the query is exactly a chunk the filter excludes
    hits = store.query(vectors[outside], k=len(allowed), where=where)
    assert {h.metadata["chunk_index"] for h in hits} == allowed
    assert all(h.score < 1.0 - 1e-4 for h in hits)
    inside = min(allowed)
    [best, *_] = store.query(vectors[inside], k=1, where=where)
    assert best.chunk_id == chunks[inside].chunk_id


# -- the Chroma server a data dir remembers ---------------------------------------------


def test_a_given_server_wins_else_the_recorded_one_else_the_embedded_store(
    data_dir: Path,
) -> None:
    from tasks.index.store import CHROMA_SERVER_FILE, chroma_server, recorded_server

    assert chroma_server(data_dir, None, 8000) == (None, 8000)  # nothing recorded: embedded
    (data_dir / CHROMA_SERVER_FILE).write_text("10.0.0.7:8123\n", encoding="utf-8")
    assert recorded_server(data_dir) == ("10.0.0.7", 8123)
    assert chroma_server(data_dir, None, 8000) == ("10.0.0.7", 8123)
    assert chroma_server(data_dir, "other", 9000) == ("other", 9000)  # a flag overrides
    assert chroma_server(data_dir, "", 8000) == (None, 8000)  # "": the embedded store


def test_remembering_a_server_needs_it_to_answer_and_empty_forgets_it(data_dir: Path) -> None:
    from tasks.common.errors import StateError
    from tasks.index.store import CHROMA_SERVER_FILE, remember_server

    record = data_dir / CHROMA_SERVER_FILE
    with pytest.raises(StoreError, match="127.0.0.1:9 does not answer"):
        remember_server(data_dir, "127.0.0.1", 9)  # a mistyped server is never recorded
    assert not record.exists()
    remember_server(data_dir, None, 8000)  # not given: nothing changes
    assert not record.exists()
    record.write_text("host:8000\n", encoding="utf-8")
    remember_server(data_dir, "", 8000)
    assert not record.exists()
    record.write_text("garbage", encoding="utf-8")
    with pytest.raises(StateError, match="host:port"):
        from tasks.index.store import recorded_server

        recorded_server(data_dir)


def test_readers_never_create_the_embedded_store(data_dir: Path) -> None:
    with pytest.raises(StoreError, match="no Chroma store"):
        ChromaStore.open(data_dir, "docflow", create=False)
    assert not (data_dir / "chroma").exists()


def test_inspect_and_query_create_nothing_in_the_data_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Commands that only read never create a folder (Chroma would make chroma/ on open)."""
    from flows.cli import main

    missing, empty = tmp_path / "missing", tmp_path / "empty"
    empty.mkdir()
    assert main(["inspect", "--data-dir", str(missing)]) == 2
    assert "does not exist" in capsys.readouterr().err and not missing.exists()
    assert main(["query", "bees", "--data-dir", str(missing)]) == 2
    assert not missing.exists()
    assert main(["inspect", "--data-dir", str(empty), "--json"]) == 0
    assert '"missing": true' in capsys.readouterr().out
    assert main(["query", "bees", "--data-dir", str(empty)]) == 2
    assert list(empty.iterdir()) == []
