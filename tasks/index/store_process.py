"""The embedded store in a process of its own while an ingest runs: Chroma off the flow's GIL.

Chroma's Rust bindings hold the GIL for the whole of an upsert (docs/performance.md, "The
embed loop and the GIL"): in the flow's process nothing else runs Python while the store
writes, not the next batch's embed step, the tables, the lexical index nor Prefect's
engine. So while a run ingests into an embedded store (:func:`serving`), every Chroma call
of this process on that store goes to one child process that holds it: the call runs
there while this process waits on a pipe, its GIL free. The lexical index and the manifest
stay here, so the words are indexed while the child writes the vectors.

Every read and write of the store during the run goes through the child, so the store
still has one writer, and each call returns once Chroma has done it: the manifest commits
a batch only after its vectors are written, as before (crash safety unchanged). The child
opens a data dir's store at the run's first call and closes it when the last run of this
process on that store ends, so later readers (this process's included, which forgets its
own cached client of the store when a run starts) open what it wrote.

One child per process, for every store (started by :func:`preload` while a command waits
for Prefect's server, so that it imports Chroma meanwhile, or at first use). It ends with
its parent, ``kill -9`` included (a parent killed during an upsert leaves the child to
finish that one call, whose Chroma holds the GIL its watching thread needs, and exit: about
a second, less than a rerun takes to reach the store). A child that dies fails the call in one line
(StoreError), and the next call starts a new one, which opens the store afresh (what
Chroma committed is on disk). It is the default on a machine with cores to spare
(:func:`enabled`); ``DOCFLOW_STORE_PROCESS`` (``1``/``0``) decides otherwise; a daemonic
process (a Dask worker's) never starts one.
"""

from __future__ import annotations

import atexit
import gc
import os
import pickle
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from tasks.common.child import Child, switch
from tasks.common.config import cores
from tasks.common.errors import StoreError

ENV = "DOCFLOW_STORE_PROCESS"

#: Collection methods that go to the child as they are (what docflow calls).
CALLS = frozenset({"upsert", "get", "delete", "count", "query"})
Args = tuple[Any, ...]
Kwargs = dict[str, Any]


#: The cores from which the child is the default: it pays where a core is spare for it.
SPARE_CORES = 4


def enabled() -> bool:
    """Return whether runs of this process keep their embedded store in a child process.

    ``DOCFLOW_STORE_PROCESS`` (``1``/``0``) decides; else on a machine of
    :data:`SPARE_CORES` cores or more. On two cores, where Chroma's threads, the flow's
    process and the workers already want more than the machine has, the child made the
    ceiling's flow about 2 % slower (docs/performance.md, "The store stage").
    """
    forced = switch(ENV)
    return cores() >= SPARE_CORES if forced is None else forced


# --- the child ---------------------------------------------------------------------------


def serve(argv: Sequence[str]) -> None:
    """The child's entry point: ``FD`` (its end of the pipe)."""
    from tasks.common.lifetime import exit_with

    exit_with(os.getppid())
    import chromadb  # noqa: F401 - now, while the parent's run plans

    conn, opened = Connection(int(argv[0])), _Opened()
    while (request := conn.recv()) is not None:
        try:
            answer: tuple[str, Any] = ("ok", opened.answer(*request))
        except Exception as exc:  # noqa: BLE001 - raised again in the parent
            answer = ("raise", _portable(exc))
        conn.send(answer)
    opened.close_all()
    gc.freeze()  # the parent waits for this exit: skip the teardown's walk (flows/cli.py run)


