"""The ``docflow`` command line: parse options, run a flow or a core function, print.

Exit codes: 0 done (bad files are listed, not fatal), 1 the run failed, 2 bad usage or
configuration, 3 done but files failed and ``--strict``. ``--json`` prints one JSON object
on stdout; logs go to stderr.
"""

from __future__ import annotations

import json
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


def ingest_options(fn: F) -> F:
    """Options shared by ``ingest`` and (later) ``reingest``/``backfill``."""
    options = [
        click.option(
            "--config", "config_file", type=click.Path(path_type=Path), help="TOML config file."
        ),
        click.option("--source", help="Folder to read documents from [data/raw]."),
        click.option("--include", multiple=True, help="Glob to include (repeatable; ** recurses)."),
        click.option("--exclude", multiple=True, help="Glob to exclude (repeatable)."),
        click.option("--include-hidden", is_flag=True, default=None, help="Read hidden files too."),
        click.option("--data-dir", help="Data folder for tables, store and state [data]."),
        click.option("--collection", help="Chroma collection name [docflow]."),
        click.option("--splitter", help="Splitting strategy [recursive]."),
        click.option("--chunk-size", type=int, help="Maximum chunk size [1024]."),
        click.option("--chunk-overlap", type=int, help="Overlap between chunks [100]."),
        click.option("--length-unit", help="Unit of the sizes [chars]."),
        click.option("--model", help="Embedding model name or path [all-MiniLM-L6-v2]."),
        click.option("--strict", is_flag=True, default=None, help="Exit 3 if any file failed."),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _params(config_file: Path | None, overrides: dict[str, Any]) -> Any:
    from tasks.config import resolve_params

    lists = {k: list(v) or None for k, v in overrides.items() if isinstance(v, tuple)}
    params = resolve_params(config_file, {**overrides, **lists})
    if not Path(params.source).is_dir():
        raise ConfigError(f"source folder not found: {params.source}")
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
    keys = [k for k in summary if k != "failures"]
    width = max(map(len, keys))
    for key in keys:
        click.echo(f"{key:<{width}}  {summary[key]}")
    for failure in summary["failures"]:
        click.echo(f"failed  {failure['source']}: {failure['error']}")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="docflow")
def cli() -> None:
    """docflow: turn document folders into a Chroma retrieval index, with Prefect."""


@cli.command()
@ingest_options
def ingest(config_file: Path | None, as_json: bool, **overrides: Any) -> None:
    """Ingest documents into the collection and print the run summary.

    Example: docflow ingest --source data/raw --include '**/*.md' --json
    """
    from flows import progress

    with _errors_to_exit_codes():
        params = _params(config_file, overrides)
        from flows.ingest import ingest as ingest_flow

        bar = _Progress()
        listener = bar if sys.stderr.isatty() else (lambda done, total: None)
        try:
            with progress.listen(listener):
                summary = ingest_flow(params)
        finally:
            bar.close()
    if as_json:
        click.echo(json.dumps(summary, ensure_ascii=False))
    else:
        _print_summary(summary)
    if params.strict and summary["files_failed"]:
        raise click.exceptions.Exit(EXIT_STRICT)


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


@cli.command()
@click.argument("text")
@click.option("-k", "k", type=click.IntRange(min=1), default=5, show_default=True, help="Results.")
@click.option("--where", multiple=True, help="Metadata filter KEY=VALUE (repeatable).")
@click.option("--data-dir", default="data", show_default=True, help="Data folder.")
@click.option("--collection", default="docflow", show_default=True, help="Collection name.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def query(
    text: str, k: int, where: tuple[str, ...], data_dir: str, collection: str, as_json: bool
) -> None:
    """Print the chunks most similar to TEXT with their source and score.

    Example: docflow query "how do I treat varroa in winter?" -k 3
    """
    from flows.query import query as run_query

    with _errors_to_exit_codes():
        hits = run_query(text, Path(data_dir), collection, k=k, where=_parse_where(where))
    if as_json:
        rows = [
            {
                "rank": i,
                "score": round(h.score, 4),
                "source": h.source,
                "chunk_id": h.chunk_id,
                "text": h.text,
                "metadata": h.metadata,
            }
            for i, h in enumerate(hits, start=1)
        ]
        click.echo(json.dumps({"query": text, "results": rows}, ensure_ascii=False))
        return
    for i, h in enumerate(hits, start=1):
        snippet = " ".join(h.text.split())
        click.echo(f"{i}. [{h.score:.3f}] {h.source}\n   {snippet[:240]}")


@cli.command()
@click.option("--data-dir", default="data", show_default=True, help="Data folder.")
@click.option("--collection", default="docflow", show_default=True, help="Collection name.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def inspect(data_dir: str, collection: str, as_json: bool) -> None:
    """Show tables (rows, parts, bytes), the collection and the last runs.

    Example: docflow inspect --json
    """
    from flows.inspect import inspect_data

    with _errors_to_exit_codes():
        info = inspect_data(Path(data_dir), collection)
    if as_json:
        click.echo(json.dumps(info, ensure_ascii=False, default=str))
        return
    click.echo(f"data dir: {info['data_dir']}")
    for name, t in info["tables"].items():
        click.echo(
            f"  table {name:<11} {t['rows']:>8} rows  {t['parts']:>4} parts  {t['bytes']:>10} bytes"
        )
    col = info["collection"]
    click.echo(
        f"collection {col['name']}: {col['count']} chunks, model {col.get('embedding_model')}"
    )
    for run in info["runs"]:
        click.echo(
            f"  run {run['run_id']}: {run['files_seen']} files, {run['chunks_written']} chunks, "
            f"{run['files_failed']} failed, {run['seconds']} s"
        )


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
