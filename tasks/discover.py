"""Discover: expand include/exclude globs under a source root into fingerprinted files.

Rules: patterns are relative to the root and use ``**`` for any depth (``**/*.md`` also
matches ``a.md`` at the top); hidden files and folders (a name starting with ``.``) are
skipped unless asked for; symbolic links are never followed out of the root; files come in
a stable (sorted) order. Files are then grouped into batches by count and bytes, the unit
of work of every later stage.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from wcmatch import glob as wglob

from tasks.errors import ConfigError

log = logging.getLogger(__name__)

_GLOB_FLAGS = wglob.GLOBSTAR | wglob.DOTGLOB | wglob.NEGATE
_HASH_BLOCK = 1 << 20


@dataclass(frozen=True, slots=True)
class FileRef:
    """A discovered file: where it is, its name relative to the root, and its fingerprint."""

    path: str  # absolute path
    source: str  # relative to the source root, POSIX separators
    size: int
    mtime: float
    sha256: str

    @property
    def extension(self) -> str:
        """Return the lower-case extension with its dot (".md"), or ""."""
        return Path(self.source).suffix.lower()


def file_sha256(path: Path) -> str:
    """Return the sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _is_hidden(rel: str) -> bool:
    return any(part.startswith(".") for part in rel.split("/"))


def _inside(root: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(root)
    except ValueError:
        return False
    return True


def iter_matches(
    root: Path,
    include: Sequence[str],
    exclude: Sequence[str] = (),
    include_hidden: bool = False,
) -> Iterator[Path]:
    """Yield files under ``root`` matching any include and no exclude glob (walk order).

    Symlinked folders are walked only when they resolve inside ``root`` and not to one of
    their own ancestors (so a link loop ends).

    Raises:
        ConfigError: If ``root`` is not a folder.
    """
    if not root.is_dir():
        raise ConfigError(f"source folder not found: {root}")
    real_root = root.resolve()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        here = Path(dirpath)
        parts = here.relative_to(root).parts
        ancestors = {(root.joinpath(*parts[:i])).resolve() for i in range(len(parts))}
        if not _inside(real_root, here) or here.resolve() in ancestors:
            dirnames[:] = []
            continue
        if not include_hidden:
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        dirnames.sort()
        for name in sorted(filenames):
            path = here / name
            rel = path.relative_to(root).as_posix()
            if not include_hidden and _is_hidden(rel):
                continue
            if not wglob.globmatch(rel, list(include), flags=_GLOB_FLAGS):
                continue
            if exclude and wglob.globmatch(rel, list(exclude), flags=_GLOB_FLAGS):
                continue
            if path.is_symlink() and not _inside(real_root, path):
                log.debug("skipping %s: link points outside the source root", rel)
                continue
            if path.is_file():
                yield path


def discover(
    root: Path,
    include: Sequence[str],
    exclude: Sequence[str] = (),
    include_hidden: bool = False,
) -> list[FileRef]:
    """Return the matching files with size, mtime and sha256, sorted by source path."""
    files = []
    for path in sorted(
        iter_matches(root, include, exclude, include_hidden),
        key=lambda p: p.relative_to(root).as_posix(),
    ):
        stat = path.stat()
        files.append(
            FileRef(
                path=os.path.abspath(path),  # through a link: keep the link's name
                source=path.relative_to(root).as_posix(),
                size=stat.st_size,
                mtime=stat.st_mtime,
                sha256=file_sha256(path),
            )
        )
    return files


def plan_batches(files: Sequence[FileRef], max_files: int, max_bytes: int) -> list[list[FileRef]]:
    """Group files, in order, into batches of at most ``max_files`` and about ``max_bytes``.

    A file larger than ``max_bytes`` gets a batch of its own.
    """
    batches: list[list[FileRef]] = []
    current: list[FileRef] = []
    size = 0
    for f in files:
        if current and (len(current) >= max_files or size + f.size > max_bytes):
            batches.append(current)
            current, size = [], 0
        current.append(f)
        size += f.size
    if current:
        batches.append(current)
    return batches


# --- Prefect edge ---
from prefect import get_run_logger, task  # noqa: E402


@task(name="discover")
def discover_task(
    source: str,
    include: list[str],
    exclude: list[str],
    include_hidden: bool,
    batch_files: int,
    batch_bytes: int,
) -> list[list[FileRef]]:
    """Find the files to ingest and group them into batches."""
    files = discover(Path(source), include, exclude, include_hidden)
    batches = plan_batches(files, batch_files, batch_bytes)
    get_run_logger().info(
        "discovered %d files in %d batches under %s", len(files), len(batches), source
    )
    return batches
