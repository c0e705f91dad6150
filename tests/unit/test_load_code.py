"""Unit tests for the source-code loader: ``language`` values the code splitter understands."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.load import load_file, loader_for
from tasks.load.sourcecode import LANGUAGES, CodeLoader
from tests.conftest import shared_path
from tests.load_helpers import ref_for, write_file

BRIEF = {
    ".py": "python", ".js": "js", ".ts": "ts", ".tsx": "ts", ".go": "go", ".rs": "rust",
    ".java": "java", ".kt": "kotlin", ".c": "c", ".h": "c", ".cpp": "cpp", ".cs": "csharp",
    ".php": "php", ".rb": "ruby", ".scala": "scala", ".swift": "swift", ".lua": "lua",
    ".pl": "perl", ".hs": "haskell", ".ex": "elixir", ".ps1": "powershell", ".sol": "sol",
    ".cob": "cobol", ".proto": "proto", ".tex": "latex",
}  # fmt: skip


def test_every_language_is_a_langchain_language_value() -> None:
    language = pytest.importorskip("langchain_text_splitters").Language
    assert set(LANGUAGES.values()) <= {lang.value for lang in language}


@pytest.mark.parametrize(("ext", "language"), sorted(BRIEF.items()))
def test_extension_gives_language(tmp_path: Path, ext: str, language: str) -> None:
    ref = write_file(tmp_path, f"main{ext.upper()}", "print('lighthouse')\n")
    assert isinstance(loader_for(ref), CodeLoader)
    [row] = load_file(ref)
    assert row.status == "loaded" and row.document is not None
    meta = row.document.metadata
    assert (meta["language"], meta["file_type"], meta["encoding"]) == (language, "code", "utf-8")
    assert row.document.page_content == "print('lighthouse')\n"


def test_real_minified_single_line_file_loads_whole() -> None:
    path = shared_path("code", "bad", "huge-single-line-528KB-minified__coffeescript.js")
    [row] = load_file(ref_for(path))
    assert row.document is not None and row.document.metadata["language"] == "js"
    assert len(row.document.page_content) > 500_000
