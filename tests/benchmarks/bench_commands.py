"""What a command costs beyond its work: an unchanged rerun, and a query from a shell.

- An unchanged rerun of the sample corpus (12 files) through the CLI, five times in one
  process against its temporary Prefect server: with Prefect's flow-run heartbeats as
  Prefect sends them by default (the peer: every 180 s, from a thread each sync flow run
  joins at its end, in 1 s steps) and as docflow's CLI runs them (none unless asked).
- A cold ``docflow query`` process against its peer, a fresh process that does only what a
  query cannot avoid: open the Chroma collection, embed the question with the same model
  and backend, and ask Chroma for the five nearest chunks.
- The exit of the embedding child (where a run's own exit waits for it: on CUDA), the torch
  backend on this CPU, against a child that skips the freeze at the end of its loop (the
  peer), alternating.
- A cold unchanged rerun as a command (``python -m flows ingest``, which freezes the
  garbage collector's objects before it exits: ``flows.cli.run``) against the same command
  through :func:`flows.cli.main` without the freeze (the peer), alternating.

Measured on this 2-core machine (the figures in the closing notes, docs/retrieval.md and
docs/performance.md).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.conftest import REPO, SAMPLE

QUESTION = "Below what temperature do bees form a winter cluster?"
RUNS = 5

#: The peer of a cold query: Chroma and the model, nothing of docflow's CLI.
PEER = """
import sys
from pathlib import Path
import chromadb
from tasks.embed.model import Embedder
from tasks.index.manifest import serving_collection

data, question = sys.argv[1], sys.argv[2]
client = chromadb.PersistentClient(path=f"{data}/chroma")
collection = client.get_collection(serving_collection(Path(data), "docflow"))
vector = Embedder().embed([question])
hits = collection.query(query_embeddings=vector.tolist(), n_results=5)
print(hits["metadatas"][0][0]["source"])
"""


def cold_query(data_dir: Path) -> tuple[float, str]:
    """Run ``docflow query`` in a new process; return its seconds and what it printed."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "flows", "query", QUESTION, "--data-dir", str(data_dir), "-k", "5"],
        capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    return time.perf_counter() - started, done.stdout


def cold_peer(data_dir: Path) -> tuple[float, str]:
    """Run the peer in a new process; return its seconds and its nearest chunk's source."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PEER, str(data_dir), QUESTION],
        capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    return time.perf_counter() - started, done.stdout.strip()


#: The peer of a cold command: the same command line, without run()'s freeze at exit.
UNFROZEN = "import sys; from flows.cli import main; sys.argv[0] = 'docflow'; sys.exit(main())"


def cold_command(argv: list[str], frozen: bool) -> float:
    """Run a docflow command in a new process, with or without run()'s freeze; its seconds."""
    entry = ["-m", "flows"] if frozen else ["-c", UNFROZEN]
    started = time.perf_counter()
    subprocess.run([sys.executable, *entry, *argv], capture_output=True, check=True, cwd=REPO)
    return time.perf_counter() - started


def child_stop_seconds(frozen: bool) -> float:
    """Start an embedding child, encode once, then time its stop (the parent waits for it)."""
    from tasks.embed.model import DEFAULT_MODEL
    from tasks.embed.process import EmbedProcess

    class Unfrozen(EmbedProcess):
        CODE = "import gc; gc.freeze = lambda: None; " + EmbedProcess.CODE

    child = (EmbedProcess if frozen else Unfrozen)(DEFAULT_MODEL, "cpu", "torch")
    child.embed([QUESTION] * 32, 32)
    started = time.perf_counter()
    child.stop()
    return time.perf_counter() - started


def rerun_seconds(source: Path, data_dir: Path, heartbeat: int | None) -> list[float]:
    """Time RUNS unchanged reruns through the CLI, with Prefect's heartbeat every ``heartbeat`` s
    (None: as the CLI runs them)."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from flows.cli import main

    argv = ["ingest", "--source", str(source), "--data-dir", str(data_dir), "--json"]
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        if heartbeat is None:
            assert main(argv) == 0
        else:
            with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: heartbeat}):
                assert main(argv) == 0
        times.append(time.perf_counter() - started)
    return times


def main() -> dict[str, Any]:
    """Build the sample index once, then time reruns and cold queries against their peers."""
    from flows.cli import main as cli

    work = Path(tempfile.mkdtemp(prefix="bench-commands-"))
    try:
        source, data_dir = work / "raw", work / "data"
        shutil.copytree(SAMPLE, source)
        argv = ["ingest", "--source", str(source), "--data-dir", str(data_dir), "--json"]
        assert cli(argv) == 0  # the first run: the index, the temporary server, the model
        peer_runs = rerun_seconds(source, data_dir, heartbeat=180)  # Prefect's default
        ours_runs = rerun_seconds(source, data_dir, heartbeat=None)
        queries = [cold_query(data_dir) for _ in range(3)]
        peers = [cold_peer(data_dir) for _ in range(3)]
        pairs = [(cold_command(argv, True), cold_command(argv, False)) for _ in range(RUNS)]
        stops = [(child_stop_seconds(True), child_stop_seconds(False)) for _ in range(3)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert all("winter-preparation.md" in out for _, out in queries + peers)  # both answer
    rerun_peer, rerun = statistics.median(peer_runs), statistics.median(ours_runs)
    query, peer = statistics.median(t for t, _ in queries), statistics.median(t for t, _ in peers)
    print(f"unchanged rerun, Prefect's heartbeats (peer) {rerun_peer:6.2f} s (median of {RUNS})")
    ratio = rerun / rerun_peer
    print(f"unchanged rerun, as the CLI runs it          {rerun:6.2f} s  ratio {ratio:.2f}")
    print(f"cold query process, Chroma + model (peer)    {peer:6.2f} s (median of 3)")
    print(f"cold docflow query                           {query:6.2f} s  ratio {query / peer:.2f}")
    frozen = statistics.median(f for f, _ in pairs)
    unfrozen = statistics.median(u for _, u in pairs)
    print(f"cold unchanged rerun, main() (peer)          {unfrozen:6.2f} s (median of {RUNS})")
    cold = frozen / unfrozen
    print(f"cold unchanged rerun, docflow (frozen exit)  {frozen:6.2f} s  ratio {cold:.2f}")
    stop, stop_peer = (statistics.median(x) for x in zip(*stops, strict=True))
    print(f"embedding child's exit, unfrozen (peer)      {stop_peer:6.2f} s (median of 3)")
    print(
        f"embedding child's exit, frozen               {stop:6.2f} s  ratio {stop / stop_peer:.2f}"
    )
    return {
        "child_stop_unfrozen_s": stop_peer,
        "child_stop_s": stop,
        "cold_rerun_unfrozen_s": unfrozen,
        "cold_rerun_s": frozen,
        "cold_rerun_ratio": cold,
        "rerun_peer_s": rerun_peer,
        "rerun_s": rerun,
        "rerun_ratio": ratio,
        "query_peer_s": peer,
        "query_s": query,
        "query_ratio": query / peer,
    }