class _Opened:
    """The child's open stores (by path) and collections (by path and name)."""

    def __init__(self) -> None:
        self.clients: dict[str, Any] = {}
        self.collections: dict[tuple[str, str], Any] = {}

    def answer(self, path: str, name: str | None, method: str, args: Args, kwargs: Kwargs) -> Any:
        """Run one call on the store at ``path`` (collection ``name``, or the client)."""
        if method == "close":
            return self.close(path)
        if name is not None:
            return getattr(self.collection(path, name), method)(*args, **kwargs)
        client = self.client(path)
        if method == "list_collections":
            return [(c.name, dict(c.metadata or {})) for c in client.list_collections()]
        if method in ("get_collection", "get_or_create_collection"):
            col = getattr(client, method)(*args, embedding_function=None, **kwargs)
            self.collections[path, col.name] = col
            return dict(col.metadata or {})
        if method == "delete_collection":
            self.collections.pop((path, args[0]), None)
        return getattr(client, method)(*args, **kwargs)

    def client(self, path: str) -> Any:
        if path not in self.clients:
            from tasks.index.store import make_client  # no run is served here: in process

            self.clients[path] = make_client(Path(path))
        return self.clients[path]

    def collection(self, path: str, name: str) -> Any:
        if (path, name) not in self.collections:
            col = self.client(path).get_collection(name, embedding_function=None)
            self.collections[path, name] = col
        return self.collections[path, name]

    def close(self, path: str) -> None:
        """Stop Chroma's system for ``path``: its files closed, for other readers to open."""
        from chromadb.api.shared_system_client import SharedSystemClient

        self.collections = {k: v for k, v in self.collections.items() if k[0] != path}
        if self.clients.pop(path, None) is not None:
            system = _forget_system(SharedSystemClient, path)
            if system is not None:
                system.stop()

    def close_all(self) -> None:
        for path in list(self.clients):
            self.close(path)


def _forget_system(shared: Any, path: str) -> Any:
    """Forget the process's cached Chroma system of the store at ``path``; return it (or None).

    The next client of ``path`` opens the store afresh (Chroma has no public way).
    """
    shared._identifier_to_refcount.pop(path, None)  # noqa: SLF001
    return shared._identifier_to_system.pop(path, None)  # noqa: SLF001


def _portable(exc: Exception) -> Exception:
    """Return ``exc`` if it survives pickling, else a StoreError with its line."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any exception type may refuse
        return StoreError(f"{type(exc).__name__}: {exc}")
    return exc


# --- the parent --------------------------------------------------------------------------


class StoreProcess(Child):
    """The child process that holds this process's embedded stores during runs."""

    CODE = "import sys; from tasks.index.store_process import serve; serve(sys.argv[1:])"
    WHAT = "the store process"
    ERROR = StoreError

    def call(self, path: str, name: str | None, method: str, args: Args, kwargs: Kwargs) -> Any:
        """Run one Chroma call in the child and return its result (or raise its error)."""
        with self.lock:
            self.send((path, name, method, args, kwargs))
            kind, value = self.receive()
        if kind == "raise":
            raise value
        return value


#: Store path → how many runs of this process it serves now.
_serving: dict[str, int] = {}
_child: StoreProcess | None = None
_lock = threading.Lock()


def _process() -> StoreProcess:
    """Return the child, starting it if there is none (or it died)."""
    global _child  # noqa: PLW0603 - one child per process
    with _lock:
        if _child is None or not _child.alive():
            if _child is not None:
                _child.stop()
            _child = StoreProcess()
        return _child


def preload(served: bool) -> None:
    """Ready Chroma while a command waits for Prefect's server anyway (0.65 s of import here).

    ``served``: the command's runs ingest (their embedded store will be in the child), so
    the child starts and imports it; else this process imports it. It used to fall in the
    run's first task, before the plan (docs/performance.md).
    """
    if served and enabled():
        _process()
    else:
        import chromadb  # noqa: F401 - imported for its cost, now


