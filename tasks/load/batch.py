"""Load files into ``documents`` rows; a bad file becomes a failed row with a reason.

Nothing a file contains stops the run: a loader's ``LoadError`` is the file's reason, and so
is any other exception a loader raises on it (parsers of hostile input raise anything).
With ``LoaderOptions.workers`` > 0 (the default: one per core) files load in worker
processes that also bound each file's time and memory (see :mod:`tasks.load.worker`).
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence
from contextlib import closing

from tasks.common.config import LoaderOptions
from tasks.common.documents import Document, FileRef, too_large_reason, valid_text
from tasks.common.errors import LoadError
from tasks.common.failpoints import failpoint
from tasks.common.lifetime import check_stopping
from tasks.common.tables import DocumentRow
from tasks.load.base import (
    Loader,
    configured,
    loader_for,
    recording_reads,
)

log = logging.getLogger(__name__)

MAX_REASON = 300
"""Failure reasons are cut to this many characters."""


def one_line(reason: str) -> str:
    """Return ``reason`` on one line, whitespace collapsed, at most MAX_REASON characters."""
    text = " ".join(reason.split()) or "unknown error"
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def failed_row(file: FileRef, loader: str, reason: str) -> DocumentRow:
    """Return the ``documents`` row of a file that could not be loaded."""
    return DocumentRow(file.source, file.sha256, loader, "failed", one_line(reason))


def _valid(doc: Document) -> Document:
    text, metadata = valid_text(doc.page_content), valid_text(doc.metadata)
    if text is doc.page_content and metadata is doc.metadata:
        return doc
    return Document(text, metadata)


def load_with(loader: Loader, file: FileRef, options: LoaderOptions) -> list[DocumentRow]:
    """Load one file with ``loader``: one row per Document, or one failed row.

    The rows carry the sha256 of the bytes the loader read, which differs from the planned
    one when the file changed after planning (or while it was read): the manifest then
    records what was indexed, and the next run sees the file as changed.
    """
    if file.error is not None:  # discovery could not read it
        return [failed_row(file, loader.name, file.error)]
    try:
        if file.size > options.max_file_size:
            raise LoadError(too_large_reason(file.size, options.max_file_size))
        with recording_reads() as reads:
            docs = list(loader.load(file))
        if not docs:
            raise LoadError("no documents")
    except LoadError as exc:
        log.debug("failed to load %s: %s", file.source, exc)
        return [failed_row(file, loader.name, str(exc))]
    except MemoryError:
        return [failed_row(file, loader.name, "out of memory")]
    except Exception as exc:  # noqa: BLE001 - a loader's crash on one file is that file's failure
        log.debug("loader %s crashed on %s", loader.name, file.source, exc_info=True)
        return [failed_row(file, loader.name, f"loader error: {type(exc).__name__}: {exc}")]
    docs = [_valid(d) for d in docs]
    sha = reads.get(file.path, file.sha256)
    if sha != file.sha256:
        log.debug("%s changed between planning and loading", file.source)
        docs = [Document(d.page_content, {**d.metadata, "sha256": sha}) for d in docs]
    return [
        DocumentRow(file.source, sha, loader.name, "loaded", document=d, pages=len(docs))
        for d in docs
    ]


def load_file(file: FileRef, options: LoaderOptions | None = None) -> list[DocumentRow]:
    """Load one file in this process (no time guard): its rows, or one failed row."""
    options = options or LoaderOptions()
    try:
        loader = configured(loader_for(file), options)
    except LoadError as exc:
        return [failed_row(file, "", str(exc))]
    return load_with(loader, file, options)


def iter_load(
    files: Sequence[FileRef], options: LoaderOptions | None = None
) -> Generator[DocumentRow, None, None]:
    """Yield the rows of ``files`` in file order, lazily.

    With ``options.workers`` > 0 (empty: one per core) the files load in that many worker
    processes, each file under the ``timeout_s`` deadline and the ``memory_limit_mb``
    limit; with 0, here.
    """
    options = options or LoaderOptions()
    if options.workers == 0:
        for file in files:
            yield from load_file(file, options)
        return
    from tasks.load.worker import iter_load_in_workers

    yield from iter_load_in_workers(files, options)


def load_batch(files: Sequence[FileRef], options: LoaderOptions | None = None) -> list[DocumentRow]:
    """Load every file of a batch, in order (see :func:`iter_load`).

    A run that stops (tasks/common/lifetime.py) abandons the batch: at once where files load
    in workers (the busy ones are killed), after the file at hand where they load here.
    """
    rows: list[DocumentRow] = []
    # closing: an error here must stop the workers (and free their slots) now, not
    # whenever the half-consumed generator is collected
    with closing(iter_load(files, options)) as stream:
        for row in stream:
            if rows and rows[-1].source != row.source:
                failpoint("load:after-file")  # the crash-safety tests stop a run mid-load here
            rows.append(row)
            check_stopping()
    if rows:
        failpoint("load:after-file")
    return rows
