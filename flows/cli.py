"""The ``docflow`` command line: one group, its commands registered from their modules.

Each command lives in :mod:`flows.commands` (ingest, reingest and backfill; query;
evaluate; clear, restore and inspect; split; deploy and serve), with the options several
commands share and the one mapping of errors to exit codes in
:mod:`flows.commands.common`. ``--json`` prints one JSON object on stdout; logs go to
stderr. Exit codes: 0 done, 1 the run failed, 2 bad usage or configuration, 3 done but
files failed and ``--strict``, 143 stopped by SIGTERM.
"""

from __future__ import annotations

import gc
import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn

import click

from flows.commands import admin, deploy, evaluate, ingest, query, split
from flows.commands.common import EMBED_BACKENDS as EMBED_BACKENDS
from flows.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
    take_failure,
)
from flows.commands.common import FUSIONS as FUSIONS
from flows.commands.common import RETRIEVALS as RETRIEVALS
from flows.env import apply_defaults
from tasks.common.errors import terminated

TERMINATED = terminated(signal.SIGTERM)


class Terminated(BaseException):
    """SIGTERM reached the command (``docker stop``, a pod's eviction).

    A BaseException, like KeyboardInterrupt: no ``except Exception`` on the way takes it
    for an error to report or retry.
    """


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="docflow")
def cli() -> None:
    """docflow: turn document folders into a Chroma retrieval index, with Prefect."""


for command in (
    ingest.ingest,
    ingest.reingest,
    ingest.backfill,
    query.query,
    evaluate.evaluate,
    admin.clear,
    admin.restore,
    admin.inspect,
    split.split,
    deploy.deploy,
    deploy.serve,
):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (usage errors are one line, exit 2).

    With ``--json``, a command that fails still prints one JSON object on stdout,
    ``{"error": ..., "exit_code": ...}``, so that scripts can parse every outcome.
    """
    apply_defaults()
    args = sys.argv[1:] if argv is None else list(argv)
    take_failure()
    try:
        with stopped_by_sigterm():
            # standalone_mode=False: click returns an Exit's code instead of calling sys.exit
            code = cli.main(args=args, prog_name="docflow", standalone_mode=False)
    except Terminated:
        click.echo(f"docflow: {TERMINATED}", err=True)
        return _failed(args, take_failure() or TERMINATED, EXIT_TERMINATED)
    except click.exceptions.Abort:
        click.echo("docflow: aborted", err=True)
        return _failed(args, "aborted", EXIT_FAILED)
    except click.ClickException as exc:
        click.echo(f"docflow: error: {exc.format_message()}", err=True)
        code = EXIT_USAGE if isinstance(exc, click.UsageError) else EXIT_FAILED
        return _failed(args, exc.format_message(), code)
    code = code if isinstance(code, int) else EXIT_OK
    error = take_failure()
    return _failed(args, error, code) if error is not None else code


def run() -> NoReturn:
    """The ``docflow`` command (and ``python -m flows``): :func:`main`, then exit with its code.

    Before exiting it freezes the garbage collector's objects (``gc.freeze``): the work is
    written and closed by then, and what is left is the interpreter's teardown, whose last
    collections walk every object the imports made (Prefect, Chroma, pyarrow, the model's
    libraries): about 1 s of an unchanged rerun of the sample corpus (5.7 s without, 4.7 s
    with; ``bench_commands``). The exit handlers still run: Prefect's log and event flush,
    the temporary server's stop, the workers' and the embedding child's stop. Only cyclic
    garbage is left uncollected, for the OS to take back. Tests call :func:`main`, whose
    process goes on.
    """
    code = main()
    gc.freeze()
    sys.exit(code)


@contextmanager
def stopped_by_sigterm() -> Iterator[None]:
    """Turn a SIGTERM into :class:`Terminated`, so the command ends as a normal exit.

    A flow run takes SIGTERM over while it runs (Prefect records the run as stopped, then
    sends the signal again to the handler it found: this one). Ending by the signal
    itself skipped the interpreter's exit: the load workers and the embedding child were
    not stopped and ``multiprocessing`` warned of leaked semaphores; and ``--json`` printed
    nothing. A second SIGTERM ends the process at once. Only the main thread can set a
    handler: elsewhere (a test calling :func:`main` from a thread) nothing changes.
    """

    def terminate(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated

    try:
        previous = signal.signal(signal.SIGTERM, terminate)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _failed(args: list[str], error: str, code: int) -> int:
    """Print a failure as one JSON object on stdout when ``--json`` was asked; return ``code``."""
    if "--json" in args:
        click.echo(json.dumps({"error": error, "exit_code": code}, ensure_ascii=False))
    return code
