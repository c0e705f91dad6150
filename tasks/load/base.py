"""The loader interface and the extension registry users can extend.

A loader turns one file into Documents. It raises :class:`LoadError` with a one-line
reason for a file it cannot read; the batch loader records that reason and goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from tasks.discover import FileRef
from tasks.documents import Document
from tasks.errors import LoadError


class Loader(Protocol):
    """Turn one file into Documents."""

    name: str

    def load(self, file: FileRef) -> Iterator[Document]:
        """Yield the Documents of ``file``; raise LoadError with a reason if it is bad."""
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


def registered_extensions() -> list[str]:
    """Return every registered extension, sorted."""
    return sorted(_REGISTRY)


def default_includes() -> list[str]:
    """Return the include globs that mean "every file type we can load"."""
    return [f"**/*{ext}" for ext in registered_extensions()]


def file_metadata(file: FileRef, file_type: str) -> dict[str, Any]:
    """Return the metadata every loader puts on its Documents."""
    path = Path(file.path)
    return {
        "source": file.source,
        "file_path": file.path,
        "file_name": path.name,
        "file_type": file_type,
        "size": file.size,
        "mtime": file.mtime,
        "sha256": file.sha256,
    }


def read_bytes(file: FileRef, max_bytes: int | None = None) -> bytes:
    """Read a file's bytes; an unreadable or oversized file is a LoadError."""
    if max_bytes is not None and file.size > max_bytes:
        raise LoadError(f"file too large: {file.size} bytes > limit {max_bytes}")
    try:
        return Path(file.path).read_bytes()
    except OSError as exc:
        raise LoadError(f"cannot read file: {exc.strerror or exc}") from exc


LoaderFactory = Callable[[], Loader]
