"""Load workers across concurrent batches: at most ``workers`` processes in the whole run."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tasks.common.config import LoaderOptions
from tasks.discover.files import discover
from tasks.load import worker as load_worker
from tasks.load.batch import load_batch


def test_concurrent_batches_share_one_budget_of_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(12):
        (tmp_path / f"note-{i:02d}.txt").write_text(f"note number {i}\n" * 50, encoding="utf-8")
    files = discover(tmp_path, ["*.txt"])
    alive, peak, lock = [0], [0], threading.Lock()
    original = load_worker._Worker

    class Counted(original):  # type: ignore[misc,valid-type]
        def __init__(self, *args: object) -> None:
            super().__init__(*args)
            with lock:
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
    assert alive[0] == 0  # every slot given back


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
    slot = load_worker._slots_for(1)
    assert slot.acquire(blocking=False)  # the failed batch's worker gave its slot back
    slot.release()
    assert len(load_batch(files, options)) == 3
