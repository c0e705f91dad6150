"""Flow parameters and their sources: defaults < config file (TOML) < DOCFLOW_* env < flags.

Pydantic lives here only. The models double as the Prefect flow parameters, so their
field descriptions become the form the Prefect UI renders for a run.

One module over ~400 lines on purpose: every setting a user can give, and the one way they
are layered and checked, are in one place, so the CLI, config files, the environment and
the Prefect UI's forms cannot disagree.
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import json
import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tasks.common.documents import printable_name
from tasks.common.errors import ConfigError
from tasks.common.names import NAME_PATTERN, check_collection_name

ENV_PREFIX = "DOCFLOW_"
_Model = TypeVar("_Model", bound=BaseModel)

PdfMode = Literal["page", "file"]


class LoaderOptions(BaseModel):
    """How files are read: per-format choices, and the size and time guards of every file.

    Any of these may also be given at the top level of the ingest parameters (a flag, a
    ``DOCFLOW_*`` variable or a config-file key such as ``pdf_mode``); it lands here.
    """

    model_config = ConfigDict(extra="forbid")

    pdf_mode: PdfMode = Field(
        "page", description="PDF: one document per page ('page') or per file ('file')."
    )
    csv_content_columns: list[str] = Field(
        default_factory=list,
        description="CSV: columns that make a row's text; empty means every column not "
        "listed in csv_metadata_columns.",
    )
    csv_metadata_columns: list[str] = Field(
        default_factory=list, description="CSV: columns copied into each row's metadata."
    )
    csv_header: bool = Field(
        True,
        description="CSV: the first row names the columns; if false, they are column_1...",
    )
    csv_delimiter: str | None = Field(
        None, min_length=1, max_length=1, description="CSV: field delimiter; empty sniffs it."
    )
    json_records_path: str | None = Field(
        None,
        description="JSON: dotted path to the list of records in a .json file (e.g. "
        "'data.items'); empty means the top-level list, or the whole document as one record.",
    )
    json_content_field: str | None = Field(
        None,
        description="JSON/JSONL: dotted path of the text field in each record; empty means "
        "the whole record.",
    )
    json_metadata_fields: list[str] = Field(
        default_factory=list, description="JSON/JSONL: dotted paths copied into metadata."
    )
    encoding: str | None = Field(
        None, description="Text encoding of every text file; empty detects it per file."
    )
    max_file_size: int = Field(
        100_000_000, gt=0, description="Files larger than this many bytes fail, unread."
    )
    timeout_s: float = Field(
        120.0, gt=0, description="Seconds one file may take to load before it fails."
    )
    workers: int | None = Field(
        None,
        ge=0,
        description="Worker processes that load files (each file time and memory guarded) "
        "and split batches; empty: one per core. 0 loads and splits in the calling "
        "process, without the time guard.",
    )
    memory_limit_mb: int | None = Field(
        2048, ge=64, description="Address space (MB) a load worker may add; empty: no limit."
    )

    def process_count(self) -> int:
        """Return the worker processes to use: ``workers``, else one per core."""
        return cores() if self.workers is None else self.workers


def cores() -> int:
    """Return the cores this process may run on (its affinity, where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


#: LoaderOptions fields that do not change what a file's documents are.
RUN_ONLY_LOADER_FIELDS: tuple[str, ...] = (
    "max_file_size",
    "timeout_s",
    "workers",
    "memory_limit_mb",
)

SplitterName = Literal[
    "auto",
    "recursive",
    "character",
    "token",
    "markdown",
    "html",
    "code",
    "semantic",
    "cluster",
    "agentic",
]
LengthUnit = Literal["chars", "tokens", "model_tokens"]
#: How the embedding model runs (tasks/embed/backends.py).
EmbedBackend = Literal["auto", "torch", "torch-fp16", "onnx", "onnx-int8"]
Retrieval = Literal["hybrid", "dense", "lexical"]
#: How ``hybrid`` puts the two scores on one scale (tasks/retrieval/ranking.py).
Fusion = Literal["absolute", "minmax", "zscore", "confidence", "rrf"]
#: How queries rank by default: the fusion, and the dense side's weight in ``hybrid``
#: (chosen by ``docflow evaluate`` on every shared data set: docs/retrieval.md, "Choosing
#: the default").
DEFAULT_RETRIEVAL: Retrieval = "hybrid"
DEFAULT_FUSION: Fusion = "absolute"
DEFAULT_DENSE_WEIGHT = 0.25
#: Dense feedback (off by default): the weight of the top hits' mean vector (Pyserini's Rocchio).
DEFAULT_FEEDBACK_WEIGHT = 0.6


def utf8_path(value: str) -> str:
    """Refuse a path that is not valid UTF-8 (Python keeps its odd bytes as lone surrogates).

    A run's parameters travel as JSON and its folders are recorded in tables, and neither
    can hold such a path; a file name under the source folder is no problem (see
    ``printable_name``).
    """
    if printable_name(value) != value:
        raise ValueError(
            f"{printable_name(value)} is not valid UTF-8: rename the folder, or reach it "
            "through a link with a UTF-8 path"
        )
    return value


# Settings of where a collection lives, shared by every command that reads or writes one.
DataDir = Annotated[
    str,
    AfterValidator(utf8_path),
    Field(description="Where tables, the Chroma store and state live."),
]
TablesUrl = Annotated[
    str | None,
    Field(
        description="Where the Parquet tables live: a folder or any fsspec URL (e.g. "
        "file:///mnt/shared/docflow-tables, s3://bucket/docflow). Empty: the location the "
        "data dir recorded last, else data_dir/tables. The data dir remembers it."
    ),
]
CollectionName = Annotated[
    str,
    AfterValidator(check_collection_name),
    Field(
        description="Chroma collection name.", json_schema_extra={"pattern": f"^{NAME_PATTERN}$"}
    ),
]
LockTimeout = Annotated[
    float, Field(ge=0, description="Seconds to wait for another run writing the same collection.")
]
ChromaHost = Annotated[
    str | None,
    Field(
        description="Chroma server host; empty: the server the data dir recorded, else the "
        "embedded store in data_dir/chroma ('' forgets a recorded server)."
    ),
]
ChromaPort = Annotated[int, Field(gt=0, lt=65536, description="Chroma server port.")]


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
    data_dir: DataDir = "data"
    tables_url: TablesUrl = None
    collection: CollectionName = "docflow"
    splitter: SplitterName = Field("auto", description="Splitting strategy.")
    # The size defaults come from `docflow evaluate` on ../shared/eval (docs/retrieval.md,
    # "Choosing the default"): 200 of the model's own tokens leave room for the context
    # block the model reads before each chunk within the 256 word-pieces it reads at all.
    chunk_size: int = Field(200, gt=0, description="Maximum chunk size in the length unit.")
    chunk_overlap: int = Field(50, ge=0, description="Overlap between neighbouring chunks.")
    length_unit: LengthUnit = Field(
        "model_tokens", description="Unit of chunk_size and chunk_overlap."
    )
    model: str = Field(
        "all-MiniLM-L6-v2",
        description="sentence-transformers model name or path (the default is bundled).",
    )
    embed_batch_size: int = Field(32, gt=0, description="Chunks per embedding batch.")
    embed_backend: EmbedBackend = Field(
        "auto",
        description="How the model runs: auto (CUDA: torch-fp16 with batches of 256 or more; "
        "CPU: onnx where the model exports, else torch), torch (float32 reference), "
        "torch-fp16 (CUDA), onnx (ONNX Runtime float32), onnx-int8 (ONNX Runtime, int8 "
        "weights). Run-only: every backend's vectors fit one collection.",
    )
    llm_base_url: str | None = Field(
        None,
        description="agentic splitter: OpenAI-compatible API root, e.g. "
        "https://api.openai.com/v1; empty reads OPENAI_BASE_URL. The key is read only from "
        "DOCFLOW_LLM_API_KEY or OPENAI_API_KEY, never from here.",
    )
    llm_model: str | None = Field(
        None, description="agentic splitter: the chat model that groups the propositions."
    )
    batch_files: int = Field(
        1000,
        gt=0,
        description="At most this many files per batch (a file gives at least one chunk, so "
        "batch_chunks binds first unless raised).",
    )
    batch_bytes: int = Field(
        8_000_000, gt=0, description="At most about this many bytes of files per batch."
    )
    batch_chunks: int = Field(
        1000,
        gt=0,
        description="About this many chunks per batch, estimated from each file's size and "
        "type (a file that gives more is a batch of its own); the first batches are smaller.",
    )
    strict: bool = Field(
        False,
        description="CLI: exit 3 when a file fails to load or the run warns (a glob that "
        "matched nothing, a missing partition folder, a repair).",
    )
    full_refresh: bool = Field(
        False, description="Reprocess every file, changed or not (still idempotent)."
    )
    lock_timeout: LockTimeout = 3600.0
    sample_size: int | None = Field(
        None, gt=0, description="Only the first N files (in sorted order): a quick trial run."
    )
    loaders: LoaderOptions = Field(
        default_factory=LoaderOptions, description="How files of each format are read."
    )
    chroma_host: ChromaHost = None
    chroma_port: ChromaPort = 8000
    source_template: str | None = Field(
        None,
        description="Date-partitioned sources: a folder template such as "
        "'landing/{date:%Y-%m-%d}/' (replaces source). A run ingests one partition: "
        "partition_date, or else the date (UTC) the run was scheduled for.",
    )
    partition_date: dt.date | None = Field(
        None,
        description="With source_template: the partition to ingest; empty means the run's "
        "scheduled date.",
    )

    @field_validator("source")
    @classmethod
    def _source_is_utf8(cls, value: str) -> str:
        return utf8_path(value)

    @field_validator("include", "exclude")
    @classmethod
    def _relative_globs(cls, value: list[str]) -> list[str]:
        """Drop a leading ``./`` (after a ``!``): globs are relative to the source already."""
        globs = []
        for pattern in value:
            negated = pattern.startswith("!")
            rest = pattern[1:] if negated else pattern
            while rest.startswith("./"):
                rest = rest[2:]
            globs.append("!" + rest if negated else rest)
        return globs

    @field_validator("source_template")
    @classmethod
    def _template_renders(cls, value: str | None) -> str | None:
        """Check the template has a ``{date...}`` field and renders with a date."""
        if value is None:
            return value
        if "{date" not in value:
            raise ValueError("needs a {date:...} field, e.g. landing/{date:%Y-%m-%d}/")
        try:
            value.format(date=dt.date(2000, 1, 31))
        except (KeyError, IndexError) as exc:
            raise ValueError(f"cannot be rendered with a date: {exc}") from exc
        return value

    @model_validator(mode="before")
    @classmethod
    def _nest_loader_options(cls, data: Any) -> Any:
        """Move loader options given at the top level (``pdf_mode=...``) into ``loaders``."""
        if not isinstance(data, dict):
            return data
        flat = {k: data[k] for k in LoaderOptions.model_fields if k in data}
        if not flat:
            return data
        nested = data.get("loaders") or {}
        if isinstance(nested, LoaderOptions):
            nested = nested.model_dump(exclude_unset=True)
        rest = {k: v for k, v in data.items() if k not in flat}
        return {**rest, "loaders": {**nested, **flat}}

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

    def content_fingerprint(self) -> str:
        """Return a hash of every setting that changes the chunks of a file.

        Stored per file in the manifest and on the collection: a file split with other
        settings counts as changed. Settings that only say where, how fast or how strictly
        to run (see ``RUN_ONLY_FIELDS``) are left out; any other field counts by default.
        """
        exclude: dict[str, Any] = {f: True for f in RUN_ONLY_FIELDS}
        exclude["loaders"] = set(RUN_ONLY_LOADER_FIELDS)
        if self.splitter != "agentic":
            exclude["llm_model"] = True  # only the agentic splitter's chunks depend on it
        settings = self.model_dump(mode="json", exclude=exclude)
        settings["splitting_version"] = SPLITTING_VERSION
        blob = json.dumps(settings, sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


#: Bump when a splitter changes its chunks for the same settings, so that every file of an
#: existing index is split again on the next run (unchanged text keeps its chunk id and its
#: cached vector). 2: a Markdown header with no text of its own joins the next section.
SPLITTING_VERSION = 2

#: IngestParams fields that do not change what a file's chunks are.
RUN_ONLY_FIELDS: tuple[str, ...] = (
    "source",
    "include",
    "exclude",
    "include_hidden",
    "data_dir",
    "tables_url",
    "collection",
    "model",
    "embed_batch_size",
    "embed_backend",  # vectors differ by rounding only; the cache keys them per backend
    "batch_files",
    "batch_bytes",
    "batch_chunks",
    "strict",
    "full_refresh",
    "lock_timeout",
    "sample_size",
    "max_file_size",
    "chroma_host",
    "chroma_port",
    "llm_base_url",
    "source_template",
    "partition_date",
)


#: DOCFLOW_* variables read elsewhere than as a setting (``DOCFLOW_<FIELD>``, below): the
#: LLM splitter's endpoint, the runtime's switches, the benchmarks' (``DOCFLOW_BENCH_*``).
OTHER_ENV = frozenset(
    {
        "DOCFLOW_CHILD_PATH",
        "DOCFLOW_DASK_ADDRESS",
        "DOCFLOW_EMBED_PROCESS",
        "DOCFLOW_FAILPOINT",
        "DOCFLOW_LLM_API_KEY",
        "DOCFLOW_LLM_BASE_URL",
        "DOCFLOW_LLM_MODEL",
        "DOCFLOW_MODEL_CACHE",
        "DOCFLOW_STORE_PROCESS",
    }
)


def unknown_env(environ: Mapping[str, str] | None = None) -> list[str]:
    """Return a line for each ``DOCFLOW_*`` variable that nothing in docflow reads.

    A typo (``DOCFLOW_COLLECTON=prod`` in a job's environment) is otherwise ignored in
    silence, and the run writes the default collection.
    """
    env = os.environ if environ is None else environ
    models = (IngestParams, LoaderOptions, QueryParams)
    known = {ENV_PREFIX + name.upper() for m in models for name in m.model_fields} | OTHER_ENV
    lines = []
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name in known or name.startswith("DOCFLOW_BENCH_"):
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        lines.append(f"{name} is not a setting docflow reads{hint}: ignored")
    return lines


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
    data = _read_toml(path)
    table = data.get(section, data)
    return {
        k.replace("-", "_"): v
        for k, v in table.items()
        # [ingest.loaders] is the one sub-table; query settings belong to docflow query
        if (not isinstance(v, dict) or k == "loaders") and k not in QueryParams.model_fields
    }


def _read_toml(path: Path) -> dict[str, Any]:
    """Return a TOML file's contents (ConfigError with a one-line reason if unreadable)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {path}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    _check_layout(data, path)
    return data


def _check_layout(data: Mapping[str, Any], path: Path) -> None:
    """Refuse settings the file holds where no command reads them.

    Read: top-level keys (a flat file), or the ``[ingest]`` table (with ``[ingest.loaders]``)
    and the ``[query]`` table. Anything else used to be skipped in silence, so a typo
    (``[injest]``, a key above ``[ingest]``) ran on the defaults: another folder, another
    collection.
    """
    tables = {k for k, v in data.items() if isinstance(v, dict)}
    known = ["ingest", "query", "loaders"]
    for name in sorted(tables - set(known)):
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean [{close[0]}]?)" if close else ""
        raise ConfigError(f"config file {path}: unknown table [{name}]{hint}")
    if "query" in tables:
        for key in data:
            if key.replace("-", "_") in QueryParams.model_fields:
                raise ConfigError(
                    f"config file {path}: {key!r} is above the [query] table, where it is not "
                    "read: move it into [query]"
                )
    ingest = data.get("ingest")
    if not isinstance(ingest, dict):
        return
    if "loaders" in tables:
        raise ConfigError(
            f"config file {path}: [loaders] beside [ingest] is not read: write [ingest.loaders]"
        )
    for key in data:
        if key not in tables:
            raise ConfigError(
                f"config file {path}: {key!r} is above the [ingest] table, where it is not "
                "read: move it into [ingest]"
            )
    for key, value in ingest.items():
        if isinstance(value, dict) and key != "loaders":
            raise ConfigError(f"config file {path}: unknown table [ingest.{key}]")
        if key.replace("-", "_") in QueryParams.model_fields:
            raise ConfigError(
                f"config file {path}: {key!r} is a query setting: put it under [query]"
            )


class QueryParams(BaseModel):
    """How ``docflow query`` (and ``docflow evaluate`` by default) ranks chunks."""

    model_config = ConfigDict(extra="forbid")

    retrieval: Retrieval = Field(
        DEFAULT_RETRIEVAL,
        description="hybrid (BM25 and cosine, weighted), dense (cosine) or lexical (BM25).",
    )
    dense_weight: float = Field(
        DEFAULT_DENSE_WEIGHT,
        ge=0.0,
        le=1.0,
        description="hybrid: weight of the dense score (the lexical one weighs 1 - this).",
    )
    fusion: Fusion = Field(
        DEFAULT_FUSION,
        description="hybrid: how the two scores meet: absolute (cosine and relative BM25 "
        "as they are), minmax, zscore (over each question's candidates), confidence "
        "(minmax, weighted per question by each side's margin) or rrf (reciprocal ranks).",
    )
    stop_words: bool = Field(
        True,
        description="lexical side: ignore English function words (when, the, what...) "
        "in the question.",
    )
    per_source: int | None = Field(
        None,
        ge=1,
        description="at most this many chunks of one source (file or document) in the "
        "results, kept after ranking (None: no limit).",
    )
    feedback: int = Field(
        0,
        ge=0,
        description="dense-side pseudo-relevance feedback (Rocchio): move the question's "
        "vector toward the mean of this many top hits and search again (0: off).",
    )
    feedback_weight: float = Field(
        DEFAULT_FEEDBACK_WEIGHT,
        ge=0.0,
        le=1.0,
        description="feedback: weight of the hits' mean vector (the question's weighs 1 - this).",
    )


def resolve_query_params(
    config_file: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> QueryParams:
    """Merge defaults, the config file's ``[query]`` table, DOCFLOW_* env and overrides.

    Raises:
        ConfigError: With a one-line message naming the first bad field.

    """
    file = _read_toml(config_file) if config_file is not None else {}
    section = file.get("query")
    if isinstance(section, dict):  # every key of [query] must be a query setting
        from_file = {k.replace("-", "_"): v for k, v in section.items()}
    else:  # a flat file holds ingest settings too: take the query ones
        from_file = {k: v for k, v in file.items() if k in QueryParams.model_fields}
    merged, origins = _layered(from_file, QueryParams.model_fields, environ, overrides, config_file)
    return validated(QueryParams, merged, origins)


def resolve_params(
    config_file: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> IngestParams:
    """Merge defaults, config file, environment and explicit overrides into IngestParams.

    Raises:
        ConfigError: With a one-line message naming the first bad field.

    """
    fields = {**IngestParams.model_fields, **LoaderOptions.model_fields}
    from_file = _from_file(config_file, "ingest")
    merged, origins = _layered(from_file, fields, environ, overrides, config_file)
    return validated(IngestParams, merged, origins)


def _layered(
    from_file: Mapping[str, Any],
    fields: Mapping[str, Any],
    environ: Mapping[str, str] | None,
    overrides: Mapping[str, Any] | None,
    config_file: Path | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Return settings by precedence: config file < DOCFLOW_* environment < overrides.

    ``environ`` defaults to ``os.environ``; an override of None means "not given". Also
    returns where each setting from the file or the environment came from, for errors: a
    bad value in a job's environment is otherwise hard to find.
    """
    from_env = _from_env(os.environ if environ is None else environ, fields)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    origins = {k: f"config file {config_file}" for k in from_file}
    origins.update({k: f"{ENV_PREFIX}{k.upper()}" for k in from_env})
    for key in given:
        origins.pop(key, None)
    return {**from_file, **from_env, **given}, origins


def validated(
    model: type[_Model], values: Mapping[str, Any], origins: Mapping[str, str] | None = None
) -> _Model:
    """Return ``model(**values)``; a ValidationError becomes a one-line ConfigError.

    An unknown key names the closest known one ("unknown setting 'chunk_sise' (did you
    mean 'chunk_size'?)"); any other error names the setting and what is wrong with it,
    and where the value came from when ``origins`` says (a file, an environment variable).
    """
    try:
        return model(**values)
    except ValidationError as exc:
        raise ConfigError(describe(exc, model, origins)) from exc


def describe(
    exc: ValidationError, model: type[BaseModel], origins: Mapping[str, str] | None = None
) -> str:
    """Return the first error of a ValidationError as one line for a person."""
    err, origins = exc.errors()[0], origins or {}
    loc = [str(p) for p in err["loc"]]
    where = ".".join(loc)
    # a loader option given flat (DOCFLOW_WORKERS) is validated as loaders.<name>
    keys = [loc[-1], loc[0]] if loc[:1] == ["loaders"] else loc[:1]
    origin = next((origins[k] for k in keys if k in origins), "")
    source = f" (from {origin})" if origin else ""
    if err["type"] == "extra_forbidden":
        known = _fields_at(model, loc[:-1])
        close = difflib.get_close_matches(loc[-1], known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown setting {where!r}{hint}{source}"
    message = str(err["msg"]).removeprefix("Value error, ")
    return f"invalid {where}: {message}{source}" if where else message


def _fields_at(model: type[BaseModel], path: Sequence[str]) -> list[str]:
    """Return the field names of the model at ``path`` (nested models), and loader fields."""
    fields: Mapping[str, Any] = model.model_fields
    for name in path:
        annotation = fields[name].annotation if name in fields else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        fields = annotation.model_fields
    extra = LoaderOptions.model_fields if model is IngestParams and not path else {}
    return [*fields, *extra]


class CollectionParams(BaseModel):
    """Which collection a whole-collection operation (restore, clear) acts on."""

    model_config = ConfigDict(extra="forbid")

    data_dir: DataDir = "data"
    tables_url: TablesUrl = None
    collection: CollectionName = "docflow"
    lock_timeout: LockTimeout = 3600.0
    chroma_host: ChromaHost = None
    chroma_port: ChromaPort = 8000

    @property
    def data_path(self) -> Path:
        """Return the data directory as a Path."""
        return Path(self.data_dir)


class ClearParams(CollectionParams):
    """What ``clear`` drops: the collection, its tables and manifest, optionally the cache."""

    drop_cache: bool = Field(False, description="Also delete the embedding cache.")


class BackfillParams(BaseModel):
    """A date range of partitions to ingest, one subflow run per day."""

    model_config = ConfigDict(extra="forbid")

    start: dt.date | None = Field(
        None, description="First partition date; empty means the run's scheduled date (UTC)."
    )
    end: dt.date | None = Field(
        None, description="Last partition date (included); empty means the same as start."
    )
    max_parallel: int = Field(
        2,
        ge=1,
        le=32,
        description="Partition runs in flight at once. Runs of one collection still write "
        "one at a time (the collection lock); this bounds how many start and wait.",
    )
    ingest: IngestParams = Field(
        default_factory=lambda: IngestParams(source_template="data/landing/{date:%Y-%m-%d}/"),
        description="The ingest settings of every partition; source_template is required.",
    )

    @model_validator(mode="after")
    def _needs_template(self) -> BackfillParams:
        if not self.ingest.source_template:
            raise ValueError("ingest.source_template is required, e.g. landing/{date:%Y-%m-%d}/")
        if self.start and self.end and self.end < self.start:
            raise ValueError(f"end {self.end} is before start {self.start}")
        return self
