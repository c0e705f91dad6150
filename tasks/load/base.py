"""The loader interface, the extension registry users can extend, and shared helpers.

A loader turns one file into Documents, lazily (a generator). It raises :class:`LoadError`
with a one-line reason for a file it cannot read; the batch loader records that reason and
goes on. Every Document carries at least the keys of :func:`file_metadata`.

Built-in loaders derive from :class:`BaseLoader`, which holds the run's
:class:`~tasks.common.config.LoaderOptions` and reads files through the size guard. A user loader
only needs ``name`` and ``load(file)``; it may also offer ``with_options(options)`` to
receive the run's options.
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Protocol, Self, runtime_checkable

from tasks.common.config import LoaderOptions
from tasks.common.documents import (
    Document,
    FileRef,
    printable_name,
    too_large_reason,
    unreadable_reason,
)
from tasks.common.errors import LoadError
from tasks.common.failpoints import failpoint
from tasks.load.encoding import Decoded, decode_text

FILE_TYPES = frozenset({"text", "markdown", "pdf", "csv", "html", "json", "code"})
"""The ``file_type`` values of the built-in loaders (the ``auto`` splitter keys on them)."""


class Loader(Protocol):
    """Turn one file into Documents."""

    name: str

    def load(self, file: FileRef) -> Iterator[Document]:
        """Yield the Documents of ``file``; raise LoadError with a reason if it is bad."""
        ...


@runtime_checkable
class ConfigurableLoader(Protocol):
    """A loader that takes the run's LoaderOptions."""

    name: str

    def load(self, file: FileRef) -> Iterator[Document]:
        """Yield the Documents of ``file``."""
        ...

    def with_options(self, options: LoaderOptions) -> Loader:
        """Return a loader that uses ``options``."""
        ...


_REGISTRY: dict[str, Loader] = {}


def register(loader: Loader, *extensions: str) -> None:
    """Register ``loader`` for each extension (".md"); a later registration wins."""
    for ext in extensions:
        if not ext.startswith("."):
            raise ValueError(f"extension must start with '.': {ext!r}")
        _REGISTRY[ext.lower()] = loader


def loader_for(file: FileRef) -> Loader:
    """Return the loader registered for the file's extension.

    Raises:
        LoadError: If no loader handles that extension.

    """
    try:
        return _REGISTRY[file.extension]
    except KeyError:
        raise LoadError(f"unsupported file type {file.extension or '(no extension)'!r}") from None


def configured(loader: Loader, options: LoaderOptions) -> Loader:
    """Return ``loader`` set up with ``options`` when it takes options, else as it is."""
    if isinstance(loader, ConfigurableLoader):
        return loader.with_options(options)
    return loader


def registered_extensions() -> list[str]:
    """Return every registered extension, sorted."""
    return sorted(_REGISTRY)


def _any_case(ext: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in ext)


def default_includes() -> list[str]:
    """Return the include globs that mean "every file type we can load".

    Extensions match in any case (``**/*.[tT][xX][tT]``), as the registry does, so
    ``NOTES.TXT`` is loaded too.
    """
    return [f"**/*{_any_case(ext)}" for ext in registered_extensions()]


def file_metadata(file: FileRef, file_type: str) -> dict[str, Any]:
    """Return the metadata every loader puts on its Documents."""
    path = Path(file.path)
    return {
        "source": file.source,
        "file_path": printable_name(file.path),
        "file_name": printable_name(path.name),
        "file_type": file_type,
        "size": file.size,
        "mtime": file.mtime,
        "sha256": file.sha256,
    }


#: The sha256 of the bytes each file was read as (path -> hex), while :func:`recording_reads`.
_reads: ContextVar[dict[str, str] | None] = ContextVar("docflow_reads", default=None)


@contextmanager
def recording_reads() -> Iterator[dict[str, str]]:
    """Record the sha256 of what :func:`read_bytes` returns in the block, by file path.

    Planning hashed each file; a file rewritten since (or while) is read as other bytes.
    The batch loader compares the two, so the manifest records what was indexed.
    """
    reads: dict[str, str] = {}
    token = _reads.set(reads)
    try:
        yield reads
    finally:
        _reads.reset(token)


def read_bytes(file: FileRef, max_bytes: int | None = None) -> bytes:
    """Read a file's bytes; an unreadable or oversized file is a LoadError.

    The size is checked on the open file too, so a file that grew after discovery is
    still refused without being read whole. The sha256 of the bytes read is recorded
    (see :func:`recording_reads`).
    """
    if max_bytes is not None and file.size > max_bytes:
        raise LoadError(too_large_reason(file.size, max_bytes))
    failpoint("load:before-read")
    try:
        with open(file.path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if max_bytes is not None and size > max_bytes:
                raise LoadError(too_large_reason(size, max_bytes))
            # read at most one byte past the limit (read(n) allocates n bytes up front)
            data = fh.read() if max_bytes is None else fh.read(min(size, max_bytes) + 1)
    except OSError as exc:
        raise LoadError(unreadable_reason(exc)) from exc
    if max_bytes is not None and len(data) > max_bytes:  # it grew while being read
        raise LoadError(f"file too large: more than {max_bytes} bytes")
    reads = _reads.get()
    if reads is not None:
        reads[file.path] = hashlib.sha256(data).hexdigest()
    return data


def jsonable(value: Any, budget: list[int]) -> Any:
    """Return ``value`` as JSON-ready data (dates as ISO text); ``budget`` caps the nodes.

    Raises:
        LoadError: If the value has more nodes than the budget (an alias bomb, say).

    """
    budget[0] -= 1
    if budget[0] < 0:
        raise LoadError("metadata too large")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v, budget) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v, budget) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


class BaseLoader(ABC):
    """Shared machinery of the built-in loaders: options, guarded reads, decoding, metadata."""

    name = "base"
    file_type = "text"

    def __init__(self, options: LoaderOptions | None = None) -> None:
        """Keep the run's options (the defaults when none are given)."""
        self.options = options or LoaderOptions()

    def with_options(self, options: LoaderOptions) -> Self:
        """Return a loader of the same kind that uses ``options``."""
        return type(self)(options)

    @abstractmethod
    def load(self, file: FileRef) -> Iterator[Document]:
        """Yield the Documents of ``file``; raise LoadError with a reason if it is bad."""

    def read(self, file: FileRef) -> bytes:
        """Return the file's bytes (size-guarded); a zero-byte file is a LoadError."""
        data = read_bytes(file, self.options.max_file_size)
        if not data:
            raise LoadError("empty file: no text")
        return data

    def read_text(self, file: FileRef) -> Decoded:
        """Return the file's decoded text; binary, undecodable or blank text is a LoadError."""
        decoded = decode_text(self.read(file), file.extension, self.options.encoding)
        if not decoded.text.strip():
            raise LoadError("empty file: no text")
        return decoded

    def metadata(self, file: FileRef, decoded: Decoded | None = None) -> dict[str, Any]:
        """Return the file metadata of this loader's type, with the encoding if decoded."""
        meta = file_metadata(file, self.file_type)
        if decoded is not None:
            meta["encoding"] = decoded.encoding
            if decoded.decode_errors:
                meta["decode_errors"] = decoded.decode_errors
        return meta


LoaderFactory = Callable[[], Loader]
