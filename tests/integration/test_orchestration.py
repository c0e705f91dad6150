"""Orchestration end to end: a real Prefect server and process worker, deployments from
deployments/prefect.yaml, UI-style triggers, backfills, artifacts, Dask and a Chroma server.

Everything is started here, on free loopback ports with PREFECT_HOME in a temporary
folder, and stopped at the end of the module: nothing started by hand is needed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowRunFilter,
    FlowRunFilterParentFlowRunId,
)
from prefect.client.schemas.objects import FlowRun
from prefect.events.worker import EventsWorker
from prefect.logging.handlers import APILogWorker
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.cli import main as cli_main
from flows.guard import limit_name
from tasks.config import IngestParams
from tasks.store import ChromaStore
from tasks.tables import read_table
from tests.servers import (
    Proc,
    base_env,
    free_port,
    spawn,
    start_chroma,
    start_prefect_server,
    start_worker,
)

POOL = "docflow"
DEPLOYMENTS = {
    "ingest/nightly",
    "ingest/nightly-partition",
    "ingest/manual",
    "reingest/full-reingest",
    "backfill/backfill",
}
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
TEMPLATE = "{date:%Y-%m-%d}/"
TIMINGS: dict[str, float] = {}


# -- fixtures: processes ------------------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("orchestration")


@pytest.fixture(scope="module")
def prefect_api(workdir: Path) -> Iterator[str]:
    """A real `prefect server start` for this module; this process and its children use it."""
    proc, api, seconds = start_prefect_server(workdir / "prefect-home", free_port(), workdir)
    TIMINGS["server_start_s"] = round(seconds, 1)
    before = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = api  # for subprocesses and Dask workers
    try:
        with temporary_settings({PREFECT_API_URL: api}):  # over the session's test harness
            yield api
            # send what is still queued for this server before it goes away
            APILogWorker.drain_all(timeout=10, at_exit=False)
            EventsWorker.drain_all(timeout=10, at_exit=False)
    finally:
        if before is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = before
        proc.stop()


@pytest.fixture(scope="module")
def deployed(prefect_api: str, workdir: Path) -> list[str]:
    """Run `docflow deploy` (creates the pool, `prefect deploy --all` from the checkout)."""
    t0 = time.perf_counter()
    proc = spawn(
        "docflow deploy",
        [sys.executable, "-m", "flows", "deploy"],
        base_env(workdir / "prefect-home", prefect_api),
        workdir / "deploy.log",
    )
    assert proc.popen.wait(300) == 0, proc.tail()
    TIMINGS["deploy_s"] = round(time.perf_counter() - t0, 1)
    return proc.log.read_text().split()


@pytest.fixture(scope="module")
def worker(deployed: list[str], prefect_api: str, workdir: Path) -> Iterator[Proc]:
    proc = start_worker(workdir / "prefect-home", prefect_api, POOL, workdir)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def chroma(workdir: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    proc, seconds = start_chroma(workdir / "chroma-server", port, workdir)
    TIMINGS["chroma_start_s"] = round(seconds, 1)
    yield "127.0.0.1", port
    proc.stop()


# -- fixtures: data -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(workdir: Path) -> Path:
    """Five small documents (several batches with batch_files=2) and one file that fails."""
    root = workdir / "corpus"
    (root / "guides").mkdir(parents=True)
    texts = {
        "lighthouse.md": "# Lighthouses\n\nA lighthouse guides ships at night with a rotating "
        "lamp.\n\n## Fresnel lens\n\nThe Fresnel lens focuses the lamp into a strong beam.\n",
        "guides/keeper.txt": "The keeper trimmed the wick every evening and logged the weather "
        "in a leather-bound book.\n",
        "guides/fog.md": "# Fog signals\n\nIn fog, a diaphone horn sounds every thirty "
        "seconds so that ships can keep their distance from the rocks.\n",
        "tides.md": "# Tides\n\nSpring tides follow the full and the new moon; neap tides "
        "follow the quarter moons.\n",
        "ferry.txt": "The ferry to the island leaves the harbour at seven and returns at six.\n",
    }
    for name, text in texts.items():
        (root / name).write_text(text * 3, encoding="utf-8")
    (root / "broken.txt").write_bytes(b"\x00\x01\x02 binary \xff\xfe" * 50)
    return root


@pytest.fixture(scope="module")
def landing(workdir: Path) -> Path:
    """Three date partitions, each with a file of the same name and different text."""
    root = workdir / "landing"
    facts = ["the north pier was repaired", "a seal slept on the slipway", "the bell buoy rang"]
    for day, fact in zip(DAYS, facts, strict=True):
        (root / day).mkdir(parents=True)
        (root / day / "notes.md").write_text(
            f"# Harbour log {day}\n\nOn {day} {fact}.\n", encoding="utf-8"
        )
    return root


# -- helpers ------------------------------------------------------------------------------


def deployment_id(name: str) -> UUID:
    with get_client(sync_client=True) as client:
        return client.read_deployment_by_name(name).id


def post_create_flow_run(api: str, name: str, body: dict[str, Any]) -> httpx.Response:
    """POST to create_flow_run, retrying while SQLite is busy (503) as Prefect's client does."""
    url = f"{api}/deployments/{deployment_id(name)}/create_flow_run"
    for delay in (1, 2, 4, 8, 16):
        resp = httpx.post(url, json=body, timeout=30)
        if resp.status_code != 503:
            return resp
        time.sleep(delay)
    return httpx.post(url, json=body, timeout=30)


