"""Unit tests for the CSV loader: dialects, quoted newlines, ragged rows, column choices."""

from __future__ import annotations

import codecs
import logging
from pathlib import Path
from typing import Any

import pytest

from tasks.common.config import LoaderOptions
from tasks.common.documents import Document
from tasks.common.tables import DocumentRow
from tasks.load import load_file
from tests.conftest import shared_path
from tests.load_helpers import ref_for, write_file

ROWS = [
    ["name", "light", "note"],
    ["Fastnet", "white, 5 s", 'Ireland\'s "teardrop"'],
    ["Eddystone", "white, 10 s", "fourth tower\non the reef"],
]


def write_csv(delimiter: str, quote: str = '"', newline: str = "\n") -> str:
    def cell(value: str) -> str:
        needs = any(c in value for c in (delimiter, quote, "\n"))
        value = value.replace(quote, quote * 2)
        return f"{quote}{value}{quote}" if needs else value

    return "".join(delimiter.join(cell(v) for v in row) + newline for row in ROWS)


def load(tmp_path: Path, name: str, data: bytes | str, **options: Any) -> list[DocumentRow]:
    return load_file(write_file(tmp_path, name, data), LoaderOptions(**options))


def docs(rows: list[DocumentRow]) -> list[Document]:
    assert all(r.status == "loaded" for r in rows), [r.error for r in rows]
    return [r.document for r in rows if r.document is not None]


@pytest.mark.parametrize(
    ("name", "delimiter", "newline"),
    [
        ("comma.csv", ",", "\n"),
        ("crlf.csv", ",", "\r\n"),
        ("cr-only.csv", ",", "\r"),
        ("semicolon.csv", ";", "\n"),
        ("pipe.csv", "|", "\n"),
        ("tabs.tsv", "\t", "\n"),
        ("tabs-sniffed.csv", "\t", "\n"),
    ],
)
def test_dialects_give_one_document_per_row(
    tmp_path: Path, name: str, delimiter: str, newline: str
) -> None:
    rows = load(tmp_path, name, write_csv(delimiter, newline=newline))
    fastnet, eddystone = docs(rows)
    assert fastnet.page_content == ('name: Fastnet\nlight: white, 5 s\nnote: Ireland\'s "teardrop"')
    assert eddystone.page_content.endswith("note: fourth tower\non the reef")  # quoted newline
    assert [d.metadata["row"] for d in (fastnet, eddystone)] == [0, 1]
    assert [d.metadata["line"] for d in (fastnet, eddystone)] == [2, 3]
    assert fastnet.metadata["delimiter"] == delimiter
    assert fastnet.metadata["file_type"] == "csv"
    assert [r.pages for r in rows] == [2, 2]


def test_content_and_metadata_columns(tmp_path: Path) -> None:
    rows = load(
        tmp_path,
        "lights.csv",
        write_csv(","),
        csv_content_columns=["note"],
        csv_metadata_columns=["name", "light"],
    )
    fastnet, _ = docs(rows)
    assert fastnet.page_content == 'note: Ireland\'s "teardrop"'
    assert (fastnet.metadata["name"], fastnet.metadata["light"]) == ("Fastnet", "white, 5 s")


def test_metadata_columns_alone_leave_the_rest_as_content(tmp_path: Path) -> None:
    fastnet, _ = docs(load(tmp_path, "l.csv", write_csv(","), csv_metadata_columns=["name"]))
    assert fastnet.page_content.startswith("light: white, 5 s\nnote:")
    assert fastnet.metadata["name"] == "Fastnet"


def test_metadata_column_cannot_replace_loader_keys(tmp_path: Path) -> None:
    data = "source,text\nelsewhere.csv,hello\n"
    [doc] = docs(load(tmp_path, "real.csv", data, csv_metadata_columns=["source"]))
    assert doc.metadata["source"] == "real.csv"


def test_unknown_column_fails_with_reason(tmp_path: Path) -> None:
    [row] = load(tmp_path, "l.csv", write_csv(","), csv_content_columns=["colour"])
    assert row.error == "CSV has no column 'colour' (columns: name, light, note)"


def test_ragged_rows_are_kept_and_reported(tmp_path: Path) -> None:
    data = "a,b,c\n1,2,3\n4,5,6,7\n8,9\n"
    ok, long, short = docs(load(tmp_path, "ragged.csv", data))
    assert "ragged" not in ok.metadata
    assert long.metadata["ragged"] == "4 fields, header has 3"
    assert long.page_content == "a: 4\nb: 5\nc: 6\n_extra: 7"
    assert short.metadata["ragged"] == "2 fields, header has 3"
    assert short.page_content == "a: 8\nb: 9"


