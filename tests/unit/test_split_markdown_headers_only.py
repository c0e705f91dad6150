"""Header-only sections join the section that follows them (``join_header_only_sections``).

The auto splitter turns the option on: no chunk is a header line alone where that can be
avoided, spans stay exact, chunks stay under the cap and cover the text. Checked on the real
Markdown corpus at the ingest defaults, on hand-written cases and on generated Markdown.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.common.config import IngestParams
from tasks.common.documents import Chunk, Document
from tasks.split import AutoSplitter, MarkdownHeaderTextSplitter, Span
from tasks.split.auto import MARKDOWN_HEADERS
from tasks.split.base import strip_span
from tasks.split.factory import build_splitter
from tasks.split.invariants import check_spans
from tasks.split.units import length_unit, tiktoken_unit
from tests.conftest import corpus_files
from tests.load_helpers import load_corpus

MARKDOWN = corpus_files("markdown", ("*.md",))


def splitter(size: int | None = None, overlap: int = 0, **kwargs: Any) -> Any:
    options: dict[str, Any] = {"strip_headers": False, "join_header_only_sections": True}
    return MarkdownHeaderTextSplitter(
        MARKDOWN_HEADERS, chunk_size=size, chunk_overlap=overlap, **{**options, **kwargs}
    )


def chunks(text: str, size: int | None = None, **kwargs: Any) -> list[tuple[str, list[str]]]:
    """Split ``text``; return each chunk's text and header path (titles), checking spans."""
    spans = splitter(size, **kwargs).split_spans(text)
    assert not check_spans(text, spans, size)
    return [(text[s.start : s.end], [h.text for h in s.headers]) for s in spans]


# -- a lone header, as a reader sees one (independent of the splitter's parser) -------------

_ATX = re.compile(r" {0,3}#{1,6}(?:[ \t]+|\Z)")
_CLOSING = re.compile(r"(?:\A|[ \t]+)#+[ \t]*\Z")
_UNDERLINE = re.compile(r" {0,3}(?:=+|-+)[ \t]*\Z")
_NOT_TITLE = re.compile(r" {0,3}(?:[-+*](?:[ \t]|\Z)|\d{1,9}[.)](?:[ \t]|\Z)|>|\|)")  # lists...


def header_titles(text: str) -> list[str] | None:
    """Return the titles if ``text`` is only header lines (ATX or setext), else None."""
    titles: list[str] = []
    paragraph: list[str] = []
    for line in text.lstrip("\ufeff").splitlines():
        if not line.strip():
            continue
        atx = _ATX.match(line)
        if atx is not None and not paragraph:
            titles.append(_CLOSING.sub("", line[atx.end() :]).strip())
        elif _UNDERLINE.match(line) and paragraph:
            titles.append(" ".join(p.strip() for p in paragraph))
            paragraph = []
        elif _NOT_TITLE.match(line):
            return None  # a list item, quote or table row: never a setext title
        else:
            paragraph.append(line)
    return None if paragraph else titles


def is_lone_header(chunk: Chunk) -> bool:
    """Return whether a chunk is header lines only, of headers on its own path.

    The path check keeps out a code line that looks like a header (``# comment`` in a
    fenced block): it is not a header of the chunk's path.
    """
    titles = header_titles(chunk.text)
    return titles is not None and bool(set(titles) & {h.text for h in chunk.headers})


# -- the real corpus at the ingest defaults -------------------------------------------------


@cache
def markdown_documents() -> tuple[Document, ...]:
    """Load the Markdown corpus as the ingest does (front matter becomes metadata)."""
    return load_corpus(MARKDOWN)


