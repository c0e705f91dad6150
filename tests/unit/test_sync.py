"""Unit tests for tasks/index/sync.py with a real embedded Chroma, lexical index and manifest.

The store and the manifest are the subject: vectors are small random unit vectors. Every
check of the store's ids also checks that the lexical index holds the same ids.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tasks.common.documents import Chunk, Document, make_chunk_id
from tasks.common.runs import RunContext, SyncResult
from tasks.common.tables import DocumentRow
from tasks.index.collection import Index
from tasks.index.manifest import FileUpdate, Manifest
from tasks.index.sync import commit_batch, remove_sources

DIM = 8
MODEL = "test-model"
FP = "fp-1"
PHYSICAL = "docflow"


def unit_vectors(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def chunks_of(source: str, texts: Sequence[str]) -> list[Chunk]:
    doc = Document(" ".join(texts), {"source": source})
    out, start = [], 0
    for i, text in enumerate(texts):
        out.append(
            Chunk(
                chunk_id=make_chunk_id(doc.doc_id, FP, start, text),
                doc_id=doc.doc_id,
                source=source,
                chunk_index=i,
                start_index=start,
                end_index=start + len(text),
                text=text,
                n_chars=len(text),
                metadata={"source": source},
            )
        )
        start += len(text) + 1
    return out


def loaded(source: str, sha: str) -> DocumentRow:
    return DocumentRow(source, sha, "text", "loaded", document=Document("…", {"source": source}))


def failed(source: str, sha: str, error: str) -> DocumentRow:
    return DocumentRow(source, sha, "text", "failed", error=error)


def ids(chunks: Sequence[Chunk]) -> set[str]:
    return {c.chunk_id for c in chunks}


@pytest.fixture
def ctx(data_dir: Path, tmp_path: Path) -> RunContext:
    return RunContext("run-1", str(data_dir), "docflow", PHYSICAL, str(tmp_path), FP, MODEL)


@pytest.fixture
def store(data_dir: Path) -> Iterator[Index]:
    s = Index.open(data_dir, PHYSICAL)
    s.vectors.collection(MODEL, DIM)
    yield s
    s.close()


def stored_ids(store: Index) -> set[str]:
    """Return the vector store's ids, checking the lexical index holds exactly the same."""
    ids = store.vectors.ids()
    assert store.words.ids() == ids
    return ids


@pytest.fixture
def manifest(data_dir: Path) -> Iterator[Manifest]:
    m = Manifest.open(data_dir)
    yield m
    m.close()


def run(
    ctx: RunContext,
    store: Index,
    manifest: Manifest,
    rows: Sequence[DocumentRow],
    chunks: Sequence[Chunk],
    run_id: str = "run-1",
    seed: int = 0,
) -> SyncResult:
    ctx = replace(ctx, run_id=run_id)
    return commit_batch(ctx, store, manifest, rows, chunks, unit_vectors(len(chunks), seed))


def stored_texts(store: Index) -> dict[str, str]:
    got = store.vectors.collection().get(include=["documents"])
    return dict(zip(got["ids"], got["documents"] or [], strict=True))


def test_new_files_land_in_the_store_and_are_committed(
    ctx: RunContext, store: Index, manifest: Manifest
) -> None:
    a = chunks_of("a.md", ["one", "two", "three"])
    b = chunks_of("b.md", ["four"])
    result = run(ctx, store, manifest, [loaded("a.md", "sha-a"), loaded("b.md", "sha-b")], a + b)
    assert result == SyncResult(written=4, deleted=0)
    assert stored_texts(store) == {c.chunk_id: c.text for c in a + b}
    rows = manifest.files(PHYSICAL)
    assert set(rows) == {"a.md", "b.md"}
    row = rows["a.md"]
    assert (row.status, row.sha256, row.fingerprint, row.root) == ("done", "sha-a", FP, ctx.root)
    assert set(row.chunk_ids) == ids(a) and row.pending_ids == ()
    assert manifest.live_chunk_ids(PHYSICAL) == stored_ids(store)


def test_recommit_with_one_changed_chunk_deletes_exactly_the_stale_id(
    ctx: RunContext, store: Index, manifest: Manifest
) -> None:
    v1 = chunks_of("a.md", ["one", "two", "three"])
    other = chunks_of("b.md", ["untouched"])
    run(ctx, store, manifest, [loaded("a.md", "sha-1"), loaded("b.md", "sha-b")], v1 + other)
    v2 = chunks_of("a.md", ["one", "TWO", "three"])
    stale = ids(v1) - ids(v2)
    assert len(stale) == 1
    result = run(ctx, store, manifest, [loaded("a.md", "sha-2")], v2, run_id="run-2")
    assert result == SyncResult(written=3, deleted=1)
    assert stored_ids(store) == ids(v2) | ids(other)
    assert stored_ids(store) == manifest.live_chunk_ids(PHYSICAL)
    assert stored_texts(store)[v2[1].chunk_id] == "TWO"
    row = manifest.files(PHYSICAL)["a.md"]
    assert (row.sha256, row.run_id, row.status) == ("sha-2", "run-2", "done")


