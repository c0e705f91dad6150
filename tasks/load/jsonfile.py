"""JSON and JSON Lines loader: one Document per record.

Records: in a ``.json`` file, the list at ``json_records_path`` (a dotted path such as
``data.items``; by default the top-level list, or the whole document as one record); in a
``.jsonl``/``.ndjson`` file, every non-blank line. A record's text is the value at
``json_content_field`` (a dotted path; by default the whole record): a string as it is,
anything else as indented JSON. Records without that field are skipped.

Metadata adds ``row`` (0-based record index, so each record has its own document id),
``line`` (JSON Lines: the 1-based line number) and the values at ``json_metadata_fields``
(keyed by their dotted path). An invalid line fails the file with its line number.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tasks.common.documents import Document, FileRef
from tasks.common.errors import LoadError
from tasks.load.base import BaseLoader

JSON_LINES = frozenset({".jsonl", ".ndjson"})
"""Extensions read as JSON Lines (one record per line)."""

_MISSING = object()


def lookup(record: Any, path: str | None) -> Any:
    """Return the value at a dotted ``path`` in ``record`` (list items by index), or a marker.

    ``None`` or "" as the path means the record itself.
    """
    value = record
    for key in path.split(".") if path else ():
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif (
            isinstance(value, list)
            and key.lstrip("-").isdigit()
            and -len(value) <= int(key) < len(value)
        ):
            value = value[int(key)]
        else:
            return _MISSING
    return value


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=2)


def _parse(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise LoadError(f"invalid JSON{where}: {exc.msg} (column {exc.colno})") from exc
    except RecursionError as exc:
        raise LoadError(f"invalid JSON{where}: nested too deeply") from exc


class JsonLoader(BaseLoader):
    """Load a JSON or JSON Lines file as one Document per record."""

    name = "json"
    file_type = "json"

    def load(self, file: FileRef) -> Iterator[Document]:
        """Yield one Document per record with content; no such record is a LoadError."""
        decoded = self.read_text(file)
        base = self.metadata(file, decoded)
        found = 0
        for row, (line, record) in enumerate(self._records(decoded.text, file.extension)):
            doc = self._document(record, {**base, "row": row, **({"line": line} if line else {})})
            if doc is not None:
                found += 1
                yield doc
        if not found:
            field = self.options.json_content_field
            raise LoadError(f"no record has the field {field!r}" if field else "no records")

    def _records(self, text: str, extension: str) -> Iterator[tuple[int, Any]]:
        """Yield (line number or 0, record) in file order."""
        if extension in JSON_LINES:
            for number, line in enumerate(text.splitlines(), start=1):
                if line.strip():
                    yield number, _parse(line, f" on line {number}")
            return
        data = _parse(text, "")
        path = self.options.json_records_path
        records = lookup(data, path)
        if records is _MISSING:
            raise LoadError(f"no records at {path!r}")
        if isinstance(records, list):
            yield from ((0, r) for r in records)
        else:
            yield 0, records

    def _document(self, record: Any, meta: dict[str, Any]) -> Document | None:
        content = lookup(record, self.options.json_content_field)
        if content is _MISSING or content is None:
            return None
        text = _as_text(content)
        if not text.strip():
            return None
        for path in self.options.json_metadata_fields:
            value = lookup(record, path)
            if value is not _MISSING and path not in meta:
                meta[path] = value
        return Document(text, meta)
