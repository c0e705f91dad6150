r"""`HTMLHeaderTextSplitter`: sections by ``h1``–``h6``, exact spans into the page's text.

LangChain's API: ``HTMLHeaderTextSplitter(headers_to_split_on=[("h1", "Header 1"), ...])``
and ``split_text(html)`` returning Documents whose metadata maps the header names to the
texts of the enclosing headers; as there, every header is a Document of its own, followed by
the text under it (``header_chunks=False`` puts each header at the start of its section's
first chunk instead, which ``auto`` uses).

The text is the page's clean text from :func:`tasks.load.html.html_to_text` (scripts, styles
and navigation dropped, ``<main>``/``<article>`` kept, each heading on its own line) and the
chunks are exact slices of it: ``split_spans(text, headings)`` takes that text and its
headings, and a Document loaded by the HTML loader carries both (``page_content`` and
``metadata["headings"]``). LangChain joins element texts with ``"  \\n"`` instead, and ends a
header's scope when the DOM element that held it closes; here a header's scope ends at the next
header of the same or a higher level. With ``chunk_size``, larger sections are split further,
every piece keeping the header path.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from tasks.common.documents import Document, Header
from tasks.split.base import Span, SpanSplitter, strip_span
from tasks.split.recursive import RecursiveCharacterTextSplitter
from tasks.split.units import span_counter

Named = tuple[tuple[str, Header], ...]


class HTMLHeaderTextSplitter(SpanSplitter):
    """Split HTML into sections by header tags (langchain-text-splitters API)."""

    def __init__(
        self,
        headers_to_split_on: list[tuple[str, str]],
        return_each_element: bool = False,
        *,
        header_chunks: bool = True,
        chunk_size: int | None = None,
        chunk_overlap: int = 0,
        length_function: Callable[[str], int] = len,
    ) -> None:
        """Create the splitter.

        Args:
            headers_to_split_on: ``(tag, metadata name)`` pairs, e.g. ``("h2", "Header 2")``.
            return_each_element: One chunk per line of text (html_to_text ends a line at
                every block element) instead of one per section.
            header_chunks: Each header is a chunk of its own, as in LangChain; False puts it
                at the start of its section's first chunk.
            chunk_size: Optional cap: larger sections are split further (docflow only).
            chunk_overlap: Overlap of the pieces of a capped section.
            length_function: Unit of ``chunk_size`` and ``chunk_overlap``.

        """
        self.headers_to_split_on = sorted(headers_to_split_on, key=lambda h: int(h[0][1:]))
        self.header_mapping = dict(self.headers_to_split_on)
        self.return_each_element = return_each_element
        self._names = {int(tag[1:]): name for tag, name in self.headers_to_split_on}
        self._header_chunks = header_chunks
        self._chunk_size = chunk_size
        self._chunk_overlap = chunk_overlap
        self._length_function = length_function
        self._inner = RecursiveCharacterTextSplitter(
            chunk_size=chunk_size or 1,
            chunk_overlap=min(chunk_overlap, chunk_size or 1),
            length_function=length_function,
        )

    @property
    def max_size(self) -> int | None:
        """Return the cap (None: sections are not split further)."""
        return self._chunk_size

    def settings(self) -> dict[str, Any]:
        """Return the settings that change the output, for the fingerprint."""
        return {
            **super().settings(),
            "headers": self.headers_to_split_on,
            "each_element": self.return_each_element,
            "header_chunks": self._header_chunks,
            "chunk_size": self._chunk_size,
            "chunk_overlap": self._chunk_overlap,
        }

    # -- LangChain API ------------------------------------------------------------------

    def split_text(self, text: str) -> list[Document]:
        """Split an HTML page into Documents (exact slices of its clean text)."""
        from tasks.load.html import html_to_text

        page = html_to_text(text)
        return [
            Document(page.text[span.start : span.end], {name: h.text for name, h in named})
            for span, named in self._split(page.text, page.headings)
        ]

    def split_text_from_file(self, file: str | IO[str]) -> list[Document]:
        """Split an HTML file (a path or an open text file)."""
        if isinstance(file, str):
            return self.split_text(pathlib.Path(file).read_text(encoding="utf-8"))
        return self.split_text(file.read())

    # -- docflow API --------------------------------------------------------------------

    def split_spans(
        self, text: str, headings: Sequence[Mapping[str, Any]] | None = None
    ) -> list[Span]:
        """Split a page's clean text, given its headings (``html_to_text``'s), into spans."""
        return [span for span, _ in self._split(text, headings or ())]

    def document_spans(self, document: Document) -> list[Span]:
        """Split an HTML-loaded Document, using the headings its loader recorded."""
        return self.split_spans(document.page_content, document.metadata.get("headings"))

    def _valid(self, text: str, headings: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Keep the configured headings whose offsets fit the text, in order."""
        out: list[Mapping[str, Any]] = []
        last = 0
        for h in headings:
            level, start, end = h.get("level"), h.get("start"), h.get("end")
            if level not in self._names or not isinstance(start, int) or not isinstance(end, int):
                continue
            if last <= start <= end <= len(text):
                out.append(h)
                last = end
        return out

    def _split(self, text: str, headings: Sequence[Mapping[str, Any]]) -> list[tuple[Span, Named]]:
        """Return the spans of ``text`` with their named header paths."""
        stack: list[tuple[str, Header]] = []
        out: list[tuple[Span, Named]] = []
        measure = span_counter(self._length_function, text) if self._chunk_size else None
        content = 0  # start of the text not yet emitted
        for h in self._valid(text, headings):
            level = int(h["level"])
            self._section(text, content, h["start"], tuple(stack), measure, out)
            while stack and stack[-1][1].level >= level:
                stack.pop()
            stack.append((self._names[level], Header(level, str(h.get("text", "")))))
            if self._header_chunks:
                self._section(text, h["start"], h["end"], tuple(stack), measure, out)
                content = h["end"]
            else:
                content = h["start"]
        self._section(text, content, len(text), tuple(stack), measure, out)
        return out

    def _section(
        self,
        text: str,
        start: int,
        end: int,
        named: Named,
        measure: Any,
        out: list[tuple[Span, Named]],
    ) -> None:
        """Emit the text of one section: whole, one chunk per line, or capped pieces."""
        headers = tuple(h for _, h in named)
        if self.return_each_element:
            ranges = []
            line_start = start
            while line_start < end:
                stop = text.find("\n", line_start, end)
                stop = end if stop < 0 else stop
                ranges.append((line_start, stop))
                line_start = stop + 1
        else:
            ranges = [(start, end)]
        for lo, hi in ranges:
            lo, hi = strip_span(text, lo, hi)
            if hi <= lo:
                continue
            if self._chunk_size is None:
                out.append((Span(lo, hi, headers), named))
                continue
            n = measure(lo, hi) if measure is not None else hi - lo
            if n <= self._chunk_size:
                out.append((Span(lo, hi, headers, n if measure is not None else None), named))
                continue
            for piece in self._inner.split_range(text, lo, hi, measure):
                out.append((Span(piece.start, piece.end, headers, piece.n_tokens), named))
