"""Unit tests for tasks/index/admin.py: collection versions, clear, restore (real Chroma).

Every physical collection has a lexical index beside it (tasks/index/collection.py):
``names`` checks the two lists of collections agree, ``snapshot`` that a collection's two
indexes hold the same ids and texts.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from tasks.common.documents import Chunk, Document, make_chunk_id
from tasks.common.errors import StoreError
from tasks.common.names import version_name
from tasks.common.runs import RunContext, new_run_id
from tasks.common.tables import (
    DocumentRow,
    chunks_table,
    documents_table,
    embeddings_table,
    part_path,
    table_dir,
    write_atomic,
    write_run,
)
from tasks.embed.cache import EmbeddingCache
from tasks.index import lexical
from tasks.index.admin import (
    clear,
    drop_versions,
    restore,
    state_from_tables,
    versions,
)
from tasks.index.collection import Index, record_text
from tasks.index.lexical import LexicalIndex
from tasks.index.manifest import FileUpdate, Manifest, serving_collection
from tasks.index.store import ChromaStore, collection_names, make_client
from tasks.index.sync import commit_batch, remove_sources

DIM = 8
MODEL = "test-model"
FP = "fp-1"
NAME = "docflow"


def unit_vectors(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def chunks_of(source: str, texts: Sequence[str]) -> list[Chunk]:
    doc = Document(" ".join(texts), {"source": source})
    starts = np.cumsum([0] + [len(t) + 1 for t in texts[:-1]]).tolist()
    return [
        Chunk(
            chunk_id=make_chunk_id(doc.doc_id, FP, start, text),
            doc_id=doc.doc_id,
            source=source,
            chunk_index=i,
            start_index=start,
            end_index=start + len(text),
            text=text,
            n_chars=len(text),
            metadata={"source": source, "title": source.upper()},
        )
        for i, (start, text) in enumerate(zip(starts, texts, strict=True))
    ]


def names(data_dir: Path) -> set[str]:
    """Return the physical collections (the vector store's and the lexical indexes' agree)."""
    got = set(collection_names(make_client(path=data_dir / "chroma")))
    assert set(lexical.physical_names(data_dir)) == got
    return got


def make_collection(data_dir: Path, physical: str, rows: int = 0) -> None:
    """Create a collection with one manifest row per ``rows`` (sources f0.md, f1.md...)."""
    with Index.open(data_dir, physical) as index:
        index.vectors.collection(MODEL, DIM)
    with Manifest.open(data_dir) as m:
        m.commit(
            physical,
            "r",
            [
                FileUpdate(f"f{i}.md", "/root", "s", FP, "done", (f"{physical}-{i}",))
                for i in range(rows)
            ],
        )


def ingest(
    data_dir: Path,
    physical: str,
    files: Mapping[str, Sequence[str]],
    run_id: str,
    collection: str = NAME,
    seed: int = 0,
    model: str = MODEL,
    dim: int = DIM,
    deleted: Sequence[str] = (),
    status: str = "completed",
    mode: str = "incremental",
) -> list[Chunk]:
    """Write one batch like a run does: table parts, store + manifest, deletions, a runs row."""
    chunks = [c for source, texts in files.items() for c in chunks_of(source, texts)]
    vectors = unit_vectors(len(chunks), seed, dim)
    rows = [
        DocumentRow(s, f"sha-{s}-{seed}", "text", "loaded", document=Document("x", {"source": s}))
        for s in files
    ]
    write_atomic(documents_table(rows), part_path(data_dir, "documents", run_id, 0))
    write_atomic(chunks_table(chunks), part_path(data_dir, "chunks", run_id, 0))
    ids = [c.chunk_id for c in chunks]
    write_atomic(
        embeddings_table(ids, model, vectors), part_path(data_dir, "embeddings", run_id, 0)
    )
    store = Index.open(data_dir, physical)
    store.vectors.ensure(model, lambda: dim)
    ctx = RunContext(run_id, str(data_dir), collection, physical, "/root", FP, model)
    with store, Manifest.open(data_dir) as manifest:
        commit_batch(ctx, store, manifest, rows, chunks, vectors)
        remove_sources(ctx, store, manifest, deleted)
    run = {
        "run_id": run_id,
        "collection": collection,
        "status": status,
        "mode": mode,
        "started_at": run_id,
        "physical": physical,
        "root": "/root",
        "content_fingerprint": FP,
        "deleted_sources": list(deleted),
    }
    write_run(data_dir, run_id, run)
    return chunks


def snapshot(data_dir: Path, physical: str) -> dict[str, tuple[str, list[float], dict[str, Any]]]:
    """Return the collection's rows; its lexical index must hold the same ids and texts."""
    got = (
        ChromaStore.open(data_dir, physical)
        .collection()
        .get(include=["documents", "embeddings", "metadatas"])
    )
    with LexicalIndex.open(data_dir, physical) as words:
        assert words.ids() == set(got["ids"])
        sql = "SELECT c.chunk_id, t.body FROM chunks c JOIN terms t ON t.rowid = c.id"
        bodies = dict(words.db.execute(sql))
    for cid, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
        assert bodies[cid] == record_text(text, meta)
    return {
        cid: (text, np.asarray(vec, dtype=np.float32).tolist(), dict(meta))
        for cid, text, vec, meta in zip(
            got["ids"], got["documents"], got["embeddings"], got["metadatas"], strict=True
        )
    }


