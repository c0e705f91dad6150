"""Unit tests for tasks/index/held.py: a run's store files, held open across its batches.

Real files: an embedded Chroma, the lexical index and the manifest in a temporary data dir.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from tasks.index.collection import Index
from tasks.index.held import holding, store_files
from tasks.index.manifest import Manifest


def is_open(files: tuple[Index, Manifest]) -> bool:
    """Return whether both SQLite connections of ``files`` still answer."""
    index, manifest = files
    try:
        index.words.db.execute("SELECT 1")
        manifest.db.execute("SELECT 1")
    except sqlite3.ProgrammingError:  # "Cannot operate on a closed database."
        return False
    return True


def wal_files(data_dir: Path) -> list[str]:
    """Return the names of the WAL journals left in ``data_dir`` (any depth)."""
    return sorted(p.name for p in data_dir.rglob("*-wal"))


def test_within_a_block_every_call_gets_the_same_open_files(tmp_path: Path) -> None:
    with holding():
        with store_files(tmp_path, "docflow") as first:
            pass
        assert is_open(first)  # the block of the call ended, the holding block did not
        with store_files(tmp_path, "docflow") as second:
            pass
        assert second[0] is first[0] and second[1] is first[1]
    assert not is_open(first)
    assert wal_files(tmp_path) == []  # closed as a store task always left them


def test_outside_a_block_each_call_opens_and_closes_its_own(tmp_path: Path) -> None:
    with store_files(tmp_path, "docflow") as first:
        assert is_open(first)
    assert not is_open(first)
    with store_files(tmp_path, "docflow") as second:
        assert second[0] is not first[0]
    assert wal_files(tmp_path) == []


def test_a_call_that_raises_closes_what_it_held_and_the_next_one_opens_afresh(
    tmp_path: Path,
) -> None:
    with holding():
        with pytest.raises(RuntimeError), store_files(tmp_path, "docflow") as first:
            raise RuntimeError("a failed batch")
        assert not is_open(first)  # a retry does not reuse a connection the failure used
        with store_files(tmp_path, "docflow") as second:
            assert second[0] is not first[0] and is_open(second)


def test_collections_are_held_apart_and_nested_blocks_share_the_outer_ones(
    tmp_path: Path,
) -> None:
    with holding():
        with store_files(tmp_path, "a") as a:
            pass
        with holding(), store_files(tmp_path, "b") as b:
            pass
        assert is_open(b)  # the inner block does not close what the outer one holds
        assert a[0] is not b[0] and a[0].words.path != b[0].words.path
    assert not is_open(a) and not is_open(b)


def test_another_thread_opens_its_own_files(tmp_path: Path) -> None:
    """SQLite connections belong to their thread: a thread not holding opens and closes."""
    seen: list[tuple[Index, Manifest]] = []

    def other() -> None:
        with store_files(tmp_path, "docflow") as files:
            seen.append(files)

    with holding(), store_files(tmp_path, "docflow") as mine:
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert seen[0][0] is not mine[0]
        assert is_open(mine)
    assert not is_open(seen[0])