def test_rerun_of_the_same_batch_is_idempotent(
    ctx: RunContext, store: Index, manifest: Manifest
) -> None:
    a = chunks_of("a.md", ["one", "two"])
    run(ctx, store, manifest, [loaded("a.md", "sha-1")], a)
    result = run(ctx, store, manifest, [loaded("a.md", "sha-1")], a, run_id="run-2")
    assert result == SyncResult(written=2, deleted=0)
    assert store.vectors.count() == 2
    assert stored_ids(store) == manifest.live_chunk_ids(PHYSICAL) == ids(a)


def test_failed_document_keeps_its_previous_chunks(
    ctx: RunContext, store: Index, manifest: Manifest
) -> None:
    v1 = chunks_of("a.md", ["one", "two"])
    run(ctx, store, manifest, [loaded("a.md", "sha-1")], v1)
    b = chunks_of("b.md", ["bee"])
    rows = [
        failed("a.md", "sha-2", "cannot decode"),
        loaded("b.md", "sha-b"),
        failed("c.md", "sha-c", "empty pdf"),
    ]
    result = run(ctx, store, manifest, rows, b, run_id="run-2")
    assert result == SyncResult(written=1, deleted=0)
    assert stored_texts(store) == {c.chunk_id: c.text for c in v1 + b}
    files = manifest.files(PHYSICAL)
    a_row = files["a.md"]
    assert (a_row.status, a_row.error) == ("failed", "cannot decode")
    assert set(a_row.chunk_ids) == ids(v1)
    assert a_row.sha256 == "sha-1"  # the committed version's hash: retried as changed
    c_row = files["c.md"]
    assert (c_row.status, c_row.error, c_row.chunk_ids, c_row.sha256) == (
        "failed",
        "empty pdf",
        (),
        "",
    )
    assert manifest.live_chunk_ids(PHYSICAL) == stored_ids(store)


@pytest.mark.parametrize(
    "upserted", ["", "vectors", "both"], ids=["before-upsert", "vectors-only", "after-upsert"]
)
def test_pending_ids_of_a_crashed_batch_are_deleted_by_the_next_commit(
    ctx: RunContext, store: Index, manifest: Manifest, upserted: str
) -> None:
    v1 = chunks_of("a.md", ["one", "two"])
    run(ctx, store, manifest, [loaded("a.md", "sha-1")], v1)
    # a run that died between begin() and commit(), maybe after its upsert
    crashed = chunks_of("a.md", ["one", "crashed two", "crashed three"])
    manifest.begin(
        PHYSICAL,
        "run-2",
        [FileUpdate("a.md", ctx.root, "sha-2", FP, "done", tuple(sorted(ids(crashed))))],
    )
    if upserted == "vectors":  # died between the vector store and the lexical index
        store.vectors.upsert(crashed, unit_vectors(len(crashed), 1))
        assert store.words.ids() == ids(v1) != store.vectors.ids()
    elif upserted:
        store.upsert(crashed, unit_vectors(len(crashed), 1))
        assert stored_ids(store) == ids(v1) | ids(crashed)
    assert manifest.files(PHYSICAL)["a.md"].status == "pending"
    # the next run produces yet another version of the file
    v3 = chunks_of("a.md", ["one", "final two"])
    run(ctx, store, manifest, [loaded("a.md", "sha-3")], v3, run_id="run-3")
    assert stored_ids(store) == ids(v3)
    assert manifest.live_chunk_ids(PHYSICAL) == ids(v3)
    row = manifest.files(PHYSICAL)["a.md"]
    assert (row.status, row.pending_ids, row.sha256) == ("done", (), "sha-3")


