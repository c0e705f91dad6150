"""The embedded store in a process of its own during a run (tasks/index/store_process.py).

Real Chroma in the child and in this process: what a served block writes through the
child is what this process reads after it, errors come back as the child raised them, a
child killed mid-run fails one call in one line and the next call starts another, and the
child ends with its parent.
"""

from __future__ import annotations

import os
import signal
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tasks.common.documents import Chunk
from tasks.common.errors import StateError, StoreError
from tasks.index import store_process
from tasks.index.store import ChromaStore, make_client
from tests.orphans import survivor_of_killed_parent

MODEL = "all-MiniLM-L6-v2"


def chunks(n: int, source: str = "hives.md") -> list[Chunk]:
    return [
        Chunk(
            chunk_id=f"{source}:{i}",
            doc_id=source,
            source=source,
            text=f"Bees of hive {i} cluster in winter.",
            n_chars=34,
            chunk_index=i,
            start_index=0,
            end_index=10,
            metadata={"type": "markdown"},
        )
        for i in range(n)
    ]


def vectors(n: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    got = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return got / np.linalg.norm(got, axis=1, keepdims=True)


@pytest.fixture
def store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(store_process.ENV, "1")  # the default on 4 cores or more
    yield tmp_path / "data" / "chroma"
    store_process.stop()


def open_store(path: Path) -> ChromaStore:
    return ChromaStore(make_client(path), "docflow")


def test_a_served_store_is_written_in_the_child_and_read_here_after(store_path: Path) -> None:
    rows, vecs = chunks(30), vectors(30)
    with store_process.serving(store_path):
        store = open_store(store_path)
        assert isinstance(store.client, store_process.ProcessClient)
        store.ensure(MODEL, lambda: 8)
        assert store.upsert(rows, vecs) == 30 and store.count() == 30
        store.update_metadata(fingerprint="abc")
        assert store.metadata()["fingerprint"] == "abc"
        assert store.delete(["hives.md:0", "hives.md:1", "missing"]) == 3
        hits = store.query(vecs[5], k=1)
        assert [h.chunk_id for h in hits] == ["hives.md:5"] and hits[0].score == pytest.approx(1)
        assert len(store.ids()) == 28
        assert store_process._child is not None and store_process._child.alive()
    # the block closed the store in the child: this process opens what it wrote, index included
    here = open_store(store_path)
    assert not isinstance(here.client, store_process.ProcessClient)
    assert here.count() == 28 and here.metadata()["fingerprint"] == "abc"
    assert [h.chunk_id for h in here.query(vecs[17], k=1)] == ["hives.md:17"]
    got = here.collection().get(ids=["hives.md:9"], include=["documents", "embeddings"])
    assert got["documents"] == [rows[9].text]
    np.testing.assert_allclose(got["embeddings"][0], vecs[9], atol=1e-6)


def test_a_run_after_a_reader_here_makes_this_process_read_afresh(store_path: Path) -> None:
    with store_process.serving(store_path):
        open_store(store_path).ensure(MODEL, lambda: 8)
        open_store(store_path).upsert(chunks(5, "a.md"), vectors(5, seed=1))
    before = open_store(store_path)
    assert before.count() == 5
    new = vectors(5, seed=2)
    with store_process.serving(store_path):
        open_store(store_path).upsert(chunks(5, "b.md"), new)
    # Chroma's index in this process's memory would not have seen the child's rows
    assert [h.chunk_id for h in open_store(store_path).query(new[3], k=1)] == ["b.md:3"]
    assert before.count() == 10  # a reader made before keeps working


def test_runs_of_one_process_share_the_store_and_the_last_closes_it(store_path: Path) -> None:
    with store_process.serving(store_path):
        with store_process.serving(store_path):
            open_store(store_path).ensure(MODEL, lambda: 8)
        # the inner run ended: the outer one still goes through the child
        assert isinstance(make_client(store_path), store_process.ProcessClient)
    assert not isinstance(make_client(store_path), store_process.ProcessClient)


def test_a_relative_path_is_the_same_store_from_another_working_dir(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_process.preload(served=True)  # the child starts in this working directory
    monkeypatch.chdir(store_path.parent.parent)
    relative = Path("data") / "chroma"
    with store_process.serving(relative):
        open_store(relative).ensure(MODEL, lambda: 8)
        open_store(relative).upsert(chunks(3), vectors(3))
    assert open_store(store_path).count() == 3


def test_the_childs_errors_come_back_as_raised(store_path: Path) -> None:
    store_path.mkdir(parents=True)
    (store_path / "chroma.sqlite3").write_bytes(b"not a database, just bytes " * 100)
    with store_process.serving(store_path):
        with pytest.raises(StateError, match=r"cannot open the Chroma store .*damaged"):
            open_store(store_path).exists()
    with store_process.serving(store_path.parent / "other"):
        client = make_client(store_path.parent / "other")
        with pytest.raises(Exception, match="does not exist") as info:
            client.get_collection("nothing-here")
        assert type(info.value).__module__.startswith("chromadb")
        with pytest.raises(StoreError, match="does not exist: run docflow ingest"):
            ChromaStore(client, "nothing-here").collection()


def test_a_killed_child_fails_one_call_in_one_line_and_the_next_starts_another(
    store_path: Path,
) -> None:
    with store_process.serving(store_path):
        store = open_store(store_path)
        store.ensure(MODEL, lambda: 8)
        store.upsert(chunks(4), vectors(4))
        child = store_process._child
        assert child is not None
        # killed in the middle of a call: stopped first, so the call is sent and waits
        os.kill(child.process.pid, signal.SIGSTOP)
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(store.count)
            while not child.lock.locked():  # the call holds it from sending to its answer
                time.sleep(0.01)
            os.kill(child.process.pid, signal.SIGKILL)
            with pytest.raises(StoreError, match=r"^the store process died \(signal 9\)$"):
                call.result(timeout=60)
        assert store.count() == 4  # a new child opened the store: what Chroma wrote stayed
        assert store_process._child is not child


@pytest.mark.parametrize(
    ("cores", "forced", "on"),
    [(2, "", False), (4, "", True), (16, "", True), (2, "1", True), (16, "0", False)],
)
def test_the_child_is_the_default_where_a_core_is_spare(
    monkeypatch: pytest.MonkeyPatch, cores: int, forced: str, on: bool
) -> None:
    monkeypatch.setattr(store_process, "cores", lambda: cores)
    monkeypatch.setenv(store_process.ENV, forced)
    assert store_process.enabled() is on


def test_the_child_ends_when_its_parent_is_killed() -> None:
    script = textwrap.dedent(
        """
        import os, sys, time
        from tasks.index import store_process

        os.environ[store_process.ENV] = "1"
        if __name__ == "__main__":
            store_process.preload(served=True)
            print(store_process._child.process.pid, flush=True)
            time.sleep(600)
        """
    )
    survivor = survivor_of_killed_parent(script)
    assert survivor is None, f"the store process {survivor} outlived its parent"
