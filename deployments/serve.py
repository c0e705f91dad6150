"""Serve docflow's deployments from one long-running process, without a work pool or worker.

    docflow serve          # or: python -m deployments.serve

The deployments are those of deployments/prefect.yaml (same flows, parameters, forms and
schedules) under names ending in ``-served`` (``ingest/manual-served``): a served deployment
must not take over a worker deployment of the same name, because stopping ``serve`` pauses
its deployments. Runs execute in subprocesses of this process.
"""

from __future__ import annotations

import importlib
from typing import Any

from deployments import deployment_specs
from flows.env import apply_defaults

#: Appended to the prefect.yaml names (see the module docstring).
SUFFIX = "-served"


def load_flow(entrypoint: str) -> Any:
    """Import the flow of a prefect.yaml entrypoint (``flows/ingest.py:ingest``) as a module.

    Imported by module name (not run as a script), so the served deployment records where
    the code is and its runs can load it.
    """
    path, _, name = entrypoint.partition(":")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    return getattr(module, name)


def build() -> list[Any]:
    """Return a RunnerDeployment for every deployment of prefect.yaml."""
    from prefect.schedules import Cron

    out = []
    for spec in deployment_specs():
        flow = load_flow(spec["entrypoint"])
        schedules = [
            Cron(s["cron"], timezone=s.get("timezone"), active=s.get("active", True))
            for s in spec.get("schedules") or []
        ]
        out.append(
            flow.to_deployment(
                name=spec["name"] + SUFFIX,
                description=spec.get("description"),
                tags=spec.get("tags"),
                parameters=spec.get("parameters"),
                schedules=schedules,
            )
        )
    return out


def main(limit: int | None = None) -> None:
    """Serve every deployment until interrupted (at most ``limit`` runs at once)."""
    apply_defaults()
    from prefect import serve

    serve(*build(), limit=limit)


if __name__ == "__main__":
    main()
