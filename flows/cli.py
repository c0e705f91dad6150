"""The ``docflow`` command line: parse options, run a flow or a core function, print.

Exit codes: 0 done (bad files are listed, not fatal), 1 the run failed, 2 bad usage or
configuration, 3 done but files failed and ``--strict``. ``--json`` prints one JSON object
on stdout; logs go to stderr.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from flows.env import apply_defaults
from tasks.errors import ConfigError, DocflowError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STRICT = 0, 1, 2, 3

F = TypeVar("F", bound=Callable[..., Any])
#: Choices of options whose settings module is imported only when a command runs (a test
#: checks them against tasks.embed_backends.BACKENDS and tasks.retrieval.RETRIEVALS).
EMBED_BACKENDS = ("auto", "torch", "torch-fp16", "onnx", "onnx-int8")
RETRIEVALS = ("hybrid", "dense", "lexical")
FUSIONS = ("absolute", "minmax", "zscore", "confidence", "rrf")


class _HideRunFailures(logging.Filter):
    """Keep Prefect's reports of a failed task or flow run off the terminal.

    Each comes with a traceback, one per retry, though the CLI prints the error on one line
    (``docflow: error: ...``). The run's logs in the Prefect API keep every one of them.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Return False for failure reports of flow and task runs."""
        if not record.name.startswith(("prefect.flow_runs", "prefect.task_runs")):
            return True
        if record.levelno >= logging.ERROR:
            return False
        message = record.getMessage()
        return not message.startswith(("Finished in state Failed", "Finished in state Crashed"))


def _hide_run_failures() -> None:
    """Attach :class:`_HideRunFailures` to Prefect's console handler.

    Call it after importing a flow: Prefect sets up its logging when first imported.
    """
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _HideRunFailures) for f in handler.filters):
            handler.addFilter(_HideRunFailures())


def _fail(message: str, code: int) -> click.exceptions.Exit:
    click.echo(f"docflow: error: {message}", err=True)
    return click.exceptions.Exit(code)


