"""Encode in a child process on a GPU: the forward pass off the flow's GIL.

On CUDA a forward pass is hundreds of short kernel launches, and each launch leaves the
GIL and takes it back. In the flow's process other threads hold it (the store's Python
side, the tables, Prefect's event loop), and taking it back waits for their switch
interval: measured with the real model on small inputs, where operators are as short as
launches (``python -m tests.benchmarks bench_gil``), an encode beside one pure-Python
thread took 57 times as long as alone, and in a child process the same as alone. So a
torch backend on CUDA encodes in a child process of its own: the parent sends a batch's
texts down a pipe and receives its vectors (the cache, the parts and the store stay in
the flow's process). The child builds the same :class:`~tasks.embed.model.Embedder` with
the parent's settings, so the vectors are the ones the parent would have computed.

One child per model and settings, per process, started on first use (or by the CLI's
warm-up, so that it imports torch and loads the model while the run plans). Where the
device is left to pick and an NVIDIA driver is there, the child picks it
(:func:`asks_child`): the flow's process never imports torch. It ends when its parent
does, even after ``kill -9`` (:mod:`tasks.common.lifetime`). A child that dies fails the
batch in one line, and the next batch starts a new one. ``DOCFLOW_EMBED_PROCESS``
(``1``/``0``) forces the choice; a daemonic process (a Dask worker's) encodes in process:
it is not the flow's process, whose GIL the child is there to avoid.

The child is a new interpreter that imports this module and nothing of its parent's
(:mod:`tasks.common.child`: ``multiprocessing``'s spawn would run the parent's main
script again in it, and a script that ingests at its module level would do so again).
"""

from __future__ import annotations

import atexit
import gc
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from tasks.common.child import Child, switch
from tasks.common.errors import EmbedError
from tasks.common.lifetime import exit_with

ENV = "DOCFLOW_EMBED_PROCESS"
#: The device argument of a child that picks the device itself (CUDA when torch sees one).
AUTO = "auto"

#: (model, device, backend) → its child.
_children: dict[tuple[str, str, str], EmbedProcess] = {}
_children_lock = threading.Lock()
#: (model, backend) → the device a child picked (:func:`picked_device`).
_picked: dict[tuple[str, str], str] = {}


def wanted(device: str, backend: str) -> bool:
    """Return whether an embedder on ``device`` with ``backend`` encodes in a child process."""
    forced = _forced()
    if forced is not None:
        return forced
    return device.startswith("cuda") and backend.startswith("torch")


def asks_child(backend: str, cuda: bool) -> bool:
    """Return whether the device of an embedder left to pick one is the child's to pick.

    Deciding it here means importing torch (5–8 s of holding the GIL while the run plans,
    before the child could even start); where a child will encode anyway (``backend``
    ``auto`` or a torch one, and ``cuda``: an NVIDIA driver is there), the child imports
    torch, picks the device and says which.
    """
    forced = _forced()
    if forced is not None:
        return forced
    return cuda and (backend == "auto" or backend.startswith("torch"))


def picked_device(
    model: str, backend: str, cuda: bool, needs_child: Callable[[str], bool]
) -> str | None:
    """Return the device the child picked for an embedder left to pick one (None: not asked).

    The child is stopped where ``needs_child(device)`` says no child encodes there after
    all (torch sees no CUDA: ONNX on the CPU, in this process).
    """
    if not asks_child(backend, cuda):
        return None
    if (model, backend) not in _picked:  # once per process, even where the child was stopped
        key = (model, AUTO, backend)
        _picked[model, backend] = child_for(*key).device
        if not needs_child(_picked[model, backend]):
            release(*key)
    return _picked[model, backend]


def _forced() -> bool | None:
    """Return ``DOCFLOW_EMBED_PROCESS``'s choice (False in a daemonic process), or None."""
    return switch(ENV)


@dataclass(frozen=True)
class _Failed:
    """A child's answer when encoding raised: the one-line reason."""

    reason: str


def serve(argv: Sequence[str]) -> None:
    """The child's entry point: ``FD MODEL DEVICE BACKEND`` (FD: its end of the pipe)."""
    fd, model, device, backend = argv
    _serve(Connection(int(fd)), model, device, backend)


def _serve(conn: Connection, model: str, device: str, backend: str) -> None:
    """The child's loop: build the embedder, then answer each batch of texts with vectors."""
    from tasks.embed.model import Embedder

    exit_with(os.getppid())
    embedder = Embedder(model, device=None if device == AUTO else device, backend=backend)
    try:
        conn.send((embedder.dimension, embedder.resolved_device))  # loads the model: ready
    except Exception as exc:  # noqa: BLE001 - any load failure goes to the parent in one line
        conn.send(_Failed(f"{type(exc).__name__}: {exc}"))
        return
    while (request := conn.recv()) is not None:
        texts, embedder.batch_size = request
        try:
            answer: Any = embedder.embed(texts)
        except Exception as exc:  # noqa: BLE001 - the parent raises it as its own error
            answer = _Failed(f"{type(exc).__name__}: {exc}")
        conn.send(answer)
    gc.freeze()  # the parent waits for this exit: skip the teardown's walk (flows/cli.py run)


class EmbedProcess(Child):
    """A child process that encodes with one model and its settings."""

    #: What the child runs (a benchmark's peer runs it another way).
    CODE = "import sys; from tasks.embed.process import serve; serve(sys.argv[1:])"
    WHAT = "the embedding process"
    ERROR = EmbedError

    def __init__(self, model: str, device: str, backend: str) -> None:
        super().__init__(model, device, backend, env={ENV: "0"})  # the child encodes itself
        self._ready: tuple[int, str] | None = None

    def _receive(self) -> Any:
        answer = self.receive()
        if isinstance(answer, _Failed):
            raise EmbedError(f"embedding failed in its process: {answer.reason}")
        return answer

    def ready(self) -> tuple[int, str]:
        """Return the model's vector size and the child's device, once the model has loaded."""
        with self.lock:
            if self._ready is None:
                dimension, device = self._receive()
                self._ready = int(dimension), str(device)
            return self._ready

    @property
    def dimension(self) -> int:
        """Return the model's vector size (waits until the child has loaded the model)."""
        return self.ready()[0]

    @property
    def device(self) -> str:
        """Return the device the child encodes on (waits until it has loaded the model)."""
        return self.ready()[1]

    def embed(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        """Return the child's vectors for ``texts`` (one call at a time)."""
        self.ready()  # the first answer is the child's ready signal
        with self.lock:
            self.send((list(texts), batch_size))
            vectors: np.ndarray = self._receive()
            return vectors


def child_for(model: str, device: str, backend: str) -> EmbedProcess:
    """Return this process's child for these settings, starting it if needed (or if dead).

    ``device`` may be :data:`AUTO` and ``backend`` ``auto``: the child resolves them as an
    embedder in this process would.
    """
    key = (model, device, backend)
    with _children_lock:
        child = _children.get(key)
        if child is None or not child.alive():
            if child is not None:
                child.stop()
            child = _children[key] = EmbedProcess(model, device, backend)
        return child


def release(model: str, device: str, backend: str) -> None:
    """Stop the child for these settings, if there is one (it turned out not to be needed)."""
    with _children_lock:
        child = _children.pop((model, device, backend), None)
    if child is not None:
        child.stop()


@atexit.register
def stop_all() -> None:
    """Stop every child (at exit)."""
    with _children_lock:
        for child in _children.values():
            child.stop()
        _children.clear()