@contextmanager
def serving(path: Path) -> Iterator[None]:
    """Send this process's calls on the embedded store at ``path`` to the child, for the block.

    Runs of one process on one store share it; the last to end closes the store in the
    child. This process's own cached Chroma system of the store is forgotten first: its
    index in memory would not see what the child writes (the clients made from it before
    keep working, as stale readers; the next client after the block opens it afresh).
    """
    key = os.path.abspath(path)  # the child's working directory is the one it started in
    with _lock:
        first = key not in _serving
        _serving[key] = _serving.get(key, 0) + 1
    if first:
        shared = sys.modules.get("chromadb.api.shared_system_client")
        if shared is not None:
            for name in {key, str(path)}:  # as Chroma was given it
                _forget_system(shared.SharedSystemClient, name)
    try:
        yield
    finally:
        with _lock:
            _serving[key] -= 1
            last = not _serving[key]
            if last:
                del _serving[key]
            child = _child
        if last and child is not None and child.alive():
            with suppress(StoreError):  # died meanwhile: nothing left open, the run's error stands
                child.call(key, None, "close", (), {})


def client_for(path: Path) -> ProcessClient | None:
    """Return a client of the store at ``path`` whose calls run in the child, if a run is served."""
    key = os.path.abspath(path)
    with _lock:
        served = key in _serving
    return ProcessClient(key) if served else None


@dataclass(frozen=True)
class Listed:
    """A collection as ``list_collections`` gives it: its name and metadata."""

    name: str
    metadata: dict[str, Any]


class ProcessClient:
    """Chroma's client, for what docflow calls of it, with every call run in the child."""

    def __init__(self, path: str) -> None:
        """Speak for the embedded store at ``path``."""
        self.path = path
        self._batch: int | None = None

    def call(self, name: str | None, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``method`` of collection ``name`` (None: of the client) in the child."""
        return _process().call(self.path, name, method, args, kwargs)

    def list_collections(self) -> list[Listed]:
        """Return the store's collections."""
        return [Listed(name, meta) for name, meta in self.call(None, "list_collections")]

    def get_collection(self, name: str, **_: Any) -> ProcessCollection:
        """Return collection ``name`` (Chroma's error if it does not exist)."""
        return ProcessCollection(self, name, self.call(None, "get_collection", name))

    def get_or_create_collection(self, name: str, **kwargs: Any) -> ProcessCollection:
        """Return collection ``name``, created with ``kwargs`` if missing (ours: no embedder)."""
        kwargs.pop("embedding_function", None)
        metadata = self.call(None, "get_or_create_collection", name, **kwargs)
        return ProcessCollection(self, name, metadata)

    def delete_collection(self, name: str) -> None:
        """Delete collection ``name``."""
        self.call(None, "delete_collection", name)

    def get_max_batch_size(self) -> int:
        """Return the most rows one call may carry (asked once)."""
        if self._batch is None:
            self._batch = int(self.call(None, "get_max_batch_size"))
        return self._batch

    def heartbeat(self) -> int:
        """Return Chroma's heartbeat (the child answers)."""
        return int(self.call(None, "heartbeat"))


class ProcessCollection:
    """Chroma's collection, for what docflow calls of it, with every call run in the child."""

    def __init__(self, client: ProcessClient, name: str, metadata: dict[str, Any]) -> None:
        """Speak for collection ``name`` of ``client``'s store, whose metadata is ``metadata``."""
        self.client, self.name, self.metadata = client, name, metadata

    def modify(self, metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Change the collection's metadata (or name) as Chroma's ``modify`` does."""
        self.client.call(self.name, "modify", metadata=metadata, **kwargs)
        if metadata is not None:
            self.metadata = dict(metadata)

    def __getattr__(self, method: str) -> Any:
        """Return the child's ``upsert``, ``get``, ``delete``, ... of this collection."""
        if method not in CALLS:
            raise AttributeError(method)
        return lambda *args, **kwargs: self.client.call(self.name, method, *args, **kwargs)


@atexit.register
def stop() -> None:
    """Stop the child (at exit): it closes its stores first."""
    global _child  # noqa: PLW0603 - one child per process
    with _lock:
        child, _child = _child, None
    if child is not None:
        child.stop()
