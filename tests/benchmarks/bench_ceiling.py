"""The pipeline ceiling: the whole ingest of ../shared/corpora with a zero-cost encoder.

The encoder returns one fixed vector at once and carries the bundled tokenizer, so chunking
is exactly the real model's and what is measured is everything but the model: discovery,
loading, splitting, the embedding bookkeeping (model inputs, cache, parts), the store
(Chroma and the lexical index), the tables and Prefect's orchestration. Each ``workers``
value from 0 (everything in the flow's process) to the machine's core count runs from an
empty data dir, in this process (flow time, the run's own ``seconds``), and prints chunks/s
and each stage's busy seconds (stages overlap: they can add up to more than the run).
Prefect's temporary server is started as ``docflow ingest`` starts it (flows/temporary_server.py).

In the same run, a bare Chroma collection takes the same rows (ids, vectors, texts,
metadata) in the same batches: the flow's chunks/s and the store stage's rate (chunks
written / store busy seconds) are printed against that rate (targets ≥ 0.8), and the
batches' chunks (the largest at most about twice the median).

Run: ``python -m tests.benchmarks bench_ceiling`` (``DOCFLOW_BENCH_WORKERS=0,2`` to choose).
``DOCFLOW_BENCH_ROUNDS=N`` repeats the ingests and the bare rate N times, alternating, and
judges by the round of median flow/bare ratio: on a shared machine one round's ratio
swung from 0.62 to 0.78 for the same code in one hour (use 3 for a verdict).
With ``DOCFLOW_BENCH_CHROMA=server`` the store is a ``chroma run`` started on this machine for
the run (``--chroma-host``), and the bare collection is on the same server. The embedded
store is in docflow's store process during the run (tasks/index/store_process.py;
``DOCFLOW_STORE_PROCESS=0`` keeps it in the flow's process, as before 2026-12-02); the bare
collection is always in this process. With ``DOCFLOW_BENCH_STORE_WRITER=pipelined`` the
embedded store's upserts run in a writer process whose upserts return once queued
(tests/benchmarks/store_writer.py: a measurement, not a crash-safe path; ``=1`` waits for
each); the writer's upsert seconds are printed against the bare collection's for the same
rows.
Target on the 2-core development machine: ≥ 1,200 chunks/s.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ZERO = "docflow-zero-cost-384"
TARGET_CHUNKS_PER_S = 1200
STORE_TARGET = 0.8
BATCH_SPREAD = 2.0  # the largest batch's chunks at most this times the median batch's


def _in_writer() -> bool:
    """Return whether this run measures the embedded store's writes in a process of their own."""
    return _pipelined() or os.environ.get("DOCFLOW_BENCH_STORE_WRITER") == "1"


def _pipelined() -> bool:
    """Return whether the writer process's upserts return once queued (store_writer.py)."""
    return os.environ.get("DOCFLOW_BENCH_STORE_WRITER") == "pipelined"


def _embedded_kind() -> str:
    """Name the embedded store's way of writing in this run, for the report."""
    from tasks.index import store_process

    if _pipelined():
        return "embedded, pipelined writer process"
    if _in_writer():
        return "embedded, writer process"
    return "embedded, in the store process" if store_process.enabled() else "embedded, in process"


def _register() -> None:
    from tasks.embed.model import register_encoder
    from tests.fake_encoder import ConstantEncoder

    register_encoder(ZERO, lambda: ConstantEncoder(384))


def ingest_once(
    source: Path, data_dir: Path, workers: int, server: tuple[str, int] | None = None
) -> dict[str, Any]:
    """Ingest ``source`` from an empty data dir; return the summary and the wall seconds."""
    from flows.ingest import ingest
    from tasks.common.config import IngestParams

    host, port = server or (None, 8000)
    params = IngestParams(
        source=str(source),
        data_dir=str(data_dir),
        model=ZERO,
        workers=workers,
        collection=f"ceiling-{workers}",
        chroma_host=host,
        chroma_port=port,
    )
    if _in_writer() and not server:
        from tests.benchmarks.store_writer import prestart

        prestart(data_dir / "chroma", _pipelined())  # started with the run, as a product would
    started = time.perf_counter()
    summary = ingest(params)
    summary["wall_s"] = round(time.perf_counter() - started, 2)
    if _in_writer():
        from tests.benchmarks.store_writer import stop_writers

        # its rows are read back next: from disk, not this process's cache
        summary["writer"] = stop_writers()
    return summary


