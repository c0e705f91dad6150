"""Date-partitioned sources: a source path template such as ``landing/{date:%Y-%m-%d}/``.

A partition is ingested with the template's fixed prefix (``landing``) as the source root
and the partition folder (``2024-01-02``) in front of every include and exclude glob. So a
file's source, and with it its document and chunk ids, names its partition
(``2024-01-02/notes.md``): two partitions holding files of the same name never collide in
one collection, and a run's deletions stay inside its own partition (deletions are scoped
to the root and the globs, see ``tasks.discover.files.classify``). Re-running a partition is an
ordinary incremental run over the same scope, hence idempotent.
"""

from __future__ import annotations

import datetime as dt
import re

from wcmatch import glob as wglob

from tasks.common.config import IngestParams
from tasks.common.errors import ConfigError
from tasks.load import default_includes

#: The most partitions one backfill may span (a typo in a year should not start 36,500 runs).
MAX_PARTITIONS = 3660

_FIELD = re.compile(r"\{[^{}]*\}")


def split_template(template: str) -> tuple[str, str]:
    """Return the fixed folder prefix of ``template`` and its partition part.

    ``landing/{date:%Y-%m-%d}/`` gives ``("landing", "{date:%Y-%m-%d}")``; a template that
    starts with its date field has the current folder as its prefix.

    Raises:
        ConfigError: If the template has no ``{date...}`` field.
    """
    first = template.find("{")
    if first < 0 or "{date" not in template:
        raise ConfigError(
            f"source_template {template!r} needs a {{date:...}} field, "
            "e.g. landing/{date:%Y-%m-%d}/"
        )
    cut = template.rfind("/", 0, first)
    prefix = "/" if cut == 0 else (template[:cut] if cut > 0 else ".")
    return prefix, template[cut + 1 :].strip("/")


def partition_folder(template: str, day: dt.date) -> str:
    """Return the partition folder of ``day``, relative to the template's prefix."""
    _, part = split_template(template)
    try:
        return part.format(date=day)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(f"source_template {template!r} cannot be rendered: {exc}") from exc


def _under(folder: str, patterns: list[str]) -> list[str]:
    """Put ``folder`` in front of every glob, keeping a leading ``!`` (negation) first."""
    out = []
    for pattern in patterns:
        negate = "!" if pattern.startswith("!") else ""
        out.append(f"{negate}{folder}/{pattern.removeprefix('!').lstrip('/')}")
    return out


def partition_params(params: IngestParams, day: dt.date | None) -> IngestParams:
    """Return the parameters that ingest the partition of ``day`` (every partition if None).

    The source becomes the template's prefix and the globs are scoped to the partition
    folder; ``partition_date`` records the day. Parameters without a template are returned
    unchanged.
    """
    if not params.source_template:
        return params
    prefix, part = split_template(params.source_template)
    if day is None:
        folder = _FIELD.sub("*", part)  # every partition: the date fields become wildcards
    else:
        rendered = partition_folder(params.source_template, day)
        folder = wglob.escape(rendered) if wglob.is_magic(rendered) else rendered
    return params.model_copy(
        update={
            "source": prefix,
            "include": _under(folder, params.include or default_includes()),
            "exclude": _under(folder, params.exclude),
            "partition_date": day,
        }
    )


def partition_dates(start: dt.date, end: dt.date) -> list[dt.date]:
    """Return every day from ``start`` to ``end``, both included.

    Raises:
        ConfigError: If ``end`` is before ``start`` or the range is implausibly long.
    """
    if end < start:
        raise ConfigError(f"backfill end {end} is before its start {start}")
    days = (end - start).days + 1
    if days > MAX_PARTITIONS:
        raise ConfigError(f"backfill of {days} partitions refused (at most {MAX_PARTITIONS})")
    return [start + dt.timedelta(days=i) for i in range(days)]
