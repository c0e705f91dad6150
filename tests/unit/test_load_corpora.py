"""Every real file under ../shared/corpora loads or fails with a one-line reason.

Expectations come from ../shared/corpora/manifest.json (pypdf results with ``cryptography``
installed, encodings of text/non-utf8) and, for the defective files under */bad/, from the
table below. The whole tree is loaded once, through two worker processes.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tasks.common.config import LoaderOptions
from tasks.common.tables import DocumentRow
from tasks.discover.files import discover
from tasks.load import load_batch
from tasks.load.base import FILE_TYPES
from tests.conftest import CORPORA

#: Outcome of each defective non-PDF file: "loaded", or the start of its failure reason.
BAD: dict[str, str] = {
    "code/bad/huge-single-line-528KB-minified__coffeescript.js": "loaded",  # valid code
    "code/bad/zero-byte__constants.ts": "empty file: no text",
    "csv/bad/cr-only-line-endings-quoted-newline__mac_newlines.csv": "loaded",
    "csv/bad/empty-one-newline__empty.csv": "empty file: no text",
    "csv/bad/fixed-width-not-csv-odd-extension__VROUTFSJ.TXt": "loaded",  # .txt: text
    "csv/bad/non-utf8-latin1__test_latin1.csv": "loaded",  # cp1252 detected
    "csv/bad/nul-byte__null_byte.csv": "binary content in .csv: NUL bytes",
    "csv/bad/quoted-newlines-in-header__test_header_newline.csv": "loaded",
    "csv/bad/ragged-rows__bad.csv": "loaded",  # ragged rows kept and marked
    "csv/bad/utf16-be-bom__test_utf16_big.csv": "loaded",
    "csv/bad/utf16-le-bom__test_utf16_little.csv": "loaded",
    "html/bad/non-utf8-cp1252-no-charset__fake-html-cp1252.html": "loaded",
    "html/bad/utf16-le-bom__example-steelJIS-datasheet-utf-16.html": "loaded",
    "markdown/bad/zero-byte__README.md": "empty file: no text",
    "text/bad/huge-single-line-82KB-hex__jpeg.txt": "loaded",  # a hex dump is text
    "text/bad/nul-byte-after-64KiB__sherlock-nul.txt": "binary content in .txt: NUL bytes",
    "text/bad/zero-byte__vocab.txt": "empty file: no text",
}

#: Good PDFs whose only "text" is whitespace: no text layer, so they fail with that reason.
WHITESPACE_ONLY_PDFS = {"pdf/git.pdf"}  # pypdf extracts ' \n' (the manifest counts 2 chars)

#: The codec each text/non-utf8 file is in (manifest notes); detection may name a superset.
NON_UTF8 = {
    "fake-text-utf-16-be.txt": "utf-16-be",
    "fake-text-utf-16-le.txt": "utf-16-le",
    "fake-text-utf-16.txt": "utf-16",
    "fake-text-utf-32.txt": "utf-32",
    "sample-arabic-1.txt": "cp1256",
    "sample-chinese.txt": "big5",
    "sample-french-1.txt": "cp1252",
    "sample-greek.txt": "cp1253",
    "sample-hebrew-2.txt": "cp1255",
    "sample-korean.txt": "cp949",
    "sample-russian.txt": "mac_cyrillic",
    "sample-turkish.txt": "cp1254",
}


@pytest.fixture(scope="module")
def manifest() -> dict[str, dict[str, Any]]:
    path = CORPORA / "manifest.json"
    if not path.exists():
        pytest.skip(f"../shared is absent here ({path} not found); the real corpora live there")
    return {e["path"]: e for e in json.loads(path.read_text(encoding="utf-8"))}


@pytest.fixture(scope="module")
def loaded(manifest: dict[str, dict[str, Any]]) -> dict[str, list[DocumentRow]]:
    files = discover(CORPORA, ["**/*"])
    rows = load_batch(files, LoaderOptions(workers=2))
    by_source: dict[str, list[DocumentRow]] = defaultdict(list)
    for row in rows:
        by_source[row.source].append(row)
    assert set(by_source) == {f.source for f in files}  # every file has a row
    return dict(by_source)


def test_every_file_loads_or_fails_with_a_one_line_reason(
    loaded: dict[str, list[DocumentRow]],
) -> None:
    problems = []
    for source, rows in loaded.items():
        if rows[0].status == "failed":
            reason = rows[0].error or ""
            if len(rows) != 1 or not reason.strip() or "\n" in reason or len(reason) > 300:
                problems.append(f"{source}: bad failure {rows!r}")
            continue
        for row in rows:
            doc = row.document
            if row.status != "loaded" or doc is None or row.error is not None:
                problems.append(f"{source}: mixed rows")
                break
            if doc.metadata.get("file_type") not in FILE_TYPES:
                problems.append(f"{source}: file_type {doc.metadata.get('file_type')!r}")
            if doc.metadata.get("source") != source or row.pages != len(rows):
                problems.append(f"{source}: metadata {doc.metadata}")
        if not any(r.document and r.document.page_content.strip() for r in rows):
            problems.append(f"{source}: loaded but no text")
    assert not problems, "\n".join(problems)


def test_every_good_file_yields_text(loaded: dict[str, list[DocumentRow]]) -> None:
    failed = {
        source: rows[0].error
        for source, rows in loaded.items()
        if "bad" not in source.split("/") and rows[0].status == "failed"
    }
    assert failed == {
        s: "no text layer: 1 page(s) without extractable text (scanned?)"
        for s in WHITESPACE_ONLY_PDFS
    }


def test_every_bad_file_is_reported_as_expected(
    loaded: dict[str, list[DocumentRow]], manifest: dict[str, dict[str, Any]]
) -> None:
    bad = {s for s in loaded if "bad" in s.split("/")}
    assert bad == {p for p in manifest if "/bad/" in p}
    assert set(BAD) == {s for s in bad if not s.startswith("pdf/")}
    for source, expected in BAD.items():
        row = loaded[source][0]
        if expected == "loaded":
            assert row.status == "loaded", (source, row.error)
        else:
            assert row.status == "failed" and (row.error or "").startswith(expected), source


def _pdf_expectation(entry: dict[str, Any]) -> str:
    """Return "loaded", or the start of the failure reason, from the manifest's pypdf run."""
    result = entry["pypdf_crypto"]
    if result["result"] == "text":
        return "loaded"
    if result["result"] == "no-text":
        return "no text layer: "
    if (result["error"] or "").startswith(("FileNotDecryptedError", "WrongPasswordError")):
        return "encrypted PDF: password required"
    if entry["size"] == 0:
        return "empty file: no text"
    return ""  # any one-line reason (corrupt, limit reached, not a PDF...)