@pytest.mark.skipif(not MARKDOWN, reason="../shared/corpora/markdown is absent here")
def test_no_lone_header_chunks_on_the_markdown_corpus_at_the_ingest_defaults() -> None:
    params = IngestParams()
    auto = build_splitter(params)
    assert isinstance(auto, AutoSplitter) and auto.markdown.join_header_only_sections
    unit = auto.length_function
    without = MarkdownHeaderTextSplitter(
        MARKDOWN_HEADERS,
        strip_headers=False,
        chunk_size=params.chunk_size,
        chunk_overlap=params.chunk_overlap,
        length_function=unit,
    )
    docs = markdown_documents()
    assert len(docs) > 150
    lone, lone_before = [], 0
    for doc in docs:
        text = doc.page_content
        got = auto.chunk_document(doc)
        spans = [Span(c.start_index, c.end_index) for c in got]
        assert not check_spans(text, spans, params.chunk_size, unit), doc.source
        assert all(text[c.start_index : c.end_index] == c.text for c in got)
        assert all(c.n_tokens == unit(c.text) for c in got), doc.source
        lone += [(doc.source, c.text) for c in got if is_lone_header(c)]
        lone_before += sum(map(is_lone_header, without.chunk_document(doc)))
    assert lone == []
    assert lone_before > 10  # the same check finds them without the option (33 here)


# -- hand-written cases ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected,langchain",
    [
        pytest.param(
            "# Guide\n\n## Install\n\npip install docflow\n",
            [("# Guide\n\n## Install\n\npip install docflow", ["Guide", "Install"])],
            [("# Guide\n\n## Install\n\npip install docflow", ["Guide", "Install"])],
            id="nested",
        ),
        pytest.param(
            "## A\n\n## B\n\ntext b\n",
            [("## A\n\n## B\n\ntext b", ["B"])],
            [("## A", ["A"]), ("## B\n\ntext b", ["B"])],
            id="sibling",
        ),
        pytest.param(
            "# T\n\n## A\n\n# U\n\ntext u\n",
            [("# T\n\n## A\n\n# U\n\ntext u", ["U"])],
            [("# T\n\n## A", ["T", "A"]), ("# U\n\ntext u", ["U"])],
            id="shallower",
        ),
        pytest.param(
            "# Doc\n\nintro\n\n## A\n\n## B\n\n### C\n\nc text\n\n## D\n\nd text\n",
            [
                ("# Doc\n\nintro", ["Doc"]),
                ("## A\n\n## B\n\n### C\n\nc text", ["Doc", "B", "C"]),
                ("## D\n\nd text", ["Doc", "D"]),
            ],
            [
                ("# Doc\n\nintro", ["Doc"]),
                ("## A", ["Doc", "A"]),
                ("## B\n\n### C\n\nc text", ["Doc", "B", "C"]),
                ("## D\n\nd text", ["Doc", "D"]),
            ],
            id="chain",
        ),
        pytest.param(
            "# A\n\ntext a\n\n## B\n\n### C\n",
            [("# A\n\ntext a\n\n## B\n\n### C", ["A"])],
            [("# A\n\ntext a", ["A"]), ("## B\n\n### C", ["A", "B", "C"])],
            id="lone-at-end-joins-the-chunk-before",
        ),
        pytest.param(
            "# A\n\n## B\n",
            [("# A\n\n## B", ["A", "B"])],
            [("# A\n\n## B", ["A", "B"])],
            id="headers-only-document",
        ),
        pytest.param(
            "A\n---\n\nB\n---\n\ntext\n",
            [("A\n---\n\nB\n---\n\ntext", ["B"])],
            [("A\n---", ["A"]), ("B\n---\n\ntext", ["B"])],
            id="setext-siblings",
        ),
        pytest.param(
            "Guide\n=====\n\nInstall\n-------\n\npip\n",
            [("Guide\n=====\n\nInstall\n-------\n\npip", ["Guide", "Install"])],
            [("Guide\n=====\n\nInstall\n-------\n\npip", ["Guide", "Install"])],
            id="setext-nested",
        ),
        pytest.param(
            "# A\n\ntext\n\nEnd\n===\n",
            [("# A\n\ntext\n\nEnd\n===", ["A"])],
            [("# A\n\ntext", ["A"]), ("End\n===", ["End"])],
            id="setext-at-end",
        ),
        pytest.param(
            "## A\n\n```\n## not a header\n```\n\n## B\n\ntext b\n",
            [("## A\n\n```\n## not a header\n```", ["A"]), ("## B\n\ntext b", ["B"])],
            [("## A\n\n```\n## not a header\n```", ["A"]), ("## B\n\ntext b", ["B"])],
            id="fenced-header-is-content",
        ),
        pytest.param(
            "## A\n\n~~~\n# x\n~~~\n",
            [("## A\n\n~~~\n# x\n~~~", ["A"])],
            [("## A\n\n~~~\n# x\n~~~", ["A"])],
            id="fenced-only",
        ),
        pytest.param(
            "## A\r\n\r\n## B\r\n\r\ntext\r\n",
            [("## A\r\n\r\n## B\r\n\r\ntext", ["B"])],
            [("## A", ["A"]), ("## B\r\n\r\ntext", ["B"])],
            id="crlf",
        ),
    ],
)
def test_header_only_sections_join_what_follows(
    text: str, expected: list[tuple[str, list[str]]], langchain: list[tuple[str, list[str]]]
) -> None:
    assert chunks(text) == expected
    assert chunks(text, 1000) == expected  # under a cap that everything fits
    assert chunks(text, join_header_only_sections=False) == langchain  # the option is off


