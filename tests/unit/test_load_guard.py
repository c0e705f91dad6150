"""Bad input never stops a run: per-file size, time and memory guards, crashes, order.

The time and memory guards live in the load worker processes (tasks/load/worker.py).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks.common import failpoints
from tasks.common.config import LoaderOptions
from tasks.common.documents import FileRef
from tasks.common.lifetime import Stopping, stoppable
from tasks.discover.files import discover
from tasks.load import base as load_base
from tasks.load import iter_load, load_batch, load_file, register
from tests.conftest import shared_path
from tests.load_helpers import (
    BuggyLoader,
    ExitLoader,
    GatedLoader,
    HogLoader,
    LambdaMetadataLoader,
    NiceLoader,
    SleepLoader,
    bomb_pdf,
    ref_for,
    slow_pdf,
    write_file,
)


@pytest.fixture
def registry() -> Iterator[None]:
    saved = dict(load_base._REGISTRY)
    try:
        yield
    finally:
        load_base._REGISTRY.clear()
        load_base._REGISTRY.update(saved)


def corpus(tmp_path: Path, names: dict[str, bytes | str]) -> list[FileRef]:
    for name, data in names.items():
        write_file(tmp_path, name, data)
    return discover(tmp_path, ["*"])


def outcome(rows: list[Any]) -> list[tuple[str, str, str | None]]:
    return [(r.source, r.status, r.error) for r in rows]


MIXED: dict[str, bytes | str] = {
    "a.md": "# A\n\nfirst\n",
    "b.txt": b"\x00binary",
    "c.csv": "x,y\n1,2\n3,4\n",
    "d.json": '[{"t": "one"}, {"t": "two"}]',
    "e.html": "<h1>E</h1><p>page</p>",
    "f.pdf": b"not a pdf",
    "g.py": "print('g')\n",
    "h.zip": b"PK",
    "i.txt": "",
}


@pytest.mark.parametrize("workers", [0, 1])
def test_load_workers_yield_the_cpu_to_the_run(
    tmp_path: Path, registry: None, workers: int
) -> None:
    """A worker loads WORKER_NICE steps below the run's process (tasks/common/priority.py);
    with 0 workers, the run's own process loads at its own priority."""
    from tasks.common.priority import WORKER_NICE

    register(NiceLoader(), ".nice")
    [row] = load_batch(corpus(tmp_path, {"a.nice": "x"}), LoaderOptions(workers=workers))
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert row.document is not None
    assert int(row.document.page_content) == (min(19, mine + WORKER_NICE) if workers else mine)


@pytest.mark.parametrize("workers", [1, 2])
def test_workers_give_the_same_rows_in_order(tmp_path: Path, workers: int) -> None:
    files = corpus(tmp_path, MIXED)
    here = load_batch(files, LoaderOptions(workers=0))
    there = load_batch(files, LoaderOptions(workers=workers))
    assert outcome(there) == outcome(here)
    assert [r.document for r in there] == [r.document for r in here]
    assert [r.source for r in there] == ["a.md", "b.txt", "c.csv", "c.csv", "d.json", "d.json",
                                         "e.html", "f.pdf", "g.py", "h.zip", "i.txt"]  # fmt: skip


def test_slow_loader_times_out_and_the_batch_goes_on(tmp_path: Path, registry: None) -> None:
    register(SleepLoader(60), ".slow")
    files = corpus(tmp_path, {"1.txt": "one\n", "2.slow": "x", "3.txt": "three\n"})
    started = time.perf_counter()
    rows = load_batch(files, LoaderOptions(timeout_s=1, workers=1))
    assert time.perf_counter() - started < 15
    assert outcome(rows) == [
        ("1.txt", "loaded", None),
        ("2.slow", "failed", "timed out after 1 s"),
        ("3.txt", "loaded", None),
    ]


def test_hostile_pdf_that_takes_long_times_out(tmp_path: Path) -> None:
    ref = write_file(tmp_path, "slow.pdf", slow_pdf(400_000))
    assert ref.size < 20_000  # a tiny file, many seconds of work for the parser
    started = time.perf_counter()
    [row] = load_batch([ref], LoaderOptions(timeout_s=1.5, workers=1))
    assert time.perf_counter() - started < 15
    assert (row.status, row.error, row.loader) == ("failed", "timed out after 1.5 s", "pdf")