def trigger_like_ui(api: str, name: str, parameters: dict[str, Any], **state: Any) -> UUID:
    """POST what the UI's "Custom run" posts; return the new flow run's id."""
    body = {
        "parameters": parameters,
        "state": {"type": "SCHEDULED", "message": "Run from the UI", **state},
    }
    resp = post_create_flow_run(api, name, body)
    assert resp.status_code == 201, resp.text
    return UUID(resp.json()["id"])


def wait_final(run_id: UUID, worker: Proc, timeout: float = 240) -> FlowRun:
    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            run = client.read_flow_run(run_id)
            if run.state and run.state.is_final():
                assert run.state.is_completed(), f"{run.state!r}\n{worker.tail(80)}"
                return run
            time.sleep(0.5)
    raise AssertionError(f"flow run {run_id} not final after {timeout} s:\n{worker.tail(80)}")


def artifacts_of(run_id: UUID) -> dict[str, Any]:
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
        )
    return {a.key: a for a in found}


def table(artifact: Any) -> list[dict[str, Any]]:
    data = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
    assert isinstance(data, list)
    return data


def written_elsewhere(data_dir: Path, name: str) -> ChromaStore:
    """Open an embedded store another process wrote: drop this process's cached clients.

    Chroma caches one client per path and process; a cached one does not see what another
    process wrote since (reading through it fails with "Error finding id").
    """
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()
    return ChromaStore.open(data_dir, name)


def store_contents(store: ChromaStore) -> dict[str, tuple[str, dict[str, Any], list[float]]]:
    got = store.collection().get(include=["documents", "metadatas", "embeddings"])
    return {
        cid: (doc, dict(meta), [float(x) for x in vec])
        for cid, doc, meta, vec in zip(
            got["ids"],
            got["documents"] or [],
            got["metadatas"] or [],
            got["embeddings"],
            strict=True,
        )
    }


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = cli_main(args)
    return code, capsys.readouterr().out


# -- tests --------------------------------------------------------------------------------


def test_deploy_registers_every_deployment_with_its_form(deployed: list[str]) -> None:
    assert set(deployed) == DEPLOYMENTS
    with get_client(sync_client=True) as client:
        deps = {name: client.read_deployment_by_name(name) for name in DEPLOYMENTS}
    nightly = deps["ingest/nightly"].schedules
    assert [(s.schedule.cron, s.active) for s in nightly] == [("0 2 * * *", True)]  # type: ignore[union-attr]
    partition = deps["ingest/nightly-partition"].schedules
    assert [s.active for s in partition] == [False]
    assert all(d.work_pool_name == POOL for d in deps.values())

    # the form the UI renders: one pydantic model per flow, every field described
    form = deps["ingest/manual"].parameter_openapi_schema
    fields = form["definitions"]["IngestParams"]["properties"]
    assert {"source", "include", "chunk_size", "source_template", "chroma_host"} <= set(fields)
    assert all(f.get("description") for f in fields.values())
    assert fields["chunk_size"]["default"] == 200
    backfill = deps["backfill/backfill"].parameter_openapi_schema["definitions"]
    assert set(backfill["BackfillParams"]["properties"]) == {
        "start",
        "end",
        "max_parallel",
        "ingest",
    }
    assert all(f.get("description") for f in backfill["BackfillParams"]["properties"].values())
    reingest_form = deps["reingest/full-reingest"].parameter_openapi_schema
    assert "IngestParams" in reingest_form["definitions"]


