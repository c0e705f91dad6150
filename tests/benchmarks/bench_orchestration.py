"""Orchestration costs: trigger → completed through a worker, and Dask vs the thread runner.

1. A real Prefect server, ``docflow deploy`` and a process worker (2 s polling); the manual
   deployment is triggered as the UI does and timed until Completed (real model, small
   corpus: mostly process start, imports and model load).
2. ../shared/corpora/markdown ingested with the default thread runner and with
   DaskTaskRunner on a LocalCluster (2 worker processes, 1 thread each, loopback), into
   fresh data dirs. The fake HashEncoder isolates orchestration overhead from embedding;
   one more pair of runs uses the real model.

Run: ``python -m tests.benchmarks bench_orchestration``.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.conftest import CORPORA, SAMPLE
from tests.servers import base_env, free_port, spawn, start_prefect_server, start_worker

FAKE_MODEL = "bench-hash-384"
REPEATS = 2


def _register_fake() -> None:
    from tasks.embed.model import register_encoder
    from tests.fake_encoder import HashEncoder

    register_encoder(FAKE_MODEL, lambda: HashEncoder(384))


def _trigger_to_completed(api: str, home: Path, work: Path, runs: int = 3) -> list[float]:
    """Deploy, start a worker, trigger the manual deployment ``runs`` times; seconds each."""
    from prefect.client.orchestration import get_client

    deploy = spawn(
        "docflow deploy", [sys.executable, "-m", "flows", "deploy"], base_env(home, api), work / "d"
    )
    if deploy.popen.wait(300) != 0:
        raise RuntimeError(deploy.tail())
    worker = start_worker(home, api, "docflow", work)
    try:
        with get_client(sync_client=True) as client:
            dep = client.read_deployment_by_name("ingest/manual")
            out = []
            for i in range(runs):
                params = {"params": {"source": str(SAMPLE), "data_dir": str(work / f"t{i}")}}
                t0 = time.perf_counter()
                # the client retries while the SQLite server answers 503
                run_id = client.create_flow_run_from_deployment(dep.id, parameters=params).id
                while not (run := client.read_flow_run(run_id)).state.is_final():  # type: ignore[union-attr]
                    time.sleep(0.2)
                if not run.state.is_completed():  # type: ignore[union-attr]
                    raise RuntimeError(f"run {run_id}: {run.state!r}\n{worker.tail()}")
                out.append(round(time.perf_counter() - t0, 2))
        return out
    finally:
        worker.stop()


def _ingest_times(work: Path, model: str, repeats: int) -> dict[str, Any]:
    """Ingest the markdown corpus with threads and with Dask; return times and counts."""
    from distributed import Client, LocalCluster

    from flows import runtime
    from flows.ingest import ingest
    from tasks.common.config import IngestParams
    from tasks.discover.plan import plan_files

    source = CORPORA / "markdown"
    result: dict[str, Any] = {"threads_s": [], "dask_s": []}

    def params(tag: str) -> IngestParams:
        return IngestParams(source=str(source), data_dir=str(work / tag), model=model)

    summary: dict[str, Any] = {}
    for i in range(repeats):
        t0 = time.perf_counter()
        summary = ingest(params(f"{model}-threads-{i}"))
        result["threads_s"].append(round(time.perf_counter() - t0, 2))
    t0 = time.perf_counter()
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        result["cluster_start_s"] = round(time.perf_counter() - t0, 2)
        with Client(cluster) as client:
            client.run(_register_fake)
        on_dask = ingest.with_options(task_runner=runtime.task_runner(cluster.scheduler_address))
        for i in range(repeats):
            t0 = time.perf_counter()
            dask_summary = on_dask(params(f"{model}-dask-{i}"))
            result["dask_s"].append(round(time.perf_counter() - t0, 2))
    assert dask_summary["chunks_written"] == summary["chunks_written"]
    best_threads, best_dask = min(result["threads_s"]), min(result["dask_s"])
    result.update(
        files=summary["files_seen"],
        chunks=summary["chunks_written"],
        batches=len(plan_files(params("plan"), dict, False).batches),
        overhead_s=round(best_dask - best_threads, 2),
        overhead_ratio=round(best_dask / best_threads, 2),
    )
    return result


def main() -> dict[str, Any]:
    """Measure and print trigger → completed and the Dask runner's overhead."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if not (CORPORA / "markdown").exists():
        print("../shared/corpora is absent: nothing to measure")
        return {"skipped": True}
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    # its data dirs, Prefect home and logs (about 240 MB) go when it ends, even on failure
    with tempfile.TemporaryDirectory(prefix="bench-orchestration-") as scratch:
        work = Path(scratch)
        home = work / "prefect-home"
        server, api, server_s = start_prefect_server(home, free_port(), work)
        os.environ["PREFECT_API_URL"] = api  # the flow-run subprocesses and Dask workers use it
        _register_fake()
        try:
            with temporary_settings({PREFECT_API_URL: api}):
                triggers = _trigger_to_completed(api, home, work)
                fake = _ingest_times(work, FAKE_MODEL, REPEATS)
                real = _ingest_times(work, "all-MiniLM-L6-v2", 1)
        finally:
            os.environ.pop("PREFECT_API_URL", None)
            server.stop()
    result = {
        "server_start_s": round(server_s, 1),
        "trigger_to_completed_s": triggers,
        "trigger_to_completed_median_s": statistics.median(triggers),
        "fake_encoder": fake,
        "real_model": real,
    }
    print(f"server start {server_s:.1f} s; trigger → completed (worker, 2 s polling): {triggers}")
    for label, r in (("fake encoder", fake), ("real model", real)):
        print(
            f"{label}: {r['files']} files, {r['chunks']} chunks, {r['batches']} batches; "
            f"threads {r['threads_s']} s, dask {r['dask_s']} s "
            f"(cluster start {r['cluster_start_s']} s); overhead {r['overhead_s']} s "
            f"(× {r['overhead_ratio']})"
        )
    return result
