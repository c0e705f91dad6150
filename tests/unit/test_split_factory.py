"""Building splitters from ingest settings, `auto` per file type, and `docflow split`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flows.cli import main
from tasks.common.config import IngestParams, resolve_params
from tasks.common.documents import Document
from tasks.common.errors import ConfigError
from tasks.common.tables import DocumentRow
from tasks.split import (
    AutoSplitter,
    CharacterTextSplitter,
    CodeTextSplitter,
    HTMLHeaderTextSplitter,
    MarkdownHeaderTextSplitter,
    RecursiveCharacterTextSplitter,
    TokenTextSplitter,
)
from tasks.split.factory import SPLITTERS, build_splitter, split_file, split_rows
from tests.conftest import SAMPLE

KINDS = {
    "auto": AutoSplitter,
    "recursive": RecursiveCharacterTextSplitter,
    "character": CharacterTextSplitter,
    "token": TokenTextSplitter,
    "markdown": MarkdownHeaderTextSplitter,
    "html": HTMLHeaderTextSplitter,
    "code": CodeTextSplitter,
}


def test_auto_is_the_default() -> None:
    params = IngestParams()
    assert params.splitter == "auto" and params.length_unit == "model_tokens"
    assert isinstance(build_splitter(params), AutoSplitter)
    assert set(SPLITTERS) == set(KINDS)


@pytest.mark.parametrize("unit", ["chars", "tokens", "model_tokens"])
@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_splitter_and_unit_builds(name: str, unit: str) -> None:
    params = IngestParams(splitter=name, length_unit=unit, chunk_size=300, chunk_overlap=30)
    splitter = build_splitter(params)
    assert isinstance(splitter, KINDS[name])
    assert splitter.max_size == 300
    chunks = splitter.chunk_document(Document("Some text.\n\n" * 100, {"source": "x.txt"}))
    counted = unit != "chars" or name == "token"
    assert chunks and all((c.n_tokens is not None) == counted for c in chunks)


def test_settings_and_unit_change_the_fingerprint() -> None:
    prints = {
        build_splitter(IngestParams(splitter=name, length_unit=unit)).fingerprint()
        for name in KINDS
        for unit in ("chars", "tokens")
        if not (name == "token" and unit == "chars")
    }
    assert len(prints) == len(KINDS) * 2 - 1


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"splitter": "fancy"}, "invalid splitter"),
        ({"length_unit": "bytes"}, "invalid length_unit"),
    ],
)
def test_bad_names_are_config_errors(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_params(None, overrides, environ={})


def test_token_windows_need_overlap_below_size() -> None:
    with pytest.raises(ConfigError, match="chunk_overlap < chunk_size"):
        build_splitter(IngestParams(splitter="token", chunk_size=100, chunk_overlap=100))


def doc(text: str, **meta: Any) -> Document:
    return Document(text, {"source": meta.pop("source", "x"), **meta})


@pytest.mark.parametrize(
    "document,strategy",
    [
        (doc("# A\n\ntext", file_type="markdown"), "markdown"),
        (doc("# A\n\ntext", source="notes.md"), "markdown"),
        (doc("A\n\ntext", file_type="html", headings=[]), "html"),
        (doc("A\n\ntext", file_type="html"), "text"),  # no headings recorded
        (doc("def f():\n  pass", file_type="code", language="python"), "code"),
        (doc("fn main() {}", source="src/main.rs"), "code"),
        (doc("a,b", file_type="csv", row=1), "text"),
        (doc("page text", file_type="pdf", page=1), "text"),
        (doc("plain"), "text"),
    ],
)
def test_auto_picks_a_strategy_per_file_type(document: Document, strategy: str) -> None:
    splitter = AutoSplitter()
    assert splitter.strategy_for(document) is getattr(splitter, strategy)


def test_code_uses_the_documents_language() -> None:
    code = "\n".join(f"def f{i}(x):\n    y = x * {i}\n    return y + {i}" for i in range(40))
    splitter = CodeTextSplitter(chunk_size=120, chunk_overlap=0)
    python = splitter.document_spans(doc(code, file_type="code", language="python"))
    by_extension = splitter.document_spans(doc(code, source="lib/m.py"))
    generic = CodeTextSplitter(chunk_size=120, chunk_overlap=0).split_spans(code)
    assert python == by_extension
    expected = RecursiveCharacterTextSplitter.from_language(
        "python", chunk_size=120, chunk_overlap=0
    ).split_spans(code)
    assert python == expected and generic != python


def test_split_rows_splits_each_document_with_its_strategy() -> None:
    rows = [
        DocumentRow("a.md", "s", "markdown", "loaded", document=doc("# A\n\nx", source="a.md")),
        DocumentRow("b.txt", "s", "text", "failed", error="empty file: no text"),
        DocumentRow("c.txt", "s", "text", "loaded", document=doc("# not md", source="c.txt")),
    ]
    chunks = split_rows(rows, AutoSplitter())
    assert [(c.source, [h.text for h in c.headers]) for c in chunks] == [
        ("a.md", ["A"]),
        ("c.txt", []),
    ]


def test_split_file_reads_with_the_loader_registry(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_text("<h1>T</h1><p>one</p><h2>U</h2><p>two</p>", encoding="utf-8")
    rows, chunks = split_file(path, IngestParams(chunk_size=50, chunk_overlap=5))
    assert rows[0].loader == "html"
    assert [tuple(h.text for h in c.headers) for c in chunks] == [("T",), ("T", "U")]


# -- docflow split --------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["split", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.skipif(not SAMPLE.exists(), reason="the sample corpus is absent")
def test_split_command_prints_chunks_with_spans_and_headers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = next(SAMPLE.glob("*.md"))
    code, out, _ = run(capsys, str(path), "--chunk-size", "300", "--length-unit", "chars", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["splitter"] == "auto" and result["chunk_size"] == 300
    text = path.read_text(encoding="utf-8")
    for chunk in result["chunks"]:
        assert text[chunk["start_index"] : chunk["end_index"]] == chunk["text"]
        assert chunk["n_chars"] <= 300
    assert any(chunk["headers"] for chunk in result["chunks"])

    code, out, _ = run(capsys, str(path), "--length-unit", "tokens", "--splitter", "recursive")
    assert code == 0 and "tokens |" in out and "chunk 0 [" in out


def test_split_command_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    empty = tmp_path / "empty.md"
    empty.write_text("", encoding="utf-8")
    code, _, err = run(capsys, str(empty))
    assert code == 1 and "empty file" in err
    code, _, err = run(capsys, str(tmp_path / "missing.md"))
    assert code == 2 and "does not exist" in err
    code, _, err = run(capsys, str(empty), "--splitter", "nope")
    assert code == 2 and err.startswith("docflow: error: invalid splitter")