def test_memory_hog_fails_and_its_worker_goes_on(tmp_path: Path, registry: None) -> None:
    register(HogLoader(8192), ".hog")
    files = corpus(tmp_path, {"1.hog": "x", "2.txt": "two\n"})
    rows = load_batch(files, LoaderOptions(memory_limit_mb=256, workers=1))
    assert outcome(rows) == [
        ("1.hog", "failed", "out of memory (limit 256 MB)"),
        ("2.txt", "loaded", None),
    ]


def test_crashing_worker_is_replaced(tmp_path: Path, registry: None) -> None:
    register(ExitLoader(), ".exit")
    files = corpus(tmp_path, {"1.exit": "x", "2.txt": "two\n", "3.exit": "x", "4.txt": "4\n"})
    rows = load_batch(files, LoaderOptions(workers=2))
    died = "loader process died (exit code 7)"
    assert outcome(rows) == [
        ("1.exit", "failed", died),
        ("2.txt", "loaded", None),
        ("3.exit", "failed", died),
        ("4.txt", "loaded", None),
    ]


@pytest.mark.parametrize("workers", [0, 1])
def test_loader_bug_is_a_one_line_reason(tmp_path: Path, registry: None, workers: int) -> None:
    register(BuggyLoader(), ".bug")
    [row] = load_batch(corpus(tmp_path, {"x.bug": "x"}), LoaderOptions(workers=workers))
    assert (row.status, row.error) == ("failed", "loader error: KeyError: 'oops\\nsecond line'")


def test_documents_that_cannot_be_pickled_fail_the_file_only(
    tmp_path: Path, registry: None
) -> None:
    register(LambdaMetadataLoader(), ".lam")
    files = corpus(tmp_path, {"1.lam": "x", "2.txt": "two\n"})
    rows = load_batch(files, LoaderOptions(workers=1))
    assert [r.status for r in rows] == ["failed", "loaded"]
    assert (rows[0].error or "").startswith("loader error: its documents cannot be pickled")


class LocalLoader:
    """A loader that cannot be pickled (it holds a lambda): it loads in the parent."""

    name = "local"

    def __init__(self) -> None:
        self.shout = lambda s: s.upper()

    def load(self, file: FileRef) -> Iterator[Any]:
        from tasks.common.documents import Document

        yield Document(self.shout(Path(file.path).read_text()), {"source": file.source})


def test_unpicklable_loader_loads_in_the_parent(tmp_path: Path, registry: None) -> None:
    register(LocalLoader(), ".local")
    [row] = load_batch(corpus(tmp_path, {"x.local": "quiet"}), LoaderOptions(workers=1))
    assert row.document is not None and row.document.page_content == "QUIET"


@pytest.mark.parametrize("workers", [0, 1])
def test_file_over_the_size_limit_fails_unread(tmp_path: Path, workers: int) -> None:
    files = corpus(tmp_path, {"big.txt": "x" * 1000, "small.txt": "ok\n"})
    rows = load_batch(files, LoaderOptions(max_file_size=999, workers=workers))
    assert outcome(rows) == [
        ("big.txt", "failed", "file too large: 1000 bytes > limit 999"),
        ("small.txt", "loaded", None),
    ]


def test_file_that_grew_after_discovery_is_still_refused(tmp_path: Path) -> None:
    ref = write_file(tmp_path, "grow.txt", "small\n")
    Path(ref.path).write_text("x" * 5000)
    [row] = load_file(ref, LoaderOptions(max_file_size=1000))
    assert row.error == "file too large: 5000 bytes > limit 1000"


def test_half_megabyte_single_line_file_is_bounded_in_time_and_memory() -> None:
    path = shared_path("code", "bad", "huge-single-line-528KB-minified__coffeescript.js")
    ref = ref_for(path)
    tracemalloc.start()
    started = time.perf_counter()
    [row] = load_file(ref)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert row.status == "loaded"
    assert elapsed < 5
    assert peak < 10 * ref.size  # the bytes, the text and little else
    [guarded] = load_batch([ref], LoaderOptions(timeout_s=10, memory_limit_mb=256))
    assert guarded.document == row.document