def test_ui_trigger_runs_on_the_worker_with_artifacts(
    worker: Proc, prefect_api: str, corpus: Path, workdir: Path
) -> None:
    data_dir = workdir / "manual-data"
    params = {
        "params": {
            "source": str(corpus),
            "data_dir": str(data_dir),
            "collection": "orch-manual",
            "batch_files": 2,
            "chunk_size": 200,
            "chunk_overlap": 20,
        }
    }
    # the server validates parameters against the form, as the UI does
    bad = {"params": {**params["params"], "chunk_size": 0}}
    resp = post_create_flow_run(prefect_api, "ingest/manual", {"parameters": bad})
    assert resp.status_code == 409 and "chunk_size" in resp.text

    t0 = time.perf_counter()
    run_id = trigger_like_ui(prefect_api, "ingest/manual", params)
    run = wait_final(run_id, worker)
    TIMINGS["trigger_to_completed_s"] = round(time.perf_counter() - t0, 1)
    assert run.parameters == params

    chunks = read_table(data_dir, "chunks")
    store = written_elsewhere(data_dir, "orch-manual")
    assert store.count() == chunks.num_rows > 5
    sources = {m["source"] for _, m, _ in store_contents(store).values()}
    assert sources == {
        "lighthouse.md",
        "guides/keeper.txt",
        "guides/fog.md",
        "tides.md",
        "ferry.txt",
    }

    arts = artifacts_of(run_id)
    summary = {r["field"]: r["value"] for r in table(arts["ingest-summary-orch-manual"])}
    assert summary["files_seen"] == 6 and summary["files_failed"] == 1
    assert summary["chunks_written"] == chunks.num_rows and summary["status"] == "completed"
    failures = table(arts["ingest-failures-orch-manual"])
    assert [f["source"] for f in failures] == ["broken.txt"] and failures[0]["error"]
    histogram = arts["ingest-chunk-sizes-orch-manual"]
    assert histogram.type == "markdown" and f"{chunks.num_rows} chunks" in str(histogram.data)
    progress = arts["ingest-progress-orch-manual"]
    assert progress.type == "progress" and progress.data == 100.0


def test_scheduled_run_ingests_the_partition_of_its_date(
    worker: Proc, prefect_api: str, landing: Path, workdir: Path
) -> None:
    params = {
        "params": {
            "source_template": str(landing / TEMPLATE),
            "data_dir": str(workdir / "partition-data"),
            "collection": "orch-partitions",
        }
    }
    run_id = trigger_like_ui(
        prefect_api,
        "ingest/manual",
        params,
        state_details={"scheduled_time": "2024-01-02T02:30:00+00:00"},
    )
    wait_final(run_id, worker)
    store = written_elsewhere(workdir / "partition-data", "orch-partitions")
    assert {m["source"] for _, m, _ in store_contents(store).values()} == {"2024-01-02/notes.md"}


def test_backfill_runs_one_subflow_per_partition_and_keeps_them_all(
    worker: Proc,
    prefect_api: str,
    landing: Path,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data_dir = workdir / "partition-data"  # 2024-01-02 is already in (previous test)
    ingest = {
        "source_template": str(landing / TEMPLATE),
        "data_dir": str(data_dir),
        "collection": "orch-partitions",
    }
    params = {"params": {"start": DAYS[0], "end": DAYS[-1], "max_parallel": 2, "ingest": ingest}}
    t0 = time.perf_counter()
    run_id = trigger_like_ui(prefect_api, "backfill/backfill", params)
    wait_final(run_id, worker, timeout=300)
    TIMINGS["backfill_3_partitions_s"] = round(time.perf_counter() - t0, 1)

    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run_id])
            )
        )
    assert sorted(r.name for r in children) == [f"ingest-{d}" for d in DAYS]
    assert all(r.state_name == "Completed" for r in children)

    store = written_elsewhere(data_dir, "orch-partitions")
    contents = store_contents(store)
    assert sorted(m["source"] for _, m, _ in contents.values()) == [f"{d}/notes.md" for d in DAYS]
    assert {d for d in DAYS if any(d in doc for doc, _, _ in contents.values())} == set(DAYS)

    rows = {r["date"]: r for r in table(artifacts_of(run_id)["backfill-summary-orch-partitions"])}
    assert rows["2024-01-02"]["files_new"] == 0 and rows["2024-01-02"]["chunks_written"] == 0
    assert rows["2024-01-01"]["files_new"] == rows["2024-01-03"]["files_new"] == 1

    # re-running a partition (from the CLI, against the same server) changes nothing
    code, out = run_cli(
        [
            "ingest",
            "--source-template",
            ingest["source_template"],
            "--partition-date",
            DAYS[0],
            "--data-dir",
            str(data_dir),
            "--collection",
            "orch-partitions",
            "--json",
        ],
        capsys,
    )
    again = json.loads(out)
    assert code == 0 and again["files_unchanged"] == 1 and again["chunks_written"] == 0
    assert store_contents(store).keys() == contents.keys()


def _models_loaded() -> int:
    """Return how many models this process holds (torch models and ONNX sessions)."""
    from tasks import embed, embed_backends

    return len(embed._models) + len(embed_backends._sessions)


