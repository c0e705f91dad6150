"""Unit tests for tasks/index/manifest.py: the per-file protocol (begin/commit) and the pointers."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tasks.index.manifest import FileState, FileUpdate, Manifest, serving_collection

COL = "docflow"
ROOT = "/corpus"


def update(
    source: str = "a.md",
    ids: tuple[str, ...] = (),
    sha: str = "sha-1",
    fingerprint: str = "fp-1",
    status: str = "done",
    error: str | None = None,
) -> FileUpdate:
    return FileUpdate(source, ROOT, sha, fingerprint, status, ids, error)


@pytest.fixture
def manifest(data_dir: Path) -> Iterator[Manifest]:
    m = Manifest.open(data_dir)
    yield m
    m.close()


# -- begin / commit -------------------------------------------------------------------------


def test_begin_records_pending_without_touching_committed(manifest: Manifest) -> None:
    manifest.commit(COL, "run-1", [update(ids=("a1", "a2"))])
    manifest.begin(COL, "run-2", [update(ids=("a2", "a3"), sha="sha-2")])
    row = manifest.files(COL)["a.md"]
    assert row.status == "pending"
    assert row.pending_ids == ("a2", "a3")
    assert row.chunk_ids == ("a1", "a2")
    assert row.sha256 == "sha-1"  # the committed file's hash stays until commit
    assert row.run_id == "run-2"
    assert manifest.live_chunk_ids(COL) == {"a1", "a2"}


def test_begin_on_a_new_file_creates_a_pending_row_with_no_hash(manifest: Manifest) -> None:
    manifest.begin(COL, "run-1", [update(ids=("n1",))])
    row = manifest.files(COL)["a.md"]
    assert (row.status, row.sha256, row.chunk_ids, row.pending_ids) == ("pending", "", (), ("n1",))
    assert row.root == ROOT


def test_pending_ids_accumulate_over_begins_without_commit(manifest: Manifest) -> None:
    manifest.begin(COL, "run-1", [update(ids=("p1", "p2"))])
    manifest.begin(COL, "run-2", [update(ids=("p2", "p3"))])
    row = manifest.files(COL)["a.md"]
    assert row.pending_ids == ("p1", "p2", "p3")
    assert row.stored_ids == {"p1", "p2", "p3"}


def test_commit_sets_ids_hash_fingerprint_status_and_clears_pending(manifest: Manifest) -> None:
    manifest.commit(COL, "run-1", [update(ids=("old",))])
    manifest.begin(COL, "run-2", [update(ids=("new1", "new2"), sha="sha-2", fingerprint="fp-2")])
    manifest.commit(COL, "run-2", [update(ids=("new2", "new1"), sha="sha-2", fingerprint="fp-2")])
    row = manifest.files(COL)["a.md"]
    assert row == FileState(
        "a.md", ROOT, "sha-2", "fp-2", "done", None, ("new1", "new2"), (), "run-2"
    )


def test_commit_of_a_failed_file_records_the_error(manifest: Manifest) -> None:
    manifest.commit(COL, "run-1", [update(ids=("k",), status="failed", error="bad zip")])
    row = manifest.files(COL)["a.md"]
    assert (row.status, row.error, row.chunk_ids) == ("failed", "bad zip", ("k",))


def test_a_rolled_back_batch_leaves_no_row(manifest: Manifest) -> None:
    with pytest.raises(ValueError, match="boom"), manifest._transaction() as db:
        db.execute(
            "INSERT INTO files (collection, source, root, sha256, fingerprint, status, run_id, "
            "updated_at) VALUES ('docflow', 'x.md', '/r', '', '', 'pending', 'r', 0)"
        )
        raise ValueError("boom")
    assert manifest.files(COL) == {}


@pytest.mark.parametrize(
    ("committed", "pending", "expected"),
    [
        ((), (), set()),
        (("a", "b"), (), {"a", "b"}),
        ((), ("c",), {"c"}),
        (("a", "b"), ("b", "c"), {"a", "b", "c"}),
    ],
)
def test_stored_ids_is_committed_union_pending(
    committed: tuple[str, ...], pending: tuple[str, ...], expected: set[str]
) -> None:
    state = FileState("a.md", ROOT, "s", "f", "pending", None, committed, pending, "r")
    assert state.stored_ids == expected


def test_forget_removes_only_the_named_sources_of_that_collection(manifest: Manifest) -> None:
    manifest.commit(COL, "r", [update("a.md", ("a",)), update("b.md", ("b",))])
    manifest.commit("other", "r", [update("a.md", ("x",))])
    manifest.forget(COL, ["a.md", "never-there.md"])
    assert set(manifest.files(COL)) == {"b.md"}
    assert set(manifest.files("other")) == {"a.md"}


def test_drop_collection_only_affects_that_collection(manifest: Manifest) -> None:
    manifest.commit(COL, "r", [update("a.md", ("a",)), update("b.md", ("b",))])
    manifest.commit("docflow--v1", "r", [update("a.md", ("v",))])
    manifest.switch(COL, "docflow--v1", "r")
    manifest.drop_collection(COL)
    assert manifest.files(COL) == {}
    assert manifest.live_chunk_ids("docflow--v1") == {"v"}
    assert manifest.physical(COL) == "docflow--v1"  # pointers are not file rows


def test_collections_lists_every_collection_with_file_rows(manifest: Manifest) -> None:
    assert manifest.collections() == []
    manifest.commit("docflow--v1", "r", [update("a.md", ("v",))])
    manifest.begin(COL, "r", [update("b.md", ("b",))])  # a pending row counts
    manifest.switch("only-a-pointer", "x", "r")
    assert manifest.collections() == [COL, "docflow--v1"]


def test_live_chunk_ids_are_committed_ids_of_every_file(manifest: Manifest) -> None:
    manifest.commit(COL, "r", [update("a.md", ("a1", "a2")), update("b.md", ("b1",))])
    manifest.begin(COL, "r2", [update("b.md", ("b2",))])
    manifest.commit("other", "r", [update("c.md", ("c1",))])
    assert manifest.live_chunk_ids(COL) == {"a1", "a2", "b1"}
    assert manifest.live_chunk_ids("nothing") == set()


def test_files_of_some_sources_reads_only_their_rows(manifest: Manifest) -> None:
    many = [update(f"f{i:04d}.md", (f"id{i}",)) for i in range(1200)]  # > one IN (...) query
    manifest.commit(COL, "r", many)
    manifest.commit("other", "r", [update("f0001.md", ("elsewhere",))])
    wanted = [f"f{i:04d}.md" for i in range(0, 1200, 2)] + ["f0001.md", "missing.md"]
    rows = manifest.files(COL, sources=wanted)
    assert set(rows) == set(wanted) - {"missing.md"}
    everything = manifest.files(COL)
    assert rows == {s: everything[s] for s in rows}  # the same rows as a full read
    assert rows["f0001.md"].chunk_ids == ("id1",)  # not the other collection's row
    assert manifest.files(COL, sources=[]) == {}


def test_files_without_ids_keeps_everything_but_the_chunk_ids(manifest: Manifest) -> None:
    manifest.commit(COL, "r", [update("a.md", ("a1", "a2"))])
    manifest.begin(COL, "r2", [update("a.md", ("a3",), sha="sha-2")])
    manifest.commit(COL, "r", [update("b.md", ("b1",), status="failed", error="bad")])
    full, light = manifest.files(COL), manifest.files(COL, ids=False)
    assert set(light) == set(full) == {"a.md", "b.md"}
    for source, row in light.items():
        assert (row.chunk_ids, row.pending_ids) == ((), ())
        assert replace(row, chunk_ids=(), pending_ids=()) == replace(
            full[source], chunk_ids=(), pending_ids=()
        )


# -- pointers -------------------------------------------------------------------------------


def test_physical_defaults_to_the_name_and_follows_switches(manifest: Manifest) -> None:
    assert manifest.physical(COL) == COL
    manifest.switch(COL, "docflow--v1", "run-1")
    assert manifest.physical(COL) == "docflow--v1"
    manifest.switch(COL, "docflow--v2", "run-2")
    assert manifest.physical(COL) == "docflow--v2"
    assert manifest.physical("other") == "other"
    manifest.drop_pointer(COL)
    assert manifest.physical(COL) == COL


def test_switch_with_move_from_moves_the_file_rows(manifest: Manifest) -> None:
    manifest.commit(COL, "r", [update("a.md", ("a",)), update("b.md", ("b",))])
    manifest.commit("new", "r", [update("stale.md", ("s",))])  # leftover rows at the target
    manifest.commit("other", "r", [update("o.md", ("o",))])
    before = manifest.files(COL)
    manifest.switch(COL, "new", "run-2", move_from=COL)
    assert manifest.files(COL) == {}
    assert manifest.files("new") == before
    assert set(manifest.files("other")) == {"o.md"}
    assert manifest.physical(COL) == "new"


def test_switch_with_move_from_is_atomic(manifest: Manifest) -> None:
    manifest.commit(COL, "r", [update("a.md", ("a",))])
    manifest.commit("new", "r", [update("stale.md", ("s",))])
    manifest.db.execute(
        "CREATE TEMP TRIGGER refuse BEFORE INSERT ON pointers "
        "BEGIN SELECT RAISE(ABORT, 'pointer refused'); END"
    )
    with pytest.raises(sqlite3.DatabaseError, match="pointer refused"):
        manifest.switch(COL, "new", "run-2", move_from=COL)
    assert set(manifest.files(COL)) == {"a.md"}  # nothing moved
    assert set(manifest.files("new")) == {"stale.md"}  # nothing deleted
    assert manifest.physical(COL) == COL


def test_serving_collection_creates_no_state_when_absent(data_dir: Path) -> None:
    assert serving_collection(data_dir, COL) == COL
    assert not (data_dir / "state.db").exists()
    assert list(data_dir.iterdir()) == []


def test_serving_collection_reads_the_pointer(data_dir: Path) -> None:
    with Manifest.open(data_dir) as m:
        m.switch(COL, "docflow--v9", "r")
    assert serving_collection(data_dir, COL) == "docflow--v9"
    assert serving_collection(data_dir, "other") == "other"


def test_two_manifests_on_one_file_see_each_others_commits(data_dir: Path) -> None:
    with Manifest.open(data_dir) as first, Manifest.open(data_dir) as second:
        assert first.path == second.path
        first.commit(COL, "r1", [update("a.md", ("a",))])
        assert second.live_chunk_ids(COL) == {"a"}
        second.begin(COL, "r2", [update("a.md", ("b",))])
        second.switch(COL, "docflow--v2", "r2")
        assert first.files(COL)["a.md"].pending_ids == ("b",)
        assert first.physical(COL) == "docflow--v2"
    with Manifest.open(data_dir) as reopened:  # and it is on disk
        assert reopened.files(COL)["a.md"].stored_ids == {"a", "b"}


def test_a_manifest_of_an_earlier_release_gains_the_new_columns(data_dir: Path) -> None:
    import sqlite3

    old = sqlite3.connect(data_dir / "state.db")
    old.executescript(
        "CREATE TABLE files (collection TEXT NOT NULL, source TEXT NOT NULL, root TEXT NOT NULL,"
        " sha256 TEXT NOT NULL, fingerprint TEXT NOT NULL, status TEXT NOT NULL, error TEXT,"
        " chunk_ids TEXT NOT NULL DEFAULT '[]', pending_ids TEXT NOT NULL DEFAULT '[]',"
        " run_id TEXT NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (collection, source));"
        "INSERT INTO files VALUES ('c', 'a.md', '/r', 'sha', 'fp', 'failed', 'bad', '[]', '[]',"
        " 'r1', 0);"
    )
    old.commit()
    old.close()
    with Manifest(data_dir / "state.db", readonly=True) as reader:  # ingest --dry-run's open
        assert reader.files("c")["a.md"].attempt_sha256 == ""
        columns = {r[1] for r in reader.db.execute("PRAGMA table_info(files)")}
        assert "attempt_sha256" not in columns  # a reader does not migrate
    with Manifest.open(data_dir) as m:
        row = m.files("c")["a.md"]
        assert (row.status, row.attempt_sha256) == ("failed", "")
        m.commit("c", "r2", [], failed=[("a.md", "/r", "still bad", "sha-2")])
        assert m.files("c")["a.md"].attempt_sha256 == "sha-2"
