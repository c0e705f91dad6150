"""Embedding backends: how the Embedder runs its sentence-transformers model.

- ``torch``: the sentence-transformers model in float32, the reference vectors (fed by
  :mod:`tasks.embed.torch_path` where that reproduces ``encode``, else ``encode`` itself).
- ``torch-fp16``: the same model in half precision on CUDA (GPU only).
- ``onnx``: the model's transformer exported once to ONNX and run with ONNX Runtime on the
  CPU (float32; the same vectors as ``torch`` up to rounding).
- ``onnx-int8``: that export with its MatMul weights quantised to int8 per output channel
  (``onnxruntime.quantization.quantize_dynamic``): the fastest on a CPU. Activations are
  quantised per batch, so a text's vector moves slightly with its batch-mates (cosine
  >= 0.98 between batchings): deterministic for one input, not bit-identical across.
- ``auto`` (the default): ``torch-fp16`` with a batch of at least ``GPU_BATCH_SIZE`` when
  CUDA is present, else ``onnx`` (float32) for models it can export (a Transformer, mean or
  CLS pooling and an optional Normalize, in a local folder such as the bundled model), else
  ``torch``. Not ``onnx-int8``, though it is faster: on the shared evaluation sets it loses
  more than 1 recall point against float32 on some corpus in 24 of 128 configurations (up to
  3.5 points; docs/retrieval.md, "Choosing the default"), which is more than a default may cost.

Exports are written once per model, backend and library versions under
:func:`model_cache_dir` (``$DOCFLOW_MODEL_CACHE``, else ``$XDG_CACHE_HOME/docflow/models``,
else ``~/.cache/docflow/models``). Each is built in a temporary folder and renamed into
place, so concurrent processes (Dask workers, the loader's processes) never see a partial
one: the first rename wins, later builders drop theirs. The export runs offline from the
local model files.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, get_args

import numpy as np

from tasks.common.config import EmbedBackend
from tasks.common.errors import ConfigError, EmbedError
from tasks.embed.batches import BatchTokenizer, length_batches, padded

log = logging.getLogger(__name__)

BACKENDS: tuple[str, ...] = get_args(EmbedBackend)
DEFAULT_BACKEND: EmbedBackend = "auto"
#: What ``auto`` means on a CPU (for models ONNX can take), and on CUDA.
CPU_BACKEND = "onnx"
GPU_BACKEND = "torch-fp16"
#: Texts per forward pass on CUDA at least (a small batch leaves the GPU idle).
GPU_BATCH_SIZE = 256
#: Bump when the export recipe changes: older exports are then ignored.
EXPORT_FORMAT = 1
ONNX_OPSET = 17
META_FILE = "docflow.json"
MODEL_FILE = "model.onnx"
#: Module types the ONNX path reproduces (sentence-transformers class names).
_SUPPORTED_MODULES = ("Transformer", "Pooling", "Normalize")
_POOLINGS = ("mean", "cls")

_sessions: OrderedDict[Path, OnnxEncoder] = OrderedDict()
_sessions_lock = threading.Lock()
_export_lock = threading.Lock()
MAX_CACHED_SESSIONS = 2


def check_backend(backend: str) -> str:
    """Return ``backend`` if it is one docflow knows.

    Raises:
        ConfigError: For any other name.

    """
    if backend not in BACKENDS:
        raise ConfigError(f"unknown embed backend {backend!r}; expected one of {BACKENDS}")
    return backend


def onnx_exportable(model_path: str) -> bool:
    """Return whether the model is a local folder the ONNX path can reproduce exactly.

    That is: its ``modules.json`` lists a Transformer, a Pooling with mean or CLS pooling
    and optionally a Normalize, nothing else (no Dense layer, no prompt-aware pooling).
    """
    folder = Path(model_path)
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
        if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in ([], ["Normalize"]):
            return False
        pooling_dir = next(m["path"] for m in modules if m["type"].endswith("Pooling"))
        config = json.loads((folder / pooling_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return False
    return _pooling_mode(config) is not None


def _pooling_mode(config: dict[str, Any]) -> str | None:
    """Return "mean" or "cls" from a Pooling config (old or new keys), else None."""
    mode = config.get("pooling_mode")
    if isinstance(mode, str):
        return mode if mode in _POOLINGS else None
    flags = [k for k, v in config.items() if k.startswith("pooling_mode_") and v is True]
    named = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}
    return named.get(flags[0]) if len(flags) == 1 else None


def resolve_backend(backend: str, device: str, model_path: str) -> str:
    """Return the concrete backend ``backend`` means for a device and model.

    Raises:
        ConfigError: For an unknown backend, or ``torch-fp16`` without CUDA.

    """
    check_backend(backend)
    if backend == "auto":
        if device.startswith("cuda"):
            return GPU_BACKEND
        return CPU_BACKEND if onnx_exportable(model_path) else "torch"
    if backend == "torch-fp16" and not device.startswith("cuda"):
        raise ConfigError("embed backend torch-fp16 needs a CUDA device")
    return backend


def model_cache_dir() -> Path:
    """Return the folder of ONNX exports (see the module docstring)."""
    configured = os.environ.get("DOCFLOW_MODEL_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "docflow" / "models"


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "-"


def export_key(model_path: str, backend: str) -> str:
    """Return the name of an export: model folder, backend, file stamps, library versions."""
    folder = Path(model_path)
    files = sorted(
        (str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file()
    )
    blob = json.dumps(
        {
            "model": str(folder.resolve()),
            "files": files,
            "backend": backend,
            "format": EXPORT_FORMAT,
            "versions": [_version(p) for p in ("torch", "transformers", "onnx", "onnxruntime")],
        },
        sort_keys=True,
    )
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in folder.name)[:40]
    return f"{slug}-{backend}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` for the block; the file goes after.

    A process already waiting on the removed file still gets the lock, then finds the
    export done (the rename into place is what makes an export exist, never the lock).
    """
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
            fcntl.flock(handle, fcntl.LOCK_UN)