def test_the_joined_chunk_has_the_metadata_of_the_section_that_follows() -> None:
    docs = splitter().split_text("# Guide\n\n## A\n\n## B\n\ntext\n")
    assert [(d.page_content, d.metadata) for d in docs] == [
        ("# Guide\n\n## A\n\n## B\n\ntext", {"Header 1": "Guide", "Header 2": "B"})
    ]


def test_a_lone_header_at_the_end_stays_alone_if_the_chunk_before_is_full() -> None:
    text = "# A\n\ntext a\n\n## B\n"
    fits = len("# A\n\ntext a\n\n## B")
    assert chunks(text, fits) == [("# A\n\ntext a\n\n## B", ["A"])]
    assert chunks(text, fits - 1) == [("# A\n\ntext a", ["A"]), ("## B", ["A", "B"])]


PARAGRAPHS = [f"Paragraph {i} " + "word " * 9 + "end." for i in range(6)]  # 62 characters


def test_a_lone_header_goes_with_the_first_chunk_of_a_larger_section() -> None:
    text = "## A\n\n## B\n\n" + "\n\n".join(PARAGRAPHS) + "\n"
    got = chunks(text, 100)
    assert got[0] == ("## A\n\n## B\n\n" + PARAGRAPHS[0], ["B"])
    assert all(path == ["B"] for _, path in got)
    assert [c for c, _ in chunks(text, 100, join_header_only_sections=False)][0] == "## A"


def test_headers_of_a_capped_section_are_not_left_alone() -> None:
    # split on "\n## " first, the old first piece was "# A" alone
    text = "# A\n\n## B\n\n" + "\n\n".join(PARAGRAPHS) + "\n"
    assert chunks(text, 100, join_header_only_sections=False)[0] == ("# A", ["A", "B"])
    got = chunks(text, 100)
    assert got[0] == ("# A\n\n## B\n\n" + PARAGRAPHS[0], ["A", "B"])


def test_the_first_chunk_is_recut_at_a_blank_line_when_the_headers_do_not_fit() -> None:
    short = ["alpha " * 7 + "a.bc", "beta " * 8 + "b.cccc"]  # 46 + 2 + 46: one piece of 94
    text = "# A\n\n## B\n\n" + "\n\n".join([*short, PARAGRAPHS[0], PARAGRAPHS[1]])
    got = chunks(text, 100)
    assert got[0] == ("# A\n\n## B\n\n" + short[0], ["A", "B"])
    assert got[1][0].startswith(short[1])


def test_the_first_chunk_is_recut_at_a_space_in_one_long_paragraph() -> None:
    text = "## Head\n\n" + " ".join(f"w{i:02d}" for i in range(60))
    assert chunks(text, 100, join_header_only_sections=False)[0] == ("## Head", ["Head"])
    got = chunks(text, 100)
    first = got[0][0]
    assert first.startswith("## Head\n\nw00 w01") and len(first) <= 100
    assert len(first) > 95 and first.endswith(f"w{(len(first) - 9) // 4:02d}")
    assert got[1][0].startswith(f"w{(len(first) - 9) // 4 + 1:02d}")


def test_a_header_stays_alone_when_not_even_a_first_word_fits_beside_it() -> None:
    text = "## Header ten\n\nabcdefghij klmnopqrst uvw\n"
    got = chunks(text, 20)
    assert got[0] == ("## Header ten", ["Header ten"])  # 13 + 2 + 10 > 20
    assert chunks(text, 25)[0] == ("## Header ten\n\nabcdefghij", ["Header ten"])


