"""Render how documents were split as one self-contained HTML page (``docflow split --html``).

Like ChunkViz: each document's text is shown once, cut into segments at every chunk start and
end, so every segment is covered by the same set of chunks from its first character to its
last. Segments covered by one chunk alternate between two colours (so neighbouring chunks are
told apart), segments covered by two or more chunks (the overlap) get a third, and each
segment's hover text names the chunks that cover it, with their header path and size. A table
below lists every chunk. The page has inline CSS, no script and no external resource, so it
opens from disk anywhere and a headless browser can screenshot it.

Pure standard library and no Prefect: the CLI calls it after ``split_file``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape

from tasks.common.documents import PART_KEYS, Chunk, Document, Header

#: Background colours: chunks alternate between "even" and "odd"; "overlap" is text covered
#: by two or more chunks. Exposed so tests can look for them in a screenshot.
COLOURS: dict[str, str] = {"even": "#bfdbfe", "odd": "#bbf7d0", "overlap": "#fcd34d"}

_CSS = """
body { font: 15px/1.5 system-ui, sans-serif; margin: 0 auto; max-width: 72rem;
       padding: 1rem 2rem; color: #1f2937; background: #ffffff; }
h1 { font-size: 1.4rem; margin: 0.5rem 0; }
h2 { font-size: 1.1rem; margin: 1.5rem 0 0.5rem; }
.meta { color: #4b5563; margin: 0.25rem 0; }
.legend span { padding: 0 0.4rem; margin-right: 0.5rem; border-radius: 3px; }
.text { white-space: pre-wrap; overflow-wrap: anywhere; font: 13px/1.6 ui-monospace, monospace;
        border: 1px solid #d1d5db; border-radius: 6px; padding: 0.75rem; background: #fafafa; }
.seg { border-radius: 2px; }
.seg:hover { outline: 2px solid #1f2937; }
.start { border-left: 2px solid #1e3a8a; }
.even { background: %(even)s; }
.odd { background: %(odd)s; }
.overlap { background: %(overlap)s; }
table { border-collapse: collapse; width: 100%%; font-size: 13px; }
th, td { border-bottom: 1px solid #e5e7eb; padding: 0.25rem 0.5rem; text-align: left;
         vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.preview { font-family: ui-monospace, monospace; color: #4b5563; }
"""

#: How many characters of each chunk the table shows.
PREVIEW_CHARS = 80


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of document text covered by the same chunks throughout.

    ``starts`` holds the chunks that begin exactly at ``start``, so the page can mark the
    boundary and give the chunk table something to link to.
    """

    start: int
    end: int
    covering: tuple[Chunk, ...]
    starts: tuple[Chunk, ...]


def header_path(headers: Iterable[Header]) -> str:
    """Return the header path as ``h1 Title > h2 Section`` (as the plain ``split`` output)."""
    return " > ".join(f"h{h.level} {h.text}" for h in headers)


def chunk_anchor(document: int, chunk: Chunk) -> str:
    """Return the element id of a chunk's row in the chunk table, e.g. ``chunk-0-3``."""
    return f"chunk-{document}-{chunk.chunk_index}"


def segments(text_length: int, chunks: Sequence[Chunk]) -> list[Segment]:
    """Cut ``[0, text_length)`` at every chunk start and end.

    A sweep over the sorted boundaries keeps the set of chunks open at each point, so the
    cost stays linear in the number of chunks (a CSV file may have thousands) instead of
    testing every chunk against every segment.

    Returns:
        The non-empty segments, in order, covering the whole text; uncovered text (the
        whitespace between chunks) is a segment with no covering chunk.

    """
    opening: dict[int, list[Chunk]] = {}
    closing: dict[int, list[Chunk]] = {}
    for c in chunks:
        opening.setdefault(c.start_index, []).append(c)
        closing.setdefault(c.end_index, []).append(c)
    bounds = sorted({0, text_length, *opening, *closing})
    open_chunks: dict[int, Chunk] = {}
    result: list[Segment] = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        for c in closing.get(start, []):
            open_chunks.pop(c.chunk_index, None)
        starting = opening.get(start, [])
        for c in starting:
            if c.end_index > start:
                open_chunks[c.chunk_index] = c
        covering = tuple(sorted(open_chunks.values(), key=lambda c: c.chunk_index))
        result.append(Segment(start, end, covering, tuple(starting)))
    return result


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _size(chunk: Chunk) -> str:
    tokens = f", {chunk.n_tokens} tokens" if chunk.n_tokens is not None else ""
    return f"{chunk.n_chars} chars{tokens}"


def _describe(chunk: Chunk) -> str:
    """Return one chunk's hover line: index, span, size and header path."""
    path = header_path(chunk.headers) or "no headers"
    return (
        f"chunk {chunk.chunk_index} [{chunk.start_index}:{chunk.end_index}] {_size(chunk)} | {path}"
    )


def _segment_class(segment: Segment) -> str:
    if not segment.covering:
        return ""
    if len(segment.covering) > 1:
        return "overlap"
    return "odd" if segment.covering[0].chunk_index % 2 else "even"


def _render_segment(document: int, text: str, segment: Segment) -> str:
    """Return one segment as a ``<span>`` (plain escaped text if no chunk covers it)."""
    anchors = "".join(f'<a id="start-{document}-{c.chunk_index}"></a>' for c in segment.starts)
    body = escape(text[segment.start : segment.end])
    if not segment.covering:
        return anchors + body
    classes = ["seg", _segment_class(segment)]
    if any(c.start_index == segment.start for c in segment.covering):
        classes.append("start")
    indexes = " ".join(str(c.chunk_index) for c in segment.covering)
    tooltip = "\n".join(_describe(c) for c in segment.covering)
    return (
        f'{anchors}<span class="{" ".join(classes)}" data-chunks="{indexes}" '
        f'title="{escape(tooltip)}">{body}</span>'
    )


def document_label(document: Document) -> str:
    """Return a document's name on the page: its source plus its page or row, if any."""
    parts = [f"{k} {document.metadata[k]}" for k in PART_KEYS if k in document.metadata]
    return ", ".join([document.source or "(no source)", *parts])


def _chunk_row(document: int, chunk: Chunk) -> str:
    preview = chunk.text[:PREVIEW_CHARS] + ("…" if len(chunk.text) > PREVIEW_CHARS else "")
    tokens = "" if chunk.n_tokens is None else str(chunk.n_tokens)
    return (
        f'<tr class="chunk" id="{chunk_anchor(document, chunk)}">'
        f'<td class="num {"odd" if chunk.chunk_index % 2 else "even"}">'
        f'<a href="#start-{document}-{chunk.chunk_index}">'
        f"{chunk.chunk_index}</a></td>"
        f'<td class="num">{chunk.start_index}:{chunk.end_index}</td>'
        f'<td class="num">{chunk.n_chars}</td><td class="num">{tokens}</td>'
        f"<td>{escape(header_path(chunk.headers))}</td>"
        f'<td class="preview">{escape(preview)}</td></tr>'
    )


def _render_document(position: int, document: Document, chunks: Sequence[Chunk]) -> str:
    """Return one document's section: heading, highlighted text and chunk table."""
    text = document.page_content
    cut = segments(len(text), chunks)
    body = "".join(_render_segment(position, text, s) for s in cut)
    overlaps = sum(1 for s in cut if len(s.covering) > 1)
    rows = "".join(_chunk_row(position, c) for c in chunks)
    return (
        f'<section class="document" id="document-{position}">'
        f"<h2>Document {position}: {escape(document_label(document))}</h2>"
        f'<p class="meta">{_count(len(text), "character")}, {_count(len(chunks), "chunk")}, '
        f"{_count(overlaps, 'overlap segment')}</p>"
        f'<div class="text">{body}</div>'
        f"<h2>Chunks of document {position}</h2>"
        "<table><thead><tr><th>#</th><th>span</th><th>chars</th><th>tokens</th>"
        f"<th>headers</th><th>start of text</th></tr></thead><tbody>{rows}</tbody></table>"
        "</section>"
    )


def _chunks_by_document(
    documents: Sequence[Document], chunks: Iterable[Chunk]
) -> list[list[Chunk]]:
    """Group chunks under their document, in chunk order.

    Raises:
        ValueError: If a chunk belongs to none of the documents or its span lies outside its
            document's text: the page could not show it where it is.

    """
    position = {d.doc_id: i for i, d in enumerate(documents)}
    grouped: list[list[Chunk]] = [[] for _ in documents]
    for c in chunks:
        if c.doc_id not in position:
            raise ValueError(f"chunk {c.chunk_index} belongs to no given document ({c.doc_id})")
        i = position[c.doc_id]
        if not 0 <= c.start_index <= c.end_index <= len(documents[i].page_content):
            raise ValueError(f"chunk {c.chunk_index} of document {i} has a span outside its text")
        grouped[i].append(c)
    return [sorted(g, key=lambda c: c.chunk_index) for g in grouped]


def render_chunks_html(
    documents: Sequence[Document],
    chunks: Iterable[Chunk],
    title: str,
    settings: Mapping[str, object] | None = None,
) -> str:
    """Return a self-contained HTML page showing how ``documents`` were cut into ``chunks``.

    Args:
        documents: The documents of one file, in file order; their position is the document
            number on the page and in ``docflow split --json``.
        chunks: The chunks of those documents (any order).
        title: The page title, e.g. the file name.
        settings: Splitter settings to show in the header (name, sizes, unit).

    Returns:
        The whole page; every piece of document text and metadata is HTML-escaped.

    """
    grouped = _chunks_by_document(documents, chunks)
    total = sum(len(g) for g in grouped)
    shown = ", ".join(f"{k} {v}" for k, v in (settings or {}).items())
    legend = (
        '<span class="even">chunk (even)</span><span class="odd">chunk (odd)</span>'
        '<span class="overlap">overlap</span>'
    )
    pairs = enumerate(zip(documents, grouped, strict=True))
    sections = "".join(_render_document(i, d, g) for i, (d, g) in pairs)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS % COLOURS}</style></head><body>"
        f"<h1>{escape(title)}</h1>"
        f'<p class="meta">{len(documents)} document(s), {total} chunks'
        f"{'; ' + escape(shown) if shown else ''}</p>"
        f'<p class="meta legend">{legend} hover over the text for each chunk\'s headers and size'
        f"</p>{sections}</body></html>\n"
    )