def test_pdfs_follow_the_manifest(
    loaded: dict[str, list[DocumentRow]], manifest: dict[str, dict[str, Any]]
) -> None:
    pdfs = {p: e for p, e in manifest.items() if p.endswith(".pdf")}
    assert len(pdfs) == 74
    for path, entry in pdfs.items():
        rows = loaded[path]
        expected = _pdf_expectation(entry)
        if path in WHITESPACE_ONLY_PDFS:
            expected = "no text layer: "
        if expected != "loaded":
            assert rows[0].status == "failed", path
            assert (rows[0].error or "").startswith(expected), (path, rows[0].error)
            continue
        assert [r.status for r in rows] == ["loaded"] * entry["pypdf_crypto"]["pages"], path
        docs = [r.document for r in rows if r.document is not None]
        assert [d.metadata["page"] for d in docs] == list(range(len(docs)))
        assert {d.metadata["total_pages"] for d in docs} == {len(docs)}
        for doc in docs:
            assert bool(doc.page_content) != bool(doc.metadata.get("no_text_layer")), path


def test_headerless_pdfs_say_so(loaded: dict[str, list[DocumentRow]]) -> None:
    for source in (
        "pdf/bad/not-a-pdf-5-bytes__bad1.pdf",
        "pdf/bad/not-a-pdf-plain-text__extend-c-api-bad.pdf",
        "pdf/bad/garbage-23-bytes-fuzzed__issue-335b.pdf",
    ):
        assert loaded[source][0].error == "not a PDF: no %PDF header"


@pytest.mark.parametrize("name", sorted(NON_UTF8))
def test_non_utf8_text_is_decoded_right(loaded: dict[str, list[DocumentRow]], name: str) -> None:
    [row] = loaded[f"text/non-utf8/{name}"]
    assert row.document is not None
    data = (CORPORA / "text" / "non-utf8" / name).read_bytes()
    assert row.document.page_content == data.decode(NON_UTF8[name]).removeprefix("\ufeff")
    assert row.document.metadata["encoding"]


def test_ragged_csv_rows_are_marked(loaded: dict[str, list[DocumentRow]]) -> None:
    rows = loaded["csv/bad/ragged-rows__bad.csv"]
    marks = [r.document.metadata.get("ragged") for r in rows if r.document]
    assert marks == ["4 fields, header has 3", "2 fields, header has 3", None]


def test_html_charset_is_checked(loaded: dict[str, list[DocumentRow]]) -> None:
    [utf16] = loaded["html/bad/utf16-le-bom__example-steelJIS-datasheet-utf-16.html"]
    [cp1252] = loaded["html/bad/non-utf8-cp1252-no-charset__fake-html-cp1252.html"]
    assert utf16.document is not None and cp1252.document is not None
    assert utf16.document.metadata["encoding"] == "utf-16-le"
    assert utf16.document.metadata["charset_mismatch"] is True  # declares utf-8
    assert cp1252.document.metadata["encoding"] == "cp1252"
    assert "À\tÁ\tÂ" in cp1252.document.page_content


def test_every_loaded_document_has_the_common_metadata(
    loaded: dict[str, list[DocumentRow]],
) -> None:
    keys = {"source", "file_path", "file_name", "file_type", "size", "mtime", "sha256"}
    for rows in loaded.values():
        for row in rows:
            if row.document is not None:
                assert keys <= set(row.document.metadata)
                assert (
                    Path(row.document.metadata["file_path"]).name
                    == (row.document.metadata["file_name"])
                )