# -- versions -------------------------------------------------------------------------------


def test_version_name_format() -> None:
    assert version_name(NAME, "20240501T101112-0a1b2c") == "docflow--v20240501T101112-0a1b2c"


@pytest.mark.parametrize(
    ("name", "decoys"),
    [
        (
            NAME,
            ["docflow-other", "docflowx", "docflow--vbogus", "other--v{rid}", "docflow-o--v{rid}"],
        ),
        ("my.docs", ["myXdocs--v{rid}", "my.docs2", "my.docs--v{rid}x"]),
    ],
)
def test_versions_finds_the_name_and_its_version_names_only(
    data_dir: Path, name: str, decoys: list[str]
) -> None:
    rid1, rid2 = "20240501T101112-0a1b2c", new_run_id()
    mine = [name, version_name(name, rid1), version_name(name, rid2)]
    for physical in mine + [d.format(rid=rid1) for d in decoys]:
        make_collection(data_dir, physical)
    assert versions(data_dir, name) == sorted(mine)


def test_drop_versions_keeps_the_named_one_and_other_names(data_dir: Path) -> None:
    keep, old = version_name(NAME, new_run_id()), version_name(NAME, "20200101T000000-abcdef")
    other, other_version = "docflow-other", version_name("docflow-other", new_run_id())
    for physical in (NAME, keep, old, other, other_version):
        make_collection(data_dir, physical, rows=2)
    dropped = drop_versions(data_dir, NAME, keep=keep)
    assert sorted(dropped) == sorted([NAME, old])
    assert names(data_dir) == {keep, other, other_version}
    with Manifest.open(data_dir) as m:
        assert m.files(NAME) == {} and m.files(old) == {}
        for physical in (keep, other, other_version):
            assert len(m.files(physical)) == 2


# -- clear ----------------------------------------------------------------------------------


@pytest.mark.parametrize("drop_cache", [False, True])
def test_clear_drops_this_collection_only(data_dir: Path, drop_cache: bool) -> None:
    rid_mine, rid_other = new_run_id(), new_run_id()
    physical = version_name(NAME, rid_mine)
    ingest(data_dir, physical, {"a.md": ["one", "two"]}, rid_mine)
    make_collection(data_dir, NAME, rows=1)  # a leftover unversioned collection
    with Manifest.open(data_dir) as m:
        m.switch(NAME, physical, rid_mine)
    ingest(data_dir, "docflow-other", {"b.md": ["bee"]}, rid_other, collection="docflow-other")
    cache = EmbeddingCache.open(data_dir)
    cache.put(MODEL, ["cached text"], unit_vectors(1))
    cache.close()

    result = clear(data_dir, NAME, drop_cache=drop_cache)

    assert sorted(result.collections) == sorted([NAME, physical])
    assert (result.runs, result.cache_dropped) == (1, drop_cache)
    assert names(data_dir) == {"docflow-other"}
    with Manifest.open(data_dir) as m:
        assert m.physical(NAME) == NAME
        assert m.files(NAME) == {} and m.files(physical) == {}
        assert set(m.files("docflow-other")) == {"b.md"}
    for table in ("documents", "chunks", "embeddings"):
        assert not (table_dir(data_dir, table) / f"run_id={rid_mine}").exists()
        assert part_path(data_dir, table, rid_other, 0).is_file()
    assert not (table_dir(data_dir, "runs") / f"{rid_mine}.parquet").exists()
    assert (table_dir(data_dir, "runs") / f"{rid_other}.parquet").is_file()
    assert (data_dir / "cache").exists() is not drop_cache
    if not drop_cache:
        cache = EmbeddingCache.open(data_dir)
        assert cache.get(MODEL, ["cached text"])[0] is not None
        cache.close()


