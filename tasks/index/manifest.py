"""The manifest (``<data_dir>/state.db``, SQLite): what the index holds, per source file.

One row per (collection, source): the file's sha256, the splitter fingerprint it was split
with, its status, the chunk ids that are committed to the store, and the ids a batch was
about to write (``pending_ids``) when it started. The protocol of one batch:

1. :meth:`Manifest.begin` records the new chunk ids as pending (status "pending");
2. the store upserts the new chunks, then deletes committed + pending ids not produced now;
3. :meth:`Manifest.commit` makes the new ids the committed ones (status "done").

A crash anywhere leaves a row that the next run treats as changed, and the stale set it
deletes covers every id that may have reached the store, so reruns converge to exactly
what a from-scratch ingest produces. The ``pointers`` table maps a logical collection name
to the physical Chroma collection that serves it (see reingest).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tasks.common.errors import StateError
from tasks.common.sqlite import SQLiteFile

#: Sources per ``SELECT ... IN (...)``: under SQLite's limit on bound variables.
_SOURCES_PER_QUERY = 500

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    collection   TEXT NOT NULL,
    source       TEXT NOT NULL,
    root         TEXT NOT NULL,
    sha256       TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    status       TEXT NOT NULL,          -- pending | done | failed
    error        TEXT,
    chunk_ids    TEXT NOT NULL DEFAULT '[]',
    pending_ids  TEXT NOT NULL DEFAULT '[]',
    run_id       TEXT NOT NULL,
    updated_at   REAL NOT NULL,
    attempt_sha256 TEXT NOT NULL DEFAULT '',  -- failed rows: the bytes that failed to load
    PRIMARY KEY (collection, source)
);
CREATE TABLE IF NOT EXISTS pointers (
    name      TEXT PRIMARY KEY,
    physical  TEXT NOT NULL,
    run_id    TEXT NOT NULL
);
"""


@dataclass(frozen=True, slots=True)
class FileState:
    """The manifest row of one source file."""

    source: str
    root: str
    sha256: str
    fingerprint: str
    status: str
    error: str | None
    chunk_ids: tuple[str, ...]
    pending_ids: tuple[str, ...]
    run_id: str
    attempt_sha256: str = ""  # a failed row: the sha256 of the bytes that failed to load

    @property
    def stored_ids(self) -> set[str]:
        """Return every id that may be in the store for this file (committed or pending)."""
        return set(self.chunk_ids) | set(self.pending_ids)


@dataclass(frozen=True, slots=True)
class FileUpdate:
    """What a batch wants the manifest to say about one file."""

    source: str
    root: str
    sha256: str
    fingerprint: str
    status: str  # "done" or "failed"
    chunk_ids: tuple[str, ...] = ()
    error: str | None = None


