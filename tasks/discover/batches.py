"""Batches: the files of a run grouped into units of work of about the same size.

Every later stage (load, split, embed, store) takes one batch at a time, and the store of
one batch overlaps the loading of the next; so a batch is cut by the work it carries, the
chunks its files will give (estimated before they are loaded), within a count of files and
of bytes. The first batches are smaller, so the pipe fills within seconds. Each type's
files are spread through the run (:func:`spread_by_type`), so that no stretch of batches
holds all the files that are slow to load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tasks.common.documents import FileRef

#: Characters of text per byte, by extension, where most of a file's bytes are not its text:
#: HTML is mostly markup, a PDF mostly fonts, images and compressed streams.
TEXT_PER_BYTE = {".html": 0.3, ".htm": 0.3, ".xhtml": 0.3, ".pdf": 0.05}
#: Characters per token of the length units that count tokens (English prose and code).
CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """How much work one batch carries: files, bytes and (estimated) chunks.

    Batches are cut by the chunks they will give, the work of the embed and store stages,
    so that no batch dwarfs the others; the first batches are smaller (a quarter, then half
    of ``chunks``) so that the store starts within seconds while later batches load.
    ``chunk_chars`` is the new text a chunk brings (its size less the overlap, in characters).
    """

    files: int = 1000
    bytes: int = 8_000_000
    chunks: int = 1000
    chunk_chars: int = 600

    @classmethod
    def for_chunks(
        cls, files: int, size: int, chunks: int, chunk_size: int, overlap: int, unit: str
    ) -> BatchLimits:
        """Return the limits of a run that splits into ``chunk_size`` with ``overlap``."""
        per_unit = 1 if unit == "chars" else CHARS_PER_TOKEN
        return cls(files, size, chunks, max(1, (chunk_size - overlap) * per_unit))


def estimate_chunks(file: FileRef, chunk_chars: int) -> int:
    """Estimate how many chunks ``file`` will give, without loading it.

    Its text (bytes, less markup for HTML and PDF) over the text a chunk brings; a file
    whose loader makes one document per line (CSV, JSON Lines) gives at least a chunk per
    line, so those lines are counted.
    """
    from tasks.load.jsonfile import JSON_LINES

    text = file.size * TEXT_PER_BYTE.get(file.extension, 1.0)
    estimate = max(1, round(text / chunk_chars))
    if file.extension in {".csv", ".tsv", *JSON_LINES} and file.error is None:
        try:
            with open(file.path, "rb") as fh:
                lines = sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 20), b""))
        except OSError:  # the load stage reports it
            lines = 0
        estimate = max(estimate, lines)
    return estimate


def spread_by_type(files: Sequence[FileRef], estimates: Sequence[int]) -> list[int]:
    """Return the order of ``files`` (indexes) that spreads each type through the run.

    Loading costs differ by type far more than storing does (a PDF's chunk takes many times
    a Markdown file's to load), and a corpus's folders often keep a type together: in path
    order the slow-to-load files came one after the other at the end, the loaders fell
    behind and the store waited for them (docs/performance.md, "Batches"). Each file goes
    where the run has given the share of all its type's estimated chunks (``estimates``)
    that its type has given before it, half of its own counted; within a type, and among
    files of one type only, the order is kept.
    """
    totals: dict[str, int] = {}
    for f, n in zip(files, estimates, strict=True):
        totals[f.extension] = totals.get(f.extension, 0) + n
    before: dict[str, int] = dict.fromkeys(totals, 0)
    place: list[tuple[float, int]] = []
    for i, (f, n) in enumerate(zip(files, estimates, strict=True)):
        place.append(((before[f.extension] + n / 2) / totals[f.extension], i))
        before[f.extension] += n
    return [i for _, i in sorted(place)]


def plan_batches(files: Sequence[FileRef], limits: BatchLimits) -> list[list[FileRef]]:
    """Group files into batches within ``limits`` (files, bytes, estimated chunks).

    The files go in the order of :func:`spread_by_type` (their own order where they are all
    of one type). A file that alone exceeds a limit gets a batch of its own. The first batch
    aims at a quarter of ``limits.chunks``, the second at half: the pipe fills quickly.
    """
    estimates = [estimate_chunks(f, limits.chunk_chars) for f in files]
    batches: list[list[FileRef]] = []
    current: list[FileRef] = []
    size = chunks = 0
    for i in spread_by_type(files, estimates):
        f, estimate = files[i], estimates[i]
        target = limits.chunks >> max(0, 2 - len(batches))  # 1/4, 1/2, then the whole
        full = (
            len(current) >= limits.files
            or size + f.size > limits.bytes
            or chunks + estimate > target
        )
        if current and full:
            batches.append(current)
            current, size, chunks = [], 0, 0
        current.append(f)
        size += f.size
        chunks += estimate
    if current:
        batches.append(current)
    return batches
