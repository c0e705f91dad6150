"""The splitter base classes: spans in, Documents and Chunks out.

Every splitter implements one method, :meth:`SpanSplitter.split_spans`, which returns
:class:`Span` objects: half-open ``[start, end)`` offsets into the text it was given, each
with the header path it sits under. All other outputs (``split_text`` strings, LangChain-style
``create_documents`` and ``split_documents``, docflow ``Chunk`` records) are derived from those
spans, so:

- every chunk text is exactly ``text[start:end]`` (no rewritten whitespace, no ``str.find``);
- ``start_index`` is always right, even for repeated text;
- chunk ids are deterministic (see :func:`tasks.common.documents.make_chunk_id`).

:class:`TextSplitter` adds LangChain's ``TextSplitter`` constructor, parameters, defaults and
methods, so code written against LangChain keeps working. The header splitters (Markdown,
HTML) sit beside it, as in LangChain, because their ``split_text`` returns Documents.

One module over ~400 lines on purpose: the base every splitter shares (spans, LangChain's
API, Documents, Chunks) is the one contract a newcomer reads before any splitter.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from tasks.common.documents import Chunk, Document, Header, make_chunk_id
from tasks.split.counting import SpanCounter
from tasks.split.units import HuggingFaceUnit, TiktokenUnit, counts_tokens, span_counter

KeepSeparator = bool | Literal["start", "end"]
TS = TypeVar("TS", bound="TextSplitter")


@dataclass(frozen=True, slots=True)
class Span:
    """A half-open ``[start, end)`` slice of a text, with its header path and token count."""

    start: int
    end: int
    headers: tuple[Header, ...] = ()
    n_tokens: int | None = None


def _length_name(fn: Callable[[str], int]) -> str:
    """Return a stable name for a length function, for the splitter fingerprint."""
    return getattr(fn, "unit_name", None) or getattr(fn, "__qualname__", None) or repr(fn)


def strip_span(text: str, start: int, end: int) -> tuple[int, int]:
    """Return ``(start, end)`` narrowed past whitespace at both ends (as ``str.strip``)."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


class SpanSplitter(ABC):
    """Base of every docflow splitter; one abstract method, :meth:`split_spans`.

    Invariants every subclass keeps (tested over the real corpora and hypothesis text):
    exact spans in document order; no span longer than the size limit in the length unit, if
    the splitter has one (an indivisible unit that is longer is cut, never kept whole); and,
    unless the splitter documents that it drops text (stripped Markdown headers), the spans
    cover all the non-whitespace text.
    """

    _length_function: Callable[[str], int] = len

    @abstractmethod
    def split_spans(self, text: str) -> list[Span]:
        """Return the chunks of ``text`` as spans, in document order."""

    @property
    def max_size(self) -> int | None:
        """Return the size limit in the length unit, or None for unbounded chunks."""
        return None

    @property
    def length_function(self) -> Callable[[str], int]:
        """Return the function that measures chunks (``len`` counts characters)."""
        return self._length_function

    def document_spans(self, document: Document) -> list[Span]:
        """Return the spans of a Document's text (splitters may read its metadata)."""
        return self.split_spans(document.page_content)

    def settings(self) -> dict[str, Any]:
        """Return the settings that change the output, for the fingerprint."""
        return {"class": type(self).__name__, "length": _length_name(self._length_function)}

    def fingerprint(self) -> str:
        """Return a short stable hash of :meth:`settings` (part of every chunk id)."""
        blob = json.dumps(self.settings(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    def chunk_document(self, document: Document) -> list[Chunk]:
        """Split one Document into Chunks with exact spans, ids, headers and token counts."""
        text = document.page_content
        doc_id, source, fingerprint = document.doc_id, document.source, self.fingerprint()
        tokens = counts_tokens(self._length_function)
        counter: SpanCounter | None = None
        metadata = chunk_metadata(document.metadata)
        chunks = []
        for index, span in enumerate(self.document_spans(document)):
            piece = text[span.start : span.end]
            n_tokens = span.n_tokens
            if n_tokens is None and tokens:
                counter = counter or span_counter(self._length_function, text)
                n_tokens = counter(span.start, span.end) if counter else None
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
                    n_tokens=n_tokens,
                    headers=span.headers,
                    metadata=metadata,
                )
            )
        return chunks


