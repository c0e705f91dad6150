"""MarkdownHeaderTextSplitter: CommonMark headers, exact sections, header paths, size cap."""

from __future__ import annotations

import pytest

from tasks.common.documents import Document, Header
from tasks.split import MarkdownHeaderTextSplitter
from tasks.split.invariants import check_spans
from tasks.split.markdown import FALLBACK_OVERLAP, FALLBACK_SIZE
from tasks.split.units import tiktoken_unit

HEADERS = [("#", "H1"), ("##", "H2"), ("###", "H3")]


def sections(text: str, **kwargs: object) -> list[tuple[str, dict[str, str]]]:
    docs = MarkdownHeaderTextSplitter(HEADERS, **kwargs).split_text(text)  # type: ignore[arg-type]
    return [(d.page_content, dict(d.metadata)) for d in docs]


def test_sections_are_exact_slices_with_the_header_path() -> None:
    text = "# A\n\nintro  line\n\n  indented\n\n## B\ntext b\n### C\nc\n# D\nd\n"
    assert sections(text) == [
        ("intro  line\n\n  indented", {"H1": "A"}),
        ("text b", {"H1": "A", "H2": "B"}),
        ("c", {"H1": "A", "H2": "B", "H3": "C"}),
        ("d", {"H1": "D"}),
    ]
    spans = MarkdownHeaderTextSplitter(HEADERS).split_spans(text)
    assert spans[2].headers == (Header(1, "A"), Header(2, "B"), Header(3, "C"))
    assert [text[s.start : s.end] for s in spans] == [c for c, _ in sections(text)]


def test_keeping_headers_covers_the_whole_text() -> None:
    text = "# A\n## B\ntext\n\n## C\n\nmore\n"
    got = sections(text, strip_headers=False)
    # as LangChain: a header line alone joins the deeper section that follows it
    assert got == [
        ("# A\n## B\ntext", {"H1": "A", "H2": "B"}),
        ("## C\n\nmore", {"H1": "A", "H2": "C"}),
    ]
    spans = MarkdownHeaderTextSplitter(HEADERS, strip_headers=False).split_spans(text)
    assert not check_spans(text, spans)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Title\n=====\n\nbody\n", [("body", {"H1": "Title"})]),
        ("Sub title\n---\nbody\n", [("body", {"H2": "Sub title"})]),
        ("two line\ntitle\n===\nbody\n", [("body", {"H1": "two line title"})]),
        ("- item\n---\nbody\n", [("- item\n---\nbody", {})]),  # a list, then a rule
        ("text\n\n---\n\nbody\n", [("text\n\n---\n\nbody", {})]),  # a thematic break
    ],
    ids=["setext-1", "setext-2", "multi-line", "list-then-rule", "rule"],
)
def test_setext_headers(text: str, expected: list[tuple[str, dict[str, str]]]) -> None:
    assert sections(text) == expected


def test_front_matter_is_not_a_setext_header() -> None:
    text = "---\ntitle: Bees\ntags: [a]\n---\n\n# Bees\n\nbody\n"
    assert sections(text) == [
        ("---\ntitle: Bees\ntags: [a]\n---", {}),
        ("body", {"H1": "Bees"}),
    ]


@pytest.mark.parametrize(
    "line,title",
    [
        ("# Title #", "Title"),
        ("## Title ##   ", "Title"),
        ("# Title#", "Title#"),  # no space before the #: part of the text
        ("#\tTabbed", "Tabbed"),
        ("   # Indented three", "Indented three"),
        ("#", ""),
    ],
)
def test_atx_header_text(line: str, title: str) -> None:
    text = f"{line}\nbody\n"
    spans = MarkdownHeaderTextSplitter(HEADERS).split_spans(text)
    assert [h.text for h in spans[0].headers] == [title]


@pytest.mark.parametrize(
    "text", ["#hashtag\nbody\n", "    # four spaces\nbody\n", "####### seven\nbody\n"]
)
def test_lines_that_are_not_headers(text: str) -> None:
    assert sections(text) == [(text.strip(), {})]


