"""A deterministic, fast stand-in encoder for tests whose subject is not embedding."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

import numpy as np


@functools.cache
def bundled_tokenizer() -> Any:
    from tokenizers import Tokenizer

    from tasks.embed.model import resolve_model_path

    return Tokenizer.from_file(str(Path(resolve_model_path("all-MiniLM-L6-v2")) / "tokenizer.json"))


class HashEncoder:
    """Hash words into a fixed-size bag-of-words vector, normalised (similar texts are close).

    Its ``tokenizer`` (what ``length_unit="model_tokens"``, the ingest default, counts in) is
    the bundled all-MiniLM-L6-v2's, so ingests with the fake split as with the real model.
    """

    def __init__(self, dimension: int = 64):
        self.dimension = dimension

    @property
    def tokenizer(self) -> Any:
        return bundled_tokenizer()

    def get_embedding_dimension(self) -> int:
        return self.dimension

    def encode(self, texts: list[str], **_: Any) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
                out[row, h % self.dimension] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms


class ConstantEncoder(HashEncoder):
    """A zero-cost encoder: the same unit vector for every text, returned at once.

    What the pipeline-ceiling benchmark runs everything but the model with. It keeps
    :class:`HashEncoder`'s bundled tokenizer, so chunking in model tokens is exactly that of
    the real model.
    """

    def __init__(self, dimension: int = 384):
        super().__init__(dimension)
        vector = np.zeros(dimension, dtype=np.float32)
        vector[0] = 1.0
        self._vector = vector

    def encode(self, texts: list[str], **_: Any) -> np.ndarray:
        return np.broadcast_to(self._vector, (len(texts), self.dimension)).copy()
