"""Content-addressed embedding cache: (model id, sha256 of chunk text) → vector.

Lives in ``<data_dir>/cache/embeddings.db`` (SQLite: transactional, safe for concurrent
readers). A re-ingest of unchanged text never recomputes a vector, whichever file or run
the text came from. ``docflow clear`` keeps it unless ``--drop-cache``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tasks.documents import sha256_hex

_LOOKUP_CHUNK = 500  # keys per SELECT ... IN (...): under SQLite's variable limit


class EmbeddingCache:
    """Vectors keyed by model and text hash."""

    def __init__(self, path: Path):
        """Open (and create) the cache database at ``path``."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, timeout=60)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, text_sha TEXT NOT NULL, "
            "vector BLOB NOT NULL, PRIMARY KEY (model, text_sha))"
        )

    @classmethod
    def open(cls, data_dir: Path) -> EmbeddingCache:
        """Open the cache of a data dir."""
        return cls(data_dir / "cache" / "embeddings.db")

    def close(self) -> None:
        """Close the connection."""
        self.db.close()

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
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", rows)
