"""Measure only: an embedded store whose upserts run in a writer process of their own.

Chroma's Rust bindings hold the flow's GIL for the whole of an upsert (docs/performance.md,
"The embed loop and the GIL"), so nothing else of the flow's process runs Python while the
store writes. This module answers what moving the writes out would gain before anyone
builds it into docflow: :func:`patch` routes :meth:`ChromaStore.upsert` of an embedded store
to a child process that opens the same folder and upserts there; everything else (the
lexical index, the manifest, deletes, reads) stays in the flow's process.

Two writers: :class:`Writer` waits for each upsert, so the store chain waits for the child
as it waits for Chroma in the flow's process; :class:`PipelinedWriter` queues them, so the
child writes batch after batch while the flow's process reads, indexes the words of and
commits the next ones: the most a writer process could gain (not crash-safe: the manifest
commits rows the child may not have written yet). :func:`prestart` starts one with the run.

It is valid for what the benchmarks run, a first ingest of a new collection: the flow's
process reads nothing back from Chroma while the child writes (a later reader in the flow's
process would see a stale index; :func:`stop_writers` drops this process's cached client).
Not a product path: the one-writer guarantee of a real writer process needs every read and
write of the run to go through it.

Used by ``DOCFLOW_BENCH_STORE_WRITER=1`` (or ``=pipelined``) ``python -m tests.benchmarks
bench_ceiling`` and by the GPU check's ``writer`` step, which runs ``python -m
tests.benchmarks.store_writer ingest ...`` (docflow's command line with the patch applied
and a pipelined writer started with the command).
"""

from __future__ import annotations

import atexit
import functools
import gc
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from tasks.common.child import Child
from tasks.common.errors import StoreError

#: How :func:`main` starts the line of the writers' timings on stderr (a JSON object follows).
TIMINGS = "store writer timings: "


def serve(fd: str, path: str) -> None:
    """The writer's loop: upsert each request into its collection and answer with timings.

    Each answer is (rows, seconds the upsert took, seconds the child waited for the request
    since its previous answer; the first request's wait counts from the child's start), or
    the error's line. The store is opened at the first request, so a writer started with
    the run imports Chroma while the run plans, before the folder exists.
    """
    import chromadb
    from chromadb.config import Settings

    from tasks.common.lifetime import exit_with

    exit_with(os.getppid())
    conn = Connection(int(fd))
    client = None
    idle_from = time.perf_counter()
    while (request := conn.recv()) is not None:
        received = time.perf_counter()
        waited = received - idle_from
        name, ids, vectors, texts, metadatas = request
        try:
            if client is None:
                settings = Settings(anonymized_telemetry=False)
                client = chromadb.PersistentClient(path=path, settings=settings)
            client.get_collection(name, embedding_function=None).upsert(
                ids=ids, embeddings=vectors, documents=texts, metadatas=metadatas
            )
            idle_from = time.perf_counter()
            conn.send((len(ids), idle_from - received, waited))
        except Exception as exc:  # noqa: BLE001 - the parent raises it
            conn.send(f"{type(exc).__name__}: {exc}")


class Writer(Child):
    """A child process that upserts into the embedded store at ``path``."""

    CODE = "import sys; from tests.benchmarks.store_writer import serve; serve(*sys.argv[1:])"
    WHAT = "the store writer"
    ERROR = StoreError

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.upsert_seconds = 0.0  # summed over the child's upserts
        self.idle_seconds = 0.0  # the child's waits for requests after its first
        self.requests = 0

    def upsert(
        self, name: str, ids: list[str], vectors: np.ndarray, texts: list[str], metas: list[Any]
    ) -> None:
        """Send one call's rows to the child and wait until they are written."""
        with self.lock:
            self.send((name, ids, vectors, texts, metas))
            answer = self.receive()
        if isinstance(answer, str):
            raise RuntimeError(f"the store writer failed: {answer}")
        _, seconds, waited = answer
        self.upsert_seconds += seconds
        self.idle_seconds += waited if self.requests else 0.0
        self.requests += 1