def read_rows(collection: Any, page: int = 5_000) -> dict[str, list[Any]]:
    """Return every row of ``collection`` (ids, documents, metadatas, embeddings), by pages.

    One ``get`` of all rows binds one SQL variable per row: SQLite refuses it beyond its
    limit (seen at 73k rows: "too many SQL variables").
    """
    keys = ("ids", "documents", "metadatas", "embeddings")
    rows: dict[str, list[Any]] = {key: [] for key in keys}
    for offset in range(0, collection.count(), page):
        got = collection.get(include=list(keys[1:]), limit=page, offset=offset)
        for key in keys:
            rows[key].extend(got[key])
    return rows


def bare_chroma_rate(
    data_dir: Path, collection: str, batch_rows: list[int], server: tuple[str, int] | None = None
) -> float:
    """Upsert the run's stored rows into a fresh Chroma collection as the run batched them.

    The collection is embedded in a new folder, or on ``server`` (the run's) when given.
    """
    from tasks.index.store import ChromaStore, make_client

    host, port = server or (None, 8000)
    got = read_rows(ChromaStore.open(data_dir, collection, host, port).collection())
    with tempfile.TemporaryDirectory(prefix="bare-chroma-") as tmp:
        client = make_client(path=Path(tmp) / "chroma", host=host, port=port)
        col = client.create_collection(
            "bare", embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
        )
        started, lo = time.perf_counter(), 0
        step = client.get_max_batch_size()
        for rows in batch_rows:
            for sub in range(lo, lo + rows, step):
                hi = min(sub + step, lo + rows)
                col.upsert(
                    ids=got["ids"][sub:hi],
                    embeddings=got["embeddings"][sub:hi],
                    documents=got["documents"][sub:hi],
                    metadatas=got["metadatas"][sub:hi],
                )
            lo += rows
        return lo / (time.perf_counter() - started)


def main() -> dict[str, Any]:
    """Run the ceiling for each workers value and the bare Chroma rate; print and return."""
    from flows.env import apply_defaults
    from tasks.common.config import LoaderOptions
    from tests.benchmarks.bench_pipeline import copy_corpus, good_files
    from tests.benchmarks.chroma_server import chroma_server

    apply_defaults()
    _register()
    if _in_writer():
        from tests.benchmarks.store_writer import patch

        patch(pipelined=_pipelined())
    cores = LoaderOptions().process_count()
    chosen = os.environ.get("DOCFLOW_BENCH_WORKERS")
    counts = [int(w) for w in chosen.split(",")] if chosen else list(range(0, cores + 1))
    work = Path(tempfile.mkdtemp(prefix="docflow-ceiling-"))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, work, ignore_errors=True)  # last, after the server
        _prefect_server_as_commands_start_it(stack)
        server = None
        if os.environ.get("DOCFLOW_BENCH_CHROMA") == "server":
            port, _ = stack.enter_context(
                chroma_server(work / "chroma-server", work / "chroma.log")
            )
            server = ("127.0.0.1", port)
        source = work / "corpus"
        files = good_files(None)
        size = copy_corpus(files, source)
        rounds = [
            one_round(source, work / f"round-{n}", counts, server) for n in range(1, _rounds() + 1)
        ]
    result = {
        **median_round(rounds),
        "store": "chroma run" if server else _embedded_kind(),
        "cores": cores,
        "files": len(files),
        "megabytes": round(size / 1e6, 2),
        "rounds_flow_vs_bare": [r["flow_vs_bare"] for r in rounds],
    }
    report(result)
    return result


def _prefect_server_as_commands_start_it(stack: contextlib.ExitStack) -> None:
    """Start Prefect's temporary server the way ``docflow ingest`` does, and wait for it.

    flows/temporary_server.py (its own session, below the command's CPU priority) rather
    than the one Prefect would start on the flow's first call: the flows here then share
    the cores with the server a user's command runs beside. Chroma is imported meanwhile,
    as the command imports it before its flow.
    """
    from flows import temporary_server
    from tasks.index.store_process import preload

    starting = temporary_server.adopt(stack.enter_context(temporary_server.started()))
    preload(served=True)  # Chroma imported while the server comes up, as the commands do
    if starting is not None:
        starting.join()


