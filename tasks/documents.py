"""The data model every stage speaks: `Document`, `Chunk` and the header path.

Invariants (tested on every splitter and corpus, see DESIGN.md):

1. ``document.page_content[chunk.start_index:chunk.end_index] == chunk.text`` (exact spans).
2. No chunk is longer than the splitter's ``chunk_size`` in its length unit, unless a single
   indivisible unit is longer.
3. The chunks of a document, in order, cover all its non-whitespace text.
4. ``chunk_id`` is deterministic: a hash of the document id, the splitter fingerprint, the
   start index and the text, so reruns and other machines produce the same ids.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Metadata keys that identify one Document inside its source file (a PDF page, a CSV row).
PART_KEYS: tuple[str, ...] = ("page", "row")


def sha256_hex(data: str | bytes) -> str:
    """Return the hex sha256 of ``data`` (str is hashed as UTF-8)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True, slots=True)
class Header:
    """One level of a chunk's header path, e.g. ``Header(2, "Install")`` for ``## Install``."""

    level: int
    text: str

    def to_dict(self) -> dict[str, Any]:
        """Return the ``{level, text}`` form stored in tables and metadata."""
        return {"level": self.level, "text": self.text}


@dataclass(frozen=True, slots=True)
class Document:
    """A loaded piece of text with metadata; same shape as LangChain's ``Document``.

    Loaders set ``source`` (the path relative to the source root, POSIX separators) and their
    own keys (``page``, ``row``, ``title``...).
    """

    page_content: str
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def source(self) -> str:
        """Return the ``source`` metadata key, or an empty string."""
        return str(self.metadata.get("source", ""))

    @property
    def doc_id(self) -> str:
        """Return a stable id for this document: its source plus its page/row, if any.

        It does not depend on the content, so a changed file keeps its document ids and the
        incremental logic can tell which chunks of it disappeared.
        """
        parts = [self.source] + [f"{k}={self.metadata[k]}" for k in PART_KEYS if k in self.metadata]
        return sha256_hex("\x1f".join(parts))[:32]


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of one document, with its exact span in the document text."""

    chunk_id: str
    doc_id: str
    source: str
    chunk_index: int
    start_index: int
    end_index: int
    text: str
    n_chars: int
    n_tokens: int | None = None
    headers: tuple[Header, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)


def make_chunk_id(doc_id: str, fingerprint: str, start_index: int, text: str) -> str:
    """Return the deterministic chunk id (invariant 4)."""
    return sha256_hex(f"{doc_id}\x1f{fingerprint}\x1f{start_index}\x1f{text}")[:32]


def header_keys(headers: tuple[Header, ...]) -> dict[str, str]:
    """Return the flat ``{"h1": ..., "h2": ...}`` keys for a header path (for filtering)."""
    return {f"h{h.level}": h.text for h in headers}
