"""Helpers for the loader tests: FileRefs for written files, hand-made PDFs, test loaders.

Loaders defined here are importable by name, so the load worker processes can unpickle them.
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from tasks.common.documents import Document, FileRef
from tasks.discover.files import discover
from tasks.load.base import file_metadata


def load_corpus(paths: Iterable[Path]) -> tuple[Document, ...]:
    """Load files of ../shared/corpora as the ingest does (bad and non-UTF-8 files drop out)."""
    from tasks.common.documents import file_sha256
    from tasks.load import load_file
    from tests.conftest import CORPORA

    docs: list[Document] = []
    for path in paths:
        ref = FileRef(str(path), path.relative_to(CORPORA).as_posix(), 0, 0.0, file_sha256(path))
        docs += [r.document for r in load_file(ref) if r.document is not None]
    return tuple(docs)


def ref_for(path: Path) -> FileRef:
    """Return the FileRef discover gives for one file (its folder is the root)."""
    [ref] = discover(path.parent, [path.name], include_hidden=True)
    return ref


def write_file(folder: Path, name: str, data: bytes | str) -> FileRef:
    """Write ``data`` (str as UTF-8) to ``folder/name`` and return its FileRef."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return ref_for(path)


def flate(chunks: Iterable[bytes]) -> bytes:
    """Compress ``chunks`` as one zlib stream without holding them all in memory."""
    comp = zlib.compressobj(9)
    out = [comp.compress(chunk) for chunk in chunks]
    out.append(comp.flush())
    return b"".join(out)


def raw_pdf(content: bytes, compressed: bool = True) -> bytes:
    """Return a one-page PDF whose page content stream is ``content`` (already compressed)."""
    filt = b" /Filter /FlateDecode" if compressed else b""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d%s >>\nstream\n" % (len(content), filt) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return out


def bomb_pdf(megabytes: int = 100) -> bytes:
    """Return a ~100 KB PDF whose content stream inflates to ``megabytes`` MB of spaces."""
    head = b"BT /F1 12 Tf 72 720 Td (boom) Tj ET\n"
    return raw_pdf(flate([head, *([b" " * 2**20] * megabytes)]))


def slow_pdf(operators: int = 400_000) -> bytes:
    """Return a tiny PDF whose text extraction takes long (many show-text operators)."""
    body = [b"BT /F1 12 Tf 72 720 Td\n", *([b"(x) Tj 1 0 Td\n"] * operators), b"ET\n"]
    return raw_pdf(flate(body))


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees no file or all of it, never a part
    (a worker reports its pid so; the test polls for it from another process)."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    os.replace(part, path)


class SleepLoader:
    """A loader that takes ``seconds`` per file (for the time guard)."""

    name = "sleep"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def load(self, file: FileRef) -> Iterator[Document]:
        time.sleep(self.seconds)
        yield Document("slept", file_metadata(file, "text"))


class GatedLoader:
    """A loader that writes its process id to ``pid``, then waits for ``gate`` to exist (a
    minute at most) and writes ``finished``: a file at hand, for as long as a test likes."""

    name = "gated"

    def __init__(self, gate: Path, pid: Path, finished: Path) -> None:
        self.gate, self.pid, self.finished = str(gate), str(pid), str(finished)

    def load(self, file: FileRef) -> Iterator[Document]:
        write_whole(Path(self.pid), str(os.getpid()))
        deadline = time.monotonic() + 60
        while not os.path.exists(self.gate) and time.monotonic() < deadline:
            time.sleep(0.02)
        Path(self.finished).touch()
        yield Document("gated", file_metadata(file, "text"))


class NiceLoader:
    """A loader whose document is its process's CPU priority (``nice``)."""

    name = "nice"

    def load(self, file: FileRef) -> Iterator[Document]:
        yield Document(str(os.getpriority(os.PRIO_PROCESS, 0)), file_metadata(file, "text"))


class HogLoader:
    """A loader that allocates ``megabytes`` MB at once (for the memory guard)."""

    name = "hog"

    def __init__(self, megabytes: int) -> None:
        self.megabytes = megabytes

    def load(self, file: FileRef) -> Iterator[Document]:
        block = bytearray(self.megabytes * 2**20)
        yield Document(f"allocated {len(block)} bytes", file_metadata(file, "text"))


class ExitLoader:
    """A loader that ends its process abruptly (a crash in native code, say)."""

    name = "exit"

    def load(self, file: FileRef) -> Iterator[Document]:
        os._exit(7)
        yield Document("never", {})  # pragma: no cover


class BuggyLoader:
    """A loader with a bug: it raises something other than LoadError."""

    name = "buggy"

    def load(self, file: FileRef) -> Iterator[Document]:
        raise KeyError("oops\nsecond line")
        yield Document("never", {})  # pragma: no cover


class LambdaMetadataLoader:
    """A loader whose documents cannot be pickled (a function in the metadata)."""

    name = "lambda"

    def load(self, file: FileRef) -> Iterator[Document]:
        yield Document("text", {"source": file.source, "callback": lambda: None})
