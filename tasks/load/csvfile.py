"""CSV/TSV loader: one Document per row, as LangChain's CSVLoader.

The first row is the header (with ``csv_header=False``, or when the file has a single
row, the columns are named ``column_1``...; the latter is marked ``no_header``). A row's
text is one ``column: value`` line per content column (``csv_content_columns``, by
default every column not in ``csv_metadata_columns``);
metadata adds ``row`` (0-based, data rows only), ``line`` (1-based line where the row
starts), the metadata columns' values, ``delimiter`` and ``encoding``.

The dialect is sniffed from the first lines (``.tsv`` is tab-separated; a configured
``csv_delimiter`` wins). Quoted fields may hold newlines. A ragged row (more or fewer
fields than the header) is kept and reported in its metadata (``ragged``); its extra
values are listed under ``_extra``; a file's ragged rows are counted in one warning. Rows
with no content are skipped. A field may be as large as ``max_file_size``; a quoted field
left open at the end of the file (an odd number of quote characters) is malformed. A metadata column
named like a loader key (``source``, ``row``...) does not replace that key.
"""

from __future__ import annotations

import csv
import io
import itertools
import logging
from collections.abc import Iterator
from typing import Any

from tasks.common.documents import Document, FileRef
from tasks.common.errors import LoadError
from tasks.load.base import BaseLoader

log = logging.getLogger(__name__)

SNIFF_CHARS = 64 * 1024
"""At most this much of the text is given to the dialect sniffer."""

SNIFF_LINES = 50
"""At most this many lines are given to the dialect sniffer."""

DELIMITERS = ",;\t|"
"""Delimiters the sniffer may choose from."""

EXTRA_KEY = "_extra"
"""Key of the values a ragged row has beyond the header."""


def sniff_dialect(text: str, extension: str, delimiter: str | None = None) -> type[csv.Dialect]:
    """Return the CSV dialect of ``text``: the configured delimiter, .tsv, or sniffed."""
    if delimiter is not None or extension == ".tsv":
        chosen = delimiter or "\t"

        class Configured(csv.excel):
            delimiter = chosen

        return Configured
    # the sniffer's quoting checks expect "\n" line ends: CR-only files are normalised here
    sample = "\n".join(text[:SNIFF_CHARS].splitlines()[:SNIFF_LINES])
    try:
        return csv.Sniffer().sniff(sample, delimiters=DELIMITERS)
    except csv.Error:
        return csv.excel


def _records(reader: Any) -> Iterator[tuple[int, list[str]]]:
    """Yield (1-based line where the record starts, fields) for each record."""
    start = 1
    for fields in reader:
        yield start, fields
        start = reader.line_num + 1


def _left_open(text: str, last: list[str], dialect: type[csv.Dialect]) -> bool:
    """Return whether the last record is a quoted field that swallowed the rest of the file."""
    quote = dialect.quotechar
    if not quote or not last or not any(c in last[-1] for c in "\r\n"):
        return False
    return text.count(quote) % 2 == 1


def _column_names(header: list[str]) -> list[str]:
    """Return unique, non-empty column names (blank ones become ``column_N``)."""
    names: list[str] = []
    for i, raw in enumerate(header, start=1):
        name = " ".join(raw.split()) or f"column_{i}"
        while name in names:
            name = f"{name}_{i}"
        names.append(name)
    return names


class CsvLoader(BaseLoader):
    """Load a CSV/TSV file as one Document per data row."""

    name = "csv"
    file_type = "csv"

    def load(self, file: FileRef) -> Iterator[Document]:
        """Yield one Document per row; a file with no data rows is a LoadError."""
        decoded = self.read_text(file)
        if csv.field_size_limit() < self.options.max_file_size:  # the default is 128 KiB
            csv.field_size_limit(self.options.max_file_size)
        dialect = sniff_dialect(decoded.text, file.extension, self.options.csv_delimiter)
        reader = csv.reader(io.StringIO(decoded.text, newline=""), dialect)
        base = {**self.metadata(file, decoded), "delimiter": dialect.delimiter}
        try:
            records = _records(reader)
            first = next(records, None)
            if first is None:
                raise LoadError("empty CSV: no rows")
            second = next(records, None)
            if not self.options.csv_header or second is None:
                if self.options.csv_header:
                    base["no_header"] = True  # a single row: data, not a header
                records = itertools.chain([first] if second is None else [first, second], records)
                columns = [f"column_{i}" for i in range(1, len(first[1]) + 1)]
            else:
                records = itertools.chain([second], records)
                columns = _column_names(first[1])
            content, meta_cols = self._pick_columns(columns)
            rows = ragged = 0
            line, fields = first
            for line, fields in records:
                doc = _row_document(fields, columns, content, meta_cols, base, rows, line)
                if doc is not None:
                    rows += 1
                    ragged += "ragged" in doc.metadata
                    yield doc
        except csv.Error as exc:
            raise LoadError(f"malformed CSV at line {reader.line_num}: {exc}") from exc
        if _left_open(decoded.text, fields, dialect):
            raise LoadError(f"malformed CSV at line {line}: quoted field not closed")
        if rows == 0:
            raise LoadError("empty CSV: no rows with content")
        if ragged:
            log.warning(
                "%s: %d ragged row(s) (field count differs from the header's %d)",
                file.source,
                ragged,
                len(columns),
            )

    def _pick_columns(self, columns: list[str]) -> tuple[list[str], list[str]]:
        """Return (content columns, metadata columns); an unknown name is a LoadError."""
        wanted = [*self.options.csv_content_columns, *self.options.csv_metadata_columns]
        missing = [c for c in wanted if c not in columns]
        if missing:
            raise LoadError(
                f"CSV has no column {missing[0]!r} (columns: {', '.join(columns)[:150]})"
            )
        meta_cols = list(self.options.csv_metadata_columns)
        content = list(self.options.csv_content_columns) or [
            c for c in columns if c not in meta_cols
        ]
        return content, meta_cols


def _row_document(
    fields: list[str],
    columns: list[str],
    content: list[str],
    meta_cols: list[str],
    base: dict[str, Any],
    row: int,
    line: int,
) -> Document | None:
    """Return the Document of one row, or None for a row with no content."""
    if not any(f.strip() for f in fields):
        return None
    values = dict(zip(columns, fields, strict=False))
    lines = [f"{c}: {values[c].strip()}" for c in content if values.get(c, "").strip()]
    meta = {**{c: values.get(c, "") for c in meta_cols}, **base, "row": row, "line": line}
    if len(fields) != len(columns):
        meta["ragged"] = f"{len(fields)} fields, header has {len(columns)}"
        extra = [f.strip() for f in fields[len(columns) :] if f.strip()]
        if extra:
            lines.append(f"{EXTRA_KEY}: {', '.join(extra)}")
    if not lines:
        return None
    return Document("\n".join(lines), meta)