def test_ragged_rows_are_counted_in_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = "a,b,c\n1,2,3\n4,5,6,7\n\n8,9\n"
    with caplog.at_level(logging.WARNING, logger="tasks.load.csvfile"):
        docs(load(tmp_path, "ragged.csv", data))
    [record] = caplog.records
    assert record.getMessage() == (
        "ragged.csv: 2 ragged row(s) (field count differs from the header's 3)"
    )


def test_field_larger_than_128_kib_loads(tmp_path: Path) -> None:
    big = "lorem ipsum " * 20_000  # 240 KB, over csv's default field_size_limit
    [doc] = docs(load(tmp_path, "big.csv", f'id,body\n1,"{big}\nsecond line"\n'))
    assert doc.page_content == f"id: 1\nbody: {big}\nsecond line"


def test_blank_rows_are_skipped_and_rows_renumbered(tmp_path: Path) -> None:
    data = "a,b\n1,2\n\n,\n3,4\n"
    first, second = docs(load(tmp_path, "blanks.csv", data))
    assert [first.metadata["row"], second.metadata["row"]] == [0, 1]
    assert [first.metadata["line"], second.metadata["line"]] == [2, 5]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(b"", "empty file: no text", id="zero-bytes"),
        pytest.param(b"\n", "empty file: no text", id="one-newline"),
        pytest.param(b"a,b\n,\n", "empty CSV: no rows with content", id="no-content"),
        pytest.param(b"a,b\n1,\x002\n", "binary content in .csv: NUL bytes", id="nul"),
        pytest.param(
            b'a,b\n"1,2\n' + b"x" * 200_000,
            "malformed CSV at line 2: quoted field not closed",
            id="huge-unclosed-field",
        ),
        pytest.param(
            b'a,b\n1,"2\n3,4\n',
            "malformed CSV at line 2: quoted field not closed",
            id="unclosed-field",
        ),
    ],
)
def test_bad_csv_fails_with_reason(tmp_path: Path, data: bytes, reason: str) -> None:
    [row] = load(tmp_path, "bad.csv", data)
    assert row.status == "failed" and row.error is not None
    assert row.error.startswith(reason), row.error


def test_single_row_is_data_not_header(tmp_path: Path) -> None:
    [doc] = docs(load(tmp_path, "one.csv", "1,2,3\n"))
    assert doc.page_content == "column_1: 1\ncolumn_2: 2\ncolumn_3: 3"
    assert doc.metadata["no_header"] is True


def test_headerless_option(tmp_path: Path) -> None:
    rows = docs(load(tmp_path, "nohead.csv", "1,2\n3,4\n", csv_header=False))
    assert [d.page_content for d in rows] == [
        "column_1: 1\ncolumn_2: 2",
        "column_1: 3\ncolumn_2: 4",
    ]


def test_configured_delimiter_wins(tmp_path: Path) -> None:
    [doc] = docs(load(tmp_path, "x.csv", "a;b,c\n1;2,3\n", csv_delimiter=","))
    assert doc.page_content == "a;b: 1;2\nc: 3"


@pytest.mark.parametrize(
    ("encoding", "bom"),
    [("utf-8", codecs.BOM_UTF8), ("utf-16-le", codecs.BOM_UTF16_LE), ("cp1252", b"")],
)
def test_encodings(tmp_path: Path, encoding: str, bom: bytes) -> None:
    text = "ville,prix\nMontréal,12 €\nQuébec,9 €\n" * 3
    first = docs(load(tmp_path, "enc.csv", bom + text.encode(encoding)))[0]
    assert first.page_content == "ville: Montréal\nprix: 12 €"
    assert first.metadata["encoding"].replace("_", "-") in (encoding, "utf-16-le")


def test_duplicate_and_blank_header_names_stay_distinct(tmp_path: Path) -> None:
    [doc] = docs(load(tmp_path, "dup.csv", "a,a, \n1,2,3\n"))
    assert doc.page_content == "a: 1\na_2: 2\ncolumn_3: 3"


def test_real_camelot_csv_keeps_quoted_newlines() -> None:
    path = shared_path("csv", "camelot-budget-data-pdftables-page-1-table-1.csv")
    rows = load_file(ref_for(path))
    assert rows and all(r.status == "loaded" for r in rows)
    assert any("\n" in v for r in rows if r.document for v in [r.document.page_content])
