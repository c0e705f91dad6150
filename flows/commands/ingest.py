"""``docflow ingest``, ``reingest`` and ``backfill``: run the ingest flows, print the summary.

Settings are resolved and checked before any flow starts (a bad one is one line and exit
code 2, never a failed run); a terminal gets a progress bar over batches.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from flows.commands.common import (
    EXIT_STRICT,
    check_data_dir,
    errors_to_exit_codes,
    flow_runs,
    ingest_options,
    warn_unknown_env,
)
from tasks.common.documents import shown_name
from tasks.common.errors import ConfigError


def _params(config_file: Path | None, overrides: dict[str, Any]) -> Any:
    """Resolve and check the ingest settings before any flow starts.

    Everything a run would only find out later is checked here, so a bad option is one
    line and exit code 2, never a failed run with tracebacks: the folders, the globs, the
    model (present on this machine), and the splitter (an LLM splitter needs its endpoint).
    """
    from tasks.common.config import resolve_params
    from tasks.discover.files import check_glob, not_a_folder
    from tasks.embed.model import check_model_available
    from tasks.split.factory import build_splitter

    lists = {k: list(v) or None for k, v in overrides.items() if isinstance(v, tuple)}
    params = resolve_params(config_file, {**overrides, **lists})
    warn_unknown_env()
    if params.source_template:
        from tasks.discover.partitions import split_template

        root = split_template(params.source_template)[0]
        if not Path(root).is_dir():
            raise ConfigError(f"{not_a_folder(Path(root))} (of {params.source_template})")
    elif not Path(params.source).is_dir():
        raise ConfigError(not_a_folder(Path(params.source)))
    check_data_dir(params.data_dir)
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
        click.echo(f"failed   {shown_name(failure['source'])}: {failure['error']}")
    for warning in summary["warnings"]:
        click.echo(f"warning  {warning}")


def _require_template(params: Any) -> None:
    """Refuse a backfill without a source template (nothing to take partitions of)."""
    if not params.source_template:
        raise ConfigError("backfill needs --source-template, e.g. 'landing/{date:%Y-%m-%d}/'")


def _strict_failure(summaries: list[dict[str, Any]]) -> bool:
    """Return whether --strict turns the runs into exit code 3: a file failed, or a warning."""
    return any(s.get("files_failed") or s.get("warnings") for s in summaries)


def _run_flow(
    flow_name: str, config_file: Path | None, as_json: bool, overrides: dict[str, Any]
) -> None:
    """Run the ingest or reingest flow with a progress bar, print the summary, set the exit code."""
    from flows import temporary_server

    address = overrides.pop("dask_address", None)
    # Before anything heavy is imported: Prefect's temporary server (4-12 s to come up)
    # starts now and comes up while this process imports Prefect, the flow and the model.
    with temporary_server.started(not address) as early, errors_to_exit_codes():
        from flows import progress, runtime

        runtime.require_server_for_dask(address)
        params = _params(config_file, overrides)
        server = temporary_server.adopt(early)
        if not address:  # on a Dask cluster the workers embed
            runtime.warm_up_model(params.model, params.embed_backend)  # on a GPU: 5-15 s
        if flow_name == "reingest":
            from flows.rebuild import reingest as run
        else:
            from flows.ingest import ingest as run
        if address:
            run = run.with_options(task_runner=runtime.task_runner(address))
        bar = _Progress()
        listener = bar if sys.stderr.isatty() else (lambda done, total: None)
        try:
            with flow_runs(server, served=not address), progress.listen(listener):
                summary = run(params)
        finally:
            bar.close()
    if as_json:
        click.echo(json.dumps(summary, ensure_ascii=False))
    else:
        _print_summary(summary)
    if params.strict and _strict_failure([summary]):
        raise click.exceptions.Exit(EXIT_STRICT)


def _plan_report(params: Any) -> dict[str, Any]:
    """Return the plan a run with ``params`` would make now, as ``--dry-run`` prints it."""
    from tasks.discover.plan import preview

    physical, plan = preview(params)
    return {
        "collection": params.collection,
        "physical": physical,
        "files_seen": plan.files_seen,
        "files_new": plan.new,
        "files_changed": plan.changed,
        "files_unchanged": plan.unchanged,
        "files_retried": plan.retried,
        "files_deleted": len(plan.deleted),
        "batches": len(plan.batches),
        "process": [
            {"source": f.source, "why": plan.why[f.source], "bytes": f.size}
            | ({"error": f.error} if f.error else {})  # known to fail: too large, unreadable
            for batch in plan.batches
            for f in batch
        ],
        "delete": plan.deleted,
        "warnings": list(plan.warnings),
        "planned": plan.describe(),
    }


def _print_plan(report: dict[str, Any], indent: str = "  ") -> None:
    """Print a plan report file by file: why each file is processed, what is deleted."""
    for row in report["process"]:
        fails = f"  (will fail: {row['error']})" if "error" in row else ""
        click.echo(f"{indent}{row['why']:<9} {shown_name(row['source'])}{fails}")
    for source in report["delete"]:
        click.echo(f"{indent}{'delete':<9} {shown_name(source)}")
    for warning in report["warnings"]:
        click.echo(f"{indent}warning   {warning}")


def _dry_run(config_file: Path | None, as_json: bool, overrides: dict[str, Any]) -> None:
    """Print the plan an ingest would make now, file by file; start nothing, write nothing."""
    with errors_to_exit_codes():
        overrides.pop("dask_address", None)
        params = _params(config_file, overrides)
        report = _plan_report(params)
    if as_json:
        click.echo(json.dumps({"dry_run": True, **report}, ensure_ascii=False))
    else:
        click.echo(f"dry run of {params.collection}: nothing is loaded, written or deleted")
        click.echo(report["planned"])
        _print_plan(report)
    if params.strict and report["warnings"]:
        raise click.exceptions.Exit(EXIT_STRICT)


dry_run_option = click.option(
    "--dry-run",
    is_flag=True,
    help="Print what the run would process and delete, file by file, and stop: nothing is "
    "loaded, written or deleted, and no Prefect run starts.",
)


@click.command()
@ingest_options
@dry_run_option
def ingest(config_file: Path | None, as_json: bool, dry_run: bool, **overrides: Any) -> None:
    """Bring the collection up to date with the source folder and print the run summary.

    Incremental: unchanged files are skipped, changed files re-split (their stale chunks
    deleted), deleted files removed from the index.

    Example: docflow ingest --source data/raw --include '**/*.md' --json
    """
    if dry_run:
        _dry_run(config_file, as_json, overrides)
        return
    _run_flow("ingest", config_file, as_json, overrides)


@click.command()
@ingest_options
def reingest(config_file: Path | None, as_json: bool, **overrides: Any) -> None:
    """Rebuild the collection from scratch without downtime (new version, then switch).

    Queries keep answering from the current version until the new one is complete; the
    embedding cache makes unchanged text free.

    Example: docflow reingest --model all-MiniLM-L6-v2
    """
    _run_flow("reingest", config_file, as_json, overrides)


@click.command()
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
@dry_run_option
def backfill(
    start: Any,
    end: Any,
    max_parallel: int,
    config_file: Path | None,
    as_json: bool,
    dry_run: bool,
    **overrides: Any,
) -> None:
    """Ingest every date partition from --start to --end, one subflow run per partition.

    Needs --source-template (or source_template in the config file). Partitions already
    in the index are skipped as unchanged, so a backfill can be re-run safely.

    Example: docflow backfill --source-template 'in/{date:%F}' --start 2024-01-01 --end 2024-01-03
    """
    if dry_run:
        _backfill_dry_run(start.date(), end.date(), config_file, as_json, overrides)
        return
    from flows import temporary_server

    address = overrides.pop("dask_address", None)
    with temporary_server.started(not address) as early, errors_to_exit_codes():  # see _run_flow
        from flows import runtime

        runtime.require_server_for_dask(address)
        params = _params(config_file, overrides)
        _require_template(params)
        from flows.backfill import backfill as run
        from tasks.common.config import BackfillParams, validated

        spec = validated(
            BackfillParams,
            {
                "start": start.date(),
                "end": end.date(),
                "max_parallel": max_parallel,
                "ingest": params,
            },
        )
        with (
            flow_runs(temporary_server.adopt(early), served=not address),
            runtime.dask_env(address),
        ):
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


def _backfill_dry_run(
    start: Any, end: Any, config_file: Path | None, as_json: bool, overrides: dict[str, Any]
) -> None:
    """Print the plan of every partition from ``start`` to ``end``; start nothing, write nothing."""
    from tasks.discover.partitions import partition_dates

    with errors_to_exit_codes():
        overrides.pop("dask_address", None)
        params = _params(config_file, overrides)
        _require_template(params)
        reports = [
            {"date": day.isoformat()}
            | _plan_report(params.model_copy(update={"partition_date": day}))
            for day in partition_dates(start, end)
        ]
    if as_json:
        click.echo(json.dumps({"dry_run": True, "partitions": reports}, ensure_ascii=False))
    else:
        click.echo(f"dry run of {params.collection}: nothing is loaded, written or deleted")
        for report in reports:
            click.echo(f"{report['date']}  {report['planned']}")
            _print_plan(report)
    if params.strict and any(r["warnings"] for r in reports):
        raise click.exceptions.Exit(EXIT_STRICT)