class Manifest(SQLiteFile):
    """Transactional access to ``state.db``; open one per use (a run holds one: held.py)."""

    SCHEMA = SCHEMA

    @classmethod
    def open(cls, data_dir: Path) -> Manifest:
        """Open the manifest of a data dir."""
        return cls(data_dir / "state.db")

    def migrate(self) -> None:
        """Add the columns later releases use to a manifest an earlier one created."""
        columns = {r[1] for r in self.db.execute("PRAGMA table_info(files)")}
        if "attempt_sha256" not in columns:
            self.db.execute("ALTER TABLE files ADD COLUMN attempt_sha256 TEXT NOT NULL DEFAULT ''")

    def damaged(self, exc: Exception) -> str:
        """Return the one-line error of an unreadable manifest, with its cure."""
        return (
            f"the manifest {self.path} is damaged ({exc}): run docflow restore, which sets "
            "it aside and rebuilds it from the tables"
        )

    # -- files ------------------------------------------------------------------------------

    def _attempt_column(self) -> str:
        """``attempt_sha256``, or ``''`` where an earlier release's file is opened read-only.

        A writable open adds the column (:meth:`migrate`); a reader (``ingest --dry-run``)
        must not, and reads such rows as a run after the migration would.
        """
        if not self.readonly:
            return "attempt_sha256"
        columns = {r[1] for r in self.db.execute("PRAGMA table_info(files)")}
        return "attempt_sha256" if "attempt_sha256" in columns else "''"

    def files(
        self, collection: str, sources: Iterable[str] | None = None, ids: bool = True
    ) -> dict[str, FileState]:
        """Return the file rows of ``collection`` by source.

        Args:
            collection: The physical collection.
            sources: Only the rows of these sources (those that have one); all when None.
                A batch asks for its own files only, so what it reads from the manifest
                stays the size of the batch however large the collection grows.
            ids: Whether to read the chunk ids. Without them (``chunk_ids`` and
                ``pending_ids`` left empty) a row is a few hundred bytes: what planning
                a run needs, whatever the number of chunks in the collection.
        """
        columns = "chunk_ids, pending_ids" if ids else "'[]', '[]'"
        query = (
            "SELECT source, root, sha256, fingerprint, status, error, "
            f"{columns}, run_id, {self._attempt_column()} FROM files WHERE collection = ?"
        )
        if sources is None:
            rows = self.db.execute(query, (collection,)).fetchall()
        else:
            wanted = sorted(set(sources))
            rows = []
            for lo in range(0, len(wanted), _SOURCES_PER_QUERY):
                part = wanted[lo : lo + _SOURCES_PER_QUERY]
                marks = ",".join("?" * len(part))
                rows += self.db.execute(
                    f"{query} AND source IN ({marks})", (collection, *part)
                ).fetchall()
        return {
            r[0]: FileState(
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                tuple(json.loads(r[6])),
                tuple(json.loads(r[7])),
                r[8],
                r[9],
            )
            for r in rows
        }

    def begin(self, collection: str, run_id: str, updates: Sequence[FileUpdate]) -> None:
        """Record the chunk ids a batch is about to write, before it writes them.

        Pending ids accumulate until a commit, so ids of an interrupted attempt are never
        forgotten; the row's status becomes "pending", which the next run treats as changed.
        """
        now = time.time()
        with self._transaction() as db:
            for u in updates:
                row = db.execute(
                    "SELECT pending_ids FROM files WHERE collection = ? AND source = ?",
                    (collection, u.source),
                ).fetchone()
                pending = set(json.loads(row[0])) if row else set()
                db.execute(
                    "INSERT INTO files (collection, source, root, sha256, fingerprint, status, "
                    "pending_ids, run_id, updated_at) VALUES (?, ?, ?, '', ?, 'pending', ?, ?, ?) "
                    "ON CONFLICT (collection, source) DO UPDATE SET status = 'pending', "
                    "pending_ids = excluded.pending_ids, run_id = excluded.run_id, "
                    "updated_at = excluded.updated_at",
                    (
                        collection,
                        u.source,
                        u.root,
                        u.fingerprint,
                        _ids(pending | set(u.chunk_ids)),
                        run_id,
                        now,
                    ),
                )

    def commit(
        self,
        collection: str,
        run_id: str,
        updates: Sequence[FileUpdate],
        failed: Sequence[tuple[str, str, str, str]] = (),
    ) -> None:
        """Make a batch's chunk ids the committed ones (after they are in the store).

        ``failed`` lists (source, root, error, sha256 of the bytes that failed) of files
        that did not load: they are marked failed with their error and keep their committed
        ids and fingerprint (the next run retries them); their pending ids are cleared (the
        caller deleted them).
        """
        now = time.time()
        with self._transaction() as db:
            for source, root, error, attempt in failed:
                db.execute(
                    "INSERT INTO files (collection, source, root, sha256, fingerprint, status, "
                    "error, run_id, updated_at, attempt_sha256) "
                    "VALUES (?, ?, ?, '', '', 'failed', ?, ?, ?, ?) "
                    "ON CONFLICT (collection, source) DO UPDATE SET status = 'failed', "
                    "error = excluded.error, pending_ids = '[]', run_id = excluded.run_id, "
                    "updated_at = excluded.updated_at, attempt_sha256 = excluded.attempt_sha256",
                    (collection, source, root, error, run_id, now, attempt),
                )
            _put(db, collection, run_id, updates, now)

    def forget(self, collection: str, sources: Iterable[str]) -> None:
        """Remove the rows of deleted files (after their chunks left the store)."""
        with self._transaction() as db:
            db.executemany(
                "DELETE FROM files WHERE collection = ? AND source = ?",
                [(collection, s) for s in sources],
            )

    def move_root(self, collection: str, sources: Iterable[str], root: str) -> None:
        """Record that unchanged files are now found under ``root`` (their folder moved)."""
        with self._transaction() as db:
            db.executemany(
                "UPDATE files SET root = ? WHERE collection = ? AND source = ?",
                [(root, collection, s) for s in sources],
            )

    def drop_collection(self, collection: str) -> None:
        """Remove every file row of a (physical) collection."""
        with self._transaction() as db:
            db.execute("DELETE FROM files WHERE collection = ?", (collection,))

    def collections(self) -> list[str]:
        """Return every (physical) collection that has file rows."""
        rows = self.db.execute("SELECT DISTINCT collection FROM files ORDER BY collection")
        return [str(r[0]) for r in rows.fetchall()]

    def counts(self, collection: str) -> tuple[int, int, int]:
        """Return a collection's file rows, committed chunk ids and pending chunk ids.

        Counted in SQLite (no id leaves the database): the cheap check, at the start of a
        run, that the store holds what the manifest says (see tasks/index/consistency.py).
        """
        row = self.db.execute(
            "SELECT count(*), coalesce(sum(json_array_length(chunk_ids)), 0), "
            "coalesce(sum(json_array_length(pending_ids)), 0) FROM files WHERE collection = ?",
            (collection,),
        ).fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    def mark_pending(self, collection: str, sources: Iterable[str]) -> None:
        """Make files "pending": the next plan processes them again (their chunks are gone)."""
        with self._transaction() as db:
            db.executemany(
                "UPDATE files SET status = 'pending' WHERE collection = ? AND source = ?",
                [(collection, s) for s in sources],
            )

    def live_chunk_ids(self, collection: str) -> set[str]:
        """Return the committed chunk ids of a collection (what the store should hold)."""
        return {i for f in self.files(collection).values() for i in f.chunk_ids}

    # -- pointers ---------------------------------------------------------------------------

    def physical(self, name: str) -> str:
        """Return the physical collection serving logical ``name`` (itself by default)."""
        row = self.db.execute("SELECT physical FROM pointers WHERE name = ?", (name,)).fetchone()
        return str(row[0]) if row else name

    def switch(
        self,
        name: str,
        physical: str,
        run_id: str,
        move_from: str | None = None,
        rows: Sequence[FileUpdate] = (),
    ) -> None:
        """Point logical ``name`` at ``physical`` (atomically).

        With ``move_from``, the file rows of that physical collection move to ``physical``
        in the same transaction (a restore copies a collection under a new name); ``rows``
        are then committed to ``physical`` in that transaction too (a restore that rebuilt
        them from the tables).
        """
        with self._transaction() as db:
            if move_from is not None:
                db.execute("DELETE FROM files WHERE collection = ?", (physical,))
                db.execute(
                    "UPDATE files SET collection = ? WHERE collection = ?", (physical, move_from)
                )
            _put(db, physical, run_id, rows, time.time())
            db.execute(
                "INSERT INTO pointers (name, physical, run_id) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET physical = excluded.physical, "
                "run_id = excluded.run_id",
                (name, physical, run_id),
            )

    def drop_pointer(self, name: str) -> None:
        """Forget the pointer of logical ``name``."""
        with self._transaction() as db:
            db.execute("DELETE FROM pointers WHERE name = ?", (name,))


