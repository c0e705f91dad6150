"""Markdown loader (.md, .mdx): YAML front matter becomes metadata, the rest is the text.

Front matter is a block at the very start of the file between a ``---`` line and a ``---``
(or ``...``) line. Its keys join the metadata without replacing the loader's own keys
(``source``, ``file_type``...). A block that is not a YAML mapping (a thematic break, say)
is not front matter: the text is kept whole.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import yaml

from tasks.common.documents import Document, FileRef
from tasks.common.errors import LoadError
from tasks.load.base import BaseLoader, jsonable

log = logging.getLogger(__name__)

MAX_FRONT_MATTER = 64 * 1024
"""Front matter larger than this many characters is left in the text, unparsed."""

MAX_FRONT_MATTER_NODES = 10_000
"""A front matter with more values than this (e.g. a YAML alias bomb) is not used."""

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?\r?\n)?(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """Return (front matter as a JSON-ready dict, the text after it).

    Text without valid front matter comes back unchanged with an empty dict.
    """
    match = _FRONT_MATTER.match(text)
    if match is None or match.end() > MAX_FRONT_MATTER:
        return {}, text
    try:
        data = yaml.safe_load(match.group(1) or "")
        meta = jsonable(data, [MAX_FRONT_MATTER_NODES]) if isinstance(data, dict) else None
    except (yaml.YAMLError, LoadError, RecursionError) as exc:
        log.debug("front matter not used: %s", exc)
        return {}, text
    if meta is None:
        return {}, text
    return meta, text[match.end() :]


class MarkdownLoader(BaseLoader):
    """Load a Markdown file as one Document (``file_type`` "markdown")."""

    name = "markdown"
    file_type = "markdown"

    def load(self, file: FileRef) -> Iterator[Document]:
        """Yield the text after the front matter; its keys join the metadata."""
        decoded = self.read_text(file)
        front, text = split_front_matter(decoded.text)
        if not text.strip():
            raise LoadError("empty file: no text after the front matter")
        meta = self.metadata(file, decoded)
        yield Document(text, {**front, **meta})
