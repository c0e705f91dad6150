"""Unit tests for tasks/load/: text and Markdown loaders, failures, the registry, real corpora."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tasks.common.documents import Document, FileRef
from tasks.common.errors import LoadError
from tasks.discover.files import discover
from tasks.load import (
    MarkdownLoader,
    TextLoader,
    default_includes,
    load_batch,
    load_file,
    loader_for,
    register,
    registered_extensions,
)
from tasks.load import base as load_base
from tasks.load.base import file_metadata, read_bytes
from tests.conftest import shared_path

METADATA_KEYS = {
    "source",
    "file_path",
    "file_name",
    "file_type",
    "size",
    "mtime",
    "sha256",
    "encoding",
}


def ref_for(path: Path) -> FileRef:
    """Return the FileRef discover gives for one file (its folder is the root)."""
    [ref] = discover(path.parent, [path.name], include_hidden=True)
    return ref


def write_bytes(folder: Path, name: str, data: bytes) -> FileRef:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return ref_for(path)


@pytest.fixture
def registry() -> Iterator[dict[str, object]]:
    """Give a test the loader registry and put it back as it was afterwards."""
    saved = dict(load_base._REGISTRY)
    try:
        yield load_base._REGISTRY
    finally:
        load_base._REGISTRY.clear()
        load_base._REGISTRY.update(saved)


# -- good files -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "file_type", "loader"),
    [
        ("notes.txt", "text", "text"),
        ("guide.rst", "text", "text"),
        ("server.log", "text", "text"),
        ("intro.md", "markdown", "markdown"),
        ("page.mdx", "markdown", "markdown"),
        ("UPPER.MD", "markdown", "markdown"),
    ],
)
def test_text_and_markdown_load_to_one_document(
    tmp_path: Path, name: str, file_type: str, loader: str
) -> None:
    text = "# Title\n\nLighthouse keepers — 灯台守 — logged the weather.\n"
    ref = write_bytes(tmp_path, name, text.encode("utf-8"))
    rows = load_file(ref)
    assert len(rows) == 1
    [row] = rows
    assert (row.status, row.error, row.loader, row.pages) == ("loaded", None, loader, 1)
    assert (row.source, row.sha256) == (ref.source, ref.sha256)
    doc = row.document
    assert doc is not None
    assert doc.page_content == text
    assert set(doc.metadata) == METADATA_KEYS
    assert doc.metadata == {
        "source": name,
        "file_path": ref.path,
        "file_name": name,
        "file_type": file_type,
        "size": len(text.encode("utf-8")),
        "mtime": ref.mtime,
        "sha256": ref.sha256,
        "encoding": "utf-8",
    }


def test_nested_source_is_relative_posix(tiny_corpus: Path) -> None:
    refs = {f.source: f for f in discover(tiny_corpus, ["**/*.md"])}
    [row] = load_file(refs["guides/deep/fog.md"])
    assert row.document is not None
    assert row.document.metadata["source"] == "guides/deep/fog.md"
    assert row.document.metadata["file_name"] == "fog.md"
    assert row.document.page_content.startswith("# Fog signals")


def test_utf8_bom_is_dropped(tmp_path: Path) -> None:
    ref = write_bytes(tmp_path, "bom.txt", b"\xef\xbb\xbfhello BOM\n")
    [row] = load_file(ref)
    assert row.document is not None
    assert row.document.page_content == "hello BOM\n"


def test_crlf_and_inner_whitespace_are_kept(tmp_path: Path) -> None:
    text = "line one\r\n\r\n  indented\tline\r\n"
    ref = write_bytes(tmp_path, "crlf.md", text.encode("utf-8"))
    [row] = load_file(ref)
    assert row.document is not None
    assert row.document.page_content == text


# -- bad files ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        pytest.param("nul.txt", b"plain text\x00more text", "binary content", id="nul-txt"),
        pytest.param("nul.md", b"# T\n\x00\x01\x02", "binary content", id="nul-md"),
        pytest.param("nul16.txt", b"a\x00\x00b\x00c", "binary content", id="nuls-not-utf16"),
        pytest.param("undecodable.txt", b"\x81\x8d\x8f\x90\x9d", "not valid UTF-8", id="no-codec"),
        pytest.param("empty.txt", b"", "empty file", id="empty"),
        pytest.param("blank.md", b"  \n\t\r\n   \n", "empty file", id="whitespace-only"),
        pytest.param("bomonly.txt", b"\xef\xbb\xbf", "empty file", id="bom-only"),
        pytest.param("bomspace.md", b"\xef\xbb\xbf \n", "empty file", id="bom-and-space"),
        pytest.param("archive.zip", b"PK\x03\x04", "unsupported file type", id="unregistered"),
        pytest.param("README", b"text", "unsupported file type", id="no-extension"),
    ],
)
def test_bad_file_fails_with_reason(tmp_path: Path, name: str, data: bytes, reason: str) -> None:
    ref = write_bytes(tmp_path, name, data)
    rows = load_file(ref)
    assert len(rows) == 1
    [row] = rows
    assert row.status == "failed"
    assert row.document is None
    assert (row.source, row.sha256) == (name, ref.sha256)
    assert row.error is not None
    assert row.error.startswith(reason), row.error
    assert "\n" not in row.error


def test_unsupported_reason_names_the_extension(tmp_path: Path) -> None:
    [row] = load_file(write_bytes(tmp_path, "data.parquet", b"PAR1"))
    assert row.error is not None and "'.parquet'" in row.error


def test_invalid_utf8_reason_gives_byte_and_offset(tmp_path: Path) -> None:
    [row] = load_file(write_bytes(tmp_path, "x.txt", b"abcd\x81\x8d\x8f\x90\x9d"))
    assert row.error == "not valid UTF-8 (byte 0x81 at offset 4) and no other encoding fits"


def test_file_gone_after_discover_fails_with_reason(tmp_path: Path) -> None:
    ref = write_bytes(tmp_path, "gone.md", b"# here for now\n")
    Path(ref.path).unlink()
    [row] = load_file(ref)
    assert row.status == "failed"
    assert row.error == "vanished during the run"


def test_read_bytes_size_limit(tmp_path: Path) -> None:
    ref = write_bytes(tmp_path, "big.txt", b"x" * 100)
    assert read_bytes(ref, max_bytes=100) == b"x" * 100
    with pytest.raises(LoadError, match="file too large"):
        read_bytes(ref, max_bytes=99)


def test_loader_raises_load_error_for_bad_bytes(tmp_path: Path) -> None:
    ref = write_bytes(tmp_path, "nul.md", b"a\x00b")
    with pytest.raises(LoadError, match="^binary content"):
        list(MarkdownLoader().load(ref))


def test_load_batch_goes_on_after_bad_files(tmp_path: Path) -> None:
    contents = {
        "a.md": b"# A\n\nfirst\n",
        "b.txt": b"\x00\x00binary",
        "c.txt": b"third\n",
        "d.md": b"",
        "e.bin": b"x,y\n",
        "f.md": b"\x81\x8d\x8f\x90\x9d",
        "g.txt": b"last\n",
    }
    for name, data in contents.items():
        (tmp_path / name).write_bytes(data)
    files = discover(tmp_path, ["*"])
    assert [f.source for f in files] == list(contents)
    rows = load_batch(files)
    assert [r.source for r in rows] == list(contents)  # one row per file here, in order
    assert [r.status for r in rows] == [
        "loaded",
        "failed",
        "loaded",
        "failed",
        "failed",
        "failed",
        "loaded",
    ]
    reasons = {r.source: r.error for r in rows if r.status == "failed"}
    assert set(reasons) == {"b.txt", "d.md", "e.bin", "f.md"}
    assert reasons["b.txt"].startswith("binary content")
    assert reasons["d.md"].startswith("empty file")
    assert reasons["e.bin"].startswith("unsupported file type")
    assert reasons["f.md"].startswith("not valid UTF-8")
    loaded = [r for r in rows if r.status == "loaded"]
    assert [r.document.page_content for r in loaded if r.document] == [
        "# A\n\nfirst\n",
        "third\n",
        "last\n",
    ]


def test_load_batch_of_nothing_is_empty() -> None:
    assert load_batch([]) == []


# -- registry -------------------------------------------------------------------------------


class ShoutLoader:
    """A user loader: one Document per non-empty line, upper-cased."""

    name = "shout"

    def load(self, file: FileRef) -> Iterator[Document]:
        lines = [ln for ln in read_bytes(file).decode("utf-8").splitlines() if ln.strip()]
        if not lines:
            raise LoadError("empty file: no lines")
        for i, line in enumerate(lines):
            yield Document(line.upper(), {**file_metadata(file, "shout"), "row": i})


def test_default_registry() -> None:
    exts = registered_extensions()
    assert {".txt", ".rst", ".log", ".md", ".markdown", ".mdx"} <= set(exts)
    assert exts == sorted(exts)
    assert set(default_includes()) >= {"**/*.[tT][xX][tT]", "**/*.[mM][dD]"}
    assert isinstance(loader_for(FileRef("/a.md", "a.md", 1, 0.0, "0")), MarkdownLoader)
    assert type(loader_for(FileRef("/a.txt", "a.txt", 1, 0.0, "0"))) is TextLoader


def test_register_a_loader_for_a_new_extension(tmp_path: Path, registry: dict[str, object]) -> None:
    ref = write_bytes(tmp_path, "calls.shout", b"ahoy\n\nland ho\n")
    [before] = load_file(ref)
    assert before.status == "failed" and before.error is not None
    assert before.error.startswith("unsupported file type")
    assert "**/*.[sS][hH][oO][uU][tT]" not in default_includes()

    register(ShoutLoader(), ".SHOUT")

    assert ".shout" in registered_extensions()
    assert "**/*.[sS][hH][oO][uU][tT]" in default_includes()
    rows = load_file(ref)
    assert [(r.status, r.loader, r.pages) for r in rows] == [("loaded", "shout", 2)] * 2
    assert [r.document.page_content for r in rows if r.document] == ["AHOY", "LAND HO"]
    assert [r.document.metadata["row"] for r in rows if r.document] == [0, 1]
    # the new type is discovered by the default includes and loaded in a batch
    [found] = discover(tmp_path, default_includes())
    assert [r.status for r in load_batch([found])] == ["loaded", "loaded"]


def test_later_registration_wins(tmp_path: Path, registry: dict[str, object]) -> None:
    ref = write_bytes(tmp_path, "one.txt", b"quiet words\n")
    register(ShoutLoader(), ".txt")
    [row] = load_file(ref)
    assert row.loader == "shout"
    assert row.document is not None and row.document.page_content == "QUIET WORDS"


def test_register_rejects_extension_without_dot(registry: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="must start with"):
        register(ShoutLoader(), "shout")
    assert "shout" not in registered_extensions()


# -- real corpora ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("folder", "pattern"),
    [
        pytest.param("markdown", "**/*", id="markdown-recursive-with-bad"),
        pytest.param("text", "*.txt", id="text-top-level"),
        pytest.param("text", "**/*.txt", id="text-recursive-with-bad-and-non-utf8"),
    ],
)
def test_real_corpus_loads_or_fails_with_one_line_reason(folder: str, pattern: str) -> None:
    root = shared_path(folder)
    files = discover(root, [pattern], include_hidden=True)
    assert files, f"no files under {root}"
    problems: list[str] = []
    loaded = 0
    for ref in files:
        try:
            rows = load_file(ref)
        except Exception as exc:  # noqa: BLE001 - the point: nothing may escape load_file
            problems.append(f"{ref.source}: {type(exc).__name__} escaped: {exc}")
            continue
        if not rows:
            problems.append(f"{ref.source}: no rows")
        for row in rows:
            if row.status == "loaded":
                loaded += 1
                if row.document is None or not row.document.page_content.strip():
                    problems.append(f"{ref.source}: loaded with no text")
            elif row.status != "failed" or not row.error or "\n" in row.error:
                problems.append(f"{ref.source}: status {row.status!r}, reason {row.error!r}")
    assert not problems, "\n".join(problems)
    assert loaded > 0


def test_real_markdown_bad_zero_byte_file_fails_as_empty() -> None:
    bad = shared_path("markdown", "bad")
    zero = [p for p in bad.iterdir() if p.is_file() and p.stat().st_size == 0]
    if not zero:
        pytest.skip("no zero-byte file in corpora/markdown/bad")
    for path in zero:
        [row] = load_file(ref_for(path))
        assert row.status == "failed"
        assert row.error is not None and row.error.startswith("empty file")


def test_rows_carry_the_hash_of_the_bytes_read_not_the_one_planned(tmp_path: Path) -> None:
    import hashlib

    from tasks.common import failpoints
    from tasks.load.batch import load_file

    path = tmp_path / "notes.md"
    path.write_text("# Notes\n\nThe whole text, as planned.\n", encoding="utf-8")
    planned = ref_for(path)
    [row] = load_file(planned)
    assert row.sha256 == planned.sha256 == row.document.metadata["sha256"]  # type: ignore[union-attr]

    rewritten = b"# Notes\n\nThe wh"
    with failpoints.on("load:before-read", lambda: path.write_bytes(rewritten)):
        [row] = load_file(planned)  # read after the plan hashed it, mid-rewrite
    read = hashlib.sha256(rewritten).hexdigest()
    assert row.sha256 == read != planned.sha256
    assert row.document is not None and row.document.metadata["sha256"] == read
    assert row.document.page_content == "# Notes\n\nThe wh"