def test_dask_runner_gives_the_same_store_as_threads(
    prefect_api: str, corpus: Path, workdir: Path
) -> None:
    from distributed import Client, LocalCluster

    from flows import runtime
    from flows.ingest import ingest

    def params(name: str) -> IngestParams:
        return IngestParams(
            source=str(corpus), data_dir=str(workdir / name), batch_files=2, chunk_size=200
        )

    t0 = time.perf_counter()
    threads = ingest(params("threads-data"))
    TIMINGS["threads_ingest_s"] = round(time.perf_counter() - t0, 1)
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster:
        on_dask = ingest.with_options(task_runner=runtime.task_runner(cluster.scheduler_address))
        t0 = time.perf_counter()
        dask = on_dask(params("dask-data"))
        TIMINGS["dask_ingest_s"] = round(time.perf_counter() - t0, 1)
        with Client(cluster) as client:  # the embedding ran in the Dask worker processes
            models = client.run(_models_loaded)
        assert sum(models.values()) >= 1

    keys = ("files_seen", "files_failed", "documents", "chunks_written", "chunks_embedded")
    assert {k: dask[k] for k in keys} == {k: threads[k] for k in keys}
    a = store_contents(ChromaStore.open(workdir / "threads-data", "docflow"))
    b = store_contents(ChromaStore.open(workdir / "dask-data", "docflow"))
    assert a.keys() == b.keys() and len(a) == threads["chunks_written"]
    for cid, (doc, meta, vec) in a.items():
        assert b[cid][0] == doc and b[cid][1] == meta
        assert max(abs(x - y) for x, y in zip(vec, b[cid][2], strict=True)) < 1e-5


def test_chroma_server_store_answers_queries(
    prefect_api: str,
    chroma: tuple[str, int],
    corpus: Path,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    host, port = chroma
    data_dir = workdir / "server-data"
    server = ["--chroma-host", host, "--chroma-port", str(port)]
    code, out = run_cli(
        [
            "ingest",
            "--source",
            str(corpus),
            "--data-dir",
            str(data_dir),
            "--collection",
            "orch-server",
            *server,
            "--json",
        ],
        capsys,
    )
    summary = json.loads(out)
    assert code == 0 and summary["chunks_written"] >= 5
    assert not (data_dir / "chroma").exists()  # nothing embedded: the vectors are on the server
    assert (
        ChromaStore.open(data_dir, "orch-server", host, port).count() == summary["chunks_written"]
    )
    # the lexical index lives in the data dir, with exactly the server collection's ids
    from tasks.lexical import LexicalIndex, database_path

    with LexicalIndex(database_path(data_dir, "orch-server"), readonly=True) as words:
        assert words.ids() == ChromaStore.open(data_dir, "orch-server", host, port).ids()

    code, out = run_cli(
        [
            "query",
            "What sounds in fog every thirty seconds?",
            "-k",
            "2",
            "--data-dir",
            str(data_dir),
            "--collection",
            "orch-server",
            *server,
            "--json",
        ],
        capsys,
    )
    hits = json.loads(out)["results"]
    assert code == 0 and hits[0]["source"] == "guides/fog.md"
    assert hits[0]["lexical_score"] > 0 and hits[0]["dense_score"] > 0  # hybrid, both sides

    # writing a shared store, the run held the collection's global concurrency slot
    with get_client(sync_client=True) as client:
        limit = client.read_global_concurrency_limit_by_name(limit_name("orch-server"))
    assert limit.limit == 1 and limit.active_slots == 0


def test_store_retries_only_what_a_retry_can_fix() -> None:
    from prefect.states import Failed

    from tasks.errors import StoreError
    from tasks.failpoints import FailpointError
    from tasks.store import retry_transient

    def retried(exc: Exception) -> bool:
        return retry_transient(None, None, Failed(data=exc))  # type: ignore[arg-type]

    assert retried(ConnectionError("connection refused"))
    assert retried(TimeoutError("read timed out"))
    assert not retried(StoreError("collection holds vectors of another model"))
    assert not retried(FailpointError("failpoint store:after-upsert reached"))


def test_serve_builds_the_same_deployments_as_prefect_yaml() -> None:
    from deployments.serve import build

    built = {f"{d.flow_name}/{d.name}": d for d in build()}
    assert set(built) == {f"{name}-served" for name in DEPLOYMENTS}
    assert built["ingest/nightly-served"].schedules[0].schedule.cron == "0 2 * * *"
    assert built["ingest/nightly-partition-served"].schedules[0].active is False


def test_report_timings(capsys: pytest.CaptureFixture[str]) -> None:
    """Print what the module measured (trigger to completed, start-ups, Dask vs threads)."""
    with capsys.disabled():
        print("\norchestration timings:", json.dumps(TIMINGS))
