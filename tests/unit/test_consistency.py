"""Unit tests for tasks/index/consistency.py: manifest, vector store and lexical index agree.

Real embedded Chroma, SQLite and Parquet tables, written by the test_admin helpers (a run's
tables, store and manifest, as a batch writes them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.common.errors import StateError
from tasks.common.tables import table_dir
from tasks.index import lexical
from tasks.index.collection import Index, chunk_record
from tasks.index.consistency import Checked, check
from tasks.index.manifest import Manifest
from tests.unit.test_admin import NAME, chunks_of, ingest, unit_vectors

R1, R2 = "20240101T000000-aaaaaa", "20240102T000000-bbbbbb"


def run_check(data_dir: Path) -> Checked:
    with Index.open(data_dir, NAME) as index, Manifest.open(data_dir) as manifest:
        return check(index, manifest, data_dir, NAME, "repair-run")


def agree(data_dir: Path) -> set[str]:
    """Return the store's ids, checking the manifest and the lexical index hold the same."""
    with Index.open(data_dir, NAME) as index, Manifest.open(data_dir) as manifest:
        stored = index.vectors.ids()
        assert index.words.ids() == stored
        assert manifest.live_chunk_ids(NAME) == stored
    return stored


@pytest.fixture
def history(data_dir: Path) -> Path:
    ingest(data_dir, NAME, {"a.md": ["one", "two"], "b.md": ["bee"]}, R1, seed=1)
    ingest(data_dir, NAME, {"c.md": ["sea"]}, R2, seed=2)
    return data_dir


def test_a_consistent_index_is_left_alone(history: Path) -> None:
    before = agree(history)
    assert run_check(history) == Checked()
    assert agree(history) == before


def test_lost_manifest_rows_are_rebuilt_from_the_tables(history: Path) -> None:
    with Manifest.open(history) as m:
        rows = {s: f.chunk_ids for s, f in m.files(NAME).items()}
        m.drop_collection(NAME)
    checked = run_check(history)
    assert checked.manifest_rebuilt == 3 and "rebuilt 3 from the tables" in checked.warnings[0]
    with Manifest.open(history) as m:
        assert {s: f.chunk_ids for s, f in m.files(NAME).items()} == rows
    agree(history)


def test_lost_manifest_rows_that_the_tables_cannot_explain_refuse(history: Path) -> None:
    with Manifest.open(history) as m:
        m.drop_collection(NAME)
    for part in table_dir(history, "chunks").rglob(f"run_id={R2}/*.parquet"):
        part.unlink()  # the tables no longer account for c.md's chunk
    with pytest.raises(StateError, match="docflow restore.*docflow reingest"):
        run_check(history)
    with Manifest.open(history) as m:
        assert m.files(NAME) == {}  # nothing half-rebuilt


def test_files_whose_chunks_left_the_store_are_marked_pending(history: Path) -> None:
    with Index.open(history, NAME) as index, Manifest.open(history) as m:
        lost = m.files(NAME)["a.md"].chunk_ids[:1]
        index.vectors.delete(lost)
    checked = run_check(history)
    assert checked.files_reindexed == 1
    assert "the store lacks 1 of the 4 chunks" in checked.warnings[0]
    with Manifest.open(history) as m:
        assert {s: f.status for s, f in m.files(NAME).items()} == {
            "a.md": "pending",
            "b.md": "done",
            "c.md": "done",
        }


def test_a_wiped_store_marks_every_file(history: Path) -> None:
    with Index.open(history, NAME) as index:
        index.vectors.delete(index.vectors.ids())
    checked = run_check(history)
    assert checked.files_reindexed == 3
    assert checked.lexical_removed == 4  # the lexical index follows the store


def test_chunks_no_file_claims_are_deleted_from_both_indexes(history: Path) -> None:
    stray = chunks_of("z.md", ["stray"])
    with Index.open(history, NAME) as index:
        index.upsert(stray, unit_vectors(1, 9))
    checked = run_check(history)
    assert checked.orphans_deleted == 1 and checked.warnings == (
        "the store held 1 chunks no file claims: deleted",
    )
    agree(history)


def test_a_missing_lexical_index_is_rebuilt_from_the_store(history: Path) -> None:
    before = agree(history)
    lexical.drop(history, NAME)
    checked = run_check(history)
    assert (checked.lexical_added, checked.lexical_removed) == (4, 0)
    assert agree(history) == before
    with Index.open(history, NAME) as index:
        fresh = {chunk_record(c)[0] for c in chunks_of("c.md", ["sea"])}
        assert fresh <= index.words.ids()
