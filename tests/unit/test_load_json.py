"""Unit tests for the JSON / JSON Lines loader: records, content field, metadata fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tasks.common.config import LoaderOptions
from tasks.common.documents import Document
from tasks.common.tables import DocumentRow
from tasks.load import load_file
from tasks.load.jsonfile import lookup
from tests.load_helpers import write_file

RECORDS = [
    {"id": 1, "light": {"name": "Fastnet", "text": "Off Ireland, first lit 1854."}, "tags": ["ie"]},
    {"id": 2, "light": {"name": "Eddystone", "text": "Four towers on one reef."}, "tags": []},
    {"id": 3, "light": {"name": "Bell Rock"}},  # no text field
]


def load(tmp_path: Path, name: str, data: str | bytes, **options: Any) -> list[DocumentRow]:
    return load_file(write_file(tmp_path, name, data), LoaderOptions(**options))


def docs(rows: list[DocumentRow]) -> list[Document]:
    assert all(r.status == "loaded" for r in rows), [r.error for r in rows]
    return [r.document for r in rows if r.document is not None]


def test_top_level_list_with_content_field(tmp_path: Path) -> None:
    rows = load(
        tmp_path,
        "lights.json",
        json.dumps(RECORDS),
        json_content_field="light.text",
        json_metadata_fields=["id", "light.name"],
    )
    first, second = docs(rows)  # the record without the field is skipped
    assert first.page_content == "Off Ireland, first lit 1854."
    assert (first.metadata["row"], first.metadata["id"], first.metadata["light.name"]) == (
        0,
        1,
        "Fastnet",
    )
    assert second.metadata["row"] == 1 and first.metadata["file_type"] == "json"
    assert "line" not in first.metadata
    assert first.doc_id != second.doc_id


def test_whole_record_as_indented_json_by_default(tmp_path: Path) -> None:
    first = docs(load(tmp_path, "lights.json", json.dumps(RECORDS)))[0]
    assert json.loads(first.page_content) == RECORDS[0]
    assert first.page_content.startswith('{\n  "id": 1')


def test_records_path_and_single_object(tmp_path: Path) -> None:
    data = json.dumps({"meta": {"v": 1}, "data": {"items": RECORDS}})
    rows = load(tmp_path, "nested.json", data, json_records_path="data.items")
    assert len(docs(rows)) == 3
    [whole] = docs(load(tmp_path, "one.json", data))
    assert json.loads(whole.page_content)["meta"] == {"v": 1}


def test_jsonl_lines_and_blank_lines(tmp_path: Path) -> None:
    text = "\n".join(json.dumps(r) for r in RECORDS[:2]) + "\n\n" + json.dumps("a plain string")
    first, second, third = docs(
        load(tmp_path, "l.jsonl", text, json_content_field="light.text")
        + load(tmp_path, "s.ndjson", json.dumps("a plain string"))
    )
    assert [first.metadata["line"], second.metadata["line"]] == [1, 2]
    assert third.page_content == "a plain string" and third.metadata["line"] == 1


@pytest.mark.parametrize(
    ("name", "data", "options", "reason"),
    [
        (
            "bad.json",
            "{not json",
            {},
            "invalid JSON: Expecting property name enclosed in double quotes (column 2)",
        ),
        (
            "bad.jsonl",
            '{"a": 1}\n{"a": \n',
            {},
            "invalid JSON on line 2: Expecting value (column 7)",
        ),
        ("deep.json", "[" * 100_000 + "]" * 100_000, {}, "invalid JSON: nested too deeply"),
        (
            "none.json",
            json.dumps(RECORDS),
            {"json_content_field": "x.y"},
            "no record has the field 'x.y'",
        ),
        ("empty.json", "[]", {}, "no records"),
        ("where.json", "{}", {"json_records_path": "data"}, "no records at 'data'"),
        ("zero.json", "", {}, "empty file: no text"),
    ],
)
def test_bad_json_fails_with_reason(
    tmp_path: Path, name: str, data: str, options: dict[str, Any], reason: str
) -> None:
    [row] = load(tmp_path, name, data, **options)
    assert (row.status, row.error) == ("failed", reason)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (None, {"a": [1, {"b": 2}]}),
        ("a", [1, {"b": 2}]),
        ("a.0", 1),
        ("a.1.b", 2),
        ("a.-1.b", 2),
    ],
)
def test_lookup(path: str | None, expected: Any) -> None:
    assert lookup({"a": [1, {"b": 2}]}, path) == expected


@pytest.mark.parametrize("path", ["b", "a.5", "a.x", "a.0.c"])
def test_lookup_missing(path: str) -> None:
    missing = lookup({}, "nothing")
    assert lookup({"a": [1, {"b": 2}]}, path) is missing


def test_a_lone_surrogate_escape_becomes_the_replacement_character(tmp_path: Path) -> None:
    """``"\\ud800"`` is valid JSON but no character: it failed the whole run (no table,
    store or log can encode it); now the file loads and every table can take it."""
    from tasks.common.tables import documents_table

    data = '[{"name": "Sk\\udbffrv", "text": "Lit in 1880 \\ud800 by the harbour board."}]'
    rows = load(tmp_path, "lights.json", data, json_content_field="text",
                json_metadata_fields=["name"])  # fmt: skip
    [doc] = docs(rows)
    assert doc.page_content == "Lit in 1880 \ufffd by the harbour board."
    assert doc.metadata["name"] == "Sk\ufffdrv"
    documents_table(rows).to_pylist()  # the ``documents`` table's UTF-8 strings
    plain = load(tmp_path, "plain.json", '[{"text": "no escapes"}]', json_content_field="text")
    assert docs(plain)[0].page_content == "no escapes"
