"""`TokenTextSplitter`: fixed windows of tokens with overlap, as exact character spans.

LangChain encodes the text, takes windows of ``chunk_size`` token ids every
``chunk_size - chunk_overlap`` tokens and decodes each window. A window edge that falls inside
a multi-byte character decodes to U+FFFD, text that is not in the document. Here a window is
the span of its tokens in the document, and its edges move to the nearest token boundary that
is also a character boundary (start: back, end: back), so every chunk is a slice of the text.
A window whose text, encoded on its own, would have more than ``chunk_size`` tokens (tokens
can merge differently at a cut) ends one token earlier. Otherwise the chunks are LangChain's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Literal, Protocol

from tasks.split.base import KeepSeparator, Span, TextSplitter
from tasks.split.counting import SpanCounter
from tasks.split.units import TiktokenUnit, TokenOffsets

if TYPE_CHECKING:
    import numpy as np


class TokenUnit(Protocol):
    """A tokenizer unit that gives a document's token offsets and span counts."""

    unit_name: str

    def __call__(self, text: str) -> int:
        """Return the number of tokens of ``text``."""
        ...

    def analyze(self, text: str) -> tuple[TokenOffsets, SpanCounter]:
        """Return the document's token offsets and a span counter."""
        ...


def _snap(cuttable: np.ndarray, index: int, floor: int) -> int:
    """Return the last token index in ``(floor, index]`` a window may start or end at."""
    while index > floor and index < len(cuttable) and not cuttable[index]:
        index -= 1
    return index


class TokenTextSplitter(TextSplitter):
    """Split text into windows of ``chunk_size`` tokens, ``chunk_overlap`` shared."""

    def __init__(
        self,
        encoding_name: str = "cl100k_base",
        model_name: str | None = None,
        allowed_special: Literal["all"] | Collection[str] | None = None,
        disallowed_special: Literal["all"] | Collection[str] = "all",
        chunk_size: int = 4000,
        chunk_overlap: int = 200,
        length_function: Callable[[str], int] = len,
        keep_separator: KeepSeparator = False,
        add_start_index: bool = False,
        strip_whitespace: bool = True,
        *,
        tokenizer: TokenUnit | None = None,
    ) -> None:
        """Create the splitter; parameters as in LangChain (default encoding: cl100k).

        Args:
            encoding_name: tiktoken encoding (LangChain's default ``gpt2`` needs a download).
            model_name: OpenAI model name; overrides ``encoding_name``.
            allowed_special: Special tokens encoded as such.
            disallowed_special: Accepted for compatibility; special-token text counts as
                plain text instead of raising.
            chunk_size: Tokens per window.
            chunk_overlap: Tokens shared by neighbouring windows (less than ``chunk_size``).
            length_function: Accepted for compatibility (windows are counted in tokens).
            keep_separator: Accepted for compatibility (there are no separators).
            add_start_index: Put ``start_index`` in created Documents' metadata.
            strip_whitespace: Accepted for compatibility (windows are never stripped).
            tokenizer: Another token unit to window over (e.g. the embedding model's,
                :func:`tasks.split.units.model_tokens_unit`); default tiktoken.

        """
        del disallowed_special
        unit: TokenUnit = tokenizer or TiktokenUnit(
            encoding_name, model_name, allowed_special or ()
        )
        super().__init__(
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            length_function=length_function if length_function is not len else unit,
            keep_separator=keep_separator,
            add_start_index=add_start_index,
            strip_whitespace=strip_whitespace,
        )
        self._unit = unit

    @classmethod
    def from_tiktoken_encoder(
        cls,
        encoding_name: str = "cl100k_base",
        model_name: str | None = None,
        allowed_special: Literal["all"] | Collection[str] | None = None,
        disallowed_special: Literal["all"] | Collection[str] = "all",
        **kwargs: Any,
    ) -> TokenTextSplitter:
        """Return a splitter over that tiktoken encoding (as LangChain's override does)."""
        return cls(
            encoding_name=encoding_name,
            model_name=model_name,
            allowed_special=allowed_special,
            disallowed_special=disallowed_special,
            **kwargs,
        )

    def settings(self) -> dict[str, Any]:
        """Return the settings that change the output, for the fingerprint."""
        return {**super().settings(), "tokens": self._unit.unit_name}

    def split_spans(self, text: str) -> list[Span]:
        """Return token windows of ``text`` as exact spans (with their token counts).

        Raises:
            ValueError: If ``chunk_overlap`` is not less than ``chunk_size`` (as LangChain).

        """
        size, overlap = self._chunk_size, self._chunk_overlap
        if size <= overlap:
            raise ValueError("tokens_per_chunk must be greater than chunk_overlap")
        if not text:
            return []
        offsets, measure = self._unit.analyze(text)
        starts, cuttable = offsets.starts, offsets.cuttable
        n = len(starts)
        if n == 0:  # nothing the tokenizer reads (e.g. only control characters)
            return [Span(0, len(text), n_tokens=0)] if text.strip() else []

        def span(first: int, stop: int) -> tuple[int, int]:
            # a window also holds what its tokenizer skips (BERT drops spaces, controls)
            start = 0 if first == 0 else int(starts[first])
            return start, (len(text) if stop >= n else int(starts[stop]))

        spans: list[Span] = []
        nominal = 0  # LangChain's window start: a multiple of chunk_size - chunk_overlap
        first = 0  # this window's first token (nominal, moved back to a character start)
        while first < n:
            stop = _snap(cuttable, min(first + size, n), first)
            if stop == first:  # one character holds more tokens than a window
                stop = first + 1
                while stop < n and not cuttable[stop]:
                    stop += 1
            start, end = span(first, stop)
            count = measure(start, end)
            while count > size and stop - first > 1:
                smaller = _snap(cuttable, stop - 1, first)
                if smaller == first:
                    break
                stop = smaller
                start, end = span(first, stop)
                count = measure(start, end)
            spans.append(Span(start, end, n_tokens=count))
            if stop >= n:
                break
            nominal += size - overlap
            following = _snap(cuttable, min(nominal, stop), first)
            first = following if following > first else stop
        return spans