@contextmanager
def _errors_to_exit_codes() -> Iterator[None]:
    """Map exceptions to one-line messages and exit codes (the one place that does so)."""
    try:
        yield
    except ConfigError as exc:
        raise _fail(str(exc), EXIT_USAGE) from exc
    except DocflowError as exc:
        raise _fail(str(exc), EXIT_FAILED) from exc
    except (click.exceptions.Exit, click.ClickException, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - the CLI edge: any crash is a failed run
        raise _fail(f"{type(exc).__name__}: {exc}", EXIT_FAILED) from exc


def store_options(fn: F) -> F:
    """Options that point at a Chroma server instead of the embedded store."""
    options = [
        click.option(
            "--chroma-host",
            envvar="DOCFLOW_CHROMA_HOST",
            help="Chroma server host [embedded store in DATA_DIR/chroma; env DOCFLOW_CHROMA_HOST].",
        ),
        click.option(
            "--chroma-port",
            envvar="DOCFLOW_CHROMA_PORT",
            type=click.IntRange(1, 65535),
            default=8000,
            show_default=True,
            help="Chroma server port.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def tables_option(fn: F) -> F:
    """The ``--tables-url`` option of the commands that read or drop the tables."""
    option = click.option(
        "--tables-url",
        envvar="DOCFLOW_TABLES_URL",
        help="Folder or fsspec URL of the Parquet tables "
        "[what DATA_DIR recorded, else DATA_DIR/tables; env DOCFLOW_TABLES_URL].",
    )
    return option(fn)


def collection_options(tables: bool) -> Callable[[F], F]:
    """``--data-dir``, ``--collection``, the store options and (``tables``) ``--tables-url``."""

    def decorate(fn: F) -> F:
        fn = store_options(fn)
        if tables:
            fn = tables_option(fn)
        for option in (
            click.option(
                "--collection", default="docflow", show_default=True, help="Collection name."
            ),
            click.option("--data-dir", default="data", show_default=True, help="Data folder."),
        ):
            fn = option(fn)
        return fn

    return decorate


def ingest_options(fn: F) -> F:
    """Options shared by ``ingest``, ``reingest`` and ``backfill``."""
    options = [
        click.option(
            "--config", "config_file", type=click.Path(path_type=Path), help="TOML config file."
        ),
        click.option("--source", help="Folder to read documents from [data/raw]."),
        click.option("--include", multiple=True, help="Glob to include (repeatable; ** recurses)."),
        click.option("--exclude", multiple=True, help="Glob to exclude (repeatable)."),
        click.option("--include-hidden", is_flag=True, default=None, help="Read hidden files too."),
        click.option("--data-dir", help="Data folder for tables, store and state [data]."),
        click.option(
            "--tables-url",
            help="Folder or fsspec URL for the Parquet tables, e.g. s3://bucket/docflow "
            "[what DATA_DIR recorded, else DATA_DIR/tables; env DOCFLOW_TABLES_URL].",
        ),
        click.option("--collection", help="Chroma collection name [docflow]."),
        click.option(
            "--splitter",
            help="Splitting strategy [auto]: auto, recursive, character, token, markdown, "
            "html, code, semantic, cluster, agentic (LLM: env DOCFLOW_LLM_BASE_URL, "
            "DOCFLOW_LLM_MODEL, DOCFLOW_LLM_API_KEY).",
        ),
        click.option("--chunk-size", type=int, help="Maximum chunk size [200]."),
        click.option("--chunk-overlap", type=int, help="Overlap between chunks [50]."),
        click.option("--length-unit", help="Unit of the sizes [model_tokens]."),
        click.option("--model", help="Embedding model name or path [all-MiniLM-L6-v2]."),
        click.option(
            "--embed-backend",
            type=click.Choice(EMBED_BACKENDS),
            help="How the model runs [auto: torch-fp16 on CUDA, else onnx (float32)].",
        ),
        click.option(
            "--max-file-size",
            type=click.IntRange(min=1),
            help="Files larger than this many bytes fail unread [100000000].",
        ),
        click.option(
            "--sample-size",
            type=click.IntRange(min=1),
            help="Only the first N files (sorted): a quick trial run that deletes nothing.",
        ),
        click.option(
            "--workers",
            type=click.IntRange(min=0),
            help="Processes that load files and split batches [one per core; 0: none].",
        ),
        click.option(
            "--pdf-mode",
            type=click.Choice(["page", "file"]),
            help="PDF: one document per page or per file [page].",
        ),
        click.option(
            "--strict",
            is_flag=True,
            default=None,
            help="Exit 3 if any file failed or the run warned (a glob that matched nothing...).",
        ),
        click.option(
            "--full-refresh",
            is_flag=True,
            default=None,
            help="Reprocess every file, changed or not.",
        ),
        click.option(
            "--source-template",
            help="Date-partitioned source folder, e.g. 'landing/{date:%Y-%m-%d}/' "
            "(replaces --source).",
        ),
        click.option(
            "--partition-date",
            help="With --source-template: the partition (YYYY-MM-DD) [the scheduled date].",
        ),
        click.option("--chroma-host", help="Chroma server host [embedded store]."),
        click.option("--chroma-port", type=int, help="Chroma server port [8000]."),
        click.option(
            "--dask-address",
            help="Run tasks on the Dask cluster at this scheduler address "
            "[threads; env DOCFLOW_DASK_ADDRESS].",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _check_data_dir(data_dir: str | Path) -> None:
    """Refuse a --data-dir that is a file (it would fail later with a traceback)."""
    path = Path(data_dir)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--data-dir {path} is a file, not a folder")


def _params(config_file: Path | None, overrides: dict[str, Any]) -> Any:
    """Resolve and check the ingest settings before any flow starts.

    Everything a run would only find out later is checked here, so a bad option is one
    line and exit code 2, never a failed run with tracebacks: the folders, the globs, the
    model (present on this machine), and the splitter (an LLM splitter needs its endpoint).
    """
    from tasks.config import resolve_params
    from tasks.discover import check_glob
    from tasks.embed import check_model_available
    from tasks.split.factory import build_splitter

    lists = {k: list(v) or None for k, v in overrides.items() if isinstance(v, tuple)}
    params = resolve_params(config_file, {**overrides, **lists})
    if params.source_template:
        from tasks.partitions import split_template

        root = split_template(params.source_template)[0]
        if not Path(root).is_dir():
            raise ConfigError(f"source folder not found: {root} (of {params.source_template})")
    elif not Path(params.source).is_dir():
        raise ConfigError(f"source folder not found: {params.source}")
    _check_data_dir(params.data_dir)
    for option, patterns in (("--include", params.include), ("--exclude", params.exclude)):
        for pattern in patterns:
            check_glob(pattern, option)
    check_model_available(params.model)
    build_splitter(params)  # the splitter's own checks (LLM endpoint, tokenizer)
    return params


class _Progress:
    """A progress bar on stderr when it is a terminal; nothing otherwise."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self.bar = Progress(
                "batches",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("ingest", total=total)
        self.bar.update(self.task, completed=done, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _print_summary(summary: dict[str, Any]) -> None:
    keys = [k for k in summary if k not in ("failures", "warnings")]
    width = max(map(len, keys))
    for key in keys:
        click.echo(f"{key:<{width}}  {summary[key]}")
    for failure in summary["failures"]:
        click.echo(f"failed   {failure['source']}: {failure['error']}")
    for warning in summary["warnings"]:
        click.echo(f"warning  {warning}")


def _strict_failure(summaries: list[dict[str, Any]]) -> bool:
    """Return whether --strict turns the runs into exit code 3: a file failed, or a warning."""
    return any(s.get("files_failed") or s.get("warnings") for s in summaries)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="docflow")
def cli() -> None:
    """docflow: turn document folders into a Chroma retrieval index, with Prefect."""


def _run_flow(
    flow_name: str, config_file: Path | None, as_json: bool, overrides: dict[str, Any]
) -> None:
    """Run the ingest or reingest flow with a progress bar, print the summary, set the exit code."""
    from flows import progress, runtime

    with _errors_to_exit_codes():
        address = overrides.pop("dask_address", None)
        runtime.require_server_for_dask(address)
        params = _params(config_file, overrides)
        if flow_name == "reingest":
            from flows.rebuild import reingest as run
        else:
            from flows.ingest import ingest as run
        if address:
            run = run.with_options(task_runner=runtime.task_runner(address))
        _hide_run_failures()

        bar = _Progress()
        listener = bar if sys.stderr.isatty() else (lambda done, total: None)
        try:
            with progress.listen(listener):
                summary = run(params)
        finally:
            bar.close()
    if as_json:
        click.echo(json.dumps(summary, ensure_ascii=False))
    else:
        _print_summary(summary)
    if params.strict and _strict_failure([summary]):
        raise click.exceptions.Exit(EXIT_STRICT)


@cli.command()
@ingest_options
def ingest(config_file: Path | None, as_json: bool, **overrides: Any) -> None:
    """Bring the collection up to date with the source folder and print the run summary.

    Incremental: unchanged files are skipped, changed files re-split (their stale chunks
    deleted), deleted files removed from the index.

    Example: docflow ingest --source data/raw --include '**/*.md' --json
    """
    _run_flow("ingest", config_file, as_json, overrides)


@cli.command()
@ingest_options
def reingest(config_file: Path | None, as_json: bool, **overrides: Any) -> None:
    """Rebuild the collection from scratch without downtime (new version, then switch).

    Queries keep answering from the current version until the new one is complete; the
    embedding cache makes unchanged text free.

    Example: docflow reingest --model all-MiniLM-L6-v2
    """
    _run_flow("reingest", config_file, as_json, overrides)


@cli.command()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--drop-cache", is_flag=True, help="Also delete the embedding cache.")
@collection_options(tables=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def clear(
    yes: bool,
    drop_cache: bool,
    data_dir: str,
    collection: str,
    tables_url: str | None,
    chroma_host: str | None,
    chroma_port: int,
    as_json: bool,
) -> None:
    """Drop the collection, its tables and manifest (the embedding cache stays unless asked).

    Example: docflow clear --yes
    """
    if not yes:
        if not sys.stdin.isatty():
            raise _fail("clear needs --yes when there is no terminal to confirm on", EXIT_USAGE)
        what = "and the embedding cache " if drop_cache else ""
        click.confirm(
            f"Drop collection {collection!r}, its tables and manifest {what}under {data_dir}?",
            abort=True,
            err=True,
        )
    from flows.rebuild import clear_flow
    from tasks.config import ClearParams

    _hide_run_failures()
    with _errors_to_exit_codes():
        _check_data_dir(data_dir)
        result = clear_flow(
            ClearParams(
                data_dir=data_dir,
                tables_url=tables_url,
                collection=collection,
                drop_cache=drop_cache,
                chroma_host=chroma_host,
                chroma_port=chroma_port,
            )
        )
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(
            f"dropped {result['collections'] or 'no collections'}; {result['runs']} runs' tables"
        )


@cli.command()
@collection_options(tables=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def restore(
    data_dir: str,
    collection: str,
    tables_url: str | None,
    chroma_host: str | None,
    chroma_port: int,
    as_json: bool,
) -> None:
    """Rebuild the Chroma collection from the Parquet tables alone, with no embedding.

    Example: docflow restore --data-dir data
    """
    from flows.rebuild import restore_flow
    from tasks.config import CollectionParams

    _hide_run_failures()
    with _errors_to_exit_codes():
        _check_data_dir(data_dir)
        result = restore_flow(
            CollectionParams(
                data_dir=data_dir,
                tables_url=tables_url,
                collection=collection,
                chroma_host=chroma_host,
                chroma_port=chroma_port,
            )
        )
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(f"restored {result['chunks']} chunks into {result['physical']}")
        if result.get("set_aside"):
            click.echo(f"the damaged manifest was moved to {result['set_aside']}")


def _parse_where(pairs: tuple[str, ...]) -> dict[str, str | int | float | bool]:
    where: dict[str, str | int | float | bool] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--where expects KEY=VALUE, got {pair!r}")
        parsed: str | int | float | bool = value
        for cast in (int, float):
            try:
                parsed = cast(value)
                break
            except ValueError:
                continue
        if value in ("true", "false"):
            parsed = value == "true"
        where[key] = parsed
    return where


def ranking_options(fn: F) -> F:
    """``--retrieval``, ``--dense-weight``, ``--fusion``, ``--stop-words``: query, evaluate."""
    options = [
        click.option(
            "--retrieval",
            type=click.Choice(RETRIEVALS),
            help="Ranking: hybrid (BM25 and cosine), dense (cosine) or lexical (BM25) "
            "[hybrid; env DOCFLOW_RETRIEVAL].",
        ),
        click.option(
            "--dense-weight",
            type=float,
            help="hybrid: weight of the cosine score, 0..1 (BM25 weighs 1 - this) "
            "[0.25; env DOCFLOW_DENSE_WEIGHT].",
        ),
        click.option(
            "--fusion",
            type=click.Choice(FUSIONS),
            help="hybrid: how the two scores meet: absolute (each on its own scale), or "
            "over each question's candidates: minmax, zscore, confidence, rrf "
            "[absolute; env DOCFLOW_FUSION].",
        ),
        click.option(
            "--stop-words/--keep-stop-words",
            "stop_words",
            default=None,
            help="BM25 side: ignore English function words of the question, or keep them "
            "[ignore; env DOCFLOW_STOP_WORDS].",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@cli.command()
@click.argument("text")
@click.option("-k", "k", type=click.IntRange(min=1), default=5, show_default=True, help="Results.")
@click.option("--where", multiple=True, help="Metadata filter KEY=VALUE (repeatable).")
@ranking_options
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path),
    help="TOML config file (its [query] table: retrieval, dense_weight, fusion, stop_words).",
)
@collection_options(tables=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def query(
    text: str,
    k: int,
    where: tuple[str, ...],
    retrieval: str | None,
    dense_weight: float | None,
    fusion: str | None,
    stop_words: bool | None,
    config_file: Path | None,
    data_dir: str,
    collection: str,
    chroma_host: str | None,
    chroma_port: int,
    as_json: bool,
) -> None:
    """Print the chunks that best answer TEXT with their source and score.

    Example: docflow query "how do I treat varroa in winter?" -k 3 --retrieval hybrid
    """
    from tasks.config import resolve_query_params
    from tasks.retrieval import Retriever, check_question, describe_score

    with _errors_to_exit_codes():
        try:
            check_question(text)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        _check_data_dir(data_dir)
        given = {
            "retrieval": retrieval,
            "dense_weight": dense_weight,
            "fusion": fusion,
            "stop_words": stop_words,
        }
        settings = resolve_query_params(config_file, given)
        filters = _parse_where(where)
        with Retriever(
            Path(data_dir),
            collection,
            settings.retrieval,
            settings.dense_weight,
            chroma_host,
            chroma_port,
            settings.fusion,
            settings.stop_words,
        ) as retriever:
            hits = retriever.search(text, k=k, where=filters)
            unknown = []
            if not hits and filters:
                keys = retriever.metadata_keys()
                unknown = [key for key in filters if key not in keys]
    if as_json:
        rows = [
            {
                "rank": i,
                "score": round(h.score, 4),
                "dense_score": None if h.dense_score is None else round(h.dense_score, 4),
                "lexical_score": None if h.lexical_score is None else round(h.lexical_score, 4),
                "source": h.source,
                "chunk_id": h.chunk_id,
                "text": h.text,
                "metadata": h.metadata,
            }
            for i, h in enumerate(hits, start=1)
        ]
        payload = {
            "query": text,
            **settings.model_dump(),
            "score": describe_score(settings),
            "results": rows,
        }
        click.echo(json.dumps(payload, ensure_ascii=False))
        return
    if not hits:
        why = " with these --where filters" if filters else ""
        if unknown:
            why = (
                f": no chunk has the metadata key {unknown[0]!r} "
                f"(keys: {', '.join(keys) or 'none'})"
            )
        click.echo(f"no results for {text!r}{why}")
        return
    click.echo(f"score = {describe_score(settings)}")
    for i, h in enumerate(hits, start=1):
        snippet = " ".join(h.text.split())
        sides = [
            f"{name} {value:.3f}"
            for name, value in (("cosine", h.dense_score), ("bm25", h.lexical_score))
            if value is not None
        ]
        click.echo(
            f"{i}. [{settings.retrieval} {h.score:.3f}] {h.source}  ({', '.join(sides)})\n"
            f"   {snippet[:240]}"
        )


@cli.command()
@collection_options(tables=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def inspect(
    data_dir: str,
    collection: str,
    tables_url: str | None,
    chroma_host: str | None,
    chroma_port: int,
    as_json: bool,
) -> None:
    """Show tables (rows, parts, bytes), the collection and the last runs.

    Example: docflow inspect --json
    """
    from flows.inspect import inspect_data
    from tasks.tables import use_tables_url

    with _errors_to_exit_codes():
        _check_data_dir(data_dir)
        use_tables_url(Path(data_dir), tables_url)
        info = inspect_data(Path(data_dir), collection, host=chroma_host, port=chroma_port)
    if as_json:
        click.echo(json.dumps(info, ensure_ascii=False, default=str))
        return
    click.echo(f"data dir: {info['data_dir']}  tables: {info['tables_url']}")
    for name, t in info["tables"].items():
        click.echo(
            f"  table {name:<11} {t['rows']:>8} rows  {t['parts']:>4} parts  {t['bytes']:>10} bytes"
        )
    col = info["collection"]
    click.echo(
        f"collection {col['name']}: {col['count']} chunks, model {col.get('embedding_model')}, "
        f"lexical index {col.get('lexical_count', 'missing')} chunks"
    )
    for run in info["runs"]:
        click.echo(
            f"  run {run['run_id']}  {run['collection']}  {run.get('mode', '')}  "
            f"{run['status']}: {run.get('files_seen', 0)} files, "
            f"{run.get('chunks_written', 0)} chunks written, {run.get('files_failed', 0)} failed, "
            f"{len(run.get('warnings') or [])} warnings, {run.get('seconds', 0)} s"
            + (f"; error: {run['error']}" if run.get("error") else "")
        )


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--splitter",
    help="Splitting strategy [auto]: auto, recursive, character, token, markdown, html, code, "
    "semantic, cluster, agentic (LLM: env DOCFLOW_LLM_BASE_URL, DOCFLOW_LLM_MODEL, "
    "DOCFLOW_LLM_API_KEY).",
)
@click.option("--chunk-size", type=int, help="Maximum chunk size in the length unit [200].")
@click.option("--chunk-overlap", type=int, help="Overlap between chunks [50].")
@click.option(
    "--length-unit", help="Unit of the sizes [model_tokens]: chars, tokens, model_tokens."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option(
    "--html",
    "html_out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write an HTML page highlighting the chunks and overlaps to this file.",
)
def split(
    file: Path,
    splitter: str | None,
    chunk_size: int | None,
    chunk_overlap: int | None,
    length_unit: str | None,
    as_json: bool,
    html_out: Path | None,
) -> None:
    """Show how FILE is split: every chunk with its span, size and header path.

    Example: docflow split data/raw/queen-rearing.md --length-unit tokens --chunk-size 256
    """
    from tasks.config import resolve_params
    from tasks.split.factory import split_file

    overrides = {
        "splitter": splitter,
        "chunk_size": chunk_size,
        "chunk_overlap": chunk_overlap,
        "length_unit": length_unit,
    }
    with _errors_to_exit_codes():
        params = resolve_params(None, overrides)
        rows, chunks = split_file(file, params)
    docs = {r.document.doc_id: i for i, r in enumerate(rows) if r.document is not None}
    records = [
        {
            "document": docs[c.doc_id],
            "chunk_index": c.chunk_index,
            "start_index": c.start_index,
            "end_index": c.end_index,
            "n_chars": c.n_chars,
            "n_tokens": c.n_tokens,
            "headers": [h.to_dict() for h in c.headers],
            "chunk_id": c.chunk_id,
            "text": c.text,
        }
        for c in chunks
    ]
    if html_out is not None:
        from tasks.visualize import render_chunks_html

        documents = [r.document for r in rows if r.document is not None]
        page_settings = {k: getattr(params, k) for k in overrides}
        with _errors_to_exit_codes():
            page = render_chunks_html(documents, chunks, str(file), page_settings)
            html_out.write_text(page, encoding="utf-8")
        click.echo(f"wrote {html_out}", err=True)  # stderr: --json keeps one object on stdout
    if as_json:
        settings = {k: getattr(params, k) for k in overrides}
        payload = {"file": str(file), **settings, "documents": len(rows), "chunks": records}
        click.echo(json.dumps(payload, ensure_ascii=False))
        return
    click.echo(
        f"{file}: {len(rows)} document(s), {len(chunks)} chunks "
        f"({params.splitter}, {params.chunk_size}/{params.chunk_overlap} {params.length_unit})"
    )
    for c in chunks:
        path = " > ".join(f"h{h.level} {h.text}" for h in c.headers) or "-"
        tokens = f", {c.n_tokens} tokens" if c.n_tokens is not None else ""
        click.echo(
            f"\n--- doc {docs[c.doc_id]} chunk {c.chunk_index} "
            f"[{c.start_index}:{c.end_index}] {c.n_chars} chars{tokens} | {path}"
        )
        click.echo(c.text)


@cli.command()
@click.option(
    "--start", required=True, type=click.DateTime(["%Y-%m-%d"]), help="First partition date."
)
@click.option(
    "--end", required=True, type=click.DateTime(["%Y-%m-%d"]), help="Last date (included)."
)
@click.option(
    "--max-parallel",
    type=click.IntRange(1, 32),
    default=2,
    show_default=True,
    help="Partition runs in flight at once.",
)
@ingest_options
def backfill(
    start: Any,
    end: Any,
    max_parallel: int,
    config_file: Path | None,
    as_json: bool,
    **overrides: Any,
) -> None:
    """Ingest every date partition from --start to --end, one subflow run per partition.

    Needs --source-template (or source_template in the config file). Partitions already
    in the index are skipped as unchanged, so a backfill can be re-run safely.

    Example: docflow backfill --source-template 'in/{date:%F}' --start 2024-01-01 --end 2024-01-03
    """
    from flows import runtime

    with _errors_to_exit_codes():
        address = overrides.pop("dask_address", None)
        runtime.require_server_for_dask(address)
        params = _params(config_file, overrides)
        if not params.source_template:
            raise ConfigError("backfill needs --source-template, e.g. 'landing/{date:%Y-%m-%d}/'")
        from flows.backfill import backfill as run
        from tasks.config import BackfillParams, validated

        spec = validated(
            BackfillParams,
            {
                "start": start.date(),
                "end": end.date(),
                "max_parallel": max_parallel,
                "ingest": params,
            },
        )
        _hide_run_failures()
        with runtime.dask_env(address):
            result = run(spec)
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False))
    else:
        for row in result["partitions"]:
            click.echo(
                f"{row['date']}  {row['status']}  {row['files_seen']} files, "
                f"{row['files_new'] + row['files_changed']} new or changed, "
                f"{row['chunks_written']} chunks written, {row['files_failed']} failed"
            )
            for warning in row["warnings"]:
                click.echo(f"  warning  {warning}")
    if params.strict and _strict_failure(result["partitions"]):
        raise click.exceptions.Exit(EXIT_STRICT)


@cli.command()
@click.option(
    "--project-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Checkout the worker runs the flows from [this checkout].",
)
def deploy(project_dir: Path | None) -> None:
    """Register the deployments of deployments/prefect.yaml with the Prefect server.

    Creates the process work pool if missing. Needs PREFECT_API_URL; then start a worker
    with: prefect worker start --pool docflow

    Example: PREFECT_API_URL=http://127.0.0.1:4200/api docflow deploy
    """
    from deployments import PROJECT_DIR
    from deployments.deploy import deploy as run

    with _errors_to_exit_codes():
        names = run(project_dir or PROJECT_DIR)
    for name in names:
        click.echo(name)


@cli.command()
@click.option("--limit", type=click.IntRange(min=1), help="Most flow runs at once [no limit].")
def serve(limit: int | None) -> None:
    """Serve the same deployments from this process, without a work pool or worker.

    Runs until interrupted; trigger runs from the UI or with prefect deployment run.

    Example: PREFECT_API_URL=http://127.0.0.1:4200/api docflow serve --limit 2
    """
    from deployments.serve import main as run

    with _errors_to_exit_codes():
        run(limit)


@cli.command()
@click.option(
    "--dataset",
    "datasets",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Evaluation data set: a folder with corpora/*.md and questions.csv, or a folder of "
    "them (repeatable) [every data set under ../shared/eval].",
)
@click.option(
    "--splitter",
    "specs",
    multiple=True,
    help="Configuration NAME[:KEY=VALUE,...] with ingest settings and the query's "
    "retrieval, dense_weight, fusion, stop_words, e.g. token:chunk_size=278,"
    "chunk_overlap=139,length_unit=tokens,retrieval=hybrid,fusion=rrf (repeatable) "
    "[docflow's defaults].",
)
@click.option("--model", help="Embedding model name or path [all-MiniLM-L6-v2].")
@click.option(
    "--embed-backend",
    envvar="DOCFLOW_EMBED_BACKEND",
    type=click.Choice(EMBED_BACKENDS),
    help="How the model runs, where a configuration does not say [auto; env "
    "DOCFLOW_EMBED_BACKEND].",
)
@ranking_options
@click.option("-k", "k", type=click.IntRange(min=1), default=5, show_default=True, help="Top k.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("data/eval"),
    show_default=True,
    help="Folder for the Parquet files and the recall-vs-IoU plot.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def evaluate(
    datasets: tuple[Path, ...],
    specs: tuple[str, ...],
    model: str | None,
    embed_backend: str | None,
    retrieval: str | None,
    dense_weight: float | None,
    fusion: str | None,
    stop_words: bool | None,
    k: int,
    out: Path,
    as_json: bool,
) -> None:
    """Score configurations by character-level retrieval recall, precision and IoU.

    Per configuration and data set: chunk every corpus, embed chunks and questions,
    retrieve the top k (dense, lexical or hybrid, as docflow query does), and report
    recall, precision, IoU and precision_Ω (× 100) per corpus, their mean over corpora and
    the worst corpus. Writes Parquet files and a PNG plot to --out.

    Example: docflow evaluate --splitter auto:retrieval=dense --splitter auto:retrieval=hybrid
    """
    from flows.evaluate import EVAL_ROOT
    from tasks.config import resolve_query_params
    from tasks.embed import DEFAULT_MODEL
    from tasks.evaluate import default_spec, find_datasets, format_table, parse_spec

    with _errors_to_exit_codes():
        found = {root: find_datasets(root) for root in list(datasets) or [EVAL_ROOT]}
        paths = [p for sets in found.values() for p in sets]
        missing = [root for root, sets in found.items() if not sets]
        if missing:
            raise ConfigError(
                f"evaluation data set not found: {missing[0]} "
                "(needs corpora/*.md and questions.csv, or folders of them)"
            )
        chosen = list(dict.fromkeys(specs)) or [default_spec()]
        given = {
            "retrieval": retrieval,
            "dense_weight": dense_weight,
            "fusion": fusion,
            "stop_words": stop_words,
        }
        ranking = resolve_query_params(None, given)  # flags, DOCFLOW_* env, defaults
        for spec in chosen:  # bad specs are usage errors, before any flow
            parse_spec(spec, model, embed_backend, ranking.model_dump())
        from flows.evaluate import evaluate as run

        _hide_run_failures()
        result = run(
            datasets=[str(p) for p in paths],
            splitters=chosen,
            model=model or DEFAULT_MODEL,
            embed_backend=embed_backend,
            k=k,
            out=str(out),
            retrieval=ranking.retrieval,
            dense_weight=ranking.dense_weight,
            fusion=ranking.fusion,
            stop_words=ranking.stop_words,
        )
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False, default=str))
        return
    click.echo(
        f"{', '.join(result['datasets'])}: {result['n_questions']} questions, "
        f"k = {result['k']} (per corpus: mean ± population std, × 100)\n"
    )
    click.echo(format_table(result["configs"]))
    click.echo(f"\nwrote {result['parquet']}, {result['questions_parquet']}, {result['plot']}")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (usage errors are one line, exit 2)."""
    apply_defaults()
    try:
        # standalone_mode=False: click returns an Exit's code instead of calling sys.exit
        code = cli.main(args=argv, prog_name="docflow", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("docflow: aborted", err=True)
        return EXIT_FAILED
    except click.ClickException as exc:
        click.echo(f"docflow: error: {exc.format_message()}", err=True)
        return EXIT_USAGE if isinstance(exc, click.UsageError) else EXIT_FAILED
    return code if isinstance(code, int) else EXIT_OK
