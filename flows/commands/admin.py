"""Whole-collection commands: ``docflow clear``, ``restore`` and ``inspect``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from flows.commands.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    check_data_dir,
    collection_options,
    errors_to_exit_codes,
    fail,
    flow_runs,
)
from tasks.common.errors import ConfigError


@click.command()
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--drop-cache", is_flag=True, help="Also delete the embedding cache.")
@collection_options(tables=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def clear(yes: bool, drop_cache: bool, as_json: bool, **where: Any) -> None:
    """Drop the collection, its tables and manifest (the embedding cache stays unless asked).

    Example: docflow clear --yes
    """
    if not yes:
        if not sys.stdin.isatty():
            raise fail("clear needs --yes when there is no terminal to confirm on", EXIT_USAGE)
        what = "and the embedding cache " if drop_cache else ""
        click.confirm(
            f"Drop collection {where['collection']!r}, its tables and manifest {what}under "
            f"{where['data_dir']}?",
            abort=True,
            err=True,
        )
    from tasks.common.config import ClearParams, validated

    with errors_to_exit_codes():
        check_data_dir(where["data_dir"])
        params = validated(ClearParams, {**where, "drop_cache": drop_cache})
    result = _run_rebuild_flow("clear_flow", params)
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(
            f"dropped {result['collections'] or 'no collections'}; {result['runs']} runs' tables"
        )


def _run_rebuild_flow(name: str, params: Any) -> dict[str, Any]:
    """Run flow ``name`` of flows/rebuild.py on checked ``params`` (usage errors came first).

    Its temporary server starts only now, so a usage error never waits for one; in a session
    of its own, so a terminal's Ctrl-C reaches this command alone (flows/temporary_server.py).
    """
    from flows import temporary_server

    with temporary_server.started() as early:
        from flows import rebuild

        with errors_to_exit_codes(), flow_runs(temporary_server.adopt(early)):
            result: dict[str, Any] = getattr(rebuild, name)(params)
    return result


@click.command()
@collection_options(tables=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def restore(as_json: bool, **where: Any) -> None:
    """Rebuild the Chroma collection from the Parquet tables alone, with no embedding.

    Example: docflow restore --data-dir data
    """
    from tasks.common.config import CollectionParams, validated

    with errors_to_exit_codes():
        check_data_dir(where["data_dir"])
        params = validated(CollectionParams, where)
    result = _run_rebuild_flow("restore_flow", params)
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(f"restored {result['chunks']} chunks into {result['physical']}")
        if result.get("set_aside"):
            click.echo(f"the damaged manifest was moved to {result['set_aside']}")


@click.command()
@collection_options(tables=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def inspect(as_json: bool, **where: Any) -> None:
    """Show tables (rows, parts, bytes), the collection and the last runs.

    Example: docflow inspect --json
    """
    from flows.inspect import inspect_data
    from tasks.common.tables import use_tables_url

    data_dir = Path(where["data_dir"])
    with errors_to_exit_codes():
        check_data_dir(data_dir)
        if not data_dir.is_dir():  # a reader creates nothing
            raise ConfigError(f"data dir {data_dir} does not exist: nothing was ingested there")
        use_tables_url(data_dir, where["tables_url"])
        info = inspect_data(
            data_dir, where["collection"], host=where["chroma_host"], port=where["chroma_port"]
        )
    error = info.pop("error")
    if as_json:
        failed = {"error": error, "exit_code": EXIT_FAILED} if error else {}
        click.echo(json.dumps({**info, **failed}, ensure_ascii=False, default=str))
    else:
        _print_inspection(info)
    if error:  # what the data dir holds is shown; the store's part could not be read
        raise fail(error, EXIT_FAILED, reported=as_json)


def _print_inspection(info: dict[str, Any]) -> None:
    """Print ``inspect``'s report: tables, the collection, the last runs."""
    click.echo(f"data dir: {info['data_dir']}  tables: {info['tables_url']}")
    for name, t in info["tables"].items():
        click.echo(
            f"  table {name:<11} {t['rows']:>8} rows  {t['parts']:>4} parts  {t['bytes']:>10} bytes"
        )
    col = info["collection"]
    lexical = col.get("lexical_count")
    words = "no lexical index" if lexical is None else f"lexical index {lexical} chunks"
    if col.get("unreadable"):
        click.echo(f"collection {col['name']} ({col['store']}): not readable; {words}")
    elif col.get("missing"):
        click.echo(f"{col['message']}; {words}")
    else:
        click.echo(
            f"collection {col['name']} ({col['store']}): {col['count']} chunks, "
            f"model {col.get('embedding_model')}, {words}"
        )
    owned = col.get("owned")
    if owned:
        click.echo(
            f"  this data dir's collections there: {', '.join(owned['this_data_dir']) or 'none'}"
        )
        for name, where in owned["other_data_dirs"].items():
            click.echo(f"  {name}: another data dir's ({where})")
    for run in info["runs"]:
        click.echo(
            f"  run {run['run_id']}  {run['collection']}  {run.get('mode', '')}  "
            f"{run['status']}: {run.get('files_seen', 0)} files, "
            f"{run.get('chunks_written', 0)} chunks written, {run.get('files_failed', 0)} failed, "
            f"{len(run.get('warnings') or [])} warnings, {run.get('seconds', 0)} s"
            + (f"; error: {run['error']}" if run.get("error") else "")
        )
