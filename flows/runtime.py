"""What a flow run takes from where it runs: its task runner, its scheduled date, its memory.

The task runner belongs to the process, not to a run's parameters (a flow's runner is fixed
before its parameters are read): threads by default, or prefect-dask's DaskTaskRunner on an
existing Dask cluster when ``DOCFLOW_DASK_ADDRESS`` (or the CLI's ``--dask-address``) names
its scheduler. Tasks hand each other table-part paths, so any runner works as long as the
data dir is visible to every Dask worker.

Memory: a long ingest runs many batches through a few threads in one process, and glibc's
malloc keeps what they freed. The flow caps the arenas (:func:`limit_malloc_arenas`) and
gives freed memory back after each batch (:func:`release_memory`, both in
:mod:`tasks.common.memory`, which the worker processes use too); what stays is what the process
holds (with an embedded Chroma store, mostly its in-memory HNSW index).

Heartbeats: the command line's runs send Prefect's flow-run heartbeats only when asked
(:func:`heartbeats_when_asked`).
"""

from __future__ import annotations

import ast
import datetime as dt
import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
    get_current_settings,
    temporary_settings,
)
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from tasks.common.config import IngestParams
from tasks.common.errors import ConfigError
from tasks.discover.partitions import partition_params
from tasks.embed.device import cuda_likely

log = logging.getLogger(__name__)

DASK_ENV = "DOCFLOW_DASK_ADDRESS"
#: Worker threads of the default runner (stages of different batches overlap).
THREADS = 4


