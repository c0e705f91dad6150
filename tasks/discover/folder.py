"""A folder as a stream of Documents: discover its files, then load them.

The LangChain ``DirectoryLoader`` of docflow, for use outside a run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

from tasks.common.config import LoaderOptions
from tasks.common.documents import Document
from tasks.discover.files import discover
from tasks.load import default_includes, iter_load

log = logging.getLogger(__name__)


def lazy_load(
    root: Path,
    include: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
    options: LoaderOptions | None = None,
) -> Iterator[Document]:
    """Yield the Documents of every loadable file under ``root``, streaming.

    Failed files are logged at DEBUG and skipped; use :func:`iter_load` to see them.
    Memory stays bounded by a few files' documents, however large the folder.
    """
    files = discover(root, include or default_includes(), exclude)
    for row in iter_load(files, options):
        if row.document is not None:
            yield row.document
        else:
            log.debug("skipped %s: %s", row.source, row.error)
