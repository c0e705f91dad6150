"""The chunk visualisation page (`docflow split --html`): segments, escaping, the chunk list."""

from __future__ import annotations

import json
import os
from html.parser import HTMLParser
from pathlib import Path

import pytest

from flows.cli import main
from tasks.common.config import resolve_params
from tasks.common.documents import Chunk, Document, Header, make_chunk_id
from tasks.split.factory import split_file
from tasks.split.visualize import COLOURS, render_chunks_html, segments
from tests.conftest import SAMPLE


def chunk(doc: Document, index: int, start: int, end: int, *headers: Header) -> Chunk:
    text = doc.page_content[start:end]
    return Chunk(
        chunk_id=make_chunk_id(doc.doc_id, "test", start, text),
        doc_id=doc.doc_id,
        source=doc.source,
        chunk_index=index,
        start_index=start,
        end_index=end,
        text=text,
        n_chars=len(text),
        n_tokens=len(text.split()),
        headers=headers,
    )


class Page(HTMLParser):
    """Collect what the tests check: each document's text pieces and the chunk rows."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.texts: list[list[tuple[str, dict[str, str]]]] = []  # per document: (text, span)
        self.rows: list[str] = []
        self._in_text = 0
        self._span: dict[str, str] = {}
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "div" and a.get("class") == "text":
            self._in_text = 1
            self.texts.append([])
        elif tag == "tr" and "chunk" in a.get("class", "").split():
            self.rows.append(a["id"])
        elif self._in_text and tag == "span":
            self._span = a

    def handle_endtag(self, tag: str) -> None:
        if tag == "div":
            self._in_text = 0
        elif tag == "span":
            self._span = {}

    def handle_data(self, data: str) -> None:
        if self._in_text:
            self.texts[-1].append((data, self._span))

    def shown_text(self, document: int) -> str:
        return "".join(t for t, _ in self.texts[document])

    def spans(self, document: int) -> list[tuple[str, dict[str, str]]]:
        return [(t, s) for t, s in self.texts[document] if s]


NASTY = Document(
    '# Intro <script>alert("x")</script>\n\nTom & Jerry\'s "quotes" <b>bold</b>\n\n'
    "Second paragraph ends here.",
    {"source": "nasty.md"},
)


def nasty_chunks() -> list[Chunk]:
    n = len(NASTY.page_content)  # 100: the paragraphs are [0:35], [37:71] and [73:100]
    h = Header(1, 'Intro <script>alert("x")</script>')
    return [chunk(NASTY, 0, 0, 50, h), chunk(NASTY, 1, 37, 71, h), chunk(NASTY, 2, 73, n, h)]


def test_segments_cut_exactly_at_every_chunk_start_and_end() -> None:
    chunks = nasty_chunks()
    cut = segments(len(NASTY.page_content), chunks)
    bounds = {s.start for s in cut} | {s.end for s in cut}
    assert bounds == {0, len(NASTY.page_content)} | {
        b for c in chunks for b in (c.start_index, c.end_index)
    }
    assert [(s.start, s.end) for s in cut] == [(0, 37), (37, 50), (50, 71), (71, 73), (73, 100)]
    assert [[c.chunk_index for c in s.covering] for s in cut] == [[0], [0, 1], [1], [], [2]]
    assert all(a.end == b.start for a, b in zip(cut, cut[1:], strict=False))


def test_page_shows_the_text_once_escaped_and_exact() -> None:
    html = render_chunks_html([NASTY], nasty_chunks(), "nasty <file>.md", {"splitter": "auto"})
    assert "<script>" not in html and "nasty &lt;file&gt;.md" in html
    page = Page(html)
    assert page.shown_text(0) == NASTY.page_content  # every character once, in order
    texts = [t for t, _ in page.spans(0)]
    assert texts == [NASTY.page_content[a:b] for a, b in [(0, 37), (37, 50), (50, 71), (73, 100)]]


def test_overlap_segments_are_marked_and_hover_names_every_covering_chunk() -> None:
    page = Page(render_chunks_html([NASTY], nasty_chunks(), "nasty.md"))
    classes = [set(s["class"].split()) for _, s in page.spans(0)]
    assert [c & {"even", "odd", "overlap"} for c in classes] == [
        {"even"},
        {"overlap"},
        {"odd"},
        {"even"},
    ]
    assert "start" in classes[0] and "start" in classes[1] and "start" not in classes[2]
    _, overlap = page.spans(0)[1]
    assert overlap["data-chunks"] == "0 1"
    lines = overlap["title"].splitlines()
    assert lines[0].startswith("chunk 0 [0:50] 50 chars, ")
    assert lines[1].startswith("chunk 1 [37:71] 34 chars, ")
    assert all(line.endswith('| h1 Intro <script>alert("x")</script>') for line in lines)
    assert f"background: {COLOURS['overlap']}" in render_chunks_html([NASTY], [], "x")


def test_every_chunk_is_listed_once_with_its_span() -> None:
    chunks = nasty_chunks()
    html = render_chunks_html([NASTY], chunks, "nasty.md")
    assert Page(html).rows == ["chunk-0-0", "chunk-0-1", "chunk-0-2"]
    for c in chunks:
        assert f'<a id="start-0-{c.chunk_index}"></a>' in html
        assert f">{c.start_index}:{c.end_index}<" in html


def test_every_document_of_a_file_is_shown() -> None:
    rows = [Document(f"row {i}: a & b", {"source": "t.csv", "row": i}) for i in range(3)]
    chunks = [chunk(d, 0, 0, len(d.page_content)) for d in rows]
    html = render_chunks_html(rows, reversed(chunks), "t.csv")
    page = Page(html)
    assert [page.shown_text(i) for i in range(3)] == [d.page_content for d in rows]
    assert page.rows == ["chunk-0-0", "chunk-1-0", "chunk-2-0"]
    assert "Document 2: t.csv, row 2" in html and "3 document(s), 3 chunks" in html


def test_a_chunk_of_another_document_is_refused() -> None:
    other = Document("elsewhere", {"source": "other.md"})
    with pytest.raises(ValueError, match="belongs to no given document"):
        render_chunks_html([NASTY], [chunk(other, 0, 0, 4)], "x")


def test_real_split_with_overlap_round_trips(tmp_path: Path) -> None:
    params = resolve_params(
        None, {"chunk_size": 200, "chunk_overlap": 60, "length_unit": "chars"}, environ={}
    )
    rows, chunks = split_file(SAMPLE / "queen-rearing.md", params)
    documents = [r.document for r in rows if r.document is not None]
    page = Page(render_chunks_html(documents, chunks, "queen-rearing.md"))
    assert page.shown_text(0) == documents[0].page_content
    assert len(page.rows) == len(chunks)
    assert any("overlap" in s["class"] for _, s in page.spans(0))


def test_cli_writes_the_page_beside_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "split.html"
    code = main(["split", str(SAMPLE / "bee-diseases.md"), "--html", str(out), "--json"])
    stdout, stderr = capsys.readouterr()
    assert code == 0
    payload = json.loads(stdout)  # still exactly one JSON object on stdout
    assert f"wrote {out}" in stderr
    assert len(Page(out.read_text(encoding="utf-8")).rows) == len(payload["chunks"])


def test_cli_splits_a_file_whose_name_is_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its name used to fail the command (the HTML title, the JSON): it is shown escaped."""
    path = Path(os.fsdecode(bytes(tmp_path) + b"/r\xe9colte.md"))
    try:
        path.write_text("# Harvest\n\nTake the capped frames.\n", encoding="utf-8")
    except (OSError, UnicodeError) as exc:  # a file system that only takes UTF-8 names
        pytest.skip(f"cannot create a file whose name is not UTF-8 here: {exc}")
    out = tmp_path / "split.html"
    assert main(["split", str(path), "--html", str(out), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["file"] == f"{tmp_path}/r\\xe9colte.md"
    assert payload["chunks"][0]["text"].startswith("# Harvest")
    assert f"<title>{tmp_path}/r\\xe9colte.md</title>" in out.read_text(encoding="utf-8")
