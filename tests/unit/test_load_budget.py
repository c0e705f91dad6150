"""Load workers across batches: at most ``workers`` processes in the whole run, reused."""

from __future__ import annotations

import textwrap
import threading
from pathlib import Path

import pytest

from tasks.common.config import LoaderOptions
from tasks.discover.files import discover
from tasks.load import worker as load_worker
from tasks.load.batch import load_batch
from tests.orphans import survivor_of_killed_parent


def test_concurrent_batches_share_one_budget_of_workers_and_reuse_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_worker.shutdown()  # no idle worker of an earlier test
    for i in range(12):
        (tmp_path / f"note-{i:02d}.txt").write_text(f"note number {i}\n" * 50, encoding="utf-8")
    files = discover(tmp_path, ["*.txt"])
    alive, peak, started, lock = [0], [0], [0], threading.Lock()
    original = load_worker._Worker

    class Counted(original):  # type: ignore[misc,valid-type]
        def __init__(self, *args: object) -> None:
            super().__init__(*args)
            with lock:
                started[0] += 1
                alive[0] += 1
                peak[0] = max(peak[0], alive[0])

        def kill(self) -> None:
            was_open = not self.conn.closed
            super().kill()
            if was_open:
                with lock:
                    alive[0] -= 1

    monkeypatch.setattr(load_worker, "_Worker", Counted)
    options = LoaderOptions(workers=2)
    results: dict[int, int] = {}

    def load(part: int) -> None:
        results[part] = len(load_batch(files[part * 4 : part * 4 + 4], options))

    threads = [threading.Thread(target=load, args=(p,)) for p in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == {0: 4, 1: 4, 2: 4}
    assert 1 <= peak[0] <= 2  # three batches at once, never more than two processes
    assert started[0] == peak[0]  # a later batch took the idle workers of an earlier one
    results.clear()
    load(0)  # and so does a batch after them
    assert results == {0: 4} and started[0] == peak[0]
    load_worker.shutdown()
    assert alive[0] == 0  # the idle workers end on request (and at exit)
    slot = load_worker._slots_for(2)
    assert slot.acquire(blocking=False) and slot.acquire(blocking=False)  # every slot back
    slot.release()
    slot.release()


def test_workers_started_before_the_first_batch_serve_it(tmp_path: Path) -> None:
    """A first ingest starts its load workers while it opens the index and plans: the
    first batch then finds them idle and starts none of its own."""
    load_worker.shutdown()
    for i in range(4):
        (tmp_path / f"note-{i}.txt").write_text(f"note number {i}\n", encoding="utf-8")
    files = discover(tmp_path, ["*.txt"])
    options = LoaderOptions(workers=2)
    assert load_worker.prestart(LoaderOptions(workers=0)) is None  # in process: none
    starting = load_worker.prestart(options)
    assert starting is not None
    starting.join(timeout=120)
    started = {w.process.pid for w in load_worker._idle}
    assert len(started) == 2 and all(w.process.is_alive() for w in load_worker._idle)
    assert len(load_batch(files, options)) == 4
    assert {w.process.pid for w in load_worker._idle} == started  # the same two served it
    load_worker.shutdown()
    slot = load_worker._slots_for(2)
    assert slot.acquire(blocking=False) and slot.acquire(blocking=False)  # every slot back
    slot.release()
    slot.release()


def test_an_error_while_loading_gives_the_slots_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks.common import failpoints

    for i in range(3):
        (tmp_path / f"n{i}.txt").write_text("text\n", encoding="utf-8")
    files = discover(tmp_path, ["*.txt"])
    options = LoaderOptions(workers=1)
    monkeypatch.setenv(failpoints.ENV, "load:after-file=raise")
    monkeypatch.setattr(failpoints, "_hits", failpoints.Counter())
    with pytest.raises(failpoints.FailpointError):
        load_batch(files, options)
    monkeypatch.delenv(failpoints.ENV)
    assert len(load_batch(files, options)) == 3  # the failed batch left its worker usable
    load_worker.shutdown()
    slot = load_worker._slots_for(1)
    assert slot.acquire(blocking=False)  # and no slot lost
    slot.release()


def test_idle_workers_end_with_their_parent_after_kill_9(tmp_path: Path) -> None:
    """An idle worker waits on its pipe for the next batch: its parent's death must end it."""
    (tmp_path / "a.txt").write_text("alpha\n", encoding="utf-8")
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from tasks.common.config import LoaderOptions
        from tasks.discover.files import discover
        from tasks.load import worker
        from tasks.load.batch import load_batch

        if __name__ == "__main__":
            load_batch(discover(Path({str(tmp_path)!r}), ["*.txt"]), LoaderOptions(workers=1))
            [idle] = worker._idle
            print(idle.process.pid, flush=True)
            time.sleep(600)
        """
    )
    survivor = survivor_of_killed_parent(script)
    assert survivor is None, f"the idle load worker {survivor} outlived its parent"
