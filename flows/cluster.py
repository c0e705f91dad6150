"""A Dask cluster's workers, prepared for each run: its Prefect server, its load guards.

Dask workers live longer than a run. Two things they keep from earlier runs must not leak
into the next one:

- **The Prefect server.** A worker process keeps one Prefect events worker for every
  self-hosted server (its key is not the API address), created for the first run it
  served. Task runs travel as events, so a later run against another server would send its
  load, split and embed task runs to the first one, where they are lost. Each run
  registers :class:`ReportToServer` with its own API address (one name: it replaces the
  last run's, and reaches workers that join later, such as a nanny's restart).
- **The load guards.** Dask's worker processes are daemonic unless started with
  ``DASK_DISTRIBUTED__WORKER__DAEMON=False``, and a daemonic process may not start the
  guarded load processes: files then load in process, under the size guard only. The run
  asks the workers and says so in its log and summary (:data:`GUARDS_OFF`).

One Dask cluster serves one Prefect server at a time: runs against two servers at once
would take the workers from each other.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from distributed import Client
from distributed.diagnostics.plugin import WorkerPlugin
from prefect.settings import PREFECT_API_URL
from prefect_dask.task_runners import DaskTaskRunner

GUARDS_OFF = (
    "load guards are off on {n} of {total} Dask workers: their processes are daemonic and "
    "cannot start the guarded load processes, so files load in process under the size guard "
    "only (no per-file time or memory limit); start the workers with "
    "DASK_DISTRIBUTED__WORKER__DAEMON=False"
)


class ReportToServer(WorkerPlugin):  # type: ignore[misc]
    """Send a Dask worker's Prefect events (task runs) to one server's API."""

    name = "docflow-prefect-api"

    def __init__(self, api_url: str):
        """Remember the API address; :meth:`setup` runs on each worker."""
        self.api_url = api_url

    def setup(self, worker: Any) -> None:
        """Point this worker process's events at ``api_url`` (earlier ones still flush)."""
        point_events_at(self.api_url)


def point_events_at(api_url: str) -> None:
    """Make this process's Prefect events go to the server at ``api_url``."""
    from prefect.events.clients import PrefectEventsClient
    from prefect.events.worker import EventsWorker

    EventsWorker.set_client_override(PrefectEventsClient, api_url=api_url)


def daemonic() -> bool:
    """Return whether this process is daemonic (it cannot start child processes)."""
    return bool(multiprocessing.current_process().daemon)


def prepare_workers(client: Client) -> list[str]:
    """Point the cluster's workers at this run's Prefect server; return what to warn of.

    Prefect Cloud's events are already kept apart per address; a self-hosted server's
    address goes to every worker. Workers whose processes are daemonic load files
    without the time and memory guards: the returned warning says so.
    """
    api_url = PREFECT_API_URL.value()
    if api_url and not api_url.startswith("https://api.prefect.cloud"):
        client.register_plugin(ReportToServer(api_url), name=ReportToServer.name)
    found = client.run(daemonic)
    n = sum(1 for flag in found.values() if flag)
    if not n:
        return []
    return [GUARDS_OFF.format(n=n, total=len(found))]


class ClusterRunner(DaskTaskRunner):
    """prefect-dask's runner on an existing cluster, its workers prepared for the run.

    ``warnings`` holds what the run's summary should say about the workers.
    """

    warnings: list[str]

    def __enter__(self) -> ClusterRunner:
        super().__enter__()  # type: ignore[no-untyped-call]
        self.warnings = prepare_workers(self.client)
        return self
