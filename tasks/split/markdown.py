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

With ``join_header_only_sections`` (and ``strip_headers=False``) no chunk is header lines
alone where that can be avoided. LangChain already joins a header-only section to a deeper
one that follows; here it joins whatever section follows (sibling or shallower too): the
chunk starts at the lone header and carries the following section's header path, the path of
its text. A section over the cap whose first piece would be its header lines alone gets them
on its first piece instead; if the two do not fit together, that piece is re-cut at the last
blank line, else line break, else word end that fits (header lines over the cap on their own
are cut as any text, and their last piece joins the text). A lone header at the very end of
the document joins the chunk before it (keeping that chunk's path). Header lines stay alone
only where nothing fits beside them: a document of headers only, headers that leave no room
for a first word, or a trailing header that does not fit in the previous chunk.

One module over ~400 lines on purpose: the header parse (CommonMark's fences, setext,
front matter) and the grouping of its sections are one algorithm with one set of spans.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tasks.common.documents import Document, Header
from tasks.split.base import Span, SpanSplitter, strip_span
from tasks.split.counting import SpanCounter
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
#: Where the first chunk of a capped section ends when its header lines must join it, by
#: the line breaks after its last word, most preferred first: a blank line, a line break
#: (else the chunk ends at the last word that fits).
_BREAKS = (2, 1)
_WORD_END = re.compile(r"\S(?=\s)")
_SPACE = re.compile(r"\s+")


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
    """A block or section: its span, header path, and where its header lines end."""

    start: int
    end: int
    path: tuple[tuple[str | None, Header], ...]
    header_only: bool = False  # ends in a header line (LangChain's test for joining)
    body: int = 0  # end of the leading header lines (start when there are none)

    @property
    def bare(self) -> bool:
        """Return whether the section is header lines only, without text."""
        return self.body >= self.end


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
        join_header_only_sections: bool = False,
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
            join_header_only_sections: Keep no header line as a chunk of its own where
                avoidable (docflow only; see the module docstring). Needs
                ``strip_headers=False``: stripped headers leave no header-only text.

        """
        self.headers_to_split_on = sorted(headers_to_split_on, key=lambda h: -len(h[0]))
        self.return_each_line = return_each_line
        self.strip_headers = strip_headers
        self.custom_header_patterns = dict(custom_header_patterns or {})
        self._chunk_size = chunk_size
        self._chunk_overlap = chunk_overlap
        self._length_function = length_function
        self.join_header_only_sections = join_header_only_sections
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
            # only when on, so the fingerprints of LangChain-style settings do not change
            **({"join_header_only_sections": True} if self.join_header_only_sections else {}),
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
        joining = self.join_header_only_sections and not self.strip_headers
        if joining:
            sections = self._join_forward(sections)
        measure = span_counter(self._length_function, text) if self._chunk_size else None
        out: list[tuple[Span, tuple[tuple[str, Header], ...]]] = []
        for section in sections:
            start, end = strip_span(text, section.start, section.end)
            if end <= start:
                continue
            if joining and section.bare and out and self._join_back(out, end, measure):
                continue  # a lone header at the end joined the chunk before it
            headers = tuple(h for _, h in section.path)
            named = tuple((n, h) for n, h in section.path if n is not None)
            if self._chunk_size is None:
                out.append((Span(start, end, headers), named))
                continue
            n = self._measure(start, end, measure)
            if n <= self._chunk_size:
                tokens = n if measure is not None else None
                out.append((Span(start, end, headers, tokens), named))
                continue
            pieces = self._inner.split_range(text, start, end, measure)
            if joining:
                pieces = self._keep_header(text, start, end, section.body, pieces, measure)
            for piece in pieces:
                out.append((Span(piece.start, piece.end, headers, piece.n_tokens), named))
        return out

    # -- header-only sections (join_header_only_sections) ---------------------------------

    @staticmethod
    def _join_forward(sections: list[_Section]) -> list[_Section]:
        """Start each section after a bare one (headers only) at that one; its path stays.

        A header-only section at the end has nothing to join: it is kept, for
        :meth:`_join_back`.
        """
        out: list[_Section] = []
        held: _Section | None = None
        for section in sections:
            if held is not None:
                section.start, held = held.start, None
            if section.bare:
                held = section
            else:
                out.append(section)
        if held is not None:
            out.append(held)
        return out

    def _join_back(
        self,
        out: list[tuple[Span, tuple[tuple[str, Header], ...]]],
        end: int,
        measure: SpanCounter | None,
    ) -> bool:
        """Extend the last chunk to ``end`` (a trailing lone header) if it still fits.

        Returns:
            Whether the chunk was extended (it keeps its own header path).

        """
        last, named = out[-1]
        n: int | None = None
        if self._chunk_size is not None:
            n = self._measure(last.start, end, measure)
            if n > self._chunk_size:
                return False
        tokens = n if measure is not None else None
        out[-1] = (Span(last.start, end, last.headers, tokens), named)
        return True

    def _keep_header(
        self,
        text: str,
        start: int,
        end: int,
        body: int,
        pieces: list[Span],
        measure: SpanCounter | None,
    ) -> list[Span]:
        """Return the pieces of a capped section with its header lines on the first one.

        Args:
            text: The document.
            start: Start of the (stripped) section, at its first header line.
            end: End of the section.
            body: End of its leading header lines (``start`` if it has none).
            pieces: The section split as a whole (kept if their first piece has content).
            measure: The document's span counter, or None for characters.

        """
        size = self._chunk_size
        head_end = strip_span(text, start, max(start, body))[1]
        if size is None or head_end <= start or not pieces or pieces[0].end > head_end:
            return pieces
        first, last = strip_span(text, head_end, end)
        if last <= first:
            return pieces
        n = self._measure(start, head_end, measure)
        if n <= size:
            alone, head = [], Span(start, head_end, n_tokens=self._tokens(n, measure))
        else:  # header lines over the cap: cut as any text, the last piece joins the text
            *alone, head = self._inner.split_range(text, start, head_end, measure)
        content = self._inner.split_range(text, first, last, measure)
        lead = content[0]
        n = self._measure(head.start, lead.end, measure)
        if n <= size:
            return [
                *alone,
                Span(head.start, lead.end, n_tokens=self._tokens(n, measure)),
                *content[1:],
            ]
        stop = self._fit(text, head.start, lead.start, lead.end, measure)
        if stop is None:  # not even a first word fits beside the header lines
            return [*alone, head, *content]
        n = self._measure(head.start, stop, measure)
        joined = Span(head.start, stop, n_tokens=self._tokens(n, measure))
        return [*alone, joined, *self._inner.split_range(text, stop, last, measure)]

    def _fit(
        self, text: str, start: int, low: int, high: int, measure: SpanCounter | None
    ) -> int | None:
        """Return the end of the longest chunk ``[start, stop)`` within the cap.

        ``stop`` ends a word in ``(low, high)`` (``[start, high)`` is over the cap); the last
        such word before a blank line is preferred, then the last before a line break. None
        if not even the first word fits. Sizes are probed at word ends only: a subword
        tokenizer can count a cut word as more tokens than the whole one.
        """
        size = self._chunk_size or 0
        ends = [m.end() for m in _WORD_END.finditer(text, low, high)]
        fitting, over = 0, len(ends)  # ends[:fitting] fit (sizes grow with the text)
        while fitting < over:
            mid = (fitting + over) // 2
            if self._measure(start, ends[mid], measure) <= size:
                fitting = mid + 1
            else:
                over = mid
        if not fitting:
            return None
        for breaks in _BREAKS:
            for stop in reversed(ends[:fitting]):
                gap = _SPACE.match(text, stop)
                if gap is not None and gap.group().count("\n") >= breaks:
                    if self._measure(start, stop, measure) <= size:
                        return stop
                    break
        return ends[fitting - 1]

    @staticmethod
    def _measure(start: int, end: int, measure: SpanCounter | None) -> int:
        """Return the size of ``[start, end)``: counted, or in characters."""
        return measure(start, end) if measure is not None else end - start

    @staticmethod
    def _tokens(n: int, measure: SpanCounter | None) -> int | None:
        """Return ``n`` as a span's token count (None when the unit is characters)."""
        return n if measure is not None else None

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
                    current = _Section(item.start, item.end, tuple(stack), True, item.end)
                boundary = True
            elif item.kind == "blank":
                if current is not None:
                    blocks.append(current)
                    current = None
            elif current is None:
                current = _Section(item.start, item.end, tuple(stack), body=item.start)
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
                if last.body >= last.end:  # no text before: it begins in this block
                    last.body = block.body
                last.end, last.header_only = block.end, block.header_only
            elif (
                last is not None
                and last.header_only
                and not self.strip_headers
                and len(last.path) < len(block.path)
            ):
                if last.body >= last.end:
                    last.body = block.body
                last.end, last.path, last.header_only = block.end, block.path, block.header_only
            else:
                sections.append(
                    _Section(block.start, block.end, block.path, block.header_only, block.body)
                )
        return [s for s in sections if s.start >= 0]
