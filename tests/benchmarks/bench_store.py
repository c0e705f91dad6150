"""The store's own rate: Chroma settings for bulk loads, and a server with several writers.

The same rows (the shared Markdown corpus's chunks, split as an ingest splits them, with
random unit vectors: Chroma's cost depends on the vectors' count and size, not their
values, as long as they are not all equal), upserted in the pipeline's batches:

- embedded (``PersistentClient``), one writer, with Chroma's default HNSW settings, the
  setting docflow uses;
- embedded with bulk-load HNSW settings: larger ``batch_size`` and ``sync_threshold``
  (vectors buffered in the brute-force index before they join the graph, and the graph
  written to disk less often);
- a ``chroma run`` server with 1, 2 and 4 writing connections at once (each a client of its
  own, each batch cut into that many parts sent together).

Each prints rows/s and its ratio to the first. ``DOCFLOW_BENCH_STORE_COPIES`` (default 4)
sets how many copies of the corpus's chunks are written (2,600 chunks each). The GPU check
runs :func:`measure` on its packed corpus's Markdown (no pytest there: the server is
tests/benchmarks/chroma_server.py's).

Run: ``python -m tests.benchmarks bench_store``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

BATCH = 1000  # the pipeline's batch_chunks
SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "bulk (batch 1000, sync 10000)": {"batch_size": 1000, "sync_threshold": 10000},
    "bulk (batch 5000, sync 50000)": {"batch_size": 5000, "sync_threshold": 50000},
}
Rows = tuple[list[str], np.ndarray, list[str], list[dict[str, Any]]]


def corpus_rows(copies: int, folder: Path | None = None) -> Rows:
    """Return ids, vectors, texts and metadata of ``folder``'s chunks, ``copies`` times.

    ``folder``: the shared Markdown corpus where not given.
    """
    from tasks.common.config import IngestParams
    from tasks.discover.folder import lazy_load
    from tasks.index.store import flatten_metadata
    from tasks.split.factory import build_splitter

    if folder is None:
        from tests.conftest import CORPORA

        folder = CORPORA / "markdown"
    splitter = build_splitter(IngestParams())
    chunks = [c for doc in lazy_load(folder) for c in splitter.chunk_document(doc)]
    ids, texts, metas = [], [], []
    for copy in range(copies):
        for i, c in enumerate(chunks):
            ids.append(f"{copy}-{i}-{c.chunk_id}")
            texts.append(c.text)
            metas.append(flatten_metadata(c))
    vectors = np.random.default_rng(0).standard_normal((len(ids), 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return ids, vectors, texts, metas


def write_all(upsert: Callable[[slice], None], n: int, writers: int) -> float:
    """Upsert ``n`` rows batch by batch, each batch in ``writers`` parts at once; rows/s."""
    started = time.perf_counter()
    with ThreadPoolExecutor(writers) as pool:
        for lo in range(0, n, BATCH):
            hi = min(lo + BATCH, n)
            step = -(-(hi - lo) // writers)
            parts = [slice(a, min(a + step, hi)) for a in range(lo, hi, step)]
            list(pool.map(upsert, parts))
    return n / (time.perf_counter() - started)


def embedded(rows: Rows, hnsw: dict[str, Any], folder: Path) -> float:
    """Rows/s of one writer into an embedded collection with ``hnsw`` settings."""
    from tasks.index.store import make_client

    ids, vectors, texts, metas = rows
    col = make_client(path=folder / "chroma").create_collection(
        "bench", embedding_function=None, configuration={"hnsw": {"space": "cosine", **hnsw}}
    )

    def upsert(part: slice) -> None:
        col.upsert(
            ids=ids[part], embeddings=vectors[part], documents=texts[part], metadatas=metas[part]
        )

    return write_all(upsert, len(ids), 1)


def server(rows: Rows, writers: int, folder: Path) -> float:
    """Rows/s into a ``chroma run`` server with ``writers`` connections at once."""
    import threading

    from tasks.index.store import make_client
    from tests.benchmarks.chroma_server import chroma_server

    ids, vectors, texts, metas = rows
    folder.mkdir(parents=True, exist_ok=True)
    with chroma_server(folder / "server", folder / "chroma.log") as (port, _):
        make_client(host="127.0.0.1", port=port).create_collection(
            "bench", embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
        )
        local = threading.local()

        def upsert(part: slice) -> None:
            if not hasattr(local, "col"):  # one client (connection) per writer thread
                local.col = make_client(host="127.0.0.1", port=port).get_collection("bench")
            local.col.upsert(
                ids=ids[part],
                embeddings=vectors[part],
                documents=texts[part],
                metadatas=metas[part],
            )

        return write_all(upsert, len(ids), writers)


def measure(rows: Rows, work: Path) -> dict[str, Any]:
    """Write ``rows`` each way (folders under ``work``); return rows/s and ratios by name."""
    rates: dict[str, float] = {}
    for i, (name, hnsw) in enumerate(SETTINGS.items()):
        rates[f"embedded, {name}"] = embedded(rows, hnsw, work / f"e{i}")
    for writers in (1, 2, 4):
        rates[f"server, {writers} writer(s)"] = server(rows, writers, work / f"s{writers}")
    base = rates["embedded, default"]
    return {
        "rows": len(rows[0]),
        "rates": {k: round(v, 1) for k, v in rates.items()},
        "vs_embedded_default": {k: round(v / base, 3) for k, v in rates.items()},
    }


def main() -> dict[str, Any]:
    """Measure each way of writing the same rows; print rows/s and ratios."""
    copies = int(os.environ.get("DOCFLOW_BENCH_STORE_COPIES", "4"))
    rows = corpus_rows(copies)
    work = Path(tempfile.mkdtemp(prefix="bench-store-"))
    try:
        result = measure(rows, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = result["rates"]["embedded, default"]
    print(f"\n{result['rows']} rows in batches of {BATCH}, 384-d")
    for name, rate in result["rates"].items():
        print(f"  {name:<40}{rate:>9.0f} rows/s {rate / base:>6.2f}x")
    return result
