"""Split workers and a run that stops: the waiting task gives up on the batch in a worker.

A stopping run used to wait for the batch a worker was splitting (Ctrl-C with one 41 MB
Markdown file in a batch: 23 s until the command ended, 1.2 s now). The splitter here waits
for a gate file the test controls, in a real worker process of the real pool.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tasks.common.documents import Document
from tasks.common.lifetime import Stopping, alive, stoppable
from tasks.common.tables import DocumentRow, documents_table, read_part, write_atomic
from tasks.split.base import Span, SpanSplitter
from tasks.split.pool import split_batch
from tests.load_helpers import write_whole

BOUND_S = 60.0  # how long the gated splitter and the test's own waits wait, at most


class GatedSplitter(SpanSplitter):
    """One span per text, once ``gate`` exists; writes its process id to ``pid`` first."""

    def __init__(self, gate: Path, pid: Path) -> None:
        self.gate, self.pid = str(gate), str(pid)

    def split_spans(self, text: str) -> list[Span]:
        write_whole(Path(self.pid), str(os.getpid()))
        deadline = time.monotonic() + BOUND_S
        while not os.path.exists(self.gate) and time.monotonic() < deadline:
            time.sleep(0.02)
        return [Span(0, len(text))]


def _documents(folder: Path) -> Path:
    folder.mkdir()
    doc = Document("bees cluster in winter", {"source": "bees.txt"})
    row = DocumentRow("bees.txt", "0" * 64, "text", "loaded", document=doc)
    return write_atomic(documents_table([row]), folder / "documents.parquet")


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + BOUND_S
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _start_split(folder: Path, workers: int, out: dict[str, Any]) -> threading.Thread:
    """Split a one-document batch in a thread with this context (the run's stop event)."""
    documents = _documents(folder)
    splitter = GatedSplitter(folder / "gate", folder / "pid")

    def run() -> None:
        try:
            out["result"] = split_batch(documents, folder / "chunks.parquet", splitter, workers)
        except BaseException as exc:  # noqa: BLE001 - the test reads what it was
            out["result"] = exc

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(run,))
    thread.start()
    return thread


@pytest.mark.slow
def test_a_stopping_run_kills_the_split_it_waits_for(tmp_path: Path) -> None:
    out: dict[str, Any] = {}
    with stoppable() as stop:
        thread = _start_split(tmp_path / "a", 1, out)
    _wait_for(tmp_path / "a" / "pid")  # a worker is splitting the batch
    stop.set()
    thread.join()
    assert isinstance(out["result"], Stopping), out["result"]
    pid = int((tmp_path / "a" / "pid").read_text())
    deadline = time.monotonic() + BOUND_S
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(pid)  # the worker was killed, not left to finish the batch
    assert not (tmp_path / "a" / "chunks.parquet").exists()


@pytest.mark.slow
def test_another_run_splits_its_batch_again_in_a_new_pool(tmp_path: Path) -> None:
    """Killing the workers breaks their pool for every run of the process: a run that is
    not stopping splits its batch once more, and its chunks are whole."""
    stopped: dict[str, Any] = {}
    going_on: dict[str, Any] = {}
    with stoppable() as stop:
        first = _start_split(tmp_path / "a", 2, stopped)
    with stoppable():
        second = _start_split(tmp_path / "b", 2, going_on)
    _wait_for(tmp_path / "a" / "pid")
    _wait_for(tmp_path / "b" / "pid")  # both batches in the same pool's workers
    pid = int((tmp_path / "b" / "pid").read_text())
    stop.set()
    first.join()
    assert isinstance(stopped["result"], Stopping), stopped["result"]
    deadline = time.monotonic() + BOUND_S  # split again, by a worker of a new pool
    while (tmp_path / "b" / "pid").read_text() == str(pid):
        assert time.monotonic() < deadline, "the batch was not split again"
        time.sleep(0.02)
    (tmp_path / "b" / "gate").touch()
    second.join()
    assert going_on["result"].chunks == 1
    chunks = read_part(tmp_path / "b" / "chunks.parquet", ["text"]).column("text").to_pylist()
    assert chunks == ["bees cluster in winter"]


