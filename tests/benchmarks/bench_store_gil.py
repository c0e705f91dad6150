"""Does a Chroma upsert let the flow's other threads run? The store's hold on the GIL.

The embedded store is written from the flow's process, where the embed task's bookkeeping,
the tables, the lexical index and Prefect's task engine are threads of the same
interpreter. This measures how much Python work another thread of the process gets done
while the store writes, against the same thread's rate with the process idle: one thread
does bench_gil's pure-Python rounds (dicts and JSON), the main thread upserts real-sized
rows (384-dimensional vectors, texts of about a thousand characters, a few metadata keys)
in batches of 1,000, first into an embedded collection, then, where the ``chroma`` command
is installed, into a ``chroma run`` server on this machine over HTTP.

The lexical index is written from the same process, and its SQLite statements release the
GIL while SQLite works: docflow binds a batch's rows as one JSON array per statement
(tasks/index/lexical.py); the peer, a statement per row (``executemany``, how docflow
wrote it before), retakes the GIL at every row. Both write the first ``LEXICAL_ROWS`` rows
into a new lexical index, alone and beside the busy thread.

Run: ``python -m tests.benchmarks bench_store_gil``.
"""

from __future__ import annotations

import json
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
#: Rows of the lexical writes (a statement per row beside a busy thread: ~15 ms a row).
LEXICAL_ROWS = 400


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


def per_row_upsert(index: Any, records: list[tuple[str, str, dict[str, Any]]]) -> None:
    """Write ``records`` into a new lexical index with a statement per row (the peer)."""
    rows = [
        (i, body, json.dumps(meta, ensure_ascii=False, sort_keys=True)) for i, body, meta in records
    ]
    with index._transaction() as db:
        db.executemany(
            "INSERT INTO chunks (chunk_id, metadata) VALUES (?, ?)", [(i, m) for i, _, m in rows]
        )
        ids = dict(db.execute("SELECT chunk_id, id FROM chunks").fetchall())
        db.executemany(
            "INSERT INTO terms (rowid, body) VALUES (?, ?)", [(ids[i], b) for i, b, _ in rows]
        )


def lexical_rates(tmp: Path, data: dict[str, Any], tag: str) -> dict[str, float]:
    """Return rows/s of docflow's lexical write and of the per-row peer, each in a new index."""
    from tasks.index.lexical import LexicalIndex

    records = list(zip(data["ids"], data["documents"], data["metadatas"], strict=True))
    records = records[:LEXICAL_ROWS]
    got = {}
    for name, write in (("json_each", LexicalIndex.upsert), ("per_row", per_row_upsert)):
        index = LexicalIndex.open(tmp, f"{name}-{tag}")
        started = time.perf_counter()
        write(index, records)
        got[name] = round(len(records) / (time.perf_counter() - started))
        index.close()
    return got


def main() -> dict[str, Any]:
    """Measure the idle rate, then the rate during embedded and server upserts; print."""
    from tasks.index.store import make_client

    data = rows()
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lexical-gil-") as tmp:
        result["lexical_alone"] = lexical_rates(Path(tmp), data, "alone")
        with Competitor():  # busy beside the writes
            result["lexical_beside"] = lexical_rates(Path(tmp), data, "beside")
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
    """Print the other thread's rate during each kind of upsert, and the lexical writes."""
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
    alone, beside = r["lexical_alone"], r["lexical_beside"]
    print(
        f"lexical index, {LEXICAL_ROWS} rows into a new index: rows/s alone, beside a busy thread"
    )
    for name, label in (
        ("json_each", "one JSON array a statement (docflow)"),
        ("per_row", "a statement per row (peer)"),
    ):
        print(
            f"  {label}: {alone[name]:,} alone, {beside[name]:,} beside "
            f"({beside[name] / alone[name]:.2f}x)"
        )


if __name__ == "__main__":
    main()