def test_byte_order_mark_and_crlf() -> None:
    text = "\ufeff# Title\r\n\r\nbody line\r\n## Next\r\nmore\r\n"
    got = sections(text)
    assert got == [("body line", {"H1": "Title"}), ("more", {"H1": "Title", "H2": "Next"})]


def test_byte_order_mark_before_a_setext_title() -> None:
    # skipped for setext headers as for ATX ones: the title has no BOM
    assert sections("\ufeffSetext\n===\nbody\n") == [("body", {"H1": "Setext"})]
    assert sections("\ufeffTwo\nlines\n---\nbody\n") == [("body", {"H2": "Two lines"})]


def test_fences_close_only_with_a_matching_fence() -> None:
    text = "# A\n```python\nx = 1\n```js\n# comment\n```\n# B\nb\n"
    assert [m for _, m in sections(text)] == [{"H1": "A"}, {"H1": "B"}]
    unclosed = "# A\n~~~\n# not a header\n"
    assert [m for _, m in sections(unclosed)] == [{"H1": "A"}]


def test_custom_header_patterns() -> None:
    splitter = MarkdownHeaderTextSplitter(
        [("#", "H1"), ("**", "Bold")], custom_header_patterns={"**": 2}
    )
    docs = splitter.split_text("# A\n**Part one**\ntext\n**not** a header\n")
    assert [(d.page_content, d.metadata) for d in docs] == [
        ("text\n**not** a header", {"H1": "A", "Bold": "Part one"})
    ]


def test_return_each_line_returns_blocks_as_langchain_does() -> None:
    text = "# A\none\ntwo\n\nthree\n"
    assert sections(text, return_each_line=True) == [
        ("one\ntwo", {"H1": "A"}),
        ("three", {"H1": "A"}),
    ]


def test_size_cap_keeps_the_whole_header_path_on_every_piece() -> None:
    body = "\n\n".join(f"Paragraph {i} " + "word " * 30 for i in range(12))
    text = f"# Guide\n\n## Install\n\n{body}\n\n## Use\n\nshort\n"
    splitter = MarkdownHeaderTextSplitter(
        HEADERS, strip_headers=False, chunk_size=300, chunk_overlap=30
    )
    spans = splitter.split_spans(text)
    assert not check_spans(text, spans, 300)
    install = [s for s in spans if s.headers[-1:] == (Header(2, "Install"),)]
    assert len(install) > 5
    assert all(s.headers == (Header(1, "Guide"), Header(2, "Install")) for s in install)
    assert spans[-1].headers == (Header(1, "Guide"), Header(2, "Use"))


def test_size_cap_in_tokens_records_token_counts() -> None:
    text = "# T\n\n" + "\n\n".join(f"sentence number {i} is here." for i in range(200))
    unit = tiktoken_unit()
    splitter = MarkdownHeaderTextSplitter(HEADERS, chunk_size=64, length_function=unit)
    spans = splitter.split_spans(text)
    assert all(s.n_tokens == unit(text[s.start : s.end]) <= 64 for s in spans)


def test_headerless_documents_fall_back_to_recursive_splitting() -> None:
    text = "\n\n".join(f"plain paragraph {i} " + "text " * 40 for i in range(30))
    spans = MarkdownHeaderTextSplitter(HEADERS).split_spans(text)
    assert len(spans) > 1 and all(s.end - s.start <= FALLBACK_SIZE for s in spans)
    assert spans[0].end - spans[1].start <= FALLBACK_OVERLAP
    capped = MarkdownHeaderTextSplitter(HEADERS, chunk_size=200).split_spans(text)
    assert all(s.end - s.start <= 200 for s in capped)


def test_split_documents_merges_metadata() -> None:
    doc = Document("# A\nbody\n", {"source": "a.md"})
    out = MarkdownHeaderTextSplitter(HEADERS).split_documents([doc])
    assert out[0].metadata == {"source": "a.md", "H1": "A"}