@pytest.mark.parametrize("versioned", [False, True], ids=["unversioned", "versioned"])
def test_clear_drops_manifest_rows_of_collections_the_store_no_longer_has(
    data_dir: Path, versioned: bool
) -> None:
    rid = new_run_id()
    physical = version_name(NAME, rid) if versioned else NAME
    ingest(data_dir, physical, {"a.md": ["one", "two"]}, rid)
    ingest(data_dir, "docflow-other", {"b.md": ["bee"]}, new_run_id(), collection="other")
    with Manifest.open(data_dir) as m:
        m.switch(NAME, physical, rid)
    ChromaStore.open(data_dir, physical).drop()  # the Chroma dir was lost or wiped
    assert set(collection_names(make_client(path=data_dir / "chroma"))) == {"docflow-other"}

    result = clear(data_dir, NAME)

    assert result.collections == [physical]
    assert names(data_dir) == {"docflow-other"}  # its lexical index went too
    with Manifest.open(data_dir) as m:
        assert m.files(physical) == {}  # else the next ingest skips every file as unchanged
        assert m.physical(NAME) == NAME
        assert set(m.files("docflow-other")) == {"b.md"}


def test_drop_versions_keeps_manifest_rows_of_the_kept_version(data_dir: Path) -> None:
    keep, stale = version_name(NAME, new_run_id()), version_name(NAME, "20200101T000000-abcdef")
    make_collection(data_dir, keep, rows=2)
    make_collection(data_dir, stale, rows=1)
    ChromaStore.open(data_dir, keep).drop()
    ChromaStore.open(data_dir, stale).drop()
    assert drop_versions(data_dir, NAME, keep=keep) == [stale]
    with Manifest.open(data_dir) as m:
        assert len(m.files(keep)) == 2 and m.files(stale) == {}


def test_clear_of_an_empty_data_dir(data_dir: Path) -> None:
    result = clear(data_dir, NAME)
    assert (result.collections, result.runs, result.cache_dropped) == ([], 0, False)


# -- restore --------------------------------------------------------------------------------


@pytest.mark.parametrize("lost", [False, True], ids=["old-present", "old-lost"])
def test_restore_rebuilds_the_serving_collection_from_the_tables(
    data_dir: Path, lost: bool
) -> None:
    r1, r2, r3 = "20240101T000000-aaaaaa", "20240102T000000-bbbbbb", "20240103T000000-cccccc"
    ingest(data_dir, NAME, {"a.md": ["one", "two", "three"], "b.md": ["bee"]}, r1, seed=1)
    ingest(data_dir, NAME, {"a.md": ["one", "TWO", "three"]}, r2, seed=2)  # one stale chunk
    old = ChromaStore.open(data_dir, NAME)
    old.update_metadata(content_fingerprint=FP)
    before = snapshot(data_dir, NAME)
    with Manifest.open(data_dir) as m:
        rows = m.files(NAME)
        assert set(before) == m.live_chunk_ids(NAME)
    assert len(before) == 4
    if lost:
        old.drop()

    result = restore(data_dir, NAME, r3)

    physical = version_name(NAME, r3)
    assert (result.physical, result.chunks, result.missing) == (physical, 4, 0)
    assert snapshot(data_dir, physical) == before  # ids, texts, vectors and metadata
    assert names(data_dir) == {physical}
    assert serving_collection(data_dir, NAME) == physical
    with Manifest.open(data_dir) as m:
        assert m.files(NAME) == {}
        assert m.files(physical) == rows
    meta = ChromaStore.open(data_dir, physical).metadata()
    assert (meta["embedding_model"], meta["dimension"]) == (MODEL, DIM)
    assert meta.get("content_fingerprint") == FP  # from the manifest rows when the store is lost


