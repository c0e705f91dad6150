"""Unit tests for tasks/common/sqlite.py: damaged files, read-only opens, failed writes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tasks.common.errors import StateError
from tasks.common.sqlite import set_aside
from tasks.embed.cache import EmbeddingCache
from tasks.index.lexical import LexicalIndex
from tasks.index.manifest import Manifest, serving_collection


def test_a_garbage_file_is_a_state_error_naming_it_and_its_cure(tmp_path: Path) -> None:
    for cls, cure in (
        (Manifest, "docflow restore"),
        (LexicalIndex, "rebuilds it from the vector store"),
        (EmbeddingCache, "delete that file (the index is not in it)"),
    ):
        path = tmp_path / f"{cls.__name__}.db"
        path.write_bytes(b"not a database at all " * 100)
        with pytest.raises(StateError) as info:
            cls(path)
        assert str(path) in str(info.value) and cure in str(info.value)
        assert "\n" not in str(info.value)


def test_a_truncated_manifest_fails_the_integrity_check(data_dir: Path) -> None:
    with Manifest.open(data_dir) as m:
        m.db.execute("CREATE TABLE filler (x TEXT)")
        m.db.executemany("INSERT INTO filler VALUES (?)", [("x" * 500,)] * 2000)
    path = data_dir / "state.db"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(StateError, match="damaged"):  # at open, or at the integrity check
        with Manifest.open(data_dir) as m:
            m.check_integrity()


def test_read_only_open_writes_nothing_and_falls_back_to_immutable(data_dir: Path) -> None:
    with Manifest.open(data_dir) as m:
        m.switch("docflow", "docflow--v20240101T000000-abcdef", "r1")
    for extra in ("state.db-wal", "state.db-shm"):
        (data_dir / extra).unlink(missing_ok=True)
        (data_dir / extra).mkdir()  # WAL files cannot be created: a writable open fails
    with pytest.raises(StateError):
        Manifest.open(data_dir)
    assert serving_collection(data_dir, "docflow") == "docflow--v20240101T000000-abcdef"
    with Manifest(data_dir / "state.db", readonly=True) as ro, pytest.raises(sqlite3.Error):
        ro.db.execute("DELETE FROM pointers")


def test_a_write_that_fails_rolls_back_and_names_the_file(data_dir: Path) -> None:
    with Manifest.open(data_dir) as m:
        m.switch("docflow", "docflow", "r1")
        with pytest.raises(StateError, match=f"cannot write {data_dir / 'state.db'}"):
            with m._transaction() as db:
                db.execute("UPDATE pointers SET run_id = 'r2'")
                db.execute("INSERT INTO no_such_table VALUES (1)")
        assert m.db.execute("SELECT run_id FROM pointers").fetchone()[0] == "r1"


def test_set_aside_renames_the_file_and_drops_its_wal(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"x")
    (tmp_path / "state.db-wal").write_bytes(b"w")
    moved = set_aside(path)
    assert moved.name.startswith("state.db.corrupt-") and moved.read_bytes() == b"x"
    assert not path.exists() and not (tmp_path / "state.db-wal").exists()


def test_open_or_set_aside_keeps_a_sound_file_and_replaces_a_damaged_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "words.sqlite"
    with LexicalIndex(path) as words:
        words.upsert([("c1", "bees in winter", {})])
    opened, moved = LexicalIndex.open_or_set_aside(path, check=True)
    with opened:
        assert moved is None and opened.ids() == {"c1"}  # a sound file is kept
    path.write_bytes(b"not a database at all " * 100)
    opened, moved = LexicalIndex.open_or_set_aside(path)
    with opened:
        assert opened.count() == 0  # a fresh, empty index in its place
    assert moved is not None and moved.name.startswith("words.sqlite.corrupt-")
    assert moved.read_bytes().startswith(b"not a database")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(StateError):  # no database there to set aside: the error stands
        LexicalIndex.open_or_set_aside(tmp_path / "a-file" / "x.sqlite")