def test_header_lines_over_the_cap_are_cut_and_their_last_piece_joins_the_text() -> None:
    text = "## A very long header line indeed\n\nbody text\n"
    assert chunks(text, 10) == chunks(text, 10, join_header_only_sections=False)
    text = "# A long first header\n\n## Second\n\nbody text here\n"  # headers: 32 > 25
    path = ["A long first header", "Second"]
    assert chunks(text, 25) == [
        ("# A long first header", path),
        ("## Second\n\nbody text here", path),
    ]


def test_stripped_headers_leave_nothing_to_join() -> None:
    texts = ["## A\n\n## B\n\ntext\n", "# A\n\ntext\n\n## B\n", "# T\n\n## A\n\n# U\n\nu\n"]
    for text in texts:
        on = splitter(strip_headers=True).split_text(text)
        off = splitter(strip_headers=True, join_header_only_sections=False).split_text(text)
        assert on == off


def test_return_each_line_blocks_join_too() -> None:
    text = "## A\n\n## B\n\none\n\ntwo\n"
    assert chunks(text, return_each_line=True) == [("## A\n\n## B\n\none", ["B"]), ("two", ["B"])]


def test_token_counts_of_joined_and_recut_chunks_are_exact() -> None:
    unit = tiktoken_unit()
    text = "# A\n\n## B\n\n" + "\n\n".join(PARAGRAPHS * 3) + "\n\n## C\n\n## D\n\nd\n\n## E\n"
    spans = splitter(30, 5, length_function=unit).split_spans(text)
    assert not check_spans(text, spans, 30, unit)
    assert all(s.n_tokens == unit(text[s.start : s.end]) for s in spans)
    assert text[spans[0].start :].startswith("# A\n\n## B\n\nParagraph 0")
    assert text[spans[-1].start : spans[-1].end] == "## C\n\n## D\n\nd\n\n## E"


def test_the_option_changes_the_fingerprint_and_auto_turns_it_on() -> None:
    off = MarkdownHeaderTextSplitter(MARKDOWN_HEADERS, strip_headers=False, chunk_size=200)
    on = splitter(200)
    assert "join_header_only_sections" not in off.settings()  # LangChain-style ids unchanged
    assert on.settings() == {**off.settings(), "join_header_only_sections": True}
    assert on.fingerprint() != off.fingerprint()
    auto = AutoSplitter(1024, 100)
    assert auto.markdown.join_header_only_sections
    doc = Document("## A\n\n## B\n\ntext\n", {"source": "a.md", "file_type": "markdown"})
    assert [c.text for c in auto.chunk_document(doc)] == ["## A\n\n## B\n\ntext"]


# -- generated Markdown ----------------------------------------------------------------------
# ATX headers (levels 1-3, up to 3 leading spaces; titles numbered, so no two sections share
# a path: LangChain's grouping merges blocks of one path, which the reference below does not
# model), text lines, list items, fenced blocks with header-like lines, indented code; no
# setext headers (the hand-written cases and test_split_invariants cover those).

WORDS = st.sampled_from(["word", "x", "longer-word", "é字", "a" * 25, "12.", "`code`", "a-b"])
LINE = st.lists(WORDS, min_size=1, max_size=12).map(" ".join)
HEADER = st.tuples(st.integers(1, 3), st.sampled_from(["", " ", "   "]), LINE)
FENCED = st.lists(st.one_of(LINE, st.just("# fake"), st.just("## fake too")), max_size=3).map(
    lambda lines: "\n".join(["```", *lines, "```"])
)
BLOCK = st.one_of(
    HEADER,
    HEADER,
    st.lists(LINE, min_size=1, max_size=4).map("\n".join),
    FENCED,
    st.just("    # indented code"),
    st.just("- item\n- item two"),
)
UNITS: dict[str, tuple[int, int]] = {"chars": (20, 200), "tokens": (6, 60), "model_tokens": (8, 60)}
Line = tuple[int, int, str, tuple[str, ...]]  # start, end, kind, header path


