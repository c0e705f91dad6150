"""`AutoSplitter`: the splitter each file type deserves (the ingest default).

- Markdown: header sections (all six levels, header lines kept in the chunks), capped at
  ``chunk_size``; a header line with no text of its own joins the section that follows it
  (``join_header_only_sections``); headerless documents are split recursively.
- HTML: header sections of the page's clean text, from the headings the HTML loader
  recorded, capped at ``chunk_size``.
- Source code: recursive splitting with the separators of the file's language.
- Everything else (text, PDF pages, CSV rows, JSON): recursive splitting.

The file type is the loader's ``file_type`` metadata, else the extension of ``source``.
Every strategy keeps exact spans, the size limit and full coverage of the text.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from tasks.common.documents import Document
from tasks.split.base import Span, SpanSplitter
from tasks.split.code import CodeTextSplitter
from tasks.split.html import HTMLHeaderTextSplitter
from tasks.split.languages import language_for_path
from tasks.split.markdown import MarkdownHeaderTextSplitter
from tasks.split.recursive import RecursiveCharacterTextSplitter

#: Every Markdown header level, with LangChain-style metadata names.
MARKDOWN_HEADERS: list[tuple[str, str]] = [("#" * n, f"Header {n}") for n in range(1, 7)]
#: Every HTML header tag.
HTML_HEADERS: list[tuple[str, str]] = [(f"h{n}", f"Header {n}") for n in range(1, 7)]
#: File types (loader ``file_type`` values) by extension, when a Document has none.
_TYPES_BY_EXTENSION = {".md": "markdown", ".markdown": "markdown", ".mdx": "markdown"}
_TYPES_BY_EXTENSION |= {".html": "html", ".htm": "html"}


class AutoSplitter(SpanSplitter):
    """Choose the splitting strategy per document from its file type."""

    def __init__(
        self,
        chunk_size: int = 1024,
        chunk_overlap: int = 100,
        length_function: Callable[[str], int] = len,
    ) -> None:
        """Create the strategies, all with the same size, overlap and unit.

        Args:
            chunk_size: Maximum chunk size in the unit of ``length_function``.
            chunk_overlap: Target overlap between neighbouring chunks.
            length_function: Measures a piece of text (``len`` counts characters).

        """
        self._chunk_size = chunk_size
        self._chunk_overlap = chunk_overlap
        self._length_function = length_function
        sizes: dict[str, Any] = {
            "chunk_size": chunk_size,
            "chunk_overlap": chunk_overlap,
            "length_function": length_function,
        }
        self.markdown = MarkdownHeaderTextSplitter(
            MARKDOWN_HEADERS, strip_headers=False, join_header_only_sections=True, **sizes
        )
        self.html = HTMLHeaderTextSplitter(HTML_HEADERS, header_chunks=False, **sizes)
        self.code = CodeTextSplitter(**sizes)
        self.text = RecursiveCharacterTextSplitter(**sizes)

    @property
    def max_size(self) -> int:
        """Return the size limit (``chunk_size``)."""
        return self._chunk_size

    def settings(self) -> dict[str, Any]:
        """Return the settings that change the output, for the fingerprint."""
        return {
            **super().settings(),
            "chunk_size": self._chunk_size,
            "chunk_overlap": self._chunk_overlap,
        }

    def strategy_for(self, document: Document) -> SpanSplitter:
        """Return the splitter for a Document's file type."""
        file_type = document.metadata.get("file_type")
        source = str(document.metadata.get("source", ""))
        if not file_type:
            file_type = _TYPES_BY_EXTENSION.get(PurePosixPath(source).suffix.lower())
            if file_type is None and language_for_path(source) is not None:
                file_type = "code"
        if file_type == "markdown":
            return self.markdown
        if file_type == "html" and "headings" in document.metadata:
            return self.html
        if file_type == "code":
            return self.code
        return self.text

    def split_spans(self, text: str) -> list[Span]:
        """Split plain text (no file type known): recursive splitting."""
        return self.text.split_spans(text)

    def document_spans(self, document: Document) -> list[Span]:
        """Split a Document with the strategy for its file type."""
        return self.strategy_for(document).document_spans(document)
