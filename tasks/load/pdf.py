"""PDF loader (pypdf): one Document per page, or one per file.

Per page (``pdf_mode="page"``, the default, as LangChain's PyPDFLoader): metadata ``page``
(0-based), ``page_label`` (the label printed on the page, e.g. "iv"), ``total_pages``.
Per file (``pdf_mode="file"``): one Document whose pages are joined by ``PAGE_DELIMITER``,
with ``total_pages``. Both add ``title``, ``author`` and ``creation_date`` (ISO 8601) from
the document information when present.

A page without a text layer (scanned, image or vector only) is recorded as such: an empty
Document with ``no_text_layer: true`` (it gives no chunk), never an empty chunk. A page whose
text cannot be extracted is an empty Document with ``text_error``. A file none of whose pages
has text fails with a reason.

Encrypted files are opened with the empty password (AES needs the ``cryptography``
package, a dependency); otherwise they fail with "encrypted PDF: password required".
pypdf's own limits bound the work a hostile file can cause (decompressed stream sizes,
page-tree depth, ...); the batch loader's worker processes bound the time.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator
from typing import Any

from tasks.common.documents import Document, FileRef
from tasks.common.errors import LoadError
from tasks.load.base import BaseLoader

log = logging.getLogger(__name__)

if logging.getLogger("pypdf").level == logging.NOTSET:
    # pypdf warns about every repair it makes to a damaged file; the loader records what
    # matters (the failure reason, pages without text), so only its errors are shown.
    logging.getLogger("pypdf").setLevel(logging.ERROR)

PAGE_DELIMITER = "\n\f"
"""Between pages in ``pdf_mode="file"`` (LangChain's default page delimiter)."""

HEADER_WINDOW = 1024
"""The ``%PDF-`` header must start within this many bytes (junk before it is tolerated)."""

PDF_LIMITS: dict[str, int] = {
    "zlib_maximum_output_length": 75_000_000,
    "lzw_maximum_output_length": 75_000_000,
    "run_length_maximum_output_length": 75_000_000,
    "maximum_declared_stream_length": 75_000_000,
}
"""pypdf Configuration limits applied while a PDF loads (bytes after decompression)."""

MAX_REASON = 200
"""Failure reasons are cut to this many characters."""


_OBJECT_ID = re.compile(r"IndirectObject\((\d+), (\d+), \d+\)")
"""pypdf prints a memory address in IndirectObject reprs: dropped, so reasons are stable."""


def _one_line(exc: BaseException) -> str:
    text = _OBJECT_ID.sub(r"IndirectObject(\1, \2)", " ".join(str(exc).split()))
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def _reason(exc: Exception) -> str:
    """Return the one-line failure reason for an exception raised by pypdf."""
    from pypdf import errors

    if isinstance(exc, errors.FileNotDecryptedError | errors.WrongPasswordError):
        return "encrypted PDF: password required"
    if isinstance(exc, errors.DependencyError):
        return f"encrypted PDF: {_one_line(exc)} (install 'cryptography')"
    if isinstance(exc, errors.EmptyFileError):
        return "empty file: no text"
    if isinstance(exc, errors.LimitReachedError):
        return f"PDF limit reached: {_one_line(exc)}"
    if isinstance(exc, errors.PyPdfError):
        return f"corrupt PDF: {_one_line(exc) or type(exc).__name__}"
    if isinstance(exc, RecursionError):
        return "PDF too complex: RecursionError"
    detail = _one_line(exc)
    return f"corrupt PDF: {type(exc).__name__}" + (f": {detail}" if detail else "")


def _info(reader: Any) -> dict[str, Any]:
    """Return title, author and creation date from the document information, if any."""
    try:
        info = reader.metadata
        if info is None:
            return {}
        found = {
            "title": info.title,
            "author": info.author,
            "creation_date": info.creation_date.isoformat() if info.creation_date else None,
        }
    except Exception as exc:  # noqa: BLE001 - a broken info dict must not fail the file
        log.debug("PDF info not readable: %s", exc)
        return {}
    return {k: " ".join(str(v).split()) for k, v in found.items() if v}


def _labels(reader: Any, total: int) -> list[str]:
    try:
        labels = list(reader.page_labels)
    except Exception as exc:  # noqa: BLE001 - broken label trees fall back to numbers
        log.debug("PDF page labels not readable: %s", exc)
        labels = []
    return labels if len(labels) == total else [str(i + 1) for i in range(total)]


def _open(data: bytes) -> Any:
    """Return a pypdf reader for ``data``, decrypted with the empty password if needed."""
    from pypdf import PasswordType, PdfReader

    if data.find(b"%PDF-", 0, HEADER_WINDOW) < 0:
        raise LoadError("not a PDF: no %PDF header")
    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
        raise LoadError("encrypted PDF: password required")
    return reader


def _page_texts(reader: Any) -> Iterator[tuple[str, str | None]]:
    """Yield (text, extraction error) per page."""
    for page in reader.pages:
        try:
            yield page.extract_text() or "", None
        except Exception as exc:  # noqa: BLE001 - pypdf raises anything on hostile pages
            yield "", _reason(exc)


class PdfLoader(BaseLoader):
    """Load a PDF per page or per file (``LoaderOptions.pdf_mode``)."""

    name = "pdf"
    file_type = "pdf"

    def load(self, file: FileRef) -> Iterator[Document]:
        """Yield the PDF's Documents; unreadable, encrypted or text-less files fail."""
        data = self.read(file)
        yield from self._extract(data, self.metadata(file))

    def _extract(self, data: bytes, meta: dict[str, Any]) -> list[Document]:
        """Parse the whole PDF under pypdf's limits (nothing of pypdf outlives this call)."""
        from pypdf import apply_configuration

        with apply_configuration(None, **PDF_LIMITS):
            try:
                reader = _open(data)
                total = len(reader.pages)
                if total == 0:
                    raise LoadError("empty PDF: no pages")
                meta = {**meta, **_info(reader), "total_pages": total}
                pages = list(_page_texts(reader))
                labels = _labels(reader, total)
            except (LoadError, MemoryError):
                raise
            except Exception as exc:  # noqa: BLE001 - pypdf raises anything on hostile files
                raise LoadError(_reason(exc)) from exc
        _check_some_text(pages)
        if self.options.pdf_mode == "file":
            return [_whole(pages, meta)]
        return [
            _page(text, error, {**meta, "page": i, "page_label": labels[i]})
            for i, (text, error) in enumerate(pages)
        ]


def _page(text: str, error: str | None, meta: dict[str, Any]) -> Document:
    """Return one page's Document; a page without text is marked, with empty content."""
    if error is not None:
        meta["text_error"] = error
    elif not text.strip():
        meta["no_text_layer"] = True
    return Document(text if text.strip() else "", meta)


def _whole(pages: list[tuple[str, str | None]], meta: dict[str, Any]) -> Document:
    """Return the whole file as one Document, pages joined by PAGE_DELIMITER."""
    empty = [i for i, (text, _) in enumerate(pages) if not text.strip()]
    if empty:
        meta["pages_without_text"] = empty
    return Document(PAGE_DELIMITER.join(t if t.strip() else "" for t, _ in pages), meta)


def _check_some_text(pages: list[tuple[str, str | None]]) -> None:
    """Fail a PDF none of whose pages has text, with the first extraction error if any."""
    if any(text.strip() for text, _ in pages):
        return
    errors = [e for _, e in pages if e is not None]
    if errors:
        raise LoadError(errors[0])
    raise LoadError(f"no text layer: {len(pages)} page(s) without extractable text (scanned?)")