def serving_collection(data_dir: Path, name: str) -> str:
    """Return the physical collection serving ``name``, without writing any state.

    The manifest is opened read-only, so a query works on a full disk or a read-only data
    dir. Raises StateError if it is damaged.
    """
    path = data_dir / "state.db"
    if not path.exists():
        return name
    with Manifest(path, readonly=True) as manifest:
        try:
            return manifest.physical(name)
        except sqlite3.DatabaseError as exc:
            raise StateError(manifest.damaged(exc)) from exc


def _put(
    db: sqlite3.Connection,
    collection: str,
    run_id: str,
    updates: Sequence[FileUpdate],
    now: float,
) -> None:
    """Insert or replace the committed rows ``updates`` (inside a transaction)."""
    for u in updates:
        db.execute(
            "INSERT INTO files (collection, source, root, sha256, fingerprint, status, "
            "error, chunk_ids, pending_ids, run_id, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, '[]', ?, ?) "
            "ON CONFLICT (collection, source) DO UPDATE SET root = excluded.root, "
            "sha256 = excluded.sha256, fingerprint = excluded.fingerprint, "
            "status = excluded.status, error = excluded.error, "
            "chunk_ids = excluded.chunk_ids, pending_ids = '[]', "
            "run_id = excluded.run_id, updated_at = excluded.updated_at",
            (
                collection,
                u.source,
                u.root,
                u.sha256,
                u.fingerprint,
                u.status,
                u.error,
                _ids(u.chunk_ids),
                run_id,
                now,
            ),
        )


def _ids(ids: Iterable[str]) -> str:
    return json.dumps(sorted(ids))