@st.composite
def markdown(draw: st.DrawFn) -> str:
    blocks = draw(st.lists(BLOCK, min_size=1, max_size=14))
    seps = draw(st.lists(st.sampled_from(["\n", "\n\n", "\n\n\n", "\n  \n"]), min_size=14))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    text = ""
    for number, (block, sep) in enumerate(zip(blocks, seps, strict=False)):
        if isinstance(block, tuple):
            level, indent, title = block
            block = f"{indent}{'#' * level} {title} {number}"
        text += block + sep
    return text.replace("\n", newline)


def reference_lines(text: str) -> list[Line]:
    """Return every line of generated Markdown with its kind and header path."""
    out: list[Line] = []
    stack: list[tuple[int, str]] = []
    fenced, start = False, 0
    for line in text.split("\n"):
        end = start + len(line)
        body = line.rstrip("\r")
        atx = re.match(r" {0,3}(#{1,3}) (.*)\Z", body)
        if body.startswith("```"):
            fenced, kind = not fenced, "text"
        elif atx and not fenced:
            level = len(atx.group(1))
            stack = [h for h in stack if h[0] < level] + [(level, atx.group(2).strip())]
            kind = "header"
        else:
            kind = "text" if body.strip() else "blank"
        out.append((start, end, kind, tuple(t for _, t in stack)))
        start = end + 1
    return out


def first_content(lines: list[Line], text: str, a: int, b: int) -> int | None:
    """Return the first non-space offset in ``[a, b)`` on a content line, else None."""
    for start, end, kind, _ in lines:
        if kind != "text" or end <= a or start >= b:
            continue
        for i in range(max(a, start), min(b, end)):
            if not text[i].isspace():
                return i
    return None


def header_run(lines: list[Line], text: str, at: int) -> tuple[int, int]:
    """Return the span of the header lines (blank lines between) around offset ``at``."""
    index = next(i for i, (s, e, _, _) in enumerate(lines) if s <= at <= e)
    first = last = index
    while first > 0 and lines[first - 1][2] != "text":
        first -= 1
    while last + 1 < len(lines) and lines[last + 1][2] != "text":
        last += 1
    return strip_span(text, lines[first][0], lines[last][1])


@settings(max_examples=300, deadline=None)
@given(text=markdown(), unit=st.sampled_from(sorted(UNITS)), data=st.data())
def test_joining_keeps_the_invariants_and_the_paths_on_generated_markdown(
    text: str, unit: str, data: st.DataObject
) -> None:
    low, high = UNITS[unit]
    size = data.draw(st.one_of(st.none(), st.integers(low, high)), label="size")
    fn: Callable[[str], int] = length_unit(unit)
    spans = splitter(size, (size or 0) // 4, length_function=fn).split_spans(text)
    assert not check_spans(text, spans, size, fn)  # exact, in order, capped, covering
    if size is not None and unit != "chars":  # token counts are exact
        assert all(s.n_tokens == fn(text[s.start : s.end]) for s in spans)
    lines = reference_lines(text)
    path_at = {i: path for s, e, _, path in lines for i in range(s, e)}
    headers = [strip_span(text, s, e) for s, e, kind, _ in lines if kind == "header"]
    starts, ends = {s for s, _ in headers}, {e for _, e in headers}
    has_text = first_content(lines, text, 0, len(text)) is not None
    measure = (lambda a, b: b - a) if size is None else (lambda a, b: fn(text[a:b]))
    for i, span in enumerate(spans):
        at = first_content(lines, text, span.start, span.end)
        if at is not None:  # a chunk's path is that of its first text
            assert tuple(h.text for h in span.headers) == path_at[at], (i, span)
            continue
        if not has_text or span.start not in starts or span.end not in ends:
            continue  # a document of headers only; a piece of a header cut as any text
        # whole header lines alone: allowed only where nothing fits beside them
        assert size is not None, (i, span)
        run_start, run_end = header_run(lines, text, span.start)
        if measure(run_start, run_end) > size:
            continue  # header lines over the cap: cut as any text, the last piece joins
        after = first_content(lines, text, span.end, len(text))
        if after is None:  # trailing: they did not fit in the last chunk with text
            before = [
                s for s in spans[:i] if first_content(lines, text, s.start, s.end) is not None
            ]
            assert measure(before[-1].start, run_end) > size, (i, span)
            continue
        word = re.compile(r"[ \t\r\n]").search(text, after)
        stop = word.start() if word else len(text)
        assert measure(span.start, stop) > size, (i, span)  # not even a first word fits
