"""One-line records a data dir keeps about itself (where its tables live, its Chroma server).

A record is a small text file holding one value. It is replaced atomically (a reader sees
the old value or the new one, never half of one) and only rewritten when its value changes,
so commands that only pass the same flag again leave the data dir untouched.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def read_record(path: Path) -> str | None:
    """Return the value recorded in ``path`` (stripped; may be empty), or None if absent."""
    if not path.is_file():
        return None
    return path.read_text(encoding="utf-8").strip()


def write_record(path: Path, value: str) -> None:
    """Record ``value`` in ``path`` (creating its folder), unless it already holds it."""
    if read_record(path) == value:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(value + "\n", encoding="utf-8")
    os.replace(tmp, path)
