"""Unit tests for tasks/index/collection.py: both indexes written together, and reconciliation.

Real embedded Chroma and SQLite; vectors are small random unit vectors (the subject is
what each index holds, not embedding).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest

from tasks.common import failpoints
from tasks.common.config import IngestParams
from tasks.common.documents import Chunk, Header, make_chunk_id, model_input
from tasks.index.collection import Index, chunk_record, reconcile, record_text, stored_records
from tasks.index.lexical import LexicalIndex
from tasks.index.store import flatten_metadata
from tasks.split.factory import split_file
from tests.conftest import SAMPLE
from tests.unit.test_admin import unit_vectors

DIM = 8


def sample_chunks(extra: Path | None = None) -> list[Chunk]:
    """Chunks of the sample corpus (and ``extra``) with the ingest defaults."""
    params = IngestParams()
    chunks: list[Chunk] = []
    files = sorted(p for p in SAMPLE.rglob("*") if p.is_file()) + ([extra] if extra else [])
    for path in files:
        chunks.extend(split_file(path, params)[1])
    return chunks


def test_the_lexical_text_of_a_stored_record_is_what_the_model_read(tmp_path: Path) -> None:
    """A record read back from Chroma (flat metadata) indexes the same string as its Chunk."""
    page = tmp_path / "front-matter.md"
    page.write_text(
        "---\ntitle: Wax moths\ndescription: |\n  Larvae that tunnel\n  through comb.\n"
        "tags: [pests, comb]\n---\n# Signs\n\nSilk tunnels in stored frames.\n",
        encoding="utf-8",
    )
    chunks = sample_chunks(page)
    assert len(chunks) > 50
    assert any(c.metadata.get("title") for c in chunks) and any(c.headers for c in chunks)
    for chunk in chunks:
        assert record_text(chunk.text, flatten_metadata(chunk)) == model_input(chunk)
        assert chunk_record(chunk)[1] == model_input(chunk)


def _chunk(source: str, text: str, index: int = 0) -> Chunk:
    doc_id = source
    return Chunk(
        make_chunk_id(doc_id, "fp", index, text),
        doc_id,
        source,
        index,
        index,
        index + len(text),
        text,
        len(text),
        headers=(Header(1, "Bees"), Header(2, source.upper())),
        metadata={"source": source, "title": "Hive notes", "description": "All about bees."},
    )


@pytest.fixture
def index(data_dir: Path) -> Index:
    idx = Index.open(data_dir, "docflow")
    idx.vectors.collection("test-model", DIM)
    return idx


def test_upsert_and_delete_reach_both_indexes(index: Index) -> None:
    chunks = [_chunk("a.md", "Queens lay eggs."), _chunk("b.md", "Drones do not sting.")]
    assert index.upsert(chunks, unit_vectors(2)) == 2
    assert index.vectors.ids() == index.words.ids() == {c.chunk_id for c in chunks}
    assert set(index.words.search("hive notes drones", 5)) == {c.chunk_id for c in chunks}
    assert index.delete([chunks[0].chunk_id, "unknown"]) == 2
    assert index.vectors.ids() == index.words.ids() == {chunks[1].chunk_id}


def test_the_words_commit_after_the_vectors_are_written(index: Index, data_dir: Path) -> None:
    """The vectors go in while SQLite indexes the words; the words' transaction waits."""
    chunks = [_chunk("a.md", "Queens lay eggs."), _chunk("b.md", "Drones do not sting.")]
    seen: list[tuple[set[str], set[str], str]] = []

    def look() -> None:  # on the vectors' thread, once they are written
        words = LexicalIndex.open(data_dir, "docflow")  # another connection: committed rows
        seen.append((index.vectors.ids(), words.ids(), threading.current_thread().name))
        words.close()

    with failpoints.on("lexical:before-upsert", look):
        assert index.upsert(chunks, unit_vectors(2)) == 2
    [(vectors, words, thread)] = seen
    assert vectors == {c.chunk_id for c in chunks} and words == set()
    assert thread != threading.current_thread().name
    assert index.words.ids() == {c.chunk_id for c in chunks}


def test_reconcile_builds_a_missing_lexical_index_from_the_store(index: Index) -> None:
    """A collection written before the lexical index existed (or whose database was lost)."""
    chunks = sample_chunks()[:40]
    index.vectors.upsert(chunks, unit_vectors(len(chunks)))  # vectors only
    assert index.words.count() == 0
    result = reconcile(index)
    assert (result.added, result.removed) == (40, 0)
    fresh = LexicalIndex(":memory:")
    fresh.upsert(chunk_record(c) for c in chunks)
    body = "SELECT c.chunk_id, t.body, c.metadata FROM chunks c JOIN terms t ON t.rowid = c.id"

    def rows(db: sqlite3.Connection) -> list[tuple[str, str, dict[str, object]]]:
        # Chroma gives a float back within one ulp (a fresh checkout's sub-second mtime)
        return sorted((i, text, _rounded(json.loads(meta))) for i, text, meta in db.execute(body))

    assert rows(index.words.db) == rows(fresh.db)
    assert reconcile(index) == type(result)(0, 0)  # in step: nothing to do


def _rounded(meta: dict[str, object]) -> dict[str, object]:
    return {k: round(v, 5) if isinstance(v, float) else v for k, v in meta.items()}


def test_reconcile_removes_ids_the_store_lacks_and_adds_those_it_has(index: Index) -> None:
    kept, lost, orphan = _chunk("a.md", "kept"), _chunk("b.md", "lost"), _chunk("c.md", "orphan")
    index.upsert([kept, lost], unit_vectors(2))
    index.vectors.delete([lost.chunk_id])
    index.words.upsert([chunk_record(orphan)])
    index.vectors.upsert([_chunk("d.md", "new")], unit_vectors(1, 2))
    result = reconcile(index)
    assert (result.added, result.removed) == (1, 2)
    assert index.words.ids() == index.vectors.ids()


def test_reconcile_empties_the_lexical_index_of_a_missing_collection(data_dir: Path) -> None:
    words = LexicalIndex.open(data_dir, "gone")
    words.upsert([chunk_record(_chunk("a.md", "x"))])
    idx = Index.open(data_dir, "gone")
    assert not idx.exists()
    assert reconcile(idx).removed == 1 and idx.words.count() == 0


def test_stored_records_pages_through_the_whole_store(index: Index) -> None:
    chunks = [_chunk(f"f{i}.md", f"text number {i}") for i in range(7)]
    index.upsert(chunks, unit_vectors(7))
    records = list(stored_records(index.vectors))
    assert sorted(records) == sorted(chunk_record(c) for c in chunks)
    some = [chunks[2].chunk_id, chunks[5].chunk_id]
    assert {r[0] for r in stored_records(index.vectors, some)} == set(some)
