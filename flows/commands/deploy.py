"""``docflow deploy`` and ``serve``: the deployments of deployments/prefect.yaml."""

from __future__ import annotations

from pathlib import Path

import click

from flows.commands.common import errors_to_exit_codes


@click.command()
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

    with errors_to_exit_codes():
        names = run(project_dir or PROJECT_DIR)
    for name in names:
        click.echo(name)


@click.command()
@click.option("--limit", type=click.IntRange(min=1), help="Most flow runs at once [no limit].")
def serve(limit: int | None) -> None:
    """Serve the same deployments from this process, without a work pool or worker.

    Runs until interrupted; trigger runs from the UI or with prefect deployment run.

    Example: PREFECT_API_URL=http://127.0.0.1:4200/api docflow serve --limit 2
    """
    from deployments.serve import main as run

    with errors_to_exit_codes():
        run(limit)
