"""`CodeTextSplitter`: recursive splitting with the separators of each file's language.

The language comes from the Document's ``language`` metadata (set by the source-code
loader, LangChain ``Language`` values) or else from the extension of its ``source``; a file
in no known language is split with the default separators. Each language's splitter is
``RecursiveCharacterTextSplitter.from_language``, so its chunks are LangChain's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tasks.common.documents import Document
from tasks.split.base import Span, SpanSplitter
from tasks.split.languages import Language, as_language, language_for_path
from tasks.split.recursive import RecursiveCharacterTextSplitter


class CodeTextSplitter(SpanSplitter):
    """Split source code with its language's separators (chosen per document)."""

    def __init__(
        self,
        language: Language | str | None = None,
        chunk_size: int = 4000,
        chunk_overlap: int = 200,
        length_function: Callable[[str], int] = len,
    ) -> None:
        """Create the splitter.

        Args:
            language: Language for plain text input (``split_spans``); Documents use their
                own ``language`` metadata or extension first.
            chunk_size: Maximum chunk size in the unit of ``length_function``.
            chunk_overlap: Target overlap between neighbouring chunks.
            length_function: Measures a piece of text (``len`` counts characters).

        Raises:
            ValueError: For a language without separators.

        """
        self._language = as_language(language) if language is not None else None
        self._chunk_size = chunk_size
        self._chunk_overlap = chunk_overlap
        self._length_function = length_function
        self._default = RecursiveCharacterTextSplitter(
            chunk_size=chunk_size, chunk_overlap=chunk_overlap, length_function=length_function
        )
        self._by_language: dict[Language, RecursiveCharacterTextSplitter] = {}

    @property
    def max_size(self) -> int:
        """Return the size limit (``chunk_size``)."""
        return self._chunk_size

    def settings(self) -> dict[str, Any]:
        """Return the settings that change the output, for the fingerprint."""
        return {
            **super().settings(),
            "language": self._language.value if self._language else None,
            "chunk_size": self._chunk_size,
            "chunk_overlap": self._chunk_overlap,
        }

    def splitter_for(self, language: Language | None) -> RecursiveCharacterTextSplitter:
        """Return the recursive splitter for ``language`` (the default one for None)."""
        if language is None:
            return self._default
        if language not in self._by_language:
            self._by_language[language] = RecursiveCharacterTextSplitter.from_language(
                language,
                chunk_size=self._chunk_size,
                chunk_overlap=self._chunk_overlap,
                length_function=self._length_function,
            )
        return self._by_language[language]

    @staticmethod
    def language_of(document: Document) -> Language | None:
        """Return a Document's language: its ``language`` metadata, else its extension."""
        declared = document.metadata.get("language")
        if declared:
            try:
                return as_language(declared)
            except ValueError:
                pass
        for key in ("source", "file_name", "file_path"):
            name = document.metadata.get(key)
            if name:
                return language_for_path(str(name))
        return None

    def split_spans(self, text: str) -> list[Span]:
        """Split ``text`` with the separators of the language given at construction."""
        return self.splitter_for(self._language).split_spans(text)

    def document_spans(self, document: Document) -> list[Span]:
        """Split a Document with the separators of its own language."""
        language = self.language_of(document) or self._language
        return self.splitter_for(language).split_spans(document.page_content)
