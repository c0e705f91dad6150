"""Unit tests for html_to_text (the HTML splitter's contract) and the HTML loader."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from tasks.load import HtmlText, html_to_text, load_file
from tests.conftest import corpus_files
from tests.load_helpers import ref_for, write_file

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>  Lighthouses   of Europe </title>
  <meta name="Description" content="A short  guide to lights.">
  <style>body { color: red }</style>
  <script>var tracking = "do not index";</script>
</head>
<body>
  <header class="site"><a href="/">Home</a> <a href="/about">About us</a></header>
  <nav><ul><li>Menu one</li><li>Menu two</li></ul></nav>
  <main>
    <article>
      <header><h1>The  Fastnet <small>Rock</small></h1></header>
      <p>The <b>Fastnet</b> light stands
         off the coast of <a href="#">Ireland</a>.</p>
      <h2>History</h2>
      <p>First lit in 1854.<br>Rebuilt in 1904.</p>
      <ul><li>granite</li><li>cast iron</li></ul>
      <h3></h3>
      <pre>
  tower:
    height: 54 m</pre>
      <table><tr><th>Year</th><th>Event</th></tr><tr><td>1854</td><td>first light</td></tr></table>
      <div hidden>secret draft</div>
      <button>Share</button>
      <noscript>enable JS</noscript>
      <h2>Keepers &amp; life</h2>
      <p>Keepers served four weeks on the rock.</p>
      <footer>Article footer: sources</footer>
    </article>
  </main>
  <footer class="site">Copyright 2024 · Privacy</footer>
  <script>trackAgain()</script>
</body>
</html>
"""


@pytest.fixture(scope="module")
def page() -> HtmlText:
    return html_to_text(PAGE)


def test_chrome_scripts_and_styles_are_dropped(page: HtmlText) -> None:
    for gone in (
        "tracking",
        "color: red",
        "Home",
        "About us",
        "Menu one",
        "Copyright",
        "secret draft",
        "Share",
        "enable JS",
        "trackAgain",
    ):
        assert gone not in page.text, gone


def test_main_article_and_their_header_footer_are_kept(page: HtmlText) -> None:
    assert "The Fastnet light stands off the coast of Ireland." in page.text
    assert "Keepers served four weeks on the rock." in page.text
    assert "Article footer: sources" in page.text


def test_block_structure_is_kept_as_newlines(page: HtmlText) -> None:
    assert "First lit in 1854.\nRebuilt in 1904." in page.text
    assert "granite\ncast iron" in page.text
    assert "  tower:\n    height: 54 m" in page.text  # pre keeps its whitespace
    assert "Year | Event\n1854 | first light" in page.text
    assert "\n\n\n" not in page.text
    assert page.text == page.text.strip()


def test_headings_are_lines_with_exact_offsets(page: HtmlText) -> None:
    assert [(h["level"], h["text"]) for h in page.headings] == [
        (1, "The Fastnet Rock"),
        (2, "History"),
        (2, "Keepers & life"),
    ]
    for h in page.headings:
        assert page.text[h["start"] : h["end"]] == h["text"]
        before, after = page.text[: h["start"]], page.text[h["end"] :]
        assert before == "" or before.endswith("\n")
        assert after == "" or after.startswith("\n")
    assert page.text.startswith("The Fastnet Rock\n\nThe Fastnet light")


def test_title_and_description(page: HtmlText) -> None:
    assert page.title == "Lighthouses of Europe"
    assert page.description == "A short guide to lights."


def test_title_falls_back_to_first_h1_and_og_description() -> None:
    page = html_to_text(
        '<meta property="og:description" content="og text"><h2>b</h2><h1>Main</h1><p>x</p>'
    )
    assert (page.title, page.description) == ("Main", "og text")


@pytest.mark.parametrize(
    "markup",
    [
        "",
        "   ",
        "<html></html>",
        "<script>only()</script>",
        "<?xml version='1.0' encoding='utf-8'?>",
        "\x00\x00",
    ],
)
def test_empty_or_odd_markup_gives_empty_text(markup: str) -> None:
    assert html_to_text(markup).text.strip() == ""


def test_fragments_comments_and_xml_declarations() -> None:
    page = html_to_text(
        "<?xml version='1.0' encoding='utf-8'?><p>a<!-- hidden -->b</p><p>c &lt;d&gt;</p>"
    )
    assert page.text == "ab\n\nc <d>"


def test_deeply_nested_markup_does_not_recurse() -> None:
    depth = 1500  # beyond Python's recursion limit; libxml2 itself stops near 2000
    page = html_to_text("<div>" * depth + "deep text" + "</div>" * depth)
    assert page.text == "deep text"


def write_html(tmp_path: Path, name: str, data: bytes) -> list:  # type: ignore[type-arg]
    return load_file(write_file(tmp_path, name, data))


