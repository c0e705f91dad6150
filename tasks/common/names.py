"""Collection names: which ones a user may give, and the names docflow derives from them.

A logical collection (the name a user gives) is stored as one or more physical Chroma
collections: the name itself, or ``<name>--v<run id>`` for the versions ``reingest`` builds
and switches to. Its lock file and lexical index are files named after it. The rules here
make every one of those names valid wherever it goes, so a bad name is refused in one
line before a run starts (Chroma refuses it only once a run reaches the store).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re

from tasks.common.runs import RUN_ID_PATTERN, new_run_id

_VERSION_SUFFIX = re.compile(rf"--v{RUN_ID_PATTERN}\Z")
#: Chroma's longest name, less the ``--v<run id>`` of a rebuild version.
MAX_NAME = 512 - len(f"--v{new_run_id()}")
NAME_PATTERN = rf"[a-zA-Z0-9][a-zA-Z0-9._-]{{1,{MAX_NAME - 2}}}[a-zA-Z0-9]"
#: Longest file name we give a file named after a collection (file systems allow 255 bytes).
MAX_FILE_NAME = 200


def check_collection_name(name: str) -> str:
    """Return ``name`` if it can name a collection and all its versions; else ValueError.

    Chroma's rules (3-512 characters of ``[a-zA-Z0-9._-]``, a letter or digit at each end,
    no ``..``, not an IP address), with room kept for a version suffix, which a name may
    not end in itself: ``clear`` and ``reingest`` would take it for a version of another
    collection and drop it.
    """
    problem = _name_problem(name)
    if problem:
        shown = repr(name) if len(name) <= 60 else f"{name[:40]!r}... ({len(name)} characters)"
        raise ValueError(f"{shown} is not a collection name: {problem}")
    return name


def _name_problem(name: str) -> str | None:
    """Return what is wrong with ``name`` as a collection name, or None."""
    if not re.fullmatch(NAME_PATTERN, name):
        return f"use 3-{MAX_NAME} characters from a-z A-Z 0-9 . _ -, a letter or digit at each end"
    if ".." in name:
        return "no two dots in a row"
    if _is_ip_address(name):
        return "it reads as an IP address"
    if _VERSION_SUFFIX.search(name):
        return "names ending in --v<run id> are the versions reingest builds"
    return None


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def version_name(name: str, run_id: str) -> str:
    """Return the physical collection name of a rebuild of ``name`` by run ``run_id``."""
    return f"{name}--v{run_id}"


def is_version_of(name: str, physical: str) -> bool:
    """Return whether ``physical`` is logical ``name`` itself or one of its rebuild versions."""
    return physical == name or (
        physical.startswith(name) and _VERSION_SUFFIX.fullmatch(physical[len(name) :]) is not None
    )


def logical_name(physical: str) -> str:
    """Return the logical collection a physical one (a rebuild version or not) belongs to."""
    return _VERSION_SUFFIX.sub("", physical)


def file_name(name: str, suffix: str) -> str:
    """Return a file name for ``name`` plus ``suffix`` that a file system takes.

    Names longer than ``MAX_FILE_NAME`` keep their start and get a hash of the whole name,
    so two long names that share a start still get files of their own.
    """
    if len(name.encode("utf-8")) <= MAX_FILE_NAME:
        return name + suffix
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
    return f"{name[: MAX_FILE_NAME - 17]}-{digest}{suffix}"
