"""The whole pipeline against a plain encode of its chunks and against the LangChain way.

Issue 8, on every good file of ../shared/corpora (``bad/`` folders left out), copied to a
temporary folder:

- T_pipeline: ``docflow ingest`` from an empty data dir, as a command (process start,
  Prefect's temporary server and the model load included), with its busy seconds per stage;
- T_encode: a plain ``SentenceTransformer.encode`` of exactly the chunk texts that run
  produced, same model, same batch size, in this process (model loaded beforehand);
- T_langchain: tests/benchmarks/langchain_job.py, the same job as LangChain's docs show it,
  as a command.

Targets: T_pipeline ≤ 1.15 × T_encode and ≤ 0.8 × T_langchain.

Memory: the peak RSS (the ingest process and every process it starts, summed) of an ingest
of the corpus copied 10 times into differently named folders, against one copy. Both runs
start from an empty data dir holding the embedding cache of the T_pipeline run, so neither
spends time embedding and both skip the model; what grows with the corpus (the store, the
manifest, tables, plans, task runs) is what they measure. Target: ≤ 1.2×.

The headline is the whole process tree of the ingest. As extra information, each run also
prints the resident size of its Chroma index (a fresh process opens the collection and
queries it once, which loads the HNSW index; an embedded store holds every vector in
memory, about 2 kB per 384-d vector), and the ratio without the growth of that index. With
``DOCFLOW_BENCH_MEMORY_SERVER=1`` both runs are repeated against a ``chroma run`` server
(started by the benchmark, outside the ingest's tree), printing the ingest tree and the
server separately.

Environment: ``DOCFLOW_BENCH_FILES_PER_TYPE=N`` keeps the first N files of each type (a
quick run); ``DOCFLOW_BENCH_SKIP=langchain,memory`` leaves parts out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.conftest import CORPORA

BIN = Path(sys.executable).parent
BATCH_SIZE = 32  # the ingest default (embed_batch_size)
COPIES = 10


def good_files(per_type: int | None) -> list[Path]:
    """Return every file of the corpora outside ``bad/``, the first ``per_type`` per folder."""
    files: list[Path] = []
    for folder in sorted(p for p in CORPORA.iterdir() if p.is_dir()):
        found = sorted(
            p
            for p in folder.rglob("*")
            if p.is_file() and "bad" not in p.relative_to(CORPORA).parts
        )
        files.extend(found[:per_type] if per_type else found)
    return files


def copy_corpus(files: list[Path], dest: Path) -> int:
    """Copy ``files`` under ``dest`` keeping their paths below the corpora; return bytes."""
    total = 0
    for f in files:
        target = dest / f.relative_to(CORPORA)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, target)
        total += f.stat().st_size
    return total


class PeakRSS:
    """Poll a process tree's resident memory; keep the peak of the sum and of the largest."""

    def __init__(self, pid: int, interval: float = 0.1):
        """Start polling ``pid`` and its descendants every ``interval`` seconds."""
        import psutil

        self._root = psutil.Process(pid)
        self._stop = threading.Event()
        self.tree = 0
        self.largest = 0
        self._thread = threading.Thread(target=self._poll, args=(interval,), daemon=True)
        self._thread.start()

    def _poll(self, interval: float) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                procs = [self._root, *self._root.children(recursive=True)]
            except psutil.Error:
                return
            sizes = []
            for p in procs:
                try:
                    sizes.append(p.memory_info().rss)
                except psutil.Error:
                    pass
            self.tree = max(self.tree, sum(sizes))
            self.largest = max(self.largest, max(sizes, default=0))
            self._stop.wait(interval)

    def stop(self) -> None:
        """Stop polling."""
        self._stop.set()
        self._thread.join()


