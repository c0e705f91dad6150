"""The data model every stage speaks: `FileRef`, `Document`, `Chunk` and the header path.

A ``FileRef`` is what discover hands to load (a file and its fingerprint), a ``Document``
what load hands to split, a ``Chunk`` what split hands to embed and the index.

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
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

#: Bytes read at a time when a file is hashed.
_HASH_BLOCK = 1 << 20


@dataclass(frozen=True, slots=True)
class FileRef:
    """A discovered file: where it is, its name relative to the root, and its fingerprint.

    ``path`` is the name the operating system knows (what loaders open); ``source``, the
    file's id everywhere else, is always valid UTF-8 (:func:`printable_name`).
    """

    path: str  # absolute path, as the OS gave it
    source: str  # relative to the source root, POSIX separators, printable
    size: int
    mtime: float
    sha256: str
    error: str | None = None  # why it could not be fingerprinted: it loads as a failed row

    @property
    def extension(self) -> str:
        """Return the lower-case extension with its dot (".md"), or ""."""
        return Path(self.source).suffix.lower()


def printable_name(name: str) -> str:
    r"""Return a file name as valid UTF-8 text: bytes that are not UTF-8 become ``\xNN``.

    A POSIX file name is bytes. Python decodes one that is not UTF-8 (a Latin-1 name from an
    old share, say) with a lone surrogate per undecodable byte, and no table, store, log or
    hash can encode those: one such name failed the whole run. Escaped, it is readable and
    the same on every run, so the file is ingested, skipped when unchanged and deleted when
    gone like any other. A name that is UTF-8 comes back unchanged.
    """
    if name.isascii():
        return name
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def shown_name(name: str) -> str:
    """Return ``name`` for one line of a person's output (quoted if it holds a control char).

    A newline in a file name would otherwise break the line (``docflow query``'s results,
    the summary's failures); quoted as Python writes it, the name stays on its line.
    """
    return name if name.isprintable() else repr(name)


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(value: Any) -> Any:
    r"""Return ``value`` with every lone surrogate in its strings replaced by U+FFFD.

    A JSON string may escape a code point that is no character (``"\ud800"``), and Python
    keeps it; no table, store or log can encode it, so one such string failed the whole
    run. The replacement character marks the spot, as a decoder marks bytes it cannot read.
    Strings inside mappings and lists (metadata) are replaced too; a value with none comes
    back as the same object.
    """
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value
    if isinstance(value, Mapping):
        items = [(valid_text(k), valid_text(v)) for k, v in value.items()]
        same = all(a is k and b is v for (a, b), (k, v) in zip(items, value.items(), strict=True))
        return value if same else dict(items)
    if isinstance(value, list | tuple):
        values = [valid_text(v) for v in value]
        same = all(a is v for a, v in zip(values, value, strict=True))
        return value if same else type(value)(values)
    return value


def file_sha256(path: Path) -> str:
    """Return the sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def unreadable_reason(exc: OSError) -> str:
    """Return the one-line reason for a file that could not be read ("vanished during the run")."""
    if isinstance(exc, FileNotFoundError):
        return "vanished during the run"
    if isinstance(exc, PermissionError):
        return "unreadable: permission denied"
    what = exc.strerror or type(exc).__name__
    return f"unreadable: {what[:1].lower()}{what[1:]}"


def too_large_reason(size: int, limit: int) -> str:
    """Return the one-line reason for a file over the size limit (refused unread)."""
    return f"file too large: {size} bytes > limit {limit}"


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


#: Characters of a document's description that go into the context block (the model reads
#: ~256 word-pieces in all; the chunk itself must keep most of them).
CONTEXT_DESCRIPTION_CHARS = 200


def text_with_context(
    text: str, source: str, title: Any, description: Any, header_path: Sequence[str]
) -> str:
    """Return a chunk's text after a short block saying what it is about.

    The block holds the document's title (else its file name), its description and the
    chunk's header path, one per line, then a blank line. It is what the embedding model
    and the lexical index read for a chunk (the stored text stays the exact span). Built
    from plain values so a chunk (:func:`model_input`) and a stored record (its
    flat metadata, ``tasks.index.collection``) give the same string.
    """
    name = str(title or "").strip()
    if not name:
        name = PurePosixPath(source).stem.replace("-", " ").replace("_", " ").strip()
    lines = [name] if name else []
    about = " ".join(str(description or "").split())
    if about:
        lines.append(about[:CONTEXT_DESCRIPTION_CHARS])
    path = " > ".join(header_path)
    if path and path != name:
        lines.append(path)
    return "\n".join(lines) + "\n\n" + text if lines else text


def model_input(chunk: Chunk) -> str:
    """Return what the model reads for a chunk: its document context, then its text.

    A chunk alone often lacks what it is about: a section's parent headers, the page
    title, or a front-matter description that the Markdown loader moved into metadata
    (a page whose body is one directive is then all context). So the model reads a short
    context block (the title, else the file's name; the description; the header path)
    before the chunk text (:func:`tasks.common.documents.text_with_context`). The stored chunk
    text stays the exact span of the document; the lexical index reads the same string.
    """
    return text_with_context(
        chunk.text,
        chunk.source,
        chunk.metadata.get("title"),
        chunk.metadata.get("description"),
        [h.text for h in chunk.headers],
    )
