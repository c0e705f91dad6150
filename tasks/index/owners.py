"""Which data dir owns which collection on a shared Chroma server.

A Chroma server can hold the collections of several data dirs (each with its own
manifest, tables and lexical indexes). Collections of different data dirs must never be
confused or written across: a data dir that wrote into another's collection would leave
two manifests that each believe they describe it. So each data dir has an id
(``<data_dir>/data-dir.id``, made by the first command that writes a server's collection),
and a collection it creates on a server records that id and the data dir's path in its
metadata (:data:`OWNER_KEY`, :data:`OWNER_DIR_KEY`). Then:

- a command that writes (ingest, reingest, backfill, restore, clear) refuses, in one line,
  a collection another data dir owns (:func:`refuse_foreign`), and claims one that
  records no owner (written before owners were recorded);
- ``query`` and ``inspect`` show the collections this data dir owns, and name those of
  other data dirs as theirs (:func:`describe_missing`).

The embedded store belongs to its one data dir: nothing is recorded there.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.common.errors import ConfigError
from tasks.common.names import is_version_of, logical_name
from tasks.common.records import read_record, write_record

if TYPE_CHECKING:
    from chromadb.api import ClientAPI

#: The file holding a data dir's id.
ID_FILE = "data-dir.id"
#: Collection metadata: the id of the data dir that owns it, and that data dir's path.
OWNER_KEY = "docflow_owner"
OWNER_DIR_KEY = "docflow_data_dir"


def data_dir_id(data_dir: Path, create: bool = False) -> str | None:
    """Return ``data_dir``'s id; ``create`` makes one if it has none (writers only)."""
    path = data_dir / ID_FILE
    found = read_record(path)
    if found or not create:
        return found or None
    write_record(path, uuid.uuid4().hex)
    return read_record(path)


def owner_marks(data_dir: Path) -> dict[str, str]:
    """Return the metadata a collection created on a server by ``data_dir`` records."""
    owner = data_dir_id(data_dir, create=True)
    assert owner is not None
    return {OWNER_KEY: owner, OWNER_DIR_KEY: str(data_dir.resolve())}


@dataclass(frozen=True)
class Owned:
    """The logical collections on a server, by who owns them."""

    mine: list[str]
    others: dict[str, str]  # logical name -> the owning data dir's path
    unowned: list[str]


def _metadata(client: ClientAPI) -> dict[str, dict[str, Any]]:
    """Return ``{physical name: metadata}`` of every collection of the server."""
    out = {}
    for col in client.list_collections():
        name = col if isinstance(col, str) else col.name
        meta = {} if isinstance(col, str) else dict(col.metadata or {})
        out[str(name)] = meta
    return out


def owned(client: ClientAPI, data_dir: Path) -> Owned:
    """Sort the server's logical collections into ``data_dir``'s, others' and no one's."""
    me = data_dir_id(data_dir)
    mine: set[str] = set()
    others: dict[str, str] = {}
    unowned: set[str] = set()
    for physical, meta in _metadata(client).items():
        name, owner = logical_name(physical), meta.get(OWNER_KEY)
        if not owner:
            unowned.add(name)
        elif owner == me:
            mine.add(name)
        else:
            others[name] = str(meta.get(OWNER_DIR_KEY) or "another data dir")
    return Owned(sorted(mine), dict(sorted(others.items())), sorted(unowned - mine))


def owner_of(meta: dict[str, Any] | None, data_dir: Path) -> str | None:
    """Return the path of the other data dir that owns a collection (by its metadata), else None."""
    owner = (meta or {}).get(OWNER_KEY)
    if not owner or owner == data_dir_id(data_dir):
        return None
    return str((meta or {}).get(OWNER_DIR_KEY) or "another data dir")


def refuse_foreign(client: ClientAPI, data_dir: Path, name: str, where: str) -> None:
    """Refuse to write logical collection ``name`` if another data dir owns a version of it.

    Versions that record no owner are claimed for ``data_dir``.

    Raises:
        ConfigError: If another data dir owns it (naming that data dir).
    """
    for physical, meta in _metadata(client).items():
        if not is_version_of(name, physical):
            continue
        other = owner_of(meta, data_dir)
        if other:
            raise ConfigError(
                f"collection {name!r} on {where} belongs to another data dir ({other}): "
                f"choose another --collection for {data_dir}, or run this in {other}"
            )
        if not meta.get(OWNER_KEY):
            client.get_collection(physical).modify(metadata={**meta, **owner_marks(data_dir)})


def describe_missing(client: ClientAPI, data_dir: Path, name: str, where: str) -> str:
    """Return the one-line error for collection ``name`` that ``data_dir`` does not have."""
    found = owned(client, data_dir)
    have = [*found.mine, *found.unowned]
    if name in found.others:
        head = f"collection {name!r} on {where} belongs to another data dir ({found.others[name]})"
    else:
        head = f"collection {name!r} not found in {where}"
    tail = (
        f"this data dir ({data_dir}) has {', '.join(have)}"
        if have
        else (
            f"this data dir ({data_dir}) has none there yet"
            + ("" if name in found.others else ": run docflow ingest")
        )
    )
    others = [n for n in found.others if n != name]
    if others:
        tail += f"; other data dirs' collections there: {', '.join(others)}"
    return f"{head}; {tail}"
