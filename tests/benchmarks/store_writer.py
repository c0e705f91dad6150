"""Measure only: an embedded store whose upserts run in a writer process of their own.

Chroma's Rust bindings hold the flow's GIL for the whole of an upsert (docs/performance.md,
"The embed loop and the GIL"), so nothing else of the flow's process runs Python while the
store writes. This module answers what moving the writes out would gain before anyone
builds it into docflow: :func:`patch` routes :meth:`ChromaStore.upsert` of an embedded store
to a child process that opens the same folder and upserts there; everything else (the
lexical index, the manifest, deletes, reads) stays in the flow's process.

It is valid for what the benchmarks run, a first ingest of a new collection: the flow's
process reads nothing back from Chroma while the child writes (a later reader in the flow's
process would see a stale index; :func:`stop_writers` drops this process's cached client).
Not a product path: the one-writer guarantee of a real writer process needs every read and
write of the run to go through it.

Used by ``DOCFLOW_BENCH_STORE_WRITER=1 python -m tests.benchmarks bench_ceiling`` and by the
GPU check's ``writer`` step, which runs ``python -m tests.benchmarks.store_writer ingest ...``
(docflow's command line with the patch applied).
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np


def serve(fd: str, path: str) -> None:
    """The writer's loop: upsert each request into its collection, answer how many rows."""
    import chromadb
    from chromadb.config import Settings

    from tasks.common.lifetime import exit_with

    exit_with(os.getppid())
    conn = Connection(int(fd))
    client = chromadb.PersistentClient(path=path, settings=Settings(anonymized_telemetry=False))
    while (request := conn.recv()) is not None:
        name, ids, vectors, texts, metadatas = request
        try:
            client.get_collection(name, embedding_function=None).upsert(
                ids=ids, embeddings=vectors, documents=texts, metadatas=metadatas
            )
            conn.send(len(ids))
        except Exception as exc:  # noqa: BLE001 - the parent raises it
            conn.send(f"{type(exc).__name__}: {exc}")


class Writer:
    """A child process that upserts into the embedded store at ``path``."""

    def __init__(self, path: str) -> None:
        self.conn, child = mp.Pipe()
        fd = child.fileno()
        code = "import sys; from tests.benchmarks.store_writer import serve; serve(*sys.argv[1:])"
        searched = os.pathsep.join(p or os.getcwd() for p in sys.path)
        self.process = subprocess.Popen(
            [sys.executable, "-c", code, str(fd), path],
            pass_fds=(fd,),
            env={**os.environ, "PYTHONPATH": searched},
        )
        child.close()
        self.lock = threading.Lock()

    def upsert(
        self, name: str, ids: list[str], vectors: np.ndarray, texts: list[str], metas: list[Any]
    ) -> None:
        """Send one call's rows to the child and wait until they are written."""
        with self.lock:
            self.conn.send((name, ids, vectors, texts, metas))
            answer = self.conn.recv()
        if isinstance(answer, str):
            raise RuntimeError(f"the store writer failed: {answer}")

    def stop(self) -> None:
        """Ask the child to exit once its writes are done."""
        self.conn.send(None)
        self.process.wait()
        self.conn.close()


_writers: dict[str, Writer] = {}
_lock = threading.Lock()


def patch() -> None:
    """Route every upsert of an embedded ChromaStore in this process to a writer process.

    Once per class: a second call keeps the first routing (wrapping it again would make a
    server store's upsert call itself).
    """
    from tasks.index.store import ChromaStore, Scalar, flatten_metadata

    in_process = ChromaStore.upsert
    if getattr(in_process, "routed_to_writer", False):
        return

    def upsert(
        self: ChromaStore,
        chunks: Sequence[Any],
        vectors: np.ndarray,
        metadatas: Sequence[dict[str, Scalar]] | None = None,
    ) -> int:
        settings = self.client.get_settings()
        path = settings.persist_directory
        if settings.chroma_api_impl.endswith("FastAPI") or not path:  # a server: as it is
            return in_process(self, chunks, vectors, metadatas)
        self.collection()  # created in this process (open_index), before any write
        with _lock:
            writer = _writers.get(path) or _writers.setdefault(path, Writer(path))
        metas = [flatten_metadata(c) for c in chunks] if metadatas is None else metadatas
        step = self._step()
        for lo in range(0, len(chunks), step):
            part = chunks[lo : lo + step]
            ids, texts = [c.chunk_id for c in part], [c.text for c in part]
            writer.upsert(
                self.name, ids, vectors[lo : lo + step], texts, list(metas[lo : lo + step])
            )
        return len(chunks)

    upsert.routed_to_writer = True  # type: ignore[attr-defined]
    ChromaStore.upsert = upsert  # type: ignore[method-assign]
    atexit.register(stop_writers)


def stop_writers() -> None:
    """Stop the writers, then drop this process's cached Chroma clients (read from disk)."""
    from chromadb.api.shared_system_client import SharedSystemClient

    with _lock:
        writers = list(_writers.values())
        _writers.clear()
    for writer in writers:
        writer.stop()
    SharedSystemClient.clear_system_cache()


def main(argv: list[str]) -> int:
    """docflow's command line (``ingest ...``) with the embedded store's writes in a child."""
    from flows.cli import main as cli

    patch()
    try:
        return int(cli(argv) or 0)
    finally:
        stop_writers()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
