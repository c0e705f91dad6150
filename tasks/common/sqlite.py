"""The SQLite database every docflow state file is: opened one way, written in transactions.

The manifest (``state.db``) and the lexical indexes (``lexical/*.sqlite``) are SQLite files
in the data dir: transactional, in the standard library, safe across processes. This base
opens them alike (WAL journal while written, fsync on commit, a long busy timeout), runs writes in
``BEGIN IMMEDIATE`` transactions that roll back on any error, and can open an existing file
read-only for readers that must not write (a query on a full disk or a read-only mount).
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Self

from tasks.common.errors import StateError

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
        self.readonly = readonly
        try:
            if readonly:
                self.db = self._connect_readonly()
                return
            if self.path != MEMORY:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            if self.path != MEMORY:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=FULL")  # durable before the next step
            self.db.executescript(self.SCHEMA)
            self.migrate()
        except sqlite3.DatabaseError as exc:
            raise StateError(self.damaged(exc)) from exc
        except OSError as exc:
            raise StateError(f"cannot open {self.path}: {exc.strerror or exc}") from exc

    @classmethod
    def open_or_set_aside(cls, path: Path, check: bool = False) -> tuple[Self, Path | None]:
        """Open the file; one SQLite cannot read is renamed aside and a fresh one created.

        For state that can be rebuilt (the manifest from the tables, a lexical index from
        the vector store). ``check`` also reads every page (:meth:`check_integrity`): a
        truncated file can open and fail only later. Returns the open file and where a
        damaged one went (None if it was sound).

        Raises:
            StateError: If the file cannot be opened and is not there to set aside (a full
                disk, an unwritable folder).

        """
        try:
            opened = cls(path)
            if check:
                try:
                    opened.check_integrity()
                except StateError:
                    opened.close()
                    raise
            return opened, None
        except StateError:
            if not path.is_file():
                raise
            moved = set_aside(path)
            return cls(path), moved

    def migrate(self) -> None:
        """Bring a file an earlier release wrote up to :attr:`SCHEMA` (columns it lacks)."""

    def _connect_readonly(self) -> sqlite3.Connection:
        """Connect read-only, or else read the file as immutable.

        A read-only connection to a WAL database may still need to write its shared-memory
        file, which a full disk refuses; immutable then reads what the last checkpoint
        holds.
        """
        uri = Path(self.path).resolve().as_uri()
        try:
            db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=60, isolation_level=None)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            db = sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db

    def damaged(self, exc: Exception) -> str:
        """Return the one-line error of a file SQLite cannot read (subclasses add the cure)."""
        return f"{self.path} is not a usable SQLite database ({exc})"

    def check_integrity(self) -> None:
        """Raise StateError unless SQLite's quick check finds the file sound.

        A truncated file can open and fail only when a damaged page is read; this reads
        them all (a few milliseconds per megabyte).
        """
        try:
            result = self.db.execute("PRAGMA quick_check").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise StateError(self.damaged(exc)) from exc
        if result != "ok":
            raise StateError(self.damaged(RuntimeError(str(result))))

    def close(self) -> None:
        """Close the connection; the last writer to close leaves the file without a WAL.

        A reader of a WAL file creates its ``-wal`` and ``-shm`` files and, reading only,
        cannot remove them: ``query`` and ``inspect`` would leave files in the data dir.
        So a writer that is the file's last connection switches it back to a rollback
        journal as it closes (the next writer turns WAL on again); readers then open it
        read-only and create nothing. With other connections open, the switch is skipped
        (never waited for): the last one to close does it.
        """
        if not self.readonly and self.path != MEMORY:
            with suppress(sqlite3.Error):
                self.db.execute("PRAGMA busy_timeout = 0")
                self.db.execute("PRAGMA journal_mode = DELETE")
        self.db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """Run the block in one write transaction (rolled back if the block raises)."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                with suppress(sqlite3.Error):  # a full disk may refuse the rollback too
                    self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as exc:  # disk full, I/O error, read-only file...
            raise StateError(f"cannot write {self.path}: {exc}") from exc


def set_aside(path: Path) -> Path:
    """Rename a damaged SQLite file to ``<name>.corrupt-<UTC time>`` (its WAL files go)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    path.rename(target)
    for extra in ("-wal", "-shm"):
        Path(str(path) + extra).unlink(missing_ok=True)
    return target