def test_loader_metadata(tmp_path: Path) -> None:
    [row] = write_html(tmp_path, "fastnet.html", PAGE.encode())
    assert row.status == "loaded" and row.document is not None
    meta = row.document.metadata
    assert (meta["file_type"], meta["title"], meta["encoding"]) == (
        "html",
        "Lighthouses of Europe",
        "utf-8",
    )
    assert meta["description"] == "A short guide to lights."
    assert meta["headings"] == html_to_text(PAGE).headings
    assert meta["declared_charset"] == "utf-8" and "charset_mismatch" not in meta


def test_declared_charset_is_used(tmp_path: Path) -> None:
    html = '<meta charset="windows-1251"><p>Маяк на скале</p>'
    [row] = write_html(tmp_path, "ru.html", html.encode("cp1251"))
    assert row.document is not None
    assert row.document.page_content == "Маяк на скале"
    assert row.document.metadata["encoding"] == "cp1251"


def test_declared_charset_that_does_not_fit_is_reported(tmp_path: Path) -> None:
    html = '<meta http-equiv="Content-Type" content="text/html; charset=utf-8"><p>Café crème</p>'
    [row] = write_html(tmp_path, "lie.html", html.encode("cp1252"))
    assert row.document is not None
    meta = row.document.metadata
    assert row.document.page_content == "Café crème"
    assert (meta["declared_charset"], meta["encoding"], meta["charset_mismatch"]) == (
        "utf-8",
        "cp1252",
        True,
    )


def test_latin1_label_means_windows_1252(tmp_path: Path) -> None:
    html = '<meta charset="iso-8859-1"><p>“quoted” – dash</p>'
    [row] = write_html(tmp_path, "w.html", html.encode("cp1252"))
    assert row.document is not None and row.document.page_content == "“quoted” – dash"
    assert "charset_mismatch" not in row.document.metadata


@pytest.mark.parametrize("label", ["iso-8859-1", "windows-1252", "iso-8859-15", "koi8-r"])
def test_utf8_page_declaring_a_single_byte_charset_loads_as_utf8(
    tmp_path: Path, label: str
) -> None:
    html = f'<meta charset="{label}"><p>Grüße aus Köln – schön, oder?</p>'
    [row] = write_html(tmp_path, "mislabelled.html", html.encode("utf-8"))
    assert row.document is not None
    assert row.document.page_content == "Grüße aus Köln – schön, oder?"
    meta = row.document.metadata
    assert (meta["declared_charset"], meta["encoding"], meta["charset_mismatch"]) == (
        label,
        "utf-8",
        True,
    )


def test_ascii_page_declaring_latin1_keeps_its_declaration(tmp_path: Path) -> None:
    [row] = write_html(tmp_path, "a.html", b'<meta charset="iso-8859-1"><p>plain</p>')
    assert row.document is not None
    assert row.document.metadata["encoding"] == "cp1252"
    assert "charset_mismatch" not in row.document.metadata


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "undeclared"])
def test_nul_byte_after_the_prescan_fails_declared_or_not(tmp_path: Path, declared: bool) -> None:
    head = b'<meta charset="windows-1252">' if declared else b""
    data = head + b"<p>" + b"text " * 2000 + b"a\x00b</p>"
    [row] = write_html(tmp_path, "nul.html", data)
    assert (row.status, row.error) == ("failed", "binary content in .html: NUL bytes")


def test_bom_wins_over_declaration(tmp_path: Path) -> None:
    html = '<meta charset="utf-8"><h1>UTF-16 page</h1><p>灯台</p>'
    [row] = write_html(tmp_path, "u16.html", codecs.BOM_UTF16_LE + html.encode("utf-16-le"))
    assert row.document is not None
    assert row.document.page_content == "UTF-16 page\n\n灯台"
    assert row.document.metadata["charset_mismatch"] is True


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty file: no text"),
        (b"<html><script>x()</script></html>", "empty document: no visible text in the HTML"),
        (b"<p>a\x00b</p>", "binary content in .html: NUL bytes"),
    ],
)
def test_bad_html_fails_with_reason(tmp_path: Path, data: bytes, reason: str) -> None:
    [row] = write_html(tmp_path, "bad.html", data)
    assert (row.status, row.error) == ("failed", reason)


@pytest.mark.parametrize(
    "path",
    corpus_files("html", ("*.html",)),
    ids=lambda p: p.name if isinstance(p, Path) else str(p),
)
def test_real_pages_keep_heading_offsets_exact(path: Path) -> None:
    [row] = load_file(ref_for(path))
    assert row.status == "loaded" and row.document is not None
    text, headings = row.document.page_content, row.document.metadata["headings"]
    assert all(text[h["start"] : h["end"]] == h["text"] for h in headings)
    assert text.strip()
