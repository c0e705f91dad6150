"""Build the splitter an ingest asks for, and split loaded documents into chunks."""

from __future__ import annotations

from collections.abc import Iterable

from tasks.config import IngestParams
from tasks.documents import Chunk
from tasks.errors import ConfigError
from tasks.split.base import TextSplitter
from tasks.split.recursive import RecursiveCharacterTextSplitter
from tasks.tables import DocumentRow


def build_splitter(params: IngestParams) -> TextSplitter:
    """Return the splitter configured by ``params``.

    Raises:
        ConfigError: For a splitter or length unit this build does not have.

    """
    if params.length_unit != "chars":
        raise ConfigError(f"unknown length unit {params.length_unit!r}")
    if params.splitter == "recursive":
        return RecursiveCharacterTextSplitter(
            chunk_size=params.chunk_size, chunk_overlap=params.chunk_overlap
        )
    raise ConfigError(f"unknown splitter {params.splitter!r}")


def split_rows(rows: Iterable[DocumentRow], splitter: TextSplitter) -> list[Chunk]:
    """Split every loaded document of a batch, in order."""
    return [c for r in rows if r.document is not None for c in splitter.chunk_document(r.document)]
