"""Orchestration end to end: a real Prefect server and process worker, deployments from
deployments/prefect.yaml, UI-style triggers, backfills, artifacts, Dask and a Chroma server.

Everything is started here, on free loopback ports with PREFECT_HOME in a temporary
folder, and stopped at the end of the module: nothing started by hand is needed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
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
from tasks.common.tables import read_table
from tasks.index.store import ChromaStore
from tests.conftest import REPO
from tests.index_state import warm_cache
from tests.servers import (
    Proc,
    base_env,
    flow_run_events,
    free_port,
    migrated_database,
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
OTHER_SERVER: list[str] = []  # the session's server's API URL, beside this module's


# -- fixtures: processes ------------------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("orchestration")


@pytest.fixture(scope="module")
def prefect_api(workdir: Path) -> Iterator[str]:
    """A real `prefect server start` for this module; this process and its children use it.

    The session's own server (the test harness's, or the one configured) stays up beside
    it: :data:`OTHER_SERVER` holds its URL, for a test that needs a second server.
    """
    OTHER_SERVER[:] = [str(PREFECT_API_URL.value())]
    database = migrated_database(workdir / "prefect-a.db")
    proc, api, seconds = start_prefect_server(
        workdir / "prefect-home", free_port(), workdir, database
    )
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
    # the worker's process keeps Prefect's heartbeats (the parent's first beat is on the
    # server), its partitions send none: each would end up to 1 s late joining the thread
    beat, completed = "prefect.flow-run.heartbeat", "prefect.flow-run.Completed"
    deadline = time.monotonic() + 30  # the server persists events in the background
    while time.monotonic() < deadline and not (
        flow_run_events(run_id, beat) and all(flow_run_events(r.id, completed) for r in children)
    ):
        time.sleep(0.2)
    assert flow_run_events(run_id, beat) >= 1
    assert [flow_run_events(r.id, beat) for r in children] == [0] * len(DAYS)

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


# -- README "Scaling out", run as written: Prefect server, Chroma server, Dask cluster ---------


def _readme_block(heading: str, language: str) -> list[str]:
    """Return the lines of the first ``language`` code block under ``heading`` of the docs.

    The section may be on any page: README.md or docs/*.md (tests/docs.py finds it).
    """
    from tests import docs

    code = docs.code_blocks(docs.section(heading), language)[0]
    return [line for line in code.splitlines() if line.strip()]


def _wait_port(port: int, timeout: float = 60) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise AssertionError(f"nothing listens on port {port} after {timeout} s")


@pytest.fixture(scope="module")
def scaled_out(
    prefect_api: str, workdir: Path, sample_template: tuple[Path, Path]
) -> Iterator[dict[str, Any]]:
    """Run README's Scaling out block in a fresh folder, line by line, as a user would.

    Substituted: the ports (free ones) and the Prefect server, which is this module's (the
    block's ``prefect server start`` line is skipped; its ``export`` names the module's).
    The folder holds the sample corpus as ``data/raw`` and ``.venv``, so the block's
    default source, data dir and ``.venv/bin/`` paths are the user's; the data dir starts
    with the sample's embedding cache (the subject is where the work runs, not the vectors).
    """
    import shutil
    import signal

    from tests.conftest import SAMPLE

    root = workdir / "scaling-out"
    warm_cache(root / "data", sample_template[1])
    shutil.copytree(SAMPLE, root / "data" / "raw")
    (root / ".venv").symlink_to(REPO / ".venv")
    api_port = prefect_api.rsplit(":", 1)[1].split("/")[0]
    chroma_port, dask_port = free_port(), free_port()
    ports = {"4200": api_port, "8000": str(chroma_port), "8786": str(dask_port)}
    lines = _readme_block("## Scaling out", "bash")
    export = lines[0]
    assert export.startswith("export PREFECT_API_URL=")
    for old, new in ports.items():
        export = export.replace(old, new)
    background: list[Any] = []
    outputs: list[str] = []
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["DASK_LOGGING__DISTRIBUTED"] = "info"
    try:
        for line in lines[1:]:
            for old, new in ports.items():
                line = line.replace(f"--port {old}", f"--port {new}").replace(f":{old}", f":{new}")
                line = line.replace(f"--chroma-port {old}", f"--chroma-port {new}")
            if "prefect server start" in line:
                continue  # the module's server answers at the exported address
            command = f"{export}; {line}"
            if line.rstrip().endswith("&"):
                background.append(
                    subprocess.Popen(
                        ["bash", "-c", command], cwd=root, env=env, start_new_session=True
                    )
                )
                if "chroma run" in line:
                    _wait_port(chroma_port)
                elif "dask scheduler" in line:
                    _wait_port(dask_port)
                elif "dask worker" in line:
                    from distributed import Client

                    with Client(f"tcp://127.0.0.1:{dask_port}", timeout=60) as client:
                        client.wait_for_workers(2, timeout=120)
                continue
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=root,
                env=env,
                text=True,
                capture_output=True,
                timeout=600,
            )
            assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
            outputs.append(done.stdout)
        yield {
            "root": root,
            "data": root / "data",
            "dask": f"tcp://127.0.0.1:{dask_port}",
            "chroma": ("127.0.0.1", chroma_port),
            "outputs": outputs,
            "worker_log": root / "dask-worker.log",
            "pgids": [proc.pid for proc in background],
            "env": {**env, "PREFECT_API_URL": prefect_api},
        }
    finally:
        for proc in background:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        time.sleep(2)
        for proc in background:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def task_runs_of(flow_run_id: UUID) -> list[Any]:
    from prefect.client.schemas.filters import FlowRunFilterId

    with get_client(sync_client=True) as client:
        return client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])), limit=200
        )


def flow_runs_writing(data_dir: Path) -> list[FlowRun]:
    """Return the ingest flow runs of ``data_dir``, oldest first."""
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(limit=200)
    mine = [
        r for r in runs if r.parameters.get("params", {}).get("data_dir") in (str(data_dir), "data")
    ]
    return sorted(mine, key=lambda r: r.created or 0)


def wait_for_task_runs(run_id: UUID, names: set[str], timeout: float = 30) -> list[Any]:
    """Wait until run ``run_id``'s task runs of these stage names reach the server (events lag)."""
    deadline = time.monotonic() + timeout
    while True:
        found = task_runs_of(run_id)
        if names <= {t.name.rsplit("-", 1)[0] for t in found}:
            return found
        assert time.monotonic() < deadline, (run_id, sorted(t.name for t in found))
        time.sleep(1)


def wait_completed(run_id: UUID, names: set[str], timeout: float = 60) -> list[Any]:
    """Wait until run ``run_id``'s task runs of these stages are on the server, each ``Completed``.

    Their states come from the Dask workers that ran them (as events, a little after the
    run ends): a worker that sends them elsewhere leaves them ``Pending`` or missing here.
    """
    found = wait_for_task_runs(run_id, names, timeout)
    deadline = time.monotonic() + timeout
    while not all(t.state and t.state.is_final() for t in found):
        assert time.monotonic() < deadline, sorted((t.name, t.state_name) for t in found)
        time.sleep(1)
        found = task_runs_of(run_id)
    assert {t.state_name for t in found} == {"Completed"}, [(t.name, t.state_name) for t in found]
    return found


def ingest_again(scaled: dict[str, Any]) -> dict[str, Any]:
    """Run the block's ingest again, as a user would in the same shell (a new process)."""
    data = scaled["data"]
    args = ["--source", str(data / "raw"), "--data-dir", str(data), "--collection", "dist"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "flows",
            "ingest",
            *args,
            "--dask-address",
            scaled["dask"],
            "--json",
        ],
        cwd=REPO,
        env=scaled["env"],
        text=True,
        capture_output=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def listening_on_every_address(root_pids: list[int]) -> list[str]:
    """Return ``addr:port`` of sockets that processes of these groups listen on beyond loopback."""
    import psutil

    pids = set()
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(proc.pid) in root_pids:
                pids.add(proc.pid)
    return [
        f"{c.laddr.ip}:{c.laddr.port}"
        for c in psutil.net_connections(kind="tcp")
        if c.pid in pids
        and c.status == psutil.CONN_LISTEN
        and c.laddr.ip not in ("127.0.0.1", "::1")
    ]


def test_the_scaling_out_section_runs_as_written(scaled_out: dict[str, Any]) -> None:
    ingest_out, query_out = scaled_out["outputs"]
    assert re.search(r"^files_new\s+12$", ingest_out, re.M), ingest_out
    # workers started as the block says keep the load guards: the run warns of nothing
    assert "warning" not in ingest_out and "load guards" not in ingest_out, ingest_out
    # nothing the block started listens beyond loopback (no dashboard on 0.0.0.0:8787)
    assert listening_on_every_address(scaled_out["pgids"]) == []
    assert "seasons/winter-preparation.md" in query_out.splitlines()[1]  # best hit
    data = scaled_out["data"]
    host, port = scaled_out["chroma"]
    assert (data / "chroma.server").read_text().strip() == f"{host}:{port}"
    assert not (data / "chroma").exists()  # the query found the server without the flag


def test_workers_that_outlive_runs_report_every_run_to_the_server(
    scaled_out: dict[str, Any],
) -> None:
    """Workers used to keep the first run's temporary server and lose later runs' task runs."""
    root, data = scaled_out["root"], scaled_out["data"]
    (root / "data" / "raw" / "letter-to-neighbours.txt").write_text(
        "Dear neighbours, the bees are calm this spring.\n", encoding="utf-8"
    )
    assert ingest_again(scaled_out)["files_changed"] == 1
    runs = flow_runs_writing(data)
    assert len(runs) >= 2
    for run in runs[-2:]:  # the block's run and this one, on the same workers
        wait_for_task_runs(run.id, {"load", "split", "embed"})
    log = scaled_out["worker_log"].read_text(errors="replace")
    assert "Unable to connect" not in log and "Error logging to API" not in log


def test_a_killed_dask_worker_is_replaced_and_the_index_converges(
    scaled_out: dict[str, Any], workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kill -9 of a busy worker: the run completes, equal to a from-scratch ingest.

    Every worker process kills itself (a real SIGKILL) at the end of its first embedding;
    its nanny starts a fresh one (without the failpoint) and Dask runs the task again.
    """
    from distributed import Client

    from tasks.common.failpoints import ENV

    root, data = scaled_out["root"], scaled_out["data"]
    (root / "data" / "raw" / "queen-rearing.md").write_text(
        "# Queen rearing\n\nGraft larvae younger than a day old.\n", encoding="utf-8"
    )
    with Client(scaled_out["dask"], timeout=60) as client:
        # a lambda travels by value and sets each worker's own environment
        client.run(lambda: os.environ.__setitem__(ENV, "embed:after-encode"))
    ingest_again(scaled_out)
    log = scaled_out["worker_log"].read_text(errors="replace")
    assert "Restarting worker" in log  # a worker died and its nanny replaced it
    # what the operator sees in Prefect: each task once, Completed
    run = flow_runs_writing(data)[-1]
    found = wait_completed(run.id, {"load", "split", "embed", "store"})
    assert len({t.id for t in found}) == len(found)
    # the killed attempt never reports Crashed: its task run starts over (docs/scaling-out.md)
    with get_client(sync_client=True) as client:
        history = {
            t.name: [st.type.value for st in client.read_task_run_states(t.id)] for t in found
        }
    embed = [h for name, h in history.items() if name.startswith("embed")]
    assert any(h.count("RUNNING") >= 2 and "CRASHED" not in h for h in embed), history
    # the index equals a from-scratch ingest of the same files
    fresh = workdir / "scaling-out-fresh"
    warm_cache(fresh, data)  # a new index; the comparison reads ids and texts, not vectors
    code, out = run_cli(
        ["ingest", "--source", str(data / "raw"), "--data-dir", str(fresh), "--json"], capsys
    )
    assert code == 0, out
    from tasks.index.manifest import serving_collection

    host, port = scaled_out["chroma"]
    served = ChromaStore.open(data, serving_collection(data, "dist"), host, port)
    wanted = written_elsewhere(fresh, "docflow")
    assert {k: v[0] for k, v in store_contents(served).items()} == {
        k: v[0] for k, v in store_contents(wanted).items()
    }


@pytest.fixture(scope="module")
def daemonic_cluster(prefect_api: str) -> Iterator[str]:
    """A LocalCluster of one worker process, daemonic as Dask makes them by default.

    Its worker inherits ``PREFECT_API_URL`` (the module's server), as workers started in a
    shell that exported it do.
    """
    from distributed import LocalCluster

    kwargs = {"n_workers": 1, "threads_per_worker": 1, "dashboard_address": None}
    with LocalCluster(processes=True, **kwargs) as cluster:
        yield cluster.scheduler_address


def probe_run(address: str, api: str) -> UUID:
    """Run tests/dask_probe.py's flow in a new process against the server ``api``."""
    code = f"from tests.dask_probe import main; main({address!r})"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, "PREFECT_API_URL": api},
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return UUID(done.stdout.split()[-1])


def test_the_same_workers_report_each_run_to_its_own_prefect_server(
    daemonic_cluster: str, prefect_api: str
) -> None:
    """Workers that served a run of server A send a run of server B's task runs to B.

    A is this module's server, B the session's (both real servers, each its own database).

    They used to keep A's events worker: B had the run and its logs, but its task runs
    were on neither server.
    """
    first = probe_run(daemonic_cluster, prefect_api)
    wait_completed(first, {"probe"})
    [api_b] = OTHER_SERVER  # the session's server: a second one already running
    assert api_b != prefect_api
    second = probe_run(daemonic_cluster, api_b)
    with temporary_settings({PREFECT_API_URL: api_b}):
        found = wait_completed(second, {"probe"})
        deadline = time.monotonic() + 60
        while len(found) < 3 and time.monotonic() < deadline:  # events arrive one by one
            time.sleep(1)
            found = wait_completed(second, {"probe"})
    assert len(found) == 3
    assert task_runs_of(second) == []  # nothing of B's run went to A


def test_daemonic_dask_workers_say_in_the_run_that_load_guards_are_off(
    daemonic_cluster: str, corpus: Path, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Workers started without DASK_DISTRIBUTED__WORKER__DAEMON=False (Dask's default)."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    from flows.cluster import GUARDS_OFF

    data_dir = workdir / "daemonic-data"
    code, out = run_cli(
        ["ingest", "--source", str(corpus), "--include", "tides.md", "--data-dir",
         str(data_dir), "--dask-address", daemonic_cluster, "--json"],
        capsys,
    )  # fmt: skip
    assert code == 0, out
    warning = GUARDS_OFF.format(n=1, total=1)
    assert json.loads(out)["warnings"] == [warning]
    [run] = [r for r in flow_runs_writing(data_dir) if r.parameters["params"]["data_dir"] != "data"]
    with get_client(sync_client=True) as client:
        for _ in range(30):  # logs arrive in batches
            found = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])))
            if any(warning in log.message for log in found):
                break
            time.sleep(1)
    assert any(warning in log.message for log in found), [log.message for log in found]


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
    from tasks.index.lexical import LexicalIndex, database_path

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

    # the data dir remembers its server: later commands need no flag, and none reads or
    # creates an (empty) embedded store
    where = ["--data-dir", str(data_dir), "--collection", "orch-server"]
    for retrieval in ("hybrid", "lexical"):
        code, out = run_cli(
            ["query", "fog signal", *where, "--retrieval", retrieval, "--json"], capsys
        )
        assert code == 0 and json.loads(out)["results"][0]["source"] == "guides/fog.md"
    code, out = run_cli(["inspect", *where, "--json"], capsys)
    info = json.loads(out)["collection"]
    assert code == 0 and info["store"] == f"{host}:{port}"
    assert info["count"] == info["lexical_count"] == summary["chunks_written"]
    code, out = run_cli(["restore", *where, "--json"], capsys)  # rebuilds it on the server
    assert code == 0, out
    from tasks.index.manifest import serving_collection

    restored = ChromaStore.open(data_dir, serving_collection(data_dir, "orch-server"), host, port)
    assert restored.count() == summary["chunks_written"]
    assert not (data_dir / "chroma").exists()

    # writing a shared store, the run held the collection's global concurrency slot
    with get_client(sync_client=True) as client:
        limit = client.read_global_concurrency_limit_by_name(limit_name("orch-server"))
    assert limit.limit == 1 and limit.active_slots == 0


def test_store_retries_only_what_a_retry_can_fix() -> None:
    from prefect.states import Failed

    from tasks.common.errors import StoreError
    from tasks.common.failpoints import FailpointError
    from tasks.index.sync import retry_transient

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