@pytest.mark.parametrize(
    "upserted",
    [
        pytest.param(
            False,
            id="before-upsert",
        ),
        pytest.param(True, id="after-upsert"),
    ],
)
def test_failed_load_after_a_crashed_attempt_keeps_manifest_and_store_in_step(
    ctx: RunContext, store: Index, manifest: Manifest, upserted: bool
) -> None:
    v1 = chunks_of("a.md", ["one", "two"])
    run(ctx, store, manifest, [loaded("a.md", "sha-1")], v1)
    crashed = chunks_of("a.md", ["one", "crashed two"])
    manifest.begin(
        PHYSICAL,
        "run-2",
        [FileUpdate("a.md", ctx.root, "sha-2", FP, "done", tuple(sorted(ids(crashed))))],
    )
    if upserted:
        store.upsert(crashed, unit_vectors(len(crashed), 1))
    run(ctx, store, manifest, [failed("a.md", "sha-3", "corrupt")], [], run_id="run-3")
    row = manifest.files(PHYSICAL)["a.md"]
    assert (row.status, row.error) == ("failed", "corrupt")
    assert ids(v1) <= stored_ids(store)  # the previous chunks are kept
    assert manifest.live_chunk_ids(PHYSICAL) == stored_ids(store)


def test_file_with_no_chunks_any_more_loses_all_of_them(
    ctx: RunContext, store: Index, manifest: Manifest
) -> None:
    v1 = chunks_of("a.md", ["one", "two"])
    b = chunks_of("b.md", ["bee"])
    run(ctx, store, manifest, [loaded("a.md", "sha-1"), loaded("b.md", "sha-b")], v1 + b)
    result = run(ctx, store, manifest, [loaded("a.md", "sha-empty")], [], run_id="run-2")
    assert result == SyncResult(written=0, deleted=2)
    assert stored_ids(store) == ids(b)
    row = manifest.files(PHYSICAL)["a.md"]
    assert (row.status, row.chunk_ids) == ("done", ())


def test_remove_sources_deletes_committed_and_pending_ids_then_forgets(
    ctx: RunContext, store: Index, manifest: Manifest
) -> None:
    a = chunks_of("a.md", ["one", "two"])
    b = chunks_of("b.md", ["bee"])
    run(ctx, store, manifest, [loaded("a.md", "sha-a"), loaded("b.md", "sha-b")], a + b)
    crashed = chunks_of("a.md", ["one", "half-written"])
    manifest.begin(
        PHYSICAL,
        "run-2",
        [FileUpdate("a.md", ctx.root, "sha-2", FP, "done", tuple(sorted(ids(crashed))))],
    )
    store.upsert(crashed, unit_vectors(len(crashed), 1))
    result = remove_sources(ctx, store, manifest, ["a.md", "never-known.md"])
    assert result == SyncResult(written=0, deleted=len(ids(a) | ids(crashed)))
    assert stored_ids(store) == ids(b)
    assert set(manifest.files(PHYSICAL)) == {"b.md"}
    assert manifest.live_chunk_ids(PHYSICAL) == stored_ids(store)


def test_remove_sources_without_a_collection_only_forgets(
    ctx: RunContext, data_dir: Path, manifest: Manifest
) -> None:
    manifest.commit(PHYSICAL, "r", [FileUpdate("a.md", ctx.root, "s", FP, "done", ("x",))])
    missing = Index.open(data_dir, PHYSICAL)
    assert not missing.exists()
    assert remove_sources(ctx, missing, manifest, ["a.md"]) == SyncResult(0, 0)
    assert manifest.files(PHYSICAL) == {}
    assert remove_sources(ctx, missing, manifest, []) == SyncResult(0, 0)


def test_a_batch_reads_only_its_own_manifest_rows(
    ctx: RunContext, store: Index, manifest: Manifest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's work and memory stay the size of the batch, not of the collection."""
    others = [chunks_of(f"other-{i}.md", [f"text {i}"]) for i in range(50)]
    rows = [loaded(f"other-{i}.md", f"sha-{i}") for i in range(50)]
    run(ctx, store, manifest, rows, [c for cs in others for c in cs])
    read: list[set[str]] = []
    files = manifest.files

    def spy(collection: str, sources=None, ids=True):  # type: ignore[no-untyped-def]
        got = files(collection, sources=sources, ids=ids)
        read.append(set(got))
        return got

    monkeypatch.setattr(manifest, "files", spy)
    v1 = chunks_of("a.md", ["one", "two"])
    run(ctx, store, manifest, [loaded("a.md", "sha-1")], v1, run_id="run-2")
    v2 = chunks_of("a.md", ["one", "changed"])
    result = run(ctx, store, manifest, [loaded("a.md", "sha-2")], v2, run_id="run-3")
    assert result == SyncResult(written=2, deleted=1)  # the stale id still found and deleted
    remove_sources(ctx, store, manifest, ["other-0.md"])
    assert read == [set(), {"a.md"}, {"other-0.md"}]
    assert stored_ids(store) == ids(v2) | {c.chunk_id for cs in others[1:] for c in cs}