def run_command(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a command; return its wall seconds, peak RSS (MB) and last stdout line as JSON."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or os.environ
    )
    peak = PeakRSS(proc.pid)
    out, err = proc.communicate()
    seconds = time.perf_counter() - started
    peak.stop()
    if proc.returncode not in (0, 3):  # 3: some files failed, the run completed
        raise RuntimeError(f"{argv[:3]} exited {proc.returncode}: {err[-2000:]}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return {
        "seconds": seconds,
        "rss_tree_mb": peak.tree / 2**20,
        "rss_largest_mb": peak.largest / 2**20,
        "result": json.loads(lines[-1]) if lines else {},
    }


def ingest(source: Path, data_dir: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``docflow ingest`` of ``source`` into ``data_dir`` as a command (``env``: its own)."""
    return run_command(
        [str(BIN / "docflow"), "ingest", "--source", str(source), "--data-dir", str(data_dir)]
        + ["--json"],
        env,
    )


def plain_encode(texts: list[str]) -> float:
    """Return the seconds of one plain ``SentenceTransformer.encode`` of ``texts``."""
    from sentence_transformers import SentenceTransformer

    from tasks.embed.model import resolve_model_path

    model = SentenceTransformer(resolve_model_path("all-MiniLM-L6-v2"), device="cpu")
    model.encode(texts[:64], batch_size=BATCH_SIZE)  # warm up
    started = time.perf_counter()
    model.encode(texts, batch_size=BATCH_SIZE, normalize_embeddings=True, show_progress_bar=False)
    return time.perf_counter() - started


INDEX_PROBE = """
import sys
from pathlib import Path

import chromadb, numpy as np, psutil
from chromadb.config import Settings
from tasks.index.manifest import serving_collection

rss = lambda: psutil.Process().memory_info().rss
data = Path(sys.argv[1])
client = chromadb.PersistentClient(str(data / "chroma"), Settings(anonymized_telemetry=False))
col = client.get_collection(serving_collection(data, "docflow"))
dimension = int((col.metadata or {}).get("dimension") or 384)
before = rss()
col.query(query_embeddings=[np.full(dimension, dimension ** -0.5, np.float32)], n_results=1)
print(col.count(), rss() - before)
"""


def index_rss_mb(data_dir: Path) -> tuple[int, float]:
    """Return the vectors of a data dir's collection and the MB loading its index adds."""
    done = subprocess.run(
        [str(BIN / "python"), "-c", INDEX_PROBE, str(data_dir)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    count, grown = done.stdout.split()[-2:]
    return int(count), int(grown) / 2**20


def prepare_copies(
    files: list[Path], cache: Path, work: Path, copies: int, data_name: str
) -> tuple[Path, Path]:
    """Copy the corpus ``copies`` times under different names; seed a data dir's cache."""
    source = work / f"mem-{copies}"
    for i in range(copies):
        copy_corpus(files, source / f"copy-{i:02d}")
    data_dir = work / f"{data_name}-{copies}"
    shutil.copytree(cache, data_dir / "cache")
    return source, data_dir


def memory(files: list[Path], cache: Path, work: Path) -> dict[str, float]:
    """Peak RSS of an ingest of one copy and of ``COPIES`` copies, both with a warm cache."""
    out: dict[str, float] = {}
    for copies in (1, COPIES):
        source, data_dir = prepare_copies(files, cache, work, copies, "mem-data")
        run = ingest(source, data_dir)
        summary = run["result"]
        vectors, index_mb = index_rss_mb(data_dir)
        print(
            f"  {copies:>2} cop{'y' if copies == 1 else 'ies'}: {run['seconds']:.1f} s, "
            f"{summary.get('chunks_written')} chunks, {summary.get('chunks_embedded')} embedded, "
            f"peak RSS {run['rss_tree_mb']:.0f} MB (largest process {run['rss_largest_mb']:.0f}); "
            f"its Chroma index of {vectors} vectors takes {index_mb:.0f} MB once loaded",
            flush=True,
        )
        out[f"rss_tree_{copies}_mb"] = run["rss_tree_mb"]
        out[f"rss_largest_{copies}_mb"] = run["rss_largest_mb"]
        out[f"seconds_{copies}"] = run["seconds"]
        out[f"index_{copies}_mb"] = index_mb
        shutil.rmtree(source)
        shutil.rmtree(data_dir)
    one, many = out["rss_tree_1_mb"], out[f"rss_tree_{COPIES}_mb"]
    out["rss_ratio"] = many / one
    index_growth = out[f"index_{COPIES}_mb"] - out["index_1_mb"]
    out["rss_ratio_without_index_growth"] = (many - index_growth) / one
    grown = many - one
    print(
        f"  the tree grew {grown:.0f} MB, of which Chroma's in-memory index "
        f"{index_growth:.0f} MB; without the index's growth the ratio would be "
        f"{out['rss_ratio_without_index_growth']:.2f}",
        flush=True,
    )
    return out


def memory_server(files: list[Path], cache: Path, work: Path) -> dict[str, float]:
    """The same two runs against a ``chroma run`` server: ingest tree and server apart."""
    from tests.servers import free_port, start_chroma

    out: dict[str, float] = {}
    for copies in (1, COPIES):
        source, data_dir = prepare_copies(files, cache, work, copies, "mem-server-data")
        port = free_port()
        server, _ = start_chroma(work / f"chroma-server-{copies}", port, work / "logs")
        server_peak = PeakRSS(server.popen.pid)
        try:
            run = run_command(
                [str(BIN / "docflow"), "ingest", "--source", str(source)]
                + ["--data-dir", str(data_dir), "--chroma-host", "127.0.0.1"]
                + ["--chroma-port", str(port), "--json"]
            )
        finally:
            server_peak.stop()
            server.stop()
        label = f"{copies:>2} cop{'y' if copies == 1 else 'ies'}"
        print(
            f"  {label}, Chroma server: {run['seconds']:.1f} s, "
            f"ingest peak RSS {run['rss_tree_mb']:.0f} MB (largest process "
            f"{run['rss_largest_mb']:.0f}); the server's peak {server_peak.tree / 2**20:.0f} MB",
            flush=True,
        )
        out[f"rss_tree_{copies}_mb"] = run["rss_tree_mb"]
        out[f"rss_largest_{copies}_mb"] = run["rss_largest_mb"]
        out[f"server_rss_{copies}_mb"] = server_peak.tree / 2**20
        out[f"seconds_{copies}"] = run["seconds"]
        shutil.rmtree(source)
        shutil.rmtree(data_dir)
    out["rss_ratio"] = out[f"rss_tree_{COPIES}_mb"] / out["rss_tree_1_mb"]
    print(
        f"  with a Chroma server: ingest peak RSS {COPIES} copies / 1 copy = "
        f"{out['rss_ratio']:.2f} (the server is a separate service, not in that tree)",
        flush=True,
    )
    return out


def main() -> dict[str, Any]:
    """Measure T_pipeline, T_encode, T_langchain and the memory bound; print the table."""
    from tasks.common.tables import read_table

    if not CORPORA.exists():
        print("../shared/corpora is absent: nothing to measure")
        return {"skipped": True}
    per_type = int(os.environ.get("DOCFLOW_BENCH_FILES_PER_TYPE", "0")) or None
    skip = set(filter(None, os.environ.get("DOCFLOW_BENCH_SKIP", "").split(",")))
    work = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    files = good_files(per_type)
    corpus = work / "corpus"
    size = copy_corpus(files, corpus)
    print(f"{len(files)} files, {size / 1e6:.2f} MB (of {CORPORA})", flush=True)

    data_dir = work / "data"
    pipeline = ingest(corpus, data_dir)
    summary = pipeline["result"]
    texts = read_table(data_dir, "chunks", columns=["text"]).column("text").to_pylist()
    t_encode = plain_encode(texts)
    result: dict[str, Any] = {
        "files": len(files),
        "mb": size / 1e6,
        "chunks": len(texts),
        "t_pipeline": pipeline["seconds"],
        "t_encode": t_encode,
        "run_seconds": summary["seconds"],
        "stage_seconds": summary["stage_seconds"],
        "pipeline_rss_mb": pipeline["rss_tree_mb"],
    }
    if "langchain" not in skip:
        peer = run_command(
            [str(BIN / "python"), "-m", "tests.benchmarks.langchain_job", str(corpus)]
            + [str(work / "langchain-chroma"), str(BATCH_SIZE)]
        )
        result |= {
            "t_langchain": peer["seconds"],
            "langchain": peer["result"],
            "langchain_rss_mb": peer["rss_tree_mb"],
        }
    report(result)
    if "memory" not in skip:
        print(f"memory: {COPIES} copies against one, warm embedding cache", flush=True)
        result["memory"] = memory(files, data_dir / "cache", work)
        ratio = result["memory"]["rss_ratio"]
        print(
            f"peak RSS {COPIES} copies / 1 copy = {ratio:.2f} (target ≤ 1.2): {verdict(ratio, 1.2)}"
        )
        if os.environ.get("DOCFLOW_BENCH_MEMORY_SERVER") == "1":
            print(f"memory with a Chroma server: {COPIES} copies against one", flush=True)
            result["memory_server"] = memory_server(files, data_dir / "cache", work)
    shutil.rmtree(work, ignore_errors=True)
    return result


def verdict(ratio: float, target: float) -> str:
    """Return "met" or "NOT met" for a ratio that must stay at or below ``target``."""
    return "met" if ratio <= target else "NOT met"


def report(r: dict[str, Any]) -> None:
    """Print the timing table, the stage busy seconds and the two ratios."""
    print(f"\n{'job':<34}{'seconds':>9}{'chunks':>8}{'chunks/s':>10}{'peak RSS MB':>13}")
    rows = [("docflow ingest (T_pipeline)", r["t_pipeline"], r["chunks"], r["pipeline_rss_mb"])]
    rows.append(("plain encode of its chunks (T_encode)", r["t_encode"], r["chunks"], None))
    if "t_langchain" in r:
        rows.append(
            ("LangChain docs job (T_langchain)", r["t_langchain"], r["langchain"]["chunks"])
            + (r["langchain_rss_mb"],)
        )
    for label, seconds, chunks, rss in rows:
        rss_text = f"{rss:>13.0f}" if rss is not None else f"{'':>13}"
        print(f"{label:<34}{seconds:>9.1f}{chunks:>8}{chunks / seconds:>10.1f}{rss_text}")
    stages = r["stage_seconds"]
    startup = r["t_pipeline"] - r["run_seconds"]
    print("\ndocflow busy seconds per stage (batches overlap, so they may sum past the run):")
    for stage in ("plan", "load", "split", "embed", "store", "tables"):
        print(f"  {stage:<8}{stages.get(stage, 0.0):>8.1f}")
    print(
        f"  run (flow body) {r['run_seconds']:.1f} s, of which not embedding "
        f"{r['run_seconds'] - stages.get('embed', 0.0):.1f} s"
    )
    print(f"  orchestration and startup (process, Prefect server, imports) {startup:.1f} s")
    encode_ratio = r["t_pipeline"] / r["t_encode"]
    print(
        f"\nT_pipeline / T_encode = {encode_ratio:.2f} (target ≤ 1.15): "
        f"{verdict(encode_ratio, 1.15)}"
    )
    if "t_langchain" in r:
        peer_ratio = r["t_pipeline"] / r["t_langchain"]
        print(
            f"T_pipeline / T_langchain = {peer_ratio:.2f} (target ≤ 0.8): "
            f"{verdict(peer_ratio, 0.8)}"
        )
        r["langchain_ratio"] = peer_ratio
    r["encode_ratio"] = encode_ratio
