"""Model inputs for a batch of texts: tokenised once, in parallel, padded into numpy arrays.

Both of docflow's own model paths (ONNX Runtime, and torch on a GPU) feed the model the same
way, because the way ``SentenceTransformer.encode`` does it is what starves a GPU: it
tokenises batch by batch in the calling thread and builds tensors from nested Python lists.
Here the whole input goes through the ``tokenizers`` Rust batch encoder in one call (it
releases the GIL and uses every core when ``TOKENIZERS_PARALLELISM`` allows), the texts are
sorted by token count so each batch pads only to its own longest member, and each batch is
filled straight into int64 numpy arrays that a torch tensor can share without a copy.

Batches are length-bucketed: with a ``token_budget`` a batch of short texts takes more rows
(``token_budget // width``, at least ``batch_size``), so a GPU sees the same amount of work
per forward pass whatever the text lengths, within the memory of a full-width batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tasks.common.failpoints import failpoint
from tasks.common.lifetime import check_stopping

#: The arrays :func:`padded` builds, under the names transformer models take them by.
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


@dataclass(frozen=True)
class Tokenised:
    """Token ids (and token type ids) of each text, unpadded, in input order."""

    ids: list[list[int]]
    type_ids: list[list[int]]
    pad_id: int

    @property
    def lengths(self) -> np.ndarray:
        """Return each text's token count."""
        return np.fromiter((len(x) for x in self.ids), dtype=np.int64, count=len(self.ids))


class BatchTokenizer:
    """A Hugging Face tokenizer set up once for truncating batch encoding."""

    def __init__(self, tokenizer: Any, max_length: int):
        """Keep ``tokenizer`` and, when it is a fast one, a private copy of its Rust backend.

        The copy gets truncation at ``max_length`` and no padding once, here; the shared
        tokenizer's own backend is left as it is (transformers reconfigures it per call).
        """
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        self.pad_id = int(getattr(tokenizer, "pad_token_id", None) or 0)
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._backend = None
        if backend is not None:
            from tokenizers import Tokenizer

            self._backend = Tokenizer.from_str(backend.to_str())
            self._backend.enable_truncation(self.max_length)
            self._backend.no_padding()

    def __call__(self, texts: Sequence[str]) -> Tokenised:
        """Return the token ids of ``texts`` (with the model's special tokens), truncated."""
        if self._backend is None:  # a slow (Python) tokenizer: its own batch call
            encoded = self.tokenizer(list(texts), truncation=True, max_length=self.max_length)
            ids = encoded["input_ids"]
            types = encoded.get("token_type_ids") or [[0] * len(x) for x in ids]
            return Tokenised(ids, types, self.pad_id)
        encodings = self._backend.encode_batch(list(texts), add_special_tokens=True)
        return Tokenised([e.ids for e in encodings], [e.type_ids for e in encodings], self.pad_id)


def length_batches(
    lengths: np.ndarray, batch_size: int, token_budget: int | None = None
) -> Iterator[np.ndarray]:
    """Yield row indices in batches, longest texts first.

    Without ``token_budget`` every batch has ``batch_size`` rows; with it a batch takes
    ``max(batch_size, token_budget // width)`` rows, ``width`` being its longest member's
    token count. Before each batch it checks that the run is not stopping, so a Ctrl-C
    waits for one forward pass, not for the rest of the texts (tasks/common/lifetime.py).
    """
    order = np.argsort(-lengths, kind="stable")
    lo = 0
    while lo < len(order):
        failpoint("embed:forward")
        check_stopping()
        rows = batch_size
        if token_budget:
            rows = max(batch_size, token_budget // max(int(lengths[order[lo]]), 1))
        yield order[lo : lo + rows]
        lo += rows


def padded(rows: np.ndarray, tokens: Tokenised) -> dict[str, np.ndarray]:
    """Return ``input_ids``, ``attention_mask`` and ``token_type_ids`` for ``rows``.

    Each is an int64 array of shape ``(len(rows), width)``, ``width`` being the longest
    row's token count; positions past a row's end hold the pad id (ids) or 0.
    """
    lengths = np.fromiter((len(tokens.ids[i]) for i in rows), dtype=np.int64, count=len(rows))
    width = int(lengths.max()) if len(rows) else 0
    ids = np.full((len(rows), width), tokens.pad_id, dtype=np.int64)
    types = np.zeros((len(rows), width), dtype=np.int64)
    for r, i in enumerate(rows):
        ids[r, : lengths[r]] = tokens.ids[i]
        types[r, : lengths[r]] = tokens.type_ids[i]
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
