"""What the commands share: exit codes, the one error-to-exit-code mapping, option sets.

Exit codes: 0 done (bad files are listed, not fatal), 1 the run failed, 2 bad usage or
configuration, 3 done but files failed and ``--strict``. Options used by several commands
are defined here once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click

from tasks.common.errors import ConfigError, DocflowError, describe, stop_signal

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STRICT = 0, 1, 2, 3
#: A command that SIGTERM stopped: 128 + 15, what a shell reports for a process it ended.
EXIT_TERMINATED = 143

F = TypeVar("F", bound=Callable[..., Any])
#: Choices of options whose settings module is imported only when a command runs (a test
#: checks them against tasks.embed.backends.BACKENDS and tasks.retrieval's lists).
EMBED_BACKENDS = ("auto", "torch", "torch-fp16", "onnx", "onnx-int8")
RETRIEVALS = ("hybrid", "dense", "lexical")
FUSIONS = ("absolute", "minmax", "zscore", "confidence", "rrf")


class HideRunFailures(logging.Filter):
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


def hide_run_failures() -> None:
    """Attach :class:`HideRunFailures` to Prefect's console handler.

    Call it after importing a flow: Prefect sets up its logging when first imported.
    """
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, HideRunFailures) for f in handler.filters):
            handler.addFilter(HideRunFailures())


@contextmanager
def flow_runs(
    server: threading.Thread | None, store: bool = True, served: bool = False
) -> Iterator[None]:
    """Around a command's flow runs: what every command that runs a flow needs first.

    Prefect's failure reports kept off the terminal (:func:`hide_run_failures`), Chroma
    imported while the early temporary server comes up (``store``: the flows open the
    store; ``served``: they are ingest runs, whose embedded store is in the store process,
    which is started instead: ``tasks.index.store_process.preload``), that server
    answering (``server``: the thread
    ``temporary_server.adopt`` returned, None where there is none) and Prefect's
    heartbeats only when asked (``runtime.heartbeats_when_asked``).
    """
    from flows.runtime import heartbeats_when_asked

    hide_run_failures()
    if store:
        from tasks.index.store_process import preload

        preload(served)
    if server is not None:
        server.join()
    with heartbeats_when_asked():
        yield


#: The error of the command that is failing (what ``--json`` prints on stdout).
_failure: list[str] = []


def fail(message: str, code: int, reported: bool = False) -> click.exceptions.Exit:
    """Print ``docflow: error: MESSAGE`` on stderr; return the Exit to raise with ``code``.

    ``reported``: the command printed its own ``--json`` object with the error already.
    """
    click.echo(f"docflow: error: {message}", err=True)
    _failure[:] = [] if reported else [message]
    return click.exceptions.Exit(code)


def take_failure() -> str | None:
    """Return (and forget) the message of the last :func:`fail`, if any."""
    message = _failure[0] if _failure else None
    _failure.clear()
    return message


def unreachable_api(exc: BaseException) -> str | None:
    """Return the one-line error for a Prefect server that does not answer, else None.

    Prefect says only ``Failed to reach API at URL``; the user needs which setting named
    that server and how to start one (or run without it).
    """
    text = str(exc)
    if not (isinstance(exc, RuntimeError) and text.startswith("Failed to reach API at ")):
        return None
    url = text.removeprefix("Failed to reach API at ").strip().rstrip("/")
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 4200
    return (
        f"the Prefect server at {url} (PREFECT_API_URL) does not answer: start it "
        f"(prefect server start --host {host} --port {port}), or unset PREFECT_API_URL "
        "to run on a temporary server"
    )


@contextmanager
def errors_to_exit_codes() -> Iterator[None]:
    """Map exceptions to one-line messages and exit codes (the one place that does so)."""
    try:
        yield
    except ConfigError as exc:
        raise fail(str(exc), EXIT_USAGE) from exc
    except DocflowError as exc:
        raise fail(str(exc), EXIT_FAILED) from exc
    except (click.exceptions.Exit, click.ClickException, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - the CLI edge: any crash is a failed run
        server = unreachable_api(exc)
        if server:
            raise fail(server, EXIT_USAGE) from exc
        # the line the run's record has; a failure that a SIGTERM set off is the stop
        stop = stop_signal(exc)
        terminated = stop is not None and not isinstance(stop, KeyboardInterrupt)
        raise fail(describe(exc), EXIT_TERMINATED if terminated else EXIT_FAILED) from exc


def warn_unknown_env() -> None:
    """Print a warning line for each DOCFLOW_* variable no setting reads (a typo)."""
    from tasks.common.config import unknown_env

    for line in unknown_env():
        click.echo(f"docflow: warning: {line}", err=True)


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


def ranking_options(fn: F) -> F:
    """``--retrieval``, ``--dense-weight``, ``--fusion``, ``--stop-words``, ``--per-source``."""
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
        click.option(
            "--per-source",
            type=click.IntRange(min=1),
            help="At most N chunks of one source file in the results (its best), so they "
            "show more distinct documents [no limit; env DOCFLOW_PER_SOURCE].",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def check_data_dir(data_dir: str | Path) -> None:
    """Refuse a --data-dir that is a file (it would fail later with a traceback)."""
    path = Path(data_dir)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--data-dir {path} is a file, not a folder")
