"""Flow parameters and their sources: defaults < config file (TOML) < DOCFLOW_* env < flags.

Pydantic lives here only. The models double as the Prefect flow parameters, so their
field descriptions become the form the Prefect UI renders for a run.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tasks.errors import ConfigError

ENV_PREFIX = "DOCFLOW_"

SplitterName = Literal["recursive"]
LengthUnit = Literal["chars"]


class IngestParams(BaseModel):
    """What to ingest, how to split and embed it, and where to put it."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field("data/raw", description="Folder to read documents from.")
    include: list[str] = Field(
        default_factory=list,
        description="Glob patterns (relative to source, ** recurses) of files to ingest; "
        "empty means every file type docflow can load.",
    )
    exclude: list[str] = Field(default_factory=list, description="Glob patterns to leave out.")
    include_hidden: bool = Field(False, description="Also read hidden files and folders.")
    data_dir: str = Field("data", description="Where tables, the Chroma store and state live.")
    collection: str = Field(
        "docflow", min_length=3, max_length=512, description="Chroma collection name."
    )
    splitter: SplitterName = Field("recursive", description="Splitting strategy.")
    chunk_size: int = Field(1024, gt=0, description="Maximum chunk size in the length unit.")
    chunk_overlap: int = Field(100, ge=0, description="Overlap between neighbouring chunks.")
    length_unit: LengthUnit = Field("chars", description="Unit of chunk_size and chunk_overlap.")
    model: str = Field(
        "all-MiniLM-L6-v2",
        description="sentence-transformers model name or path (the default is bundled).",
    )
    embed_batch_size: int = Field(32, gt=0, description="Chunks per embedding batch.")
    batch_files: int = Field(64, gt=0, description="At most this many files per batch.")
    batch_bytes: int = Field(
        8_000_000, gt=0, description="At most about this many bytes of files per batch."
    )
    strict: bool = Field(False, description="Treat files that fail to load as a failed run.")

    @model_validator(mode="after")
    def _overlap_below_size(self) -> IngestParams:
        if self.chunk_overlap > self.chunk_size:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must not exceed chunk_size "
                f"({self.chunk_size})"
            )
        return self

    @property
    def data_path(self) -> Path:
        """Return the data directory as a Path."""
        return Path(self.data_dir)


def _from_env(environ: Mapping[str, str], fields: Mapping[str, Any]) -> dict[str, Any]:
    """Read ``DOCFLOW_<FIELD>`` variables; list fields are comma-separated."""
    values: dict[str, Any] = {}
    for name, info in fields.items():
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is None:
            continue
        is_list = getattr(info.annotation, "__origin__", None) is list
        values[name] = [p.strip() for p in raw.split(",") if p.strip()] if is_list else raw
    return values


def _from_file(path: Path | None, section: str) -> dict[str, Any]:
    """Read a TOML config file: the ``[section]`` table, or top-level keys."""
    if path is None:
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {path}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    table = data.get(section, data)
    return {k.replace("-", "_"): v for k, v in table.items() if not isinstance(v, dict)}


def resolve_params(
    config_file: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> IngestParams:
    """Merge defaults, config file, environment and explicit overrides into IngestParams.

    Raises:
        ConfigError: With a one-line message naming the first bad field.

    """
    env = os.environ if environ is None else environ
    merged: dict[str, Any] = {}
    merged.update(_from_file(config_file, "ingest"))
    merged.update(_from_env(env, IngestParams.model_fields))
    merged.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return IngestParams(**merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "options"
        raise ConfigError(f"invalid {where}: {err['msg']}") from exc
