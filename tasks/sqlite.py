"""The SQLite database every docflow state file is: opened one way, written in transactions.

The manifest (``state.db``) and the lexical indexes (``lexical/*.sqlite``) are SQLite files
in the data dir: transactional, in the standard library, safe across processes. This base
opens them alike (WAL journal, fsync on commit, a long busy timeout), runs writes in
``BEGIN IMMEDIATE`` transactions that roll back on any error, and can open an existing file
read-only for readers that must not write (a query on a full disk or a read-only mount).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

MEMORY = ":memory:"


class SQLiteFile:
    """One connection to a docflow SQLite file (or an in-memory scratch database)."""

    #: The tables and indexes of the file, created on a writable open.
    SCHEMA = ""

    def __init__(self, path: Path | str, readonly: bool = False):
        """Open the database at ``path``.

        Args:
            path: The file; created with :attr:`SCHEMA` unless ``readonly``. ``":memory:"``
                opens a scratch database.
            readonly: Open an existing file for reading only (no schema change, no write).

        """
        self.path = str(path)
        if readonly:
            uri = Path(self.path).resolve().as_uri() + "?mode=ro"
            self.db = sqlite3.connect(uri, uri=True, timeout=60, isolation_level=None)
            return
        if self.path != MEMORY:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        if self.path != MEMORY:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")  # durable before the next step relies on it
        self.db.executescript(self.SCHEMA)

    def close(self) -> None:
        """Close the connection."""
        self.db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """Run the block in one write transaction (rolled back if the block raises)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