def test_restore_follows_the_pointer_of_a_restored_version(data_dir: Path) -> None:
    r1, r2, r3 = "20240101T000000-aaaaaa", "20240102T000000-bbbbbb", "20240103T000000-cccccc"
    ingest(data_dir, NAME, {"a.md": ["one", "two"]}, r1)
    before = snapshot(data_dir, NAME)
    first = restore(data_dir, NAME, r2)
    second = restore(data_dir, NAME, r3)
    assert names(data_dir) == {second.physical}
    assert serving_collection(data_dir, NAME) == second.physical != first.physical
    assert snapshot(data_dir, second.physical) == before


def test_restore_after_a_reingest_with_a_model_of_another_dimension(data_dir: Path) -> None:
    r1, r2 = "20240101T000000-aaaaaa", "20240102T000000-bbbbbb"
    ingest(data_dir, NAME, {"a.md": ["one", "two"]}, r1)
    physical = version_name(NAME, r2)  # what docflow reingest --model new-model does
    ingest(data_dir, physical, {"a.md": ["one", "two"]}, r2, model="new-model", dim=2 * DIM)
    with Manifest.open(data_dir) as m:
        m.switch(NAME, physical, r2)
    drop_versions(data_dir, NAME, keep=physical)
    before = snapshot(data_dir, physical)
    result = restore(data_dir, NAME, "20240103T000000-cccccc")
    assert (result.chunks, result.missing) == (2, 0)
    assert snapshot(data_dir, result.physical) == before


def test_restore_counts_live_chunks_missing_from_the_tables(data_dir: Path) -> None:
    r1 = "20240101T000000-aaaaaa"
    ingest(data_dir, NAME, {"a.md": ["one", "two"]}, r1)
    extra = chunks_of("b.md", ["not in any table"])
    ctx = RunContext("r-x", str(data_dir), NAME, NAME, "/root", FP, MODEL)
    row = DocumentRow("b.md", "sha", "text", "loaded", document=Document("x", {"source": "b.md"}))
    with Manifest.open(data_dir) as m, Index.open(data_dir, NAME) as index:
        commit_batch(ctx, index, m, [row], extra, unit_vectors(1))
    result = restore(data_dir, NAME, new_run_id())
    assert (result.chunks, result.missing) == (2, 1)


def _manifest_lost(data_dir: Path) -> None:
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (data_dir / name).unlink(missing_ok=True)


def _history(data_dir: Path) -> tuple[str, str]:
    """Runs r1..r4 of NAME: change a.md, delete b.md, add c.md, a failed run; another name."""
    r1, r2, r3, r4 = (f"2024010{i}T000000-aaaaaa" for i in range(1, 5))
    ingest(data_dir, NAME, {"a.md": ["one", "two", "three"], "b.md": ["bee"]}, r1, seed=1)
    ingest(data_dir, NAME, {"a.md": ["one", "TWO", "three"]}, r2, seed=2)
    ingest(data_dir, NAME, {"c.md": ["sea"]}, r3, seed=3, deleted=["b.md"])
    ingest(data_dir, "other", {"o.md": ["oh"]}, "20240105T000000-bbbbbb", collection="other")
    return r2, r3


def test_state_from_tables_replays_completed_runs(data_dir: Path) -> None:
    r2, r3 = _history(data_dir)
    with Manifest.open(data_dir) as m:
        expected = m.files(NAME)
    # a failed run: its chunks are not what the collection held after the last completed run
    ingest(data_dir, "scratch", {"a.md": ["failed"]}, "20240104T000000-aaaaaa", status="failed")
    rows, fingerprint = state_from_tables(data_dir, NAME)
    assert fingerprint == FP
    assert {r.source: (r.chunk_ids, r.sha256, r.fingerprint, r.root) for r in rows} == {
        s: (f.chunk_ids, f.sha256, f.fingerprint, f.root) for s, f in expected.items()
    }
    assert {f.run_id for f in expected.values()} == {r2, r3}