def one_round(
    source: Path, work: Path, counts: list[int], server: tuple[str, int] | None
) -> dict[str, Any]:
    """Ingest ``source`` once per workers value, then the bare rate of the fastest's rows."""
    runs = []
    for workers in counts:
        summary = ingest_once(source, work / f"data-{workers}", workers, server)
        runs.append(
            {
                "workers": workers,
                "flow_s": summary["seconds"],
                "wall_s": summary["wall_s"],
                "chunks": summary["chunks_written"],
                "chunks_per_s": round(summary["chunks_written"] / summary["seconds"], 1),
                "stage_seconds": summary["stage_seconds"],
                **({"writer": summary["writer"]} if "writer" in summary else {}),
            }
        )
        print(json.dumps(runs[-1]), flush=True)
    best = max(runs, key=lambda r: r["chunks_per_s"])
    batches = _batch_rows(work / f"data-{best['workers']}")
    bare = bare_chroma_rate(
        work / f"data-{best['workers']}", f"ceiling-{best['workers']}", batches, server
    )
    store_rate = best["chunks"] / best["stage_seconds"]["store"]
    flow_vs_bare = round(best["chunks_per_s"] / bare, 2)
    print(json.dumps({"bare_chroma_rows_per_s": round(bare, 1), "flow_vs_bare": flow_vs_bare}))
    return {
        "runs": runs,
        "best": best,
        "bare_chroma_rows_per_s": round(bare, 1),
        "store_rows_per_s": round(store_rate, 1),
        "store_vs_bare": round(store_rate / bare, 2),
        "flow_vs_bare": flow_vs_bare,
        "batches": batches,
        "largest_batch_vs_median": round(max(batches) / statistics.median(batches), 2),
    }


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the round of median flow/bare ratio (the lower middle one of an even count).

    The verdicts go by it: one round's bare rate swings by a fifth from run to run on a
    shared machine (docs/performance.md).
    """
    return sorted(rounds, key=lambda r: r["flow_vs_bare"])[(len(rounds) - 1) // 2]


def _rounds() -> int:
    """Return how many rounds to run (``DOCFLOW_BENCH_ROUNDS``, default 1)."""
    return max(1, int(os.environ.get("DOCFLOW_BENCH_ROUNDS", "1")))


def _batch_rows(data_dir: Path) -> list[int]:
    """Return the chunk count of each batch of the run (its chunks parts, in order)."""
    from tasks.common.tables import list_parts, read_part

    return [read_part(p, ["chunk_id"]).num_rows for p in list_parts(data_dir, "chunks")]


def report(r: dict[str, Any]) -> None:
    """Print the table: one line per workers value, then the store against bare Chroma."""
    print(
        f"\npipeline ceiling: {r['files']} files, {r['megabytes']} MB, {r['cores']} cores, "
        f"zero-cost encoder, store {r['store']} (flow time; busy seconds per stage overlap)"
    )
    print(f"{'workers':>7} {'flow s':>7} {'chunks':>7} {'chunks/s':>9}  stages")
    for run in r["runs"]:
        stages = " ".join(f"{k} {v:.1f}" for k, v in run["stage_seconds"].items())
        print(
            f"{run['workers']:>7} {run['flow_s']:>7.1f} {run['chunks']:>7} "
            f"{run['chunks_per_s']:>9.1f}  {stages}"
        )
    best = r["best"]["chunks_per_s"]
    met = "met" if best >= TARGET_CHUNKS_PER_S else "NOT met"
    print(f"best {best:.0f} chunks/s (target ≥ {TARGET_CHUNKS_PER_S}): {met}")
    met = "met" if r["flow_vs_bare"] >= STORE_TARGET else "NOT met"
    rounds = r["rounds_flow_vs_bare"]
    median = f" (the median of {len(rounds)} rounds: {rounds})" if len(rounds) > 1 else ""
    print(
        f"the flow's {best:.0f} chunks/s against a bare Chroma collection's "
        f"{r['bare_chroma_rows_per_s']:.0f} rows/s: {r['flow_vs_bare']:.2f}{median} "
        f"(target ≥ {STORE_TARGET}): {met}"
    )
    sizes = sorted(r["batches"])
    met = "met" if r["largest_batch_vs_median"] <= BATCH_SPREAD else "NOT met"
    print(
        f"{len(sizes)} batches of {sizes[0]} to {sizes[-1]} chunks, median "
        f"{statistics.median(sizes):.0f}: the largest is {r['largest_batch_vs_median']:.2f}x "
        f"the median (target ≤ {BATCH_SPREAD}): {met}"
    )
    if writer := r["best"].get("writer"):
        bare_s = r["best"]["chunks"] / r["bare_chroma_rows_per_s"]
        print(
            f"the writer process's {writer['requests']} upserts took {writer['upsert_s']:.1f} s "
            f"(the bare collection {bare_s:.1f} s for the same rows: "
            f"{writer['upsert_s'] / bare_s:.2f}x); it waited {writer['idle_s']:.1f} s between them"
        )
    met = "met" if r["store_vs_bare"] >= STORE_TARGET else "NOT met"
    if r["store"].startswith("embedded, pipelined"):
        met = "not judged: the stage only queues the upserts"
    print(
        f"store stage {r['store_rows_per_s']:.0f} rows/s against a bare Chroma collection's "
        f"{r['bare_chroma_rows_per_s']:.0f} in this run: {r['store_vs_bare']:.2f} "
        f"(target ≥ {STORE_TARGET}): {met}"
    )


if __name__ == "__main__":
    main()
