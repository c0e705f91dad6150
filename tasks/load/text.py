"""Plain text loader (.txt, .rst, .log): one Document per file, encoding detected."""

from __future__ import annotations

from collections.abc import Iterator

from tasks.common.documents import Document, FileRef
from tasks.load.base import BaseLoader


class TextLoader(BaseLoader):
    """Load a text file as one Document; metadata adds the detected ``encoding``."""

    name = "text"
    file_type = "text"

    def load(self, file: FileRef) -> Iterator[Document]:
        """Yield the file's text; empty, binary or undecodable files are a LoadError."""
        decoded = self.read_text(file)
        yield Document(decoded.text, self.metadata(file, decoded))
