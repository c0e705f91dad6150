"""Load a batch of files into ``documents`` rows; a bad file becomes a failed row."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tasks.discover import FileRef
from tasks.errors import LoadError
from tasks.load.base import loader_for
from tasks.tables import DocumentRow

log = logging.getLogger(__name__)


def load_file(file: FileRef) -> list[DocumentRow]:
    """Load one file into rows: one per Document, or one failed row with the reason."""
    loader_name = ""
    try:
        loader = loader_for(file)
        loader_name = loader.name
        docs = list(loader.load(file))
    except LoadError as exc:
        log.debug("failed to load %s: %s", file.source, exc)
        return [DocumentRow(file.source, file.sha256, loader_name, "failed", str(exc))]
    return [
        DocumentRow(file.source, file.sha256, loader_name, "loaded", document=d, pages=len(docs))
        for d in docs
    ]


def load_batch(files: Sequence[FileRef]) -> list[DocumentRow]:
    """Load every file of a batch, in order."""
    return [row for f in files for row in load_file(f)]