class NiceSplitter(SpanSplitter):
    """One span per text; writes its process's CPU priority (``nice``) to ``out`` first."""

    def __init__(self, out: Path) -> None:
        self.out = str(out)

    def split_spans(self, text: str) -> list[Span]:
        Path(self.out).write_text(str(os.getpriority(os.PRIO_PROCESS, 0)))
        return [Span(0, len(text))]


@pytest.mark.parametrize("workers", [0, 1])
def test_split_workers_yield_the_cpu_to_the_run(tmp_path: Path, workers: int) -> None:
    """A worker runs WORKER_NICE steps below the run's process; with 0 workers, the run's
    own process splits at its own priority."""
    from tasks.common.priority import WORKER_NICE

    documents = _documents(tmp_path / "docs")
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    split_batch(documents, tmp_path / "chunks.parquet", NiceSplitter(tmp_path / "nice"), workers)
    expected = min(19, mine + WORKER_NICE) if workers else mine
    assert int((tmp_path / "nice").read_text()) == expected


#: How often each CountedSplitter was pickled in this process, by its label.
PICKLED: dict[str, int] = {}


class CountedSplitter(SpanSplitter):
    """One span per text; counts each time it is pickled (in the flow's process)."""

    def __init__(self, label: str) -> None:
        self.label = label

    def __getstate__(self) -> dict[str, Any]:
        PICKLED[self.label] = PICKLED.get(self.label, 0) + 1
        return dict(self.__dict__)

    def split_spans(self, text: str) -> list[Span]:
        return [Span(0, len(text))]


def test_a_run_pickles_its_splitter_once_for_all_its_batches(tmp_path: Path) -> None:
    """The split task builds the run's splitter for every batch; pickling it (the default
    one's tokenizer: ~0.9 MB, 25-35 ms of the GIL) is done once per ``reuse`` key."""
    documents = _documents(tmp_path / "docs")
    label = f"run-{os.getpid()}-{time.monotonic_ns()}"
    for batch in range(3):  # a new splitter object each batch, as split_task builds them
        out = tmp_path / f"chunks-{batch}.parquet"
        assert split_batch(documents, out, CountedSplitter(label), 1, reuse=label).chunks == 1
        assert read_part(out, ["text"]).column("text").to_pylist() == ["bees cluster in winter"]
    assert PICKLED[label] == 1
    # another run (another key) pickles its own; no key: every batch pickles
    split_batch(documents, tmp_path / "other.parquet", CountedSplitter(label), 1, reuse="other")
    split_batch(documents, tmp_path / "bare.parquet", CountedSplitter(label), 1)
    assert PICKLED[label] == 3


def test_the_split_workers_can_start_before_the_first_batch(tmp_path: Path) -> None:
    from tasks.split import pool

    pool.shutdown()
    pool.prestart(0)  # no workers: no pool
    assert pool._pool is None
    pool.prestart(2)
    assert pool._pool is not None
    deadline = time.monotonic() + BOUND_S
    while len(pool._pool._processes) < 2:  # both started, no batch handed to them yet
        assert time.monotonic() < deadline, "the split workers did not start"
        time.sleep(0.02)
    started = set(pool._pool._processes)
    documents = _documents(tmp_path / "docs")
    split_batch(documents, tmp_path / "chunks.parquet", NiceSplitter(tmp_path / "nice"), 2)
    assert set(pool._pool._processes) == started  # the batch went to one of them
    pool.shutdown()


def test_kept_values_are_made_once_and_the_least_recently_used_go_first() -> None:
    from tasks.common.kept import Kept

    made: list[str] = []
    kept: Kept[str, str] = Kept(2)

    def make(key: str) -> str:
        made.append(key)
        return key.upper()

    assert [kept.get(k, lambda k=k: make(k)) for k in ("a", "b", "a", "c", "a", "b")] == [
        "A", "B", "A", "C", "A", "B",
    ]  # fmt: skip
    assert made == ["a", "b", "c", "b"]  # "b" was the least recently used when "c" came