def test_decompression_bomb_in_a_guarded_worker(tmp_path: Path) -> None:
    ref = write_file(tmp_path, "bomb.pdf", bomb_pdf(200))  # 200 MB once inflated
    assert ref.size < 500_000
    started = time.perf_counter()
    [row] = load_batch([ref], LoaderOptions(timeout_s=30, memory_limit_mb=512))
    assert time.perf_counter() - started < 30
    assert row.status == "failed" and row.error is not None
    assert row.error.startswith(("PDF limit reached", "out of memory")), row.error


def test_iter_load_is_lazy_and_leaves_no_worker_behind(tmp_path: Path) -> None:
    from tasks.load import worker

    files = corpus(tmp_path, {f"{i}.txt": f"file {i}\n" for i in range(10)})
    rows = iter_load(files, LoaderOptions(workers=2))
    first = next(rows)
    assert first.source == "0.txt"
    rows.close()  # abandon the run: a busy worker is stopped, an idle one kept for reuse
    loading = {p.pid for p in mp.active_children() if p.name == "docflow-load"}
    assert loading <= {w.process.pid for w in worker._idle}
    worker.shutdown()
    deadline = time.monotonic() + 10
    while any(p.name == "docflow-load" for p in mp.active_children()):
        assert time.monotonic() < deadline, "load workers left running"
        time.sleep(0.05)


def _load_in_daemon(root: str, out: Any) -> None:
    files = discover(Path(root), ["*"])
    out.put([(r.source, r.status, r.document is not None) for r in load_batch(files)])


def test_a_daemonic_process_loads_in_process(tmp_path: Path) -> None:
    """Dask's worker processes are daemonic and may not start load workers: files still load."""
    write_file(tmp_path, "a.txt", "alpha text\n")
    write_file(tmp_path, "b.md", "# Beta\n\nbody\n")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_load_in_daemon, args=(str(tmp_path), out), daemon=True)
    proc.start()
    rows = out.get(timeout=120)
    proc.join(timeout=30)
    assert proc.exitcode == 0
    assert rows == [("a.txt", "loaded", True), ("b.md", "loaded", True)]


@pytest.mark.parametrize("workers", [0, 1])
def test_a_stopping_run_abandons_its_batch_after_the_file_at_hand(
    tmp_path: Path, workers: int
) -> None:
    """A Ctrl-C waited for the whole batch to load (a batch holds up to 1,000 files)."""
    files = corpus(tmp_path, {f"f{i}.txt": f"file {i}\n" for i in range(6)})
    reads: list[int] = []  # files read in this process (workers=0)
    with (
        stoppable() as stop,
        failpoints.on("load:before-read", lambda: reads.append(1)),
        failpoints.on("load:after-file", stop.set),  # the second file's row has arrived
        pytest.raises(Stopping),
    ):
        load_batch(files, LoaderOptions(workers=workers))
    assert len(reads) == (2 if workers == 0 else 0)  # the third file was never read here


def test_a_stopping_run_kills_the_worker_whose_file_is_at_hand(
    tmp_path: Path, registry: None
) -> None:
    """The file at hand was waited for to its end (up to ``timeout_s``, 120 s by default: a
    slow PDF held a Ctrl-C that long); now its worker is killed and the run stops."""
    import contextvars
    import threading

    from tasks.common.lifetime import alive

    marks = tmp_path / "marks"
    marks.mkdir()
    register(GatedLoader(marks / "gate", marks / "pid", marks / "finished"), ".gated")
    files = corpus(tmp_path / "files", {"a.gated": "x", "b.txt": "b\n"})
    out: list[BaseException] = []

    def load() -> None:
        try:
            load_batch(files, LoaderOptions(workers=1))
        except BaseException as exc:  # noqa: BLE001 - the test reads what it was
            out.append(exc)

    with stoppable() as stop:
        thread = threading.Thread(target=contextvars.copy_context().run, args=(load,))
    thread.start()
    while not (marks / "pid").exists() and thread.is_alive():  # the worker has the file
        time.sleep(0.02)
    stop.set()
    thread.join()
    assert len(out) == 1 and isinstance(out[0], Stopping), out
    assert not (marks / "finished").exists()  # given up on, not waited for
    assert not alive(int((marks / "pid").read_text()))
