"""Does the embed loop lose its time to the GIL? A CPU stand-in for the GPU box's hot loop.

On the H100 the embed stage took 26 busy seconds for what a plain encode does in 7 (see
docs/performance.md, "The GPU check"). There a forward pass is hundreds of short kernel
launches, and each launch leaves the GIL and takes it back: when another thread of the
flow's process holds it (the store's Python side, the tables, Prefect's event loop), taking
it back waits for that thread's switch interval (5 ms by default). The same happens on a
CPU with inputs so small that each operator runs for microseconds, as a kernel launch does:
that is what this measures, without a GPU.

The real model (docflow's torch path, one intra-op thread: one core for the model, the
other for the competitor) encodes short texts in small batches: alone; beside a thread doing
pure-Python work (dicts and JSON, like the flow's bookkeeping) at switch intervals of 5 ms
(Python's default), 1 ms and 0.2 ms; and in a child process while the same thread runs in
this one. Rounds alternate the variants; medians are printed, with the competitor's rate (the
price of a shorter interval is paid by the other threads).

Run: ``python -m tests.benchmarks bench_gil``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import statistics
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

ROUNDS = 3
TEXTS = 256
BATCH = 8
INTERVALS = (0.005, 0.001, 0.0002)


def texts() -> list[str]:
    """Return short real sentences of the sample corpus (a few tokens each)."""
    from tests.conftest import SAMPLE

    words = " ".join(p.read_text(encoding="utf-8") for p in sorted(SAMPLE.glob("*.md"))).split()
    return [" ".join(words[i : i + 6]) for i in range(0, 6 * TEXTS, 6)][:TEXTS]


def encoder() -> Callable[[list[str]], Any]:
    """Return docflow's torch-path encode of the real model on one CPU thread."""
    import torch

    from tasks.embed.model import Embedder

    torch.set_num_threads(1)
    embedder = Embedder("all-MiniLM-L6-v2", batch_size=BATCH, device="cpu", backend="torch")
    embedder.embed(["warm up"])
    return embedder.embed


class Competitor:
    """A thread doing pure-Python work until stopped; counts its rounds."""

    def __init__(self) -> None:
        self.rounds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rows = [{"id": f"c{i}", "source": "a.md", "start": i, "end": i + 9} for i in range(50)]
            json.dumps(rows)
            self.rounds += 1

    def __enter__(self) -> Competitor:
        self.started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.rate = self.rounds / (time.perf_counter() - self.started)


def _child(conn: Connection) -> None:
    encode = encoder()
    conn.send("ready")
    while (batch := conn.recv()) is not None:
        conn.send(encode(batch))


def measure() -> dict[str, Any]:
    """Run every variant ``ROUNDS`` times, alternating; return the medians."""
    inputs = texts()
    encode = encoder()
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_child, args=(child,), daemon=True)
    process.start()
    assert parent.recv() == "ready"
    default = sys.getswitchinterval()
    seconds: dict[str, list[float]] = {}
    rates: dict[str, list[float]] = {}

    def timed(name: str, run: Callable[[], Any], interval: float, compete: bool) -> None:
        sys.setswitchinterval(interval)
        try:
            started = time.perf_counter()
            if compete:
                with Competitor() as other:
                    run()
                rates.setdefault(name, []).append(other.rate)
            else:
                run()
            seconds.setdefault(name, []).append(time.perf_counter() - started)
        finally:
            sys.setswitchinterval(default)

    def in_child() -> None:
        parent.send(inputs)
        parent.recv()

    try:
        for _ in range(ROUNDS):
            timed("alone", lambda: encode(inputs), default, False)
            for interval in INTERVALS:
                timed(f"thread, {interval * 1000:g} ms", lambda: encode(inputs), interval, True)
            timed("child process, 5 ms", in_child, default, True)
    finally:
        parent.send(None)
        process.join(10)
    alone = statistics.median(seconds["alone"])
    return {
        name: {
            "encode_s": round(statistics.median(runs), 2),
            "vs_alone": round(statistics.median(runs) / alone, 2),
            "competitor_rounds_per_s": round(statistics.median(rates[name]))
            if name in rates
            else None,
        }
        for name, runs in seconds.items()
    }


def main() -> dict[str, Any]:
    """Measure, print a table and return the figures."""
    result = {"texts": TEXTS, "batch": BATCH, "variants": measure()}
    print(f"{TEXTS} texts of 6 words, batch {BATCH}, real model on one CPU thread")
    print(f"{'variant':<22} {'encode s':>9} {'vs alone':>9} {'competitor rounds/s':>20}")
    for name, row in result["variants"].items():
        rate = row["competitor_rounds_per_s"]
        print(f"{name:<22} {row['encode_s']:>9} {row['vs_alone']:>9} {rate if rate else '-':>20}")
    return result
