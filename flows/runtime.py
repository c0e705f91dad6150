"""What a flow run takes from where it runs: its task runner and its scheduled date.

The task runner belongs to the process, not to a run's parameters (a flow's runner is fixed
before its parameters are read): threads by default, or prefect-dask's DaskTaskRunner on an
existing Dask cluster when ``DOCFLOW_DASK_ADDRESS`` (or the CLI's ``--dask-address``) names
its scheduler. Tasks hand each other table-part paths, so any runner works as long as the
data dir is visible to every Dask worker.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from tasks.config import IngestParams
from tasks.errors import ConfigError
from tasks.partitions import partition_params

DASK_ENV = "DOCFLOW_DASK_ADDRESS"
#: Worker threads of the default runner (stages of different batches overlap).
THREADS = 4


def dask_address(address: str | None = None) -> str | None:
    """Return the Dask scheduler address to use: ``address``, else the environment's."""
    return address or os.environ.get(DASK_ENV) or None


def task_runner(address: str | None = None) -> TaskRunner[Any]:
    """Return a DaskTaskRunner for the cluster at ``address`` (or the env's), else threads."""
    address = dask_address(address)
    if not address:
        return ThreadPoolTaskRunner(max_workers=THREADS)
    try:
        from prefect_dask.task_runners import DaskTaskRunner
    except ImportError as exc:
        raise ConfigError("a Dask address needs prefect-dask: pip install prefect-dask") from exc
    runner: TaskRunner[Any] = DaskTaskRunner(address=address)
    return runner


@contextmanager
def api_for_workers(address: str | None) -> Iterator[None]:
    """Give Dask workers a Prefect API to report their task runs to.

    With a server configured (PREFECT_API_URL), its settings travel to the workers with
    each task. Without one, start this process's temporary server now and name it in the
    settings, so the workers report to it rather than each starting its own.
    """
    if not dask_address(address) or PREFECT_API_URL.value():
        yield
        return
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start()
    with temporary_settings({PREFECT_API_URL: server.api_url}):
        yield


def scheduled_date() -> dt.date:
    """Return the date (UTC) the current flow run was scheduled for (today outside one)."""
    from prefect.runtime import flow_run

    when: dt.datetime = flow_run.scheduled_start_time
    return when.astimezone(dt.UTC).date()


def for_this_run(params: IngestParams) -> IngestParams:
    """Scope partitioned parameters to this run's partition (its date, or the scheduled one)."""
    if not params.source_template:
        return params
    return partition_params(params, params.partition_date or scheduled_date())


@contextmanager
def dask_env(address: str | None) -> Iterator[None]:
    """Name the Dask cluster in ``DOCFLOW_DASK_ADDRESS`` for the block (for subflow runners)."""
    if not address:
        yield
        return
    before = os.environ.get(DASK_ENV)
    os.environ[DASK_ENV] = address
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(DASK_ENV, None)
        else:
            os.environ[DASK_ENV] = before
