"""Content-addressed embedding cache: (model id, sha256 of chunk text) → vector.

Lives in ``<data_dir>/cache/embeddings.db`` (SQLite: transactional, safe for concurrent
readers). A re-ingest of unchanged text never recomputes a vector, whichever file or run
the text came from. ``docflow clear`` keeps it unless ``--drop-cache``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tasks.common.documents import sha256_hex
from tasks.common.sqlite import SQLiteFile

_LOOKUP_CHUNK = 500  # keys per SELECT ... IN (...): under SQLite's variable limit


def cache_path(data_dir: Path) -> Path:
    """Return where the embedding cache of a data dir lives."""
    return data_dir / "cache" / "embeddings.db"


class EmbeddingCache(SQLiteFile):
    """Vectors keyed by model and text hash."""

    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, text_sha TEXT NOT NULL, "
        "vector BLOB NOT NULL, PRIMARY KEY (model, text_sha))"
    )

    @classmethod
    def open(cls, data_dir: Path) -> EmbeddingCache:
        """Open the cache of a data dir."""
        return cls(cache_path(data_dir))

    def damaged(self, exc: Exception) -> str:
        """Return the one-line error of an unreadable cache, with its cure."""
        return (
            f"the embedding cache {self.path} is damaged ({exc}): delete that file (the "
            "index is not in it); its vectors are then computed again"
        )

    def get(self, model: str, texts: Sequence[str]) -> list[np.ndarray | None]:
        """Return the cached vector of each text, or None where there is none."""
        keys = [sha256_hex(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        unique = sorted(set(keys))
        for lo in range(0, len(unique), _LOOKUP_CHUNK):
            part = unique[lo : lo + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(part))
            for sha, blob in self.db.execute(
                f"SELECT text_sha, vector FROM vectors WHERE model = ? AND text_sha IN ({marks})",
                [model, *part],
            ):
                found[sha] = np.frombuffer(blob, dtype=np.float32)
        return [found.get(k) for k in keys]

    def put(self, model: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store vectors (float32 rows) for texts."""
        rows = [
            (model, sha256_hex(t), np.ascontiguousarray(v, dtype=np.float32).tobytes())
            for t, v in zip(texts, vectors, strict=True)
        ]
        with self._transaction() as db:
            db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", rows)
