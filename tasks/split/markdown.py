r"""`MarkdownHeaderTextSplitter`: sections by header, exact spans, optional size cap.

LangChain's API and grouping (``headers_to_split_on``, ``strip_headers``, ``return_each_line``,
``custom_header_patterns``; ``split_text`` returns Documents whose metadata maps the header
names to the header texts), read with CommonMark's rules and returned as exact slices:

- a line inside a fenced code block (backticks or tildes, closed only by a fence of the same
  character at least as long, with no info string) is never a header; nor is a line indented
  four spaces or more;
- setext headers (a paragraph underlined with ``===`` or ``---``) count, YAML/TOML front
  matter does not; a leading BOM is skipped; closing ``#``s are not part of the header text;
- a chunk is the exact text of its section (LangChain strips every line and re-joins them
  with ``"  \\n"``); every chunk carries the whole header path.

Beyond LangChain: with ``chunk_size``, sections larger than that are split further with the
Markdown separators, every piece keeping the header path; a document without any of the
configured headers is split recursively (``chunk_size``/``chunk_overlap``, or 1024/100
characters when no cap is set) instead of being returned whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tasks.documents import Document, Header
from tasks.split.base import Span, SpanSplitter, strip_span
from tasks.split.languages import SEPARATORS, Language
from tasks.split.recursive import RecursiveCharacterTextSplitter
from tasks.split.units import span_counter

#: Sizes for documents without headers when no cap is set (the seed design's defaults).
FALLBACK_SIZE, FALLBACK_OVERLAP = 1024, 100

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+|\Z)")
_CLOSING = re.compile(r"(?:\A|[ \t]+)#+[ \t]*\Z")
_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)\Z")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*\Z")
_NOT_PARAGRAPH = re.compile(r" {0,3}(?:[-+*](?:[ \t]|\Z)|\d{1,9}[.)](?:[ \t]|\Z)|>|\|)")
_FRONT_MATTER = ("---", "+++")


@dataclass(slots=True)
class _Item:
    """A line (or a setext header's lines): its span and what it is."""

    start: int
    end: int
    kind: str  # "blank", "text", "header"
    level: int = 0
    title: str = ""
    name: str | None = None


@dataclass(slots=True)
class _Section:
    start: int
    end: int
    path: tuple[tuple[str | None, Header], ...]
    header_only: bool = False


def _lines(text: str) -> list[tuple[int, int]]:
    """Return ``(start, end)`` of every line, without its line break (CRLF too)."""
    out: list[tuple[int, int]] = []
    start = 0
    while start <= len(text):
        stop = text.find("\n", start)
        if stop < 0:
            stop = len(text)
        end = stop - 1 if stop > start and text[stop - 1] == "\r" else stop
        out.append((start, end))
        start = stop + 1
    return out


class MarkdownHeaderTextSplitter(SpanSplitter):
    """Split Markdown into sections by header (langchain-text-splitters API)."""

    def __init__(
        self,
        headers_to_split_on: list[tuple[str, str]],
        return_each_line: bool = False,
        strip_headers: bool = True,
        custom_header_patterns: dict[str, int] | None = None,
        chunk_size: int | None = None,
        chunk_overlap: int = 0,
        length_function: Callable[[str], int] = len,
    ) -> None:
        """Create the splitter.

        Args:
            headers_to_split_on: ``(marker, metadata name)`` pairs, e.g. ``("##", "Header 2")``.
            return_each_line: One chunk per block of lines (as LangChain: blank lines and
                headers end a block) instead of one per section.
            strip_headers: Leave the header lines out of the chunks.
            custom_header_patterns: Extra markers and their levels, e.g. ``{"**": 1}`` makes
                a line ``**Title**`` a level-1 header (if ``"**"`` is split on).
            chunk_size: Optional cap: larger sections are split further (docflow only).
            chunk_overlap: Overlap of the pieces of a capped section.
            length_function: Unit of ``chunk_size`` and ``chunk_overlap``.

        """
        self.headers_to_split_on = sorted(headers_to_split_on, key=lambda h: -len(h[0]))
        self.return_each_line = return_each_line
        self.strip_headers = strip_headers
        self.custom_header_patterns = dict(custom_header_patterns or {})
        self._chunk_size = chunk_size
        self._chunk_overlap = chunk_overlap
        self._length_function = length_function
        self._atx_names = {
            len(m): n for m, n in headers_to_split_on if m and set(m) == {"#"} and len(m) <= 6
        }
        self._custom = [
            (
                re.compile(
                    rf"{re.escape(m)}(?!{re.escape(m)})(.+?)(?<!{re.escape(m)}){re.escape(m)}"
                ),
                m,
                level,
                n,
            )
            for m, n in headers_to_split_on
            if (level := self.custom_header_patterns.get(m)) is not None
        ]
        size = chunk_size or FALLBACK_SIZE
        overlap = chunk_overlap if chunk_size else FALLBACK_OVERLAP
        self._inner = RecursiveCharacterTextSplitter(
            separators=list(SEPARATORS[Language.MARKDOWN]),
            is_separator_regex=True,
            chunk_size=size,
            chunk_overlap=min(overlap, size),
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
            "each_line": self.return_each_line,
            "strip_headers": self.strip_headers,
            "custom": self.custom_header_patterns,
            "chunk_size": self._chunk_size,
            "chunk_overlap": self._chunk_overlap,
        }

    # -- LangChain API ------------------------------------------------------------------

    def split_text(self, text: str) -> list[Document]:
        """Split Markdown into Documents: exact section text, header names → header texts."""
        return [
            Document(text[s.start : s.end], {name: h.text for name, h in p})
            for s, p in self._split(text)
        ]

    def split_documents(self, documents: list[Any]) -> list[Document]:
        """Split Documents, merging each section's header metadata into a copy of theirs."""
        out = []
        for doc in documents:
            for chunk in self.split_text(doc.page_content):
                out.append(Document(chunk.page_content, {**doc.metadata, **chunk.metadata}))
        return out

    # -- docflow API --------------------------------------------------------------------

    def split_spans(self, text: str) -> list[Span]:
        """Return the sections (or capped pieces) of ``text`` as exact spans."""
        return [span for span, _ in self._split(text)]

    def _split(self, text: str) -> list[tuple[Span, tuple[tuple[str, Header], ...]]]:
        """Return spans with their named header path (for metadata)."""
        items = self._items(text)
        if not any(item.kind == "header" for item in items):
            measure = span_counter(self._length_function, text)
            return [(s, ()) for s in self._inner.split_range(text, 0, len(text), measure)]
        sections = self._sections(items)
        measure = span_counter(self._length_function, text) if self._chunk_size else None
        out: list[tuple[Span, tuple[tuple[str, Header], ...]]] = []
        for section in sections:
            start, end = strip_span(text, section.start, section.end)
            if end <= start:
                continue
            headers = tuple(h for _, h in section.path)
            named = tuple((n, h) for n, h in section.path if n is not None)
            if self._chunk_size is None:
                out.append((Span(start, end, headers), named))
                continue
            n = measure(start, end) if measure is not None else end - start
            if n <= self._chunk_size:
                tokens = n if measure is not None else None
                out.append((Span(start, end, headers, tokens), named))
                continue
            for piece in self._inner.split_range(text, start, end, measure):
                out.append((Span(piece.start, piece.end, headers, piece.n_tokens), named))
        return out

    # -- parsing ------------------------------------------------------------------------

    def _header(self, line: str) -> tuple[int, str, str | None] | None:
        """Return ``(level, text, name)`` if ``line`` is a configured ATX/custom header."""
        match = _ATX.match(line)
        if match is not None and len(match.group(1)) in self._atx_names:
            title = _CLOSING.sub("", line[match.end() :]).strip()
            level = len(match.group(1))
            return level, title, self._atx_names[level]
        stripped = line.strip()
        for pattern, marker, level, name in self._custom:
            found = pattern.fullmatch(stripped)
            if (
                found
                and found.group(1).strip()
                and set(found.group(1).replace(" ", "")) - set(marker)
            ):
                return level, found.group(1).strip(), name
        return None

    def _items(self, text: str) -> list[_Item]:
        """Classify every line; fenced code, front matter and setext headers resolved."""
        items: list[_Item] = []
        lines = _lines(text)
        fence, fence_indent = "", 0  # the opening fence while inside a fenced block
        front_end = self._front_matter_end(text, lines)
        para = -1  # index in items of the first line of the open paragraph, or -1
        for number, (start, end) in enumerate(lines):
            line = text[start:end]
            if number == 0 and line.startswith("\ufeff"):
                line = line[1:]  # a byte order mark is not part of the first line
            if number < front_end:
                items.append(_Item(start, end, "text"))
                continue
            if fence:
                if self._closes(line, fence, fence_indent):
                    fence = ""
                items.append(_Item(start, end, "text"))
                continue
            if not line.strip():
                items.append(_Item(start, end, "blank"))
                para = -1
                continue
            opening = _FENCE.match(line)
            if opening and (opening.group(1)[0] == "~" or "`" not in opening.group(2)):
                fence = opening.group(1)
                fence_indent = opening.start(1)
                items.append(_Item(start, end, "text"))
                para = -1
                continue
            setext = _SETEXT.match(line)
            if setext and para >= 0:
                level = 1 if setext.group(1)[0] == "=" else 2
                if level in self._atx_names:
                    bom = 1 if text.startswith("\ufeff") else 0  # not part of the title
                    title = " ".join(text[max(i.start, bom) : i.end].strip() for i in items[para:])
                    first = items[para].start
                    del items[para:]
                    items.append(_Item(first, end, "header", level, title, self._atx_names[level]))
                else:  # a header of a level not split on: content
                    items.append(_Item(start, end, "text"))
                para = -1
                continue
            header = self._header(line)
            if header is not None:
                items.append(_Item(start, end, "header", *header))
                para = -1
                continue
            indented = len(line) - len(line.lstrip(" ")) >= 4 or line.startswith("\t")
            if _NOT_PARAGRAPH.match(line):  # list items, quotes, tables interrupt paragraphs
                para = -1
            elif para < 0 and not indented and not setext:
                para = len(items)
            items.append(_Item(start, end, "text"))
        return items

    @staticmethod
    def _closes(line: str, fence: str, indent: int) -> bool:
        """Return whether ``line`` closes ``fence``.

        CommonMark: the same character, at least as long, no info string, and (our reading
        for fences nested in lists) indented at most 3 columns more than the opening.
        """
        closing = _FENCE.match(line)
        return (
            closing is not None
            and closing.group(1)[0] == fence[0]
            and len(closing.group(1)) >= len(fence)
            and not closing.group(2).strip()
            and closing.start(1) <= indent + 3
        )

    @staticmethod
    def _front_matter_end(text: str, lines: list[tuple[int, int]]) -> int:
        """Return the number of lines of YAML (``---``) or TOML (``+++``) front matter."""
        marker = text[lines[0][0] : lines[0][1]].lstrip("\ufeff").rstrip() if lines else ""
        if marker not in _FRONT_MATTER:
            return 0
        for number in range(1, len(lines)):
            line = text[lines[number][0] : lines[number][1]].rstrip()
            if line == marker or (marker == "---" and line == "..."):
                return number + 1
        return 0

    def _sections(self, items: list[_Item]) -> list[_Section]:
        """Group lines into blocks, then blocks into sections, as LangChain does."""
        stack: list[tuple[str | None, Header]] = []
        blocks: list[_Section] = []
        current: _Section | None = None
        boundary = False  # a header line since the previous block (strip_headers only)
        for item in items:
            if item.kind == "header":
                if current is not None:
                    blocks.append(current)
                    current = None
                while stack and stack[-1][1].level >= item.level:
                    stack.pop()
                stack.append((item.name, Header(item.level, item.title)))
                if not self.strip_headers:
                    current = _Section(item.start, item.end, tuple(stack), header_only=True)
                boundary = True
            elif item.kind == "blank":
                if current is not None:
                    blocks.append(current)
                    current = None
            elif current is None:
                current = _Section(item.start, item.end, tuple(stack))
                if boundary and self.strip_headers and blocks:
                    blocks.append(_Section(-1, -1, ()))  # marks a header between blocks
                boundary = False
            else:
                current.end = item.end
                current.header_only = False
        if current is not None:
            blocks.append(current)
        if self.return_each_line:
            return [b for b in blocks if b.start >= 0]
        sections: list[_Section] = []
        for block in blocks:
            last = sections[-1] if sections else None
            if block.start < 0:
                sections.append(block)
            elif last is not None and last.start >= 0 and last.path == block.path:
                last.end, last.header_only = block.end, block.header_only
            elif (
                last is not None
                and last.header_only
                and not self.strip_headers
                and len(last.path) < len(block.path)
            ):
                last.end, last.path, last.header_only = block.end, block.path, block.header_only
            else:
                sections.append(_Section(block.start, block.end, block.path, block.header_only))
        return [s for s in sections if s.start >= 0]