def test_state_from_tables_starts_at_the_latest_reingest(data_dir: Path) -> None:
    _history(data_dir)
    physical = version_name(NAME, "20240106T000000-cccccc")
    ingest(data_dir, physical, {"z.md": ["zed"]}, "20240106T000000-cccccc", mode="reingest")
    rows, _ = state_from_tables(data_dir, NAME)
    assert [r.source for r in rows] == ["z.md"]
    assert state_from_tables(data_dir, "nothing") == ([], None)


@pytest.mark.parametrize("store_lost", [False, True], ids=["store-kept", "store-lost"])
def test_restore_without_the_manifest_rebuilds_store_and_manifest_from_the_tables(
    data_dir: Path, store_lost: bool
) -> None:
    _history(data_dir)
    ChromaStore.open(data_dir, NAME).update_metadata(content_fingerprint=FP)
    before = snapshot(data_dir, NAME)
    with Manifest.open(data_dir) as m:
        rows_before = m.files(NAME)
    assert sorted(rows_before) == ["a.md", "c.md"] and len(before) == 4
    _manifest_lost(data_dir)
    shutil.rmtree(data_dir / "cache", ignore_errors=True)
    if store_lost:
        ChromaStore.open(data_dir, NAME).drop()

    result = restore(data_dir, NAME, "20240109T000000-dddddd")

    assert (result.chunks, result.missing) == (4, 0)
    assert snapshot(data_dir, result.physical) == before
    assert serving_collection(data_dir, NAME) == result.physical
    assert ChromaStore.open(data_dir, result.physical).metadata()["content_fingerprint"] == FP
    with Manifest.open(data_dir) as m:
        rows = m.files(result.physical)
    assert {
        s: (f.chunk_ids, f.sha256, f.fingerprint, f.root, f.status) for s, f in rows.items()
    } == {
        s: (f.chunk_ids, f.sha256, f.fingerprint, f.root, f.status) for s, f in rows_before.items()
    }
    assert not (data_dir / "cache").exists()  # nothing was embedded


def test_restore_records_the_fingerprint_of_the_manifest_when_the_store_is_lost(
    data_dir: Path,
) -> None:
    ingest(data_dir, NAME, {"a.md": ["one", "two"]}, "20240101T000000-aaaaaa")
    ChromaStore.open(data_dir, NAME).drop()
    result = restore(data_dir, NAME, new_run_id())
    assert ChromaStore.open(data_dir, result.physical).metadata()["content_fingerprint"] == FP


def test_restore_with_an_empty_manifest_raises(data_dir: Path) -> None:
    make_collection(data_dir, NAME)
    with pytest.raises(StoreError, match="nothing to restore"):
        restore(data_dir, NAME, new_run_id())
    assert names(data_dir) == {NAME}


def _tables_removed(data_dir: Path) -> None:
    for table in ("documents", "chunks", "embeddings"):
        for part in table_dir(data_dir, table).rglob("*.parquet"):
            part.unlink()


def _vectors_of_another_model(data_dir: Path) -> None:
    (part,) = table_dir(data_dir, "embeddings").rglob("*.parquet")
    ids = pq.read_table(part).column("chunk_id").to_pylist()
    write_atomic(embeddings_table(ids, "other-model", unit_vectors(len(ids))), part)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(
            _tables_removed,
            id="no-table-parts",
        ),
        pytest.param(_vectors_of_another_model, id="vectors-of-another-model"),
    ],
)
def test_restore_without_usable_vectors_raises_and_keeps_the_old_collection(
    data_dir: Path, damage: Callable[[Path], None]
) -> None:
    ingest(data_dir, NAME, {"a.md": ["one", "two"]}, "20240101T000000-aaaaaa")
    before = snapshot(data_dir, NAME)
    damage(data_dir)
    with pytest.raises(StoreError, match="no stored vectors"):
        restore(data_dir, NAME, new_run_id())
    assert names(data_dir) == {NAME}
    assert serving_collection(data_dir, NAME) == NAME
    assert snapshot(data_dir, NAME) == before