def _main_guard_lines(path: str) -> list[tuple[int, int]]:
    """Return the line ranges of the ``if __name__ == "__main__":`` blocks of a script."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []
    ranges = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            names = [node.test.left, *node.test.comparators]
            dunder = any(isinstance(n, ast.Name) and n.id == "__name__" for n in names)
            main = any(isinstance(n, ast.Constant) and n.value == "__main__" for n in names)
            if dunder and main and node.body:
                ranges.append((node.body[0].lineno, node.body[-1].end_lineno or node.lineno))
    return ranges


def refuse_unguarded_main(workers: int) -> None:
    """Refuse to start worker processes from a script's unguarded module level.

    Worker processes (the fork server's, or spawned) import the main script again. An
    ingest started at its module level, outside ``if __name__ == "__main__":``, would start
    once more in every worker and wait there for the collection lock the first one holds:
    a hang of ``lock_timeout``. Better to say so at once.

    Raises:
        ConfigError: If this call comes from the main script's module level, unguarded.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if workers == 0 or main is None or not path or not os.path.isfile(path):
        return
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            line = frame.f_lineno
            if not any(lo <= line <= hi for lo, hi in _main_guard_lines(path)):
                raise ConfigError(
                    f"{path}:{line} starts docflow at its module level: the worker processes "
                    "import that script again and would start it once more each; put the call "
                    'under `if __name__ == "__main__":` (or set workers = 0)'
                )
            return
        frame = frame.f_back  # type: ignore[assignment]


#: The background model loads started in this process, by (model, backend): one each.
_warm_ups: dict[tuple[str, str], threading.Thread] = {}


def warm_up_model(model: str, backend: str, cuda: bool | None = None) -> threading.Thread | None:
    """Start loading the embedding model in the background, when a GPU is there.

    Importing torch and sentence-transformers and moving the model to the GPU takes 15-20 s
    that the first embed task would otherwise wait for; started at the beginning of the
    run (the CLI starts it before the flow, while Prefect's server comes up), it overlaps
    everything before the first embed. There the torch backends encode in a child process
    (tasks/embed/process.py), which this starts; otherwise the loaded model is the
    process's shared one (tasks/embed/model.py). Either way the embed task finds it ready;
    a second call for the same model returns the first call's thread. On a CPU the ONNX
    backends load in about a second: nothing to win.
    """
    if not (cuda_likely() if cuda is None else cuda):
        return None
    if (model, backend) in _warm_ups:
        return _warm_ups[(model, backend)]

    def load() -> None:
        from tasks.embed.model import Embedder

        try:
            Embedder(model, backend=backend).warm_up()
        except Exception as exc:  # noqa: BLE001 - the embed task reports any real failure
            log.debug("background model load failed: %s", exc)

    thread = threading.Thread(target=load, name="docflow-model-warm-up", daemon=True)
    _warm_ups[(model, backend)] = thread
    thread.start()
    return thread


def _runs_on_threads() -> bool:
    """Return whether the current flow run's tasks run in this process's threads (not Dask)."""
    from prefect.context import FlowRunContext

    run = FlowRunContext.get()
    return run is not None and isinstance(run.task_runner, ThreadPoolTaskRunner)


@contextmanager
def store_in_its_process(params: IngestParams) -> Iterator[None]:
    """Keep the run's embedded store in the store process for the block (off the flow's GIL).

    Where this process writes the store: an embedded store and tasks in this process's
    threads (a Dask cluster's workers open it themselves); ``DOCFLOW_STORE_PROCESS`` off
    keeps it here (tasks/index/store_process.py).
    """
    from tasks.index import store_process

    if params.chroma_host or not store_process.enabled() or not _runs_on_threads():
        yield
        return
    with store_process.serving(params.data_path / "chroma"):
        yield


def start_workers_for_a_first_ingest(params: IngestParams, physical: str) -> None:
    """Start the load and split workers while a run opens the index and plans.

    Only where files are sure to load: a collection with no file in the manifest yet (a
    first ingest, a reingest's new version). An unchanged rerun loads nothing and starts
    none; a run on Dask loads on the cluster's workers.
    """
    from tasks.index.manifest import Manifest
    from tasks.load.worker import prestart as start_load_workers
    from tasks.split.pool import prestart as start_split_workers

    if not _runs_on_threads():
        return
    with Manifest.open(params.data_path) as manifest:
        if manifest.counts(physical)[0]:
            return
    start_load_workers(params.loaders)
    start_split_workers(params.loaders.process_count())


def dask_address(address: str | None = None) -> str | None:
    """Return the Dask scheduler address to use: ``address``, else the environment's."""
    return address or os.environ.get(DASK_ENV) or None


def task_runner(address: str | None = None) -> TaskRunner[Any]:
    """Return a DaskTaskRunner for the cluster at ``address`` (or the env's), else threads."""
    address = dask_address(address)
    if not address:
        return ThreadPoolTaskRunner(max_workers=THREADS)
    try:
        from flows.cluster import ClusterRunner
    except ImportError as exc:
        raise ConfigError("a Dask address needs prefect-dask: pip install prefect-dask") from exc
    runner: TaskRunner[Any] = ClusterRunner(address=address)
    return runner


def runner_warnings() -> list[str]:
    """Return what the current flow run's task runner warned of (Dask workers' load guards).

    A run's summary lists them (see flows/cluster.py).
    """
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    return list(getattr(ctx.task_runner, "warnings", ()) if ctx else ())


def require_server_for_dask(address: str | None) -> None:
    """Refuse a Dask cluster without a configured Prefect server.

    Dask workers live longer than a run, and each keeps the Prefect API address of the
    first task it ran (its events and log workers are per process). A temporary server
    lives and dies with one CLI run, so the workers of the next run would report to a dead
    address: their task runs and logs would be lost. A configured server outlives runs.

    Raises:
        ConfigError: If a Dask address is given (or in the environment) and no
            PREFECT_API_URL is configured.
    """
    if dask_address(address) and not PREFECT_API_URL.value():
        raise ConfigError(
            "a Dask cluster needs a Prefect server that outlives the run for its workers to "
            "report to: start one (prefect server start) and set "
            "PREFECT_API_URL=http://127.0.0.1:4200/api"
        )


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


@contextmanager
def heartbeats_when_asked() -> Iterator[None]:
    """Run the flows started inside with Prefect's heartbeats only if a setting asks for them.

    Prefect 3.8 sends a flow-run heartbeat every 180 s by default, from a thread that sleeps
    in 1 s steps and that every sync flow run (each backfill partition too) joins at its
    end: each run ends up to 1 s late. Measured: an unchanged rerun of the sample corpus
    through the CLI in one process took 1.13 s, 0.50 s without. The heartbeats feed one
    thing, an automation that marks a silent run crashed, which Prefect's guide to it
    enables by setting ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY``: set it (environment or
    profile) and the runs send them as configured. docflow's own run records mark a killed
    run interrupted either way.
    """
    if "heartbeat_frequency" in get_current_settings().flows.model_fields_set:
        yield
        return
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield
