"""Plain text and Markdown loaders (UTF-8); one Document per file."""

from __future__ import annotations

from collections.abc import Iterator

from tasks.discover import FileRef
from tasks.documents import Document
from tasks.errors import LoadError
from tasks.load.base import file_metadata, read_bytes


def decode_utf8(data: bytes, extension: str) -> str:
    """Decode UTF-8 text (a BOM is dropped); binary or undecodable bytes are a LoadError."""
    if b"\x00" in data:
        raise LoadError(f"binary content in {extension or 'file'}: NUL bytes")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LoadError(
            f"not valid UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}"
        ) from exc


class TextLoader:
    """Load a UTF-8 text file as one Document."""

    name = "text"
    file_type = "text"

    def load(self, file: FileRef) -> Iterator[Document]:
        """Yield the file's text with file metadata; an empty file is a LoadError."""
        text = decode_utf8(read_bytes(file), file.extension)
        if not text.strip():
            raise LoadError("empty file: no text")
        yield Document(text, file_metadata(file, self.file_type))


class MarkdownLoader(TextLoader):
    """Load a UTF-8 Markdown file as one Document (``file_type`` "markdown")."""

    name = "markdown"
    file_type = "markdown"