def export_onnx(model_path: str, backend: str, cache_dir: Path | None = None) -> Path:
    """Return the folder of the model's ONNX export for ``backend``, exporting it if needed.

    The folder holds ``model.onnx``, the tokenizer files and ``docflow.json`` (pooling,
    maximum length, dimension). It appears complete or not at all (temp folder + rename).

    Raises:
        EmbedError: If the model cannot be exported (not a local folder, an unsupported
            module, ``onnx`` not installed) or the export does not reproduce the model.

    """
    if backend not in ("onnx", "onnx-int8"):
        raise ConfigError(f"no ONNX export for backend {backend!r}")
    if not onnx_exportable(model_path):
        raise EmbedError(
            f"model {model_path!r} cannot run on ONNX Runtime (a local sentence-transformers "
            "folder with mean or CLS pooling and no other modules is needed): "
            "use embed backend torch"
        )
    root = cache_dir or model_cache_dir()
    final = root / export_key(model_path, backend)
    if (final / META_FILE).is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    # one export per process at a time, and across processes (Dask or test workers starting
    # together on a fresh machine): the others wait for it instead of exporting it again
    with _export_lock, _file_lock(root / f"{final.name}.lock"):
        if (final / META_FILE).is_file():
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide a shared cache from other users
        try:
            _export_into(model_path, tmp, quantize=backend == "onnx-int8")
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / META_FILE).is_file():  # not another process's finished export
                    raise
            else:
                log.info("exported %s for %s to %s", model_path, backend, final)
        except EmbedError:
            raise
        except Exception as exc:  # noqa: BLE001 - any exporter failure is one EmbedError
            raise EmbedError(f"cannot export {model_path!r} to ONNX: {exc}") from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


#: Texts the export is checked with (two lengths, so padding is traced and tested).
_CHECK_TEXTS = (
    "The lighthouse keeper lit the lamp at dusk.",
    "Quarterly revenue rose four percent on strong software sales, the report said.",
    "x",
)


def _export_into(model_path: str, folder: Path, quantize: bool) -> None:
    """Export, optionally quantise, check against torch and describe the model in folder."""
    import torch
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(
        model_path, device="cpu", model_kwargs={"attn_implementation": "eager"}
    )
    transformer: Any = st[0]
    pooling: Any = st[1]
    tokenizer = st.tokenizer
    names = list(tokenizer.model_input_names)
    model = transformer.auto_model.eval()

    class _Hidden(torch.nn.Module):  # type: ignore[misc]  # torch is Any to mypy (pyproject)
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: torch.Tensor) -> Any:
            return self.model(**dict(zip(names, inputs, strict=True))).last_hidden_state

    sample = tokenizer(list(_CHECK_TEXTS), padding=True, return_tensors="pt")
    fp32 = folder / ("model.fp32.onnx" if quantize else MODEL_FILE)
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Hidden(),
            tuple(sample[n] for n in names),
            str(fp32),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=ONNX_OPSET,
            dynamo=False,
        )
    if quantize:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        logging.disable(logging.WARNING)  # its root-logger advice to pre-process the model
        try:
            quantize_dynamic(
                str(fp32), str(folder / MODEL_FILE), per_channel=True, weight_type=QuantType.QInt8
            )
        finally:
            logging.disable(logging.NOTSET)
        fp32.unlink()
    tokenizer.save_pretrained(str(folder))
    meta = {
        "format": EXPORT_FORMAT,
        "inputs": names,
        "pooling": str(pooling.pooling_mode),
        "max_seq_length": int(st.max_seq_length or 512),
        "dimension": int(st.get_embedding_dimension() or 0),
    }
    reference = st.encode(list(_CHECK_TEXTS), normalize_embeddings=True, convert_to_numpy=True)
    got = OnnxEncoder(folder, meta).encode(list(_CHECK_TEXTS))
    worst = float(np.min(np.sum(np.asarray(reference) * got, axis=1)))
    if worst < (0.95 if quantize else 0.999):
        raise EmbedError(f"the ONNX export of {model_path!r} differs from it (cosine {worst:.4f})")
    (folder / META_FILE).write_text(json.dumps(meta), encoding="utf-8")