class PipelinedWriter(Writer):
    """A writer whose upserts return at once: a thread hands them to the child in order.

    The store chain then never waits for the child between two upserts (the next batch's
    parts are read, its words written and its manifest rows committed while the child
    writes): the most a writer process could gain. The manifest commits before the child
    has written, so a crash could lose rows the manifest calls stored: a measurement only.
    """

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.queue: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._send, name="store-writer", daemon=True)
        self.thread.start()

    def _send(self) -> None:
        while (request := self.queue.get()) is not None:
            try:
                Writer.upsert(self, *request)
            except Exception as exc:  # noqa: BLE001 - a dead child too: drain() raises it
                self.errors.append(str(exc) if isinstance(exc, RuntimeError) else repr(exc))
            finally:
                self.queue.task_done()
        self.queue.task_done()

    def upsert(
        self, name: str, ids: list[str], vectors: np.ndarray, texts: list[str], metas: list[Any]
    ) -> None:
        """Queue one call's rows for the child; :meth:`drain` waits for them."""
        self.queue.put((name, ids, vectors, texts, metas))

    def drain(self) -> None:
        """Wait until every queued upsert is written; raise the first failure."""
        self.queue.join()
        if self.errors:
            raise RuntimeError(self.errors[0])

    def stop(self) -> None:
        """Write what is queued, stop the thread and the child, then raise a failure."""
        self.queue.join()
        self.queue.put(None)
        self.thread.join()
        super().stop()
        self.drain()


#: The ChromaStore methods that a pipelined routing makes wait for the queued upserts.
AFTER_WRITES = ("delete", "update_metadata", "ids", "count", "query")

_writers: dict[str, Writer] = {}
_lock = threading.Lock()


def patch(pipelined: bool = False) -> None:
    """Route every upsert of an embedded ChromaStore in this process to a writer process.

    ``pipelined``: upserts return once queued (:class:`PipelinedWriter`), and the store's
    other calls (deletes, the collection's metadata at the end of a run) wait for the
    queue first. Once per class: a second call keeps the first routing (wrapping it again
    would make a server store's upsert call itself).
    """
    from tasks.index import store_process
    from tasks.index.store import ChromaStore, Scalar, flatten_metadata

    os.environ[store_process.ENV] = "0"  # this writer instead of docflow's store process
    in_process = ChromaStore.upsert
    if getattr(in_process, "routed_to_writer", False):
        return
    if pipelined:
        for method in AFTER_WRITES:
            setattr(ChromaStore, method, _after_writes(getattr(ChromaStore, method)))

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
        writer = _writer_for(path, pipelined)
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


def prestart(path: Path, pipelined: bool = False) -> None:
    """Start the writer of the embedded store at ``path`` now (before its run's first write).

    Its child imports Chroma while the run plans and loads, as a writer started with the run
    would; it opens the store at the first write.
    """
    _writer_for(str(path), pipelined)


def _writer_for(path: str, pipelined: bool) -> Writer:
    """Return this process's writer of the store at ``path``, starting it if there is none."""
    with _lock:
        if path not in _writers:
            _writers[path] = (PipelinedWriter if pipelined else Writer)(path)
        return _writers[path]


def _after_writes(method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a ChromaStore method to run once the queued upserts are written."""

    @functools.wraps(method)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        if method.__name__ != "delete" or args[0]:  # an empty delete waits for nothing
            drain_writers()
        return method(self, *args, **kwargs)

    return wrapped


def drain_writers() -> None:
    """Wait for every pipelined writer's queued upserts."""
    with _lock:
        writers = list(_writers.values())
    for writer in writers:
        if isinstance(writer, PipelinedWriter):
            writer.drain()


def stop_writers() -> dict[str, float]:
    """Stop the writers, then drop this process's cached Chroma clients (read from disk).

    Return the stopped writers' timings summed: seconds in upserts, seconds the children
    waited for a request after their first, and requests.
    """
    from chromadb.api.shared_system_client import SharedSystemClient

    with _lock:
        writers = list(_writers.values())
        _writers.clear()
    for writer in writers:
        writer.stop()
    SharedSystemClient.clear_system_cache()
    return {
        "upsert_s": round(sum(w.upsert_seconds for w in writers), 2),
        "idle_s": round(sum(w.idle_seconds for w in writers), 2),
        "requests": sum(w.requests for w in writers),
    }


def main(argv: list[str]) -> int:
    """docflow's command line (``ingest ...``) with the embedded store's writes in a child.

    The writer starts with the command (for ``--data-dir``'s store) and is pipelined;
    ``DOCFLOW_BENCH_STORE_WRITER=1`` makes it one that waits for each upsert.
    """
    from flows.cli import main as cli

    pipelined = os.environ.get("DOCFLOW_BENCH_STORE_WRITER") != "1"
    patch(pipelined)
    if "--data-dir" in argv:
        prestart(Path(argv[argv.index("--data-dir") + 1]) / "chroma", pipelined)
    try:
        return int(cli(argv) or 0)
    finally:
        print(TIMINGS + json.dumps(stop_writers()), file=sys.stderr)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    gc.freeze()  # as docflow's own command exits (flows.cli.run): the check compares walls
    raise SystemExit(code)
