"""Does a Chroma upsert let the flow's other threads run? The store's hold on the GIL.

The embedded store is written from the flow's process, where the embed task's bookkeeping,
the tables, the lexical index and Prefect's task engine are threads of the same
interpreter. This measures how much Python work another thread of the process gets done
while the store writes, against the same thread's rate with the process idle: one thread
does bench_gil's pure-Python rounds (dicts and JSON), the main thread upserts real-sized
rows (384-dimensional vectors, texts of about a thousand characters, a few metadata keys)
in batches of 1,000, first into an embedded collection, then, where the ``chroma`` command
is installed, into a ``chroma run`` server on this machine over HTTP.

Run: ``python -m tests.benchmarks bench_store_gil``.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tests.benchmarks.bench_gil import Competitor

ROWS = 4_000
BATCH = 1_000
IDLE_S = 1.0


def rate_during(competitor: Competitor, work: Callable[[], Any]) -> tuple[float, float]:
    """Return (the competitor's rounds per second during ``work()``, its seconds)."""
    before, started = competitor.rounds, time.perf_counter()
    work()
    seconds = time.perf_counter() - started
    return (competitor.rounds - before) / seconds, seconds


def rows() -> dict[str, Any]:
    """Return ``ROWS`` rows of the sizes docflow stores."""
    rng = np.random.default_rng(0)
    return {
        "ids": [f"chunk-{i}" for i in range(ROWS)],
        "embeddings": rng.standard_normal((ROWS, 384)).astype(np.float32),
        "documents": [
            f"paragraph {i} of a document about bees and their hives " * 18 for i in range(ROWS)
        ],
        "metadatas": [
            {"source": f"doc-{i % 50}.md", "chunk_index": i, "file_type": "markdown"}
            for i in range(ROWS)
        ],
    }


def upsert_all(collection: Any, data: dict[str, Any]) -> None:
    """Upsert ``data`` into ``collection`` in batches of ``BATCH``."""
    for lo in range(0, ROWS, BATCH):
        collection.upsert(**{key: value[lo : lo + BATCH] for key, value in data.items()})


def measure(client: Any, competitor: Competitor, data: dict[str, Any]) -> dict[str, float]:
    """Upsert the rows into a new collection of ``client``; the competitor's rate meanwhile."""
    collection = client.create_collection(
        "gil-check", embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
    )
    rate, seconds = rate_during(competitor, lambda: upsert_all(collection, data))
    return {"rounds_per_s": round(rate), "upsert_s": round(seconds, 2)}


def main() -> dict[str, Any]:
    """Measure the idle rate, then the rate during embedded and server upserts; print."""
    from tasks.index.store import make_client

    data = rows()
    result: dict[str, Any] = {}
    with Competitor() as competitor:
        idle, _ = rate_during(competitor, lambda: time.sleep(IDLE_S))
        result["idle_rounds_per_s"] = round(idle)
        with tempfile.TemporaryDirectory(prefix="store-gil-") as tmp:
            client = make_client(path=Path(tmp) / "chroma")
            result["embedded"] = measure(client, competitor, data)
            result["server"] = _server(Path(tmp), competitor, data)
    report(result)
    return result


def _server(tmp: Path, competitor: Competitor, data: dict[str, Any]) -> dict[str, float] | None:
    """Measure against a ``chroma run`` on this machine, or None without the command."""
    from tasks.index.store import make_client
    from tests.servers import BIN, free_port, start_chroma

    if not (BIN / "chroma").exists():
        return None
    port = free_port()
    proc, _ = start_chroma(tmp / "server", port, tmp)
    try:
        return measure(make_client(host="127.0.0.1", port=port), competitor, data)
    finally:
        proc.stop()


def report(r: dict[str, Any]) -> None:
    """Print the other thread's rate during each kind of upsert, against its idle rate."""
    idle = r["idle_rounds_per_s"]
    print(f"\nanother thread's Python work while the store writes {ROWS:,} rows ({BATCH:,} a call)")
    print(f"  idle process: {idle:,} rounds/s")
    for name in ("embedded", "server"):
        got = r[name]
        if got is None:
            print(f"  {name}: not measured (no `chroma` command)")
            continue
        share = got["rounds_per_s"] / idle
        got["vs_idle"] = round(share, 3)
        print(
            f"  {name} upserts ({got['upsert_s']:.2f} s): {got['rounds_per_s']:,} rounds/s, "
            f"{share:.0%} of idle"
        )


if __name__ == "__main__":
    main()
