"""Unit tests for the PDF loader on PDFs the tests write (fpdf2) or build by hand."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from fpdf import FPDF
from fpdf.enums import EncryptionMethod

from tasks.common.config import LoaderOptions
from tasks.common.documents import Document
from tasks.common.tables import DocumentRow
from tasks.load import PdfLoader, load_file
from tasks.load.pdf import PAGE_DELIMITER
from tests.load_helpers import bomb_pdf, raw_pdf, write_file

PAGES = [
    "The lamp was lit at dusk and trimmed at midnight.",
    "",  # a page with no text layer
    "Fog rolled in after two; the horn sounded every thirty seconds.",
]


def make_pdf(
    pages: list[str] = PAGES,
    encrypt: dict[str, Any] | None = None,
    labels: bool = False,
) -> bytes:
    pdf = FPDF()
    pdf.set_title("Lighthouse Log")
    pdf.set_author("Keeper Jones")
    pdf.set_creation_date(dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC))
    pdf.set_font("helvetica", size=12)
    for i, text in enumerate(pages):
        pdf.add_page()
        if labels and i < 2:  # roman front matter, then 1, 2, ...
            pdf.set_page_label(label_style="r" if i == 0 else "D", label_start=1)
        if text:
            pdf.multi_cell(0, 10, text=text)
    if encrypt:
        pdf.set_encryption(**encrypt)
    return bytes(pdf.output())


def load(tmp_path: Path, data: bytes, name: str = "log.pdf", **options: Any) -> list[DocumentRow]:
    return load_file(write_file(tmp_path, name, data), LoaderOptions(**options))


def docs(rows: list[DocumentRow]) -> list[Document]:
    assert all(r.status == "loaded" for r in rows), [r.error for r in rows]
    return [r.document for r in rows if r.document is not None]


def test_one_document_per_page_with_page_metadata(tmp_path: Path) -> None:
    rows = load(tmp_path, make_pdf())
    pages = docs(rows)
    assert [r.pages for r in rows] == [3, 3, 3]
    assert [d.metadata["page"] for d in pages] == [0, 1, 2]  # 0-based, as LangChain
    assert [d.metadata["page_label"] for d in pages] == ["1", "2", "3"]
    assert {d.metadata["total_pages"] for d in pages} == {3}
    assert pages[0].page_content.startswith("The lamp was lit at dusk")
    assert "horn sounded" in pages[2].page_content
    meta = pages[0].metadata
    assert (meta["title"], meta["author"]) == ("Lighthouse Log", "Keeper Jones")
    assert meta["creation_date"] == "2024-05-06T07:08:09+00:00"
    assert (meta["file_type"], meta["source"]) == ("pdf", "log.pdf")
    assert len({d.metadata["page"] for d in pages}) == 3  # distinct doc ids per page
    assert len({Document(d.page_content, d.metadata).doc_id for d in pages}) == 3


def test_page_without_text_layer_is_recorded_not_chunked(tmp_path: Path) -> None:
    blank = docs(load(tmp_path, make_pdf()))[1]
    assert blank.page_content == ""  # gives no chunk
    assert blank.metadata["no_text_layer"] is True
    assert blank.metadata["page"] == 1


def test_file_mode_gives_one_document(tmp_path: Path) -> None:
    [doc] = docs(load(tmp_path, make_pdf(), pdf_mode="file"))
    first, blank, third = doc.page_content.split(PAGE_DELIMITER)
    assert first.startswith("The lamp") and blank == "" and "Fog rolled" in third
    assert doc.metadata["total_pages"] == 3
    assert doc.metadata["pages_without_text"] == [1]
    assert "page" not in doc.metadata


def test_page_labels_come_from_the_pdf(tmp_path: Path) -> None:
    pages = docs(load(tmp_path, make_pdf(labels=True)))
    assert [d.metadata["page_label"] for d in pages] == ["i", "1", "2"]


@pytest.mark.parametrize(
    "method", [EncryptionMethod.RC4, EncryptionMethod.AES_128, EncryptionMethod.AES_256]
)
def test_encrypted_with_user_password_fails_clearly(tmp_path: Path, method: Any) -> None:
    data = make_pdf(
        encrypt={"owner_password": "own", "user_password": "usr", "encryption_method": method}
    )
    [row] = load(tmp_path, data)
    assert (row.status, row.error, row.loader) == (
        "failed",
        "encrypted PDF: password required",
        "pdf",
    )


@pytest.mark.parametrize(
    "method", [EncryptionMethod.RC4, EncryptionMethod.AES_128, EncryptionMethod.AES_256]
)
def test_encrypted_with_empty_user_password_opens(tmp_path: Path, method: Any) -> None:
    data = make_pdf(
        encrypt={"owner_password": "own", "user_password": "", "encryption_method": method}
    )
    pages = docs(load(tmp_path, data))
    assert pages[0].page_content.startswith("The lamp was lit")


def test_no_text_anywhere_fails_with_reason(tmp_path: Path) -> None:
    [row] = load(tmp_path, make_pdf(["", ""]))
    assert row.error == "no text layer: 2 page(s) without extractable text (scanned?)"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(b"", "empty file: no text", id="zero-bytes"),
        pytest.param(b"oops\n", "not a PDF: no %PDF header", id="five-bytes"),
        pytest.param(b"<html>not a pdf</html>" * 10, "not a PDF: no %PDF header", id="html"),
        pytest.param(b"%PDF-1.4\n1 0 obj\n<< /Type", "corrupt PDF: ", id="truncated-after-header"),
        pytest.param(b"%PDF-1.7\n" + b"\x00" * 3000, "corrupt PDF: ", id="nul-padding"),
    ],
)
def test_broken_files_fail_with_one_line_reason(tmp_path: Path, data: bytes, reason: str) -> None:
    [row] = load(tmp_path, data)
    assert row.status == "failed" and row.error is not None
    assert row.error.startswith(reason), row.error
    assert "\n" not in row.error and len(row.error) <= 300


def test_truncated_real_pdf_fails_or_loads_but_never_raises(tmp_path: Path) -> None:
    data = make_pdf()
    for cut in (len(data) // 4, len(data) // 2, len(data) - 40):
        rows = load(tmp_path, data[:cut], name=f"cut{cut}.pdf")
        assert rows and all(r.status in ("loaded", "failed") for r in rows)
        assert all("\n" not in (r.error or "") for r in rows)


def test_junk_before_header_is_tolerated(tmp_path: Path) -> None:
    pages = docs(load(tmp_path, b"leading junk\n" + make_pdf()))
    assert pages[0].page_content.startswith("The lamp")


def test_decompression_bomb_fails_fast_within_limits(tmp_path: Path) -> None:
    [row] = load(tmp_path, bomb_pdf(100), name="bomb.pdf", workers=0)
    assert row.status == "failed"
    assert row.error is not None and row.error.startswith("PDF limit reached: ")


def test_hand_made_pdf_loads(tmp_path: Path) -> None:
    data = raw_pdf(b"BT /F1 12 Tf 72 720 Td (Hello lighthouse) Tj ET", compressed=False)
    [doc] = docs(load(tmp_path, data))
    assert doc.page_content == "Hello lighthouse"
    assert "title" not in doc.metadata  # no info dictionary: no empty keys


def test_loader_is_lazy_and_configurable() -> None:
    loader = PdfLoader().with_options(LoaderOptions(pdf_mode="file"))
    assert isinstance(loader, PdfLoader) and loader.options.pdf_mode == "file"
    assert PdfLoader().options.pdf_mode == "page"
