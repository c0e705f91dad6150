"""The splitter base class: spans in, Documents and Chunks out.

Every splitter implements one method, :meth:`TextSplitter.split_spans`, which returns
:class:`Span` objects: half-open ``[start, end)`` offsets into the text it was given. All
other outputs (``split_text`` strings, LangChain-style ``create_documents`` and
``split_documents``, docflow ``Chunk`` records) are derived from those spans, so:

- every chunk text is exactly ``text[start:end]`` (no rewritten whitespace, no ``str.find``);
- ``start_index`` is always right, even for repeated text;
- chunk ids are deterministic (see :func:`tasks.documents.make_chunk_id`).

The constructor parameters and their defaults are those of langchain-text-splitters'
``TextSplitter``, so code written against LangChain keeps working.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tasks.documents import Chunk, Document, Header, make_chunk_id

KeepSeparator = bool | Literal["start", "end"]


@dataclass(frozen=True, slots=True)
class Span:
    """A half-open ``[start, end)`` slice of a text, with the header path it sits under."""

    start: int
    end: int
    headers: tuple[Header, ...] = ()


def _length_name(fn: Callable[[str], int]) -> str:
    """Return a stable name for a length function, for the splitter fingerprint."""
    return getattr(fn, "unit_name", None) or getattr(fn, "__qualname__", None) or repr(fn)


class TextSplitter(ABC):
    """Base of every docflow splitter; one abstract method, :meth:`split_spans`.

    Invariants every subclass keeps (tested over the real corpora and hypothesis text):
    exact spans, no span longer than ``chunk_size`` in the length unit (an indivisible unit
    that is longer is cut, never kept whole), and, in order, the spans cover all the
    non-whitespace text.
    """

    def __init__(
        self,
        chunk_size: int = 4000,
        chunk_overlap: int = 200,
        length_function: Callable[[str], int] = len,
        keep_separator: KeepSeparator = False,
        add_start_index: bool = False,
        strip_whitespace: bool = True,
    ) -> None:
        """Validate and store the settings shared by all splitters (LangChain's defaults).

        Args:
            chunk_size: Maximum size of a chunk, in the unit of ``length_function``.
            chunk_overlap: Target overlap between neighbouring chunks, same unit.
            length_function: Measures a piece of text (``len`` counts characters).
            keep_separator: Keep separators, at the start (``True``/"start") or end of pieces.
            add_start_index: Put ``start_index`` in the metadata of created Documents.
            strip_whitespace: Strip whitespace from both ends of every chunk.

        Raises:
            ValueError: If the sizes are inconsistent (same checks as LangChain).

        """
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
        if chunk_overlap < 0:
            raise ValueError(f"chunk_overlap must be >= 0, got {chunk_overlap}")
        if chunk_overlap > chunk_size:
            raise ValueError(
                f"Got a larger chunk overlap ({chunk_overlap}) than chunk size "
                f"({chunk_size}), should be smaller."
            )
        self._chunk_size = chunk_size
        self._chunk_overlap = chunk_overlap
        self._length_function = length_function
        self._keep_separator = keep_separator
        self._add_start_index = add_start_index
        self._strip_whitespace = strip_whitespace

    # -- the one method a splitter implements -------------------------------------------

    @abstractmethod
    def split_spans(self, text: str) -> list[Span]:
        """Return the chunks of ``text`` as spans, in document order."""

    # -- derived API (LangChain-compatible) -----------------------------------------------

    @property
    def chunk_size(self) -> int:
        """Return the maximum chunk size in the length unit."""
        return self._chunk_size

    def split_text(self, text: str) -> list[str]:
        """Split ``text`` into chunk strings (each one is ``text[start:end]`` of a span)."""
        return [text[s.start : s.end] for s in self.split_spans(text)]

    def create_documents(
        self, texts: Sequence[str], metadatas: Sequence[dict[str, Any]] | None = None
    ) -> list[Document]:
        """Split each text into Documents carrying a copy of its metadata.

        With ``add_start_index`` the exact span start is stored as ``start_index``.
        """
        metas = list(metadatas) if metadatas is not None else [{} for _ in texts]
        documents: list[Document] = []
        for text, meta in zip(texts, metas, strict=True):
            for span in self.split_spans(text):
                metadata = dict(meta)
                if self._add_start_index:
                    metadata["start_index"] = span.start
                documents.append(Document(text[span.start : span.end], metadata))
        return documents

    def split_documents(self, documents: Iterable[Any]) -> list[Document]:
        """Split Documents (ours or LangChain's: anything with page_content and metadata)."""
        docs = list(documents)
        return self.create_documents(
            [d.page_content for d in docs], [dict(d.metadata) for d in docs]
        )

    def transform_documents(self, documents: Sequence[Any], **_: Any) -> list[Document]:
        """Split Documents (the LangChain ``BaseDocumentTransformer`` entry point)."""
        return self.split_documents(documents)

    # -- docflow API ----------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        """Return the settings that change the output, for the fingerprint."""
        return {
            "class": type(self).__name__,
            "chunk_size": self._chunk_size,
            "chunk_overlap": self._chunk_overlap,
            "length": _length_name(self._length_function),
            "keep_separator": self._keep_separator,
            "strip_whitespace": self._strip_whitespace,
        }

    def fingerprint(self) -> str:
        """Return a short stable hash of :meth:`settings` (part of every chunk id)."""
        blob = json.dumps(self.settings(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    def chunk_document(self, document: Document) -> list[Chunk]:
        """Split one Document into Chunks with exact spans, ids and inherited metadata."""
        text = document.page_content
        doc_id, source, fingerprint = document.doc_id, document.source, self.fingerprint()
        chunks = []
        for index, span in enumerate(self.split_spans(text)):
            piece = text[span.start : span.end]
            chunks.append(
                Chunk(
                    chunk_id=make_chunk_id(doc_id, fingerprint, span.start, piece),
                    doc_id=doc_id,
                    source=source,
                    chunk_index=index,
                    start_index=span.start,
                    end_index=span.end,
                    text=piece,
                    n_chars=len(piece),
                    headers=span.headers,
                    metadata=document.metadata,
                )
            )
        return chunks

    # -- shared machinery for subclasses --------------------------------------------------

    def _strip(self, text: str, start: int, end: int) -> tuple[int, int]:
        """Return ``(start, end)`` narrowed by ``str.strip`` when ``strip_whitespace`` is on."""
        if not self._strip_whitespace:
            return start, end
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        return start, end

    def _merge_spans(self, text: str, pieces: list[tuple[int, int]]) -> list[Span]:
        """Merge adjacent pieces into chunks of at most ``chunk_size`` with overlap.

        This is LangChain's ``_merge_splits`` on offsets: the same decisions, the same
        chunks, with one difference: the length between two pieces is that of the text
        really between them in the source (LangChain assumes one separator; they differ
        only where a separator was dropped), so a span is never longer than counted.
        """
        size, overlap, length = self._chunk_size, self._chunk_overlap, self._length_function
        keep = bool(self._keep_separator)
        spans: list[Span] = []
        current: list[tuple[int, int, int, int]] = []  # (start, end, length, gap_before)
        total = 0
        prev_end = -1
        for start, end in pieces:
            piece_len = length(text[start:end])
            gap = 0 if keep or prev_end < 0 else length(text[prev_end:start])
            prev_end = end
            if total + piece_len + (gap if current else 0) > size:
                if current:
                    self._emit(text, current[0][0], current[-1][1], spans)
                    while total > overlap or (
                        total + piece_len + (gap if current else 0) > size and total > 0
                    ):
                        total -= current[0][2] + (current[1][3] if len(current) > 1 else 0)
                        current.pop(0)
            current.append((start, end, piece_len, gap if current else 0))
            total += piece_len + (gap if len(current) > 1 else 0)
        if current:
            self._emit(text, current[0][0], current[-1][1], spans)
        return spans

    def _emit(self, text: str, start: int, end: int, out: list[Span]) -> None:
        """Append the stripped span ``[start, end)`` to ``out`` unless it is empty."""
        start, end = self._strip(text, start, end)
        if end > start:
            out.append(Span(start, end))
