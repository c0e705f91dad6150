"""The torch backends' model path: a sentence-transformers model fed by our own batches.

``SentenceTransformer.encode`` spends most of a GPU run outside the GPU: it tokenises one
batch at a time in the calling thread and turns token lists into tensors through Python
lists (measured on an H100: 55% tokenizer, 30% list to tensor, 5% GPU). :class:`TorchEncoder`
runs the same modules on inputs from :mod:`tasks.embed.batches` instead: one parallel Rust
tokenisation, length-sorted batches sized by a token budget, numpy arrays handed to torch
without a copy (pinned, copied to the device without blocking), and the results brought
back once at the end, so the CPU prepares the next batch while the GPU runs this one.

It is used only where it reproduces ``encode``: a model of the module types it knows (a
Transformer, mean or CLS pooling, an optional Normalize) with a fast tokenizer, checked
once per loaded model against ``encode`` on sample texts. Any other model keeps ``encode``.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tasks.embed.batches import INPUT_NAMES, BatchTokenizer, length_batches, padded

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger(__name__)

#: Sample texts of several lengths the fast path must embed as ``encode`` does.
CHECK_TEXTS = (
    "a",
    "Chunk overlap keeps a sentence that straddles a boundary whole in one of the chunks.",
    "  Leading and trailing spaces, UPPER case, ünïcödé and numbers 1,234.5  ",
    " ".join(["The pipeline loads, splits, embeds and stores documents."] * 40),
)
#: Worst cosine between the fast path and ``encode`` that still counts as the same vectors.
MIN_COSINE = {False: 0.9999, True: 0.999}  # float32, float16

_encoders: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class TorchEncoder:
    """A loaded sentence-transformers model with an ``encode`` fed by :mod:`tasks.embed.batches`."""

    def __init__(self, model: SentenceTransformer):
        """Wrap ``model`` (loaded, on its device)."""
        self.model = model
        self.tokens = BatchTokenizer(model.tokenizer, int(model.max_seq_length or 512))
        names = set(getattr(model.tokenizer, "model_input_names", ()))
        self.input_names = [n for n in INPUT_NAMES if n in names]

    def get_embedding_dimension(self) -> int | None:
        """Return the vector dimension."""
        dimension = self.model.get_embedding_dimension()
        return None if dimension is None else int(dimension)

    def encode(
        self,
        sentences: Sequence[str],
        batch_size: int = 32,
        token_budget: int | None = None,
        **_: Any,
    ) -> np.ndarray:
        """Return one unit-length float32 row per text, in input order.

        ``token_budget`` (tokens per forward pass) lets batches of short texts take more
        than ``batch_size`` rows (:func:`tasks.embed.batches.length_batches`).
        """
        import torch

        dim = int(self.get_embedding_dimension() or 0)
        if not sentences:
            return np.zeros((0, dim), dtype=np.float32)
        tokens = self.tokens(sentences)
        device = self.model.device
        pin = device.type == "cuda"
        results: list[tuple[np.ndarray, torch.Tensor]] = []
        with torch.inference_mode():
            for rows in length_batches(tokens.lengths, batch_size, token_budget):
                arrays = padded(rows, tokens)
                features: dict[str, Any] = {}
                for name in self.input_names:
                    tensor = torch.from_numpy(arrays[name])
                    features[name] = (tensor.pin_memory() if pin else tensor).to(
                        device, non_blocking=True
                    )
                results.append((rows, self.model(features)["sentence_embedding"]))
        out = np.empty((len(sentences), dim), dtype=np.float32)
        for rows, vectors in results:  # the one wait for the device
            out[rows] = vectors.float().cpu().numpy()
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out


def supported(model: SentenceTransformer) -> bool:
    """Return whether ``model`` is made of the modules the fast path feeds, with a fast tokenizer.

    A Transformer, a Pooling and an optional Normalize (no Dense layer, no router): the
    inputs are then exactly the tokenizer's ids, mask and token types.
    """
    kinds = [type(module).__name__ for module in model]
    if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in ([], ["Normalize"]):
        return False
    return bool(getattr(model.tokenizer, "is_fast", False))


def torch_encoder(model: SentenceTransformer) -> Any:
    """Return a :class:`TorchEncoder` for ``model`` where it reproduces ``encode``, else ``model``.

    Checked once per loaded model: its modules (:func:`supported`), then its vectors
    against ``encode`` on :data:`CHECK_TEXTS`.
    """
    with _lock:
        if model in _encoders:
            return _encoders[model]
        chosen: Any = model
        if supported(model):
            fast = TorchEncoder(model)
            if _agrees(fast, model):
                chosen = fast
            else:
                log.warning("the fast torch path differs from encode for this model: not used")
        _encoders[model] = chosen
        return chosen


def _agrees(fast: TorchEncoder, model: SentenceTransformer) -> bool:
    texts = list(CHECK_TEXTS)
    reference = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    reference = np.asarray(reference, dtype=np.float32)
    reference /= np.maximum(np.linalg.norm(reference, axis=1, keepdims=True), 1e-12)
    worst = float(np.min(np.sum(reference * fast.encode(texts, batch_size=2), axis=1)))
    half = next(model.parameters()).dtype.itemsize == 2
    return worst >= MIN_COSINE[half]