DOCUMENT_ONLY_KEYS = frozenset({"headings"})
"""Metadata about a whole document that its chunks do not inherit: the HTML loader's
``headings`` (every heading's offsets) is what the splitter reads, and copied into each
chunk it would bloat every row of the tables and the store. A chunk has its own ``headers``."""


def chunk_metadata(metadata: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return the metadata a chunk inherits from its document."""
    if DOCUMENT_ONLY_KEYS.isdisjoint(metadata):
        return metadata
    return {k: v for k, v in metadata.items() if k not in DOCUMENT_ONLY_KEYS}


class TextSplitter(SpanSplitter):
    """LangChain's ``TextSplitter`` API over spans: ``split_text`` returns strings."""

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
            length_function: Measures a piece of text (``len`` counts characters; see
                :mod:`tasks.split.units` for token units).
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

    # -- LangChain's classmethod constructors ---------------------------------------------

    @classmethod
    def from_tiktoken_encoder(
        cls: type[TS],
        encoding_name: str = "cl100k_base",
        model_name: str | None = None,
        allowed_special: Literal["all"] | Collection[str] | None = None,
        disallowed_special: Literal["all"] | Collection[str] = "all",
        **kwargs: Any,
    ) -> TS:
        """Return a splitter that measures chunks in tiktoken tokens (offline cl100k).

        Args:
            encoding_name: tiktoken encoding (LangChain's default ``gpt2`` needs a download).
            model_name: OpenAI model name; overrides ``encoding_name``.
            allowed_special: Special tokens encoded as such.
            disallowed_special: Accepted for compatibility; special-token text in a document
                counts as plain text instead of raising.
            **kwargs: The class's own parameters (``chunk_size``, ``separators``...).

        """
        del disallowed_special
        unit = TiktokenUnit(encoding_name, model_name, allowed_special or ())
        return cls(length_function=unit, **kwargs)

    @classmethod
    def from_huggingface_tokenizer(cls: type[TS], tokenizer: Any, **kwargs: Any) -> TS:
        """Return a splitter that measures chunks with a Hugging Face tokenizer.

        Args:
            tokenizer: A ``transformers`` tokenizer or a ``tokenizers.Tokenizer``.
            **kwargs: The class's own parameters (``chunk_size``, ``separators``...).

        Raises:
            ValueError: If ``tokenizer`` is neither kind (LangChain's check).

        """
        from tokenizers import Tokenizer

        if not isinstance(tokenizer, Tokenizer) and not hasattr(tokenizer, "tokenize"):
            raise ValueError("Tokenizer received was not an instance of PreTrainedTokenizerBase")
        return cls(length_function=HuggingFaceUnit(tokenizer), **kwargs)

    # -- derived API (LangChain-compatible) -----------------------------------------------

    @property
    def chunk_size(self) -> int:
        """Return the maximum chunk size in the length unit."""
        return self._chunk_size

    @property
    def max_size(self) -> int:
        """Return the size limit (``chunk_size``)."""
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

    def settings(self) -> dict[str, Any]:
        """Return the settings that change the output, for the fingerprint."""
        return {
            **super().settings(),
            "chunk_size": self._chunk_size,
            "chunk_overlap": self._chunk_overlap,
            "keep_separator": self._keep_separator,
            "strip_whitespace": self._strip_whitespace,
        }

    # -- shared machinery for subclasses --------------------------------------------------

    def _strip(self, text: str, start: int, end: int) -> tuple[int, int]:
        """Return ``(start, end)`` narrowed by ``str.strip`` when ``strip_whitespace`` is on."""
        return strip_span(text, start, end) if self._strip_whitespace else (start, end)

    def _emit(self, text: str, start: int, end: int, out: list[Span]) -> None:
        """Append the stripped span ``[start, end)`` to ``out`` unless it is empty.

        Sizes are enforced afterwards, for all the spans of a call, by :meth:`_finish`.
        """
        if self._strip_whitespace:
            start, end = strip_span(text, start, end)
        if end > start:
            out.append(Span(start, end))

    def _finish(self, text: str, spans: list[Span], measure: SpanCounter | None) -> list[Span]:
        """Enforce the size limit on finished spans and record their token counts.

        A token unit measures each chunk as a whole (LangChain sums its pieces, which can
        differ); the rare chunk over the limit is cut further.
        """
        size = self._chunk_size
        if measure is None:
            if all(s.end - s.start <= size for s in spans):
                return spans
            out: list[Span] = []
            for s in spans:
                if s.end - s.start <= size:
                    out.append(s)
                else:
                    self._cut(text, s.start, s.end, None, out)
            return out
        many = getattr(measure, "count_spans", None)
        starts, ends = [s.start for s in spans], [s.end for s in spans]
        counts = many(starts, ends) if many else [measure(s.start, s.end) for s in spans]
        out = []
        for i, (span, n) in enumerate(zip(spans, counts, strict=True)):
            if n <= size:
                out.append(Span(span.start, span.end, span.headers, n))
                continue
            pieces: list[Span] = []
            self._cut(text, span.start, span.end, measure, pieces)
            after = spans[i + 1] if i + 1 < len(spans) else None
            for piece in pieces:  # a tail the next (overlapping) chunk holds would go back
                if after is None or piece.start < after.start or piece.end > after.end:
                    out.append(Span(piece.start, piece.end, span.headers, piece.n_tokens))
        return out

    def _merge(
        self,
        text: str,
        pieces: list[tuple[int, int, int]],
        measure: SpanCounter | None,
        out: list[Span],
    ) -> None:
        """Merge ``(start, end, length)`` pieces into chunks (LangChain's ``_merge_splits``).

        The same decisions on offsets, with one difference: without ``keep_separator`` the
        length between two pieces is that of the text really between them in the source
        (LangChain assumes one separator; they differ only where a separator was dropped).
        """
        size, overlap = self._chunk_size, self._chunk_overlap
        keep = bool(self._keep_separator)
        window: list[tuple[int, int, int, int]] = []  # (start, end, length, gap_before)
        head = 0  # window[head:] is the current chunk
        total = 0
        prev_end = -1
        for start, end, n in pieces:
            gap = 0
            if not keep and prev_end >= 0:
                gap = start - prev_end if measure is None else measure(prev_end, start)
            prev_end = end
            if total + n + (gap if head < len(window) else 0) > size and head < len(window):
                self._emit(text, window[head][0], window[-1][1], out)
                while head < len(window) and (
                    total > overlap or (total + n + gap > size and total > 0)
                ):
                    total -= window[head][2]
                    head += 1
                    if head < len(window):
                        total -= window[head][3]
            gap = gap if head < len(window) else 0
            window.append((start, end, n, gap))
            total += n + gap
        if head < len(window):
            self._emit(text, window[head][0], window[-1][1], out)

    def _cut(
        self, text: str, start: int, end: int, measure: SpanCounter | None, out: list[Span]
    ) -> None:
        """Cut a piece into windows of at most ``chunk_size`` (no overlap).

        Reached only when a piece is over the limit and cannot be split further; LangChain
        returns such a piece whole, over the limit. A window ends at its last whitespace
        when it has one, so words stay whole.
        """
        size = self._chunk_size
        while start < end:
            if self._strip_whitespace:
                while start < end and text[start].isspace():
                    start += 1
                if start >= end:
                    return
            if measure is None:
                stop = min(end, start + size)
            else:
                stop = self._longest_prefix(start, end, measure)
            if stop < end and not text[stop].isspace():
                space = max(text.rfind(c, start + 1, stop) for c in " \t\n")
                stop = space + 1 if space > start else stop
            s, e = self._strip(text, start, stop)
            n = None
            if measure is not None:
                n = measure(s, e)
                while n > size and e - s > 1:  # stripping can add a token
                    e -= 1
                    n = measure(s, e)
            if e > s:
                out.append(Span(s, e, n_tokens=n))
            start = e if s < e < stop else stop

    def _longest_prefix(self, start: int, end: int, measure: SpanCounter) -> int:
        """Return the largest ``stop`` with ``measure(start, stop) <= chunk_size``.

        At least one character; probes grow exponentially, then bisect, so a long piece
        costs time linear in its length.
        """
        size = self._chunk_size
        lo, step = start + 1, size
        hi = min(end, start + step)
        while measure(start, hi) <= size:
            if hi == end:
                return end
            lo, step = hi, step * 2
            hi = min(end, start + step)
        hi -= 1  # measure(start, hi + 1) > size
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if measure(start, mid) <= size:
                lo = mid
            else:
                hi = mid - 1
        return lo
