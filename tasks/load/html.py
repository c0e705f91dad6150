"""HTML loader: clean text with headings kept, title, description, charset checked.

:func:`html_to_text` is the contract the HTML splitter builds on:

- ``text``: the visible text of the body. Scripts, styles and page chrome (``nav``, a
  page-level ``header``/``footer``, buttons, forms' option lists, hidden elements) are
  dropped; ``<main>``, ``<article>``, ``<section>``, ``<aside>`` and their own
  ``header``/``footer`` are kept. Block elements end lines (paragraphs, lists, tables are
  separated by a blank line; list items and table rows by a newline; table cells by
  ``" | "``); inline whitespace collapses to one space; ``<pre>``/``<textarea>`` keep theirs.
- Each heading ``h1``–``h6`` is a line of its own, surrounded by blank lines.
  ``headings[i] == {"level", "text", "start", "end"}`` with
  ``text[start:end] == headings[i]["text"]`` (the heading line, whitespace collapsed).
- ``title``: the ``<title>`` (else the first ``h1``); ``description``: the meta description
  (else ``og:description``); both "" when absent.

The loader decodes the bytes first: a BOM wins, then the declared charset (``<meta
charset>``, ``http-equiv`` or an XML declaration) when it decodes the bytes (a single-byte
charset declared on valid multi-byte UTF-8 loses to UTF-8, as in browsers), else UTF-8 or
detection (undeclared legacy bytes fall back to windows-1252, as browsers do). NUL or
control-character bytes fail the page as binary, declared or not. Metadata
records ``encoding``, ``declared_charset`` and ``charset_mismatch`` when they disagree.
"""

from __future__ import annotations

import codecs
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tasks.common.documents import Document, FileRef
from tasks.common.errors import LoadError
from tasks.load.base import BaseLoader
from tasks.load.encoding import BOMS, UTF8_MULTIBYTE, Decoded, check_controls, decode_text

log = logging.getLogger(__name__)

DROPPED = (
    "script",
    "style",
    "noscript",
    "template",
    "svg",
    "math",
    "canvas",
    "iframe",
    "object",
    "embed",
    "nav",
    "button",
    "select",
    "datalist",
    "dialog",
    "head",
)
"""Elements whose content is never text of the page."""

SECTIONING = frozenset({"article", "aside", "main", "nav", "section"})
"""A ``header``/``footer`` inside one of these belongs to the content, not the page chrome."""

PARAGRAPH_BLOCKS = frozenset(
    {
        "p",
        "pre",
        "textarea",
        "blockquote",
        "table",
        "ul",
        "ol",
        "dl",
        "figure",
        "section",
        "article",
        "main",
        "aside",
        "header",
        "footer",
        "form",
        "fieldset",
        "address",
        "details",
        "hr",
        "listing",
        "xmp",
        "plaintext",
    }
)
"""Block elements separated from their neighbours by a blank line."""

LINE_BLOCKS = frozenset(
    {
        "div",
        "li",
        "tr",
        "dt",
        "dd",
        "caption",
        "figcaption",
        "summary",
        "legend",
        "center",
        "label",
        "option",
        "body",
        "html",
    }
)
"""Block elements that end a line."""

PREFORMATTED = frozenset({"pre", "textarea", "listing", "xmp", "plaintext"})
"""Elements whose whitespace is kept as it is."""

HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}

CELL_SEPARATOR = " | "

PRESCAN_BYTES = 4096
"""The declared charset is looked for in this many leading bytes."""

_XML_DECL = re.compile(r"\A\s*<\?xml[^>]*\?>")
_DECLARED = re.compile(
    rb"<meta[^>]+?charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]+)"
    rb"|<\?xml[^>]+encoding\s*=\s*[\"']([A-Za-z0-9_.:-]+)",
    re.I,
)
_LEGACY_LABELS = {"iso-8859-1": "cp1252", "latin1": "cp1252", "ascii": "cp1252"}
"""WHATWG: these labels mean windows-1252."""


@dataclass(frozen=True, slots=True)
class HtmlText:
    """The text of an HTML page and what the HTML splitter needs from its markup."""

    text: str
    headings: list[dict[str, Any]] = field(default_factory=list)
    title: str = ""
    description: str = ""


def _norm(text: str) -> str:
    return " ".join(text.split())


def _in_svg(el: Any) -> bool:
    return any(a.tag == "svg" for a in el.iterancestors())