@dataclass(frozen=True)
class TokenizerFile:
    """The two things :class:`BatchTokenizer` needs of a fast tokenizer, read from its files.

    An export folder holds the tokenizer exactly as ``save_pretrained`` wrote it
    (``tokenizer.json``: normaliser, pre-tokenizer, vocabulary, special-token template).
    Reading it with ``tokenizers`` alone skips importing transformers, which imports torch:
    about 1.8 s of every cold query or CLI run on a CPU.
    """

    backend_tokenizer: Any
    pad_token_id: int | None

    @classmethod
    def read(cls, folder: Path) -> TokenizerFile | None:
        """Return the folder's tokenizer, or None where it has no ``tokenizer.json``."""
        from tokenizers import Tokenizer

        if not (folder / "tokenizer.json").is_file():
            return None
        backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
        config_file = folder / "tokenizer_config.json"
        config = json.loads(config_file.read_text("utf-8")) if config_file.is_file() else {}
        pad = config.get("pad_token")
        pad = pad.get("content") if isinstance(pad, dict) else pad
        return cls(backend, backend.token_to_id(pad) if pad else None)


class OnnxEncoder:
    """An exported model on ONNX Runtime, with the ``encode`` the Embedder calls."""

    def __init__(self, folder: Path, meta: dict[str, Any] | None = None):
        """Open the session and the tokenizer of an export folder."""
        import onnxruntime as ort

        self.folder = folder
        self.meta = meta or json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        tokenizer: Any = TokenizerFile.read(folder)
        if tokenizer is None:  # a slow tokenizer only: transformers reads it
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.tokenizer = tokenizer
        self.tokens = BatchTokenizer(self.tokenizer, int(self.meta["max_seq_length"]))
        options = ort.SessionOptions()
        options.inter_op_num_threads = 1
        # no busy-waiting between batches: the machine is shared (Dask workers, loaders)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(
            str(folder / MODEL_FILE), options, providers=["CPUExecutionProvider"]
        )

    def get_embedding_dimension(self) -> int | None:
        """Return the vector dimension."""
        return int(self.meta["dimension"]) or None

    def encode(self, sentences: Sequence[str], batch_size: int = 32, **_: Any) -> np.ndarray:
        """Return one unit-length float32 row per text, in input order.

        Texts are tokenised once, sorted by token count and batched, so each batch pads
        to its own longest member only (:mod:`tasks.embed.batches`).
        """
        dim = int(self.meta["dimension"])
        if not sentences:
            return np.zeros((0, dim), dtype=np.float32)
        names: list[str] = self.meta["inputs"]
        tokens = self.tokens(sentences)
        out = np.empty((len(sentences), dim), dtype=np.float32)
        for rows in length_batches(tokens.lengths, batch_size):
            arrays = padded(rows, tokens)
            hidden = self.session.run(None, {n: arrays[n] for n in names})[0]
            if self.meta["pooling"] == "cls":
                pooled = hidden[:, 0]
            else:
                weights = arrays["attention_mask"][..., None].astype(np.float32)
                pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[rows] = pooled / np.maximum(norms, 1e-12)
        return out


def load_onnx(model_path: str, backend: str) -> OnnxEncoder:
    """Return the ONNX encoder of a model, exporting it first if needed (once per process)."""
    folder = export_onnx(model_path, backend)
    with _sessions_lock:
        if folder in _sessions:
            _sessions.move_to_end(folder)
            return _sessions[folder]
    encoder = OnnxEncoder(folder)
    with _sessions_lock:
        _sessions[folder] = encoder
        while len(_sessions) > MAX_CACHED_SESSIONS:
            _sessions.popitem(last=False)
    return encoder