class _Builder:
    """Accumulate text with lazy line breaks, so offsets are final when written."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.pending = 0  # newlines owed before the next text (at most 2)
        self.space = False  # a collapsed space owed before the next word
        self.sep = ""  # a cell separator owed before the next text
        self.line_has_text = False

    def write(self, s: str) -> None:
        self.parts.append(s)
        self.length += len(s)

    def brk(self, n: int) -> None:
        if self.length:
            self.pending = max(self.pending, n)

    def line_break(self) -> None:
        if self.length:
            self.pending = min(2, self.pending + 1)

    def _flush(self) -> None:
        if self.pending and self.length:
            last = self.parts[-1]
            owed = self.pending - min(len(last) - len(last.rstrip("\n")), self.pending)
            self.write("\n" * owed)
            self.line_has_text = False
        elif self.line_has_text and self.sep:
            self.write(self.sep)
        elif self.line_has_text and self.space:
            self.write(" ")
        self.pending, self.space, self.sep = 0, False, ""

    def inline(self, text: str) -> None:
        words = text.split()
        if not words:
            self.space = self.space or bool(text)
            return
        if text[0].isspace():
            self.space = True
        self._flush()
        self.write(" ".join(words))
        self.line_has_text = True
        self.space = text[-1].isspace()

    def raw(self, text: str) -> None:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        if not text:
            return
        self._flush()
        self.write(text)
        self.line_has_text = not text.endswith("\n")

    def heading(self, level: int, text: str) -> dict[str, Any]:
        self.brk(2)
        self._flush()
        start = self.length
        self.write(text)
        self.line_has_text = True
        self.brk(2)
        return {"level": level, "text": text, "start": start, "end": self.length}


def _drop_chrome(body: Any) -> None:
    """Remove scripts, styles, navigation and page-level header/footer, keeping tails."""
    from lxml import etree

    etree.strip_elements(body, etree.Comment, etree.ProcessingInstruction, with_tail=False)
    etree.strip_elements(body, *DROPPED, with_tail=False)
    for el in list(body.iter()):
        tag = el.tag if isinstance(el.tag, str) else ""
        hidden = el.get("hidden") is not None or el.get("aria-hidden") == "true"
        chrome = tag in ("header", "footer") and not any(
            a.tag in SECTIONING for a in el.iterancestors()
        )
        if (hidden or chrome or el.get("role") == "navigation") and el.getparent() is not None:
            el.drop_tree()


def _walk(body: Any, out: _Builder, headings: list[dict[str, Any]]) -> None:
    from lxml import etree

    pre = 0
    walker = etree.iterwalk(body, events=("start", "end"))
    for event, el in walker:
        tag = el.tag if isinstance(el.tag, str) else ""
        if event == "start":
            if tag in HEADINGS:
                walker.skip_subtree()
                text = _norm(el.text_content())
                if text:
                    headings.append(out.heading(HEADINGS[tag], text))
                continue
            if tag in PREFORMATTED:
                pre += 1
            if tag in PARAGRAPH_BLOCKS:
                out.brk(2)
            elif tag in LINE_BLOCKS:
                out.brk(1)
            elif tag == "br":
                out.line_break()
            elif tag in ("td", "th") and out.line_has_text:
                out.sep = CELL_SEPARATOR
            if el.text:
                text = el.text.removeprefix("\n") if tag in PREFORMATTED else el.text
                out.raw(text) if pre else out.inline(text)
        else:
            if tag in PREFORMATTED:
                pre -= 1
            if tag in PARAGRAPH_BLOCKS or tag in HEADINGS:
                out.brk(2)
            elif tag in LINE_BLOCKS:
                out.brk(1)
            if el.tail and el is not body:
                out.raw(el.tail) if pre else out.inline(el.tail)


def _parser() -> Any:
    """Return an HTML parser without libxml2's text-size caps.

    The input is bounded by the loader's file-size limit, and the tree walk is iterative.
    """
    from lxml import html as lxml_html

    return lxml_html.HTMLParser(huge_tree=True)


def html_to_text(html: str) -> HtmlText:
    """Return the clean text, headings (with exact offsets), title and description of a page.

    See the module docstring for the rules. Never raises on bad markup: a page with no
    parseable content gives empty text.
    """
    from lxml import etree
    from lxml import html as lxml_html

    markup = _XML_DECL.sub("", html.replace("\x00", ""), count=1)
    if not markup.strip():
        return HtmlText("")
    try:
        root = lxml_html.document_fromstring(markup, parser=_parser())
    except (etree.ParserError, ValueError) as exc:
        log.debug("unparseable HTML: %s", exc)
        return HtmlText("")
    title = next((_norm(t.text_content()) for t in root.iter("title") if not _in_svg(t)), "")
    description = ""
    for meta in root.iter("meta"):
        key = (meta.get("name") or meta.get("property") or "").lower()
        if key in ("description", "og:description") and meta.get("content"):
            description = _norm(meta.get("content", ""))
            if key == "description":
                break
    body = root.find("body")
    body = body if body is not None else root
    _drop_chrome(body)
    out = _Builder()
    headings: list[dict[str, Any]] = []
    _walk(body, out, headings)
    if not title:
        title = next((h["text"] for h in headings if h["level"] == 1), "")
    return HtmlText("".join(out.parts), headings, title, description)


def _codec(label: str) -> str | None:
    """Return the Python codec for a charset label (WHATWG's latin-1 is cp1252), or None."""
    label = label.strip().lower()
    try:
        name = codecs.lookup(_LEGACY_LABELS.get(label, label)).name
    except LookupError:
        return None
    return "cp1252" if name in ("latin-1", "iso8859-1", "ascii") else name


def _utf8_despite_declaration(data: bytes, codec: str) -> bool:
    """Return whether bytes declared in a single-byte ``codec`` are really UTF-8.

    Valid UTF-8 with multi-byte sequences is next to impossible in legacy text ("Ã¼" would
    have to follow every lead byte), so such a page is UTF-8 whatever it declares, as
    browsers' sniffing decides for these pages.
    """
    from charset_normalizer.utils import is_multi_byte_encoding

    if is_multi_byte_encoding(codec) or not UTF8_MULTIBYTE.search(data):
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def decode_html(data: bytes, extension: str) -> tuple[Decoded, str | None]:
    """Decode an HTML file: BOM, then the declared charset if it fits, then detection.

    A declared single-byte charset (``iso-8859-1``, ``windows-1252``...) on bytes that are
    valid UTF-8 with multi-byte sequences loses to UTF-8 (metadata: ``charset_mismatch``).
    NUL bytes not of UTF-16/32 text mean binary content wherever they are, declared or not.

    Returns:
        The decoded text and the declared charset label (None when undeclared).

    """
    match = _DECLARED.search(data[:PRESCAN_BYTES])
    wide = any(data.startswith(bom) for bom, _ in BOMS) or b"\0" in data[:PRESCAN_BYTES]
    if wide:  # BOM or UTF-16/32: the declaration is in the decoded text
        decoded = decode_text(data, extension)
        found = _DECLARED.search(decoded.text[:PRESCAN_BYTES].encode("ascii", "replace"))
        match = found
    label = (match.group(1) or match.group(2)).decode("ascii") if match else None
    if wide:
        return decoded, label
    codec = _codec(label) if label else None
    if codec and not codec.startswith(("utf-16", "utf-32")) and b"\0" not in data:
        if _utf8_despite_declaration(data, codec):
            log.debug("declared charset %s on UTF-8 bytes: decoding as UTF-8", label)
            decoded = Decoded(data.decode("utf-8"), "utf-8")
            check_controls(decoded.text, extension)
            return decoded, label
        try:
            decoded = Decoded(data.decode(codec), codec)
        except UnicodeDecodeError:
            log.debug("declared charset %s does not decode the bytes; detecting", label)
        else:
            check_controls(decoded.text, extension)
            return decoded, label
    return decode_text(data, extension), label


class HtmlLoader(BaseLoader):
    """Load an HTML page as one Document with ``title``, ``description``, ``headings``."""

    name = "html"
    file_type = "html"

    def load(self, file: FileRef) -> Iterator[Document]:
        """Yield the page's clean text; a page without visible text is a LoadError."""
        data = self.read(file)
        if self.options.encoding is not None:
            decoded, label = decode_text(data, file.extension, self.options.encoding), None
        else:
            decoded, label = decode_html(data, file.extension)
        page = html_to_text(decoded.text)
        if not page.text.strip():
            raise LoadError("empty document: no visible text in the HTML")
        meta = self.metadata(file, decoded)
        if label is not None:
            meta["declared_charset"] = label
            if _codec(label) != _codec(decoded.encoding):
                meta["charset_mismatch"] = True
        meta.update(title=page.title, description=page.description, headings=page.headings)
        yield Document(page.text, meta)
