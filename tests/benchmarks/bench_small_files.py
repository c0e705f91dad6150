"""Many small files: a whole ingest against the model alone on the same texts.

A folder of 5,000 one-line notes (one chunk each: tickets, messages, short pages) is the
case where what a batch costs beyond its chunks (Prefect's task runs, a Chroma upsert and
a manifest transaction, four table parts, the parts read back) shows: the embed and store
work per batch is small. ``docflow ingest`` runs as a command from an empty data dir, with
the default batch limits and with ``batch_files`` at 64 (the default until 2026-11-28,
which cut such a folder into 79 batches of 64 chunks); the peers, in this process: the
run's own encoder (``Embedder``, the backend ``auto`` picks) on the same 5,000 texts, and
a plain ``SentenceTransformer.encode`` (bench_pipeline's T_encode).

Run: ``python -m tests.benchmarks bench_small_files``.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.benchmarks.bench_pipeline import ingest, plain_encode

FILES = 5_000
WORDS = "bees queen brood honey varroa frame wax hive comb nectar pollen drone worker swarm"


def write_notes(folder: Path) -> list[str]:
    """Write ``FILES`` one-line notes (deterministic); return their texts."""
    rng = random.Random(0)
    texts = [f"{' '.join(rng.choices(WORDS.split(), k=30))} note {i}." for i in range(FILES)]
    folder.mkdir(parents=True)
    for i, text in enumerate(texts):
        (folder / f"n{i:05d}.txt").write_text(text + "\n", encoding="utf-8")
    return texts


def own_encoder(texts: list[str]) -> float:
    """Return the seconds of the ingest's own encoder (default model and backend) on ``texts``."""
    from tasks.common.config import IngestParams
    from tasks.embed.model import Embedder

    params = IngestParams()
    embedder = Embedder(params.model, params.embed_batch_size, backend=params.embed_backend)
    embedder.embed(texts[:64])  # load (or export) the model first
    started = time.perf_counter()
    embedder.embed(texts)
    return time.perf_counter() - started


def run_ingest(source: Path, data_dir: Path, batch_files: int | None) -> dict[str, Any]:
    """Ingest ``source`` as a command; ``batch_files`` set through the environment."""
    env = {k: v for k, v in os.environ.items() if k != "DOCFLOW_BATCH_FILES"}
    if batch_files is not None:
        env["DOCFLOW_BATCH_FILES"] = str(batch_files)
    run = ingest(source, data_dir, env)
    summary = run["result"]
    assert summary.get("chunks_written") == FILES, summary
    return {
        "wall_s": round(run["seconds"], 1),
        "flow_s": summary["seconds"],
        "stages": summary["stage_seconds"],
    }


def main() -> dict[str, Any]:
    """Run both ingests and both peers; print the ratios and return the figures."""
    with tempfile.TemporaryDirectory(prefix="docflow-small-files-") as tmp:
        work = Path(tmp)
        texts = write_notes(work / "notes")
        got: dict[str, Any] = {
            "batch_files_64": run_ingest(work / "notes", work / "old", 64),
            "default": run_ingest(work / "notes", work / "new", None),
        }
    got["own_encoder_s"] = round(own_encoder(texts), 1)
    got["plain_encode_s"] = round(plain_encode(texts), 1)
    print(f"\n{FILES:,} one-line files, one chunk each (docflow ingest from an empty data dir)")
    for name in ("batch_files_64", "default"):
        r = got[name]
        print(
            f"  {name:15} wall {r['wall_s']:6.1f} s  flow {r['flow_s']:6.1f} s  "
            f"flow / own encoder {r['flow_s'] / got['own_encoder_s']:.2f}  "
            f"flow / plain encode {r['flow_s'] / got['plain_encode_s']:.2f}"
        )
        print(f"  {'':15} busy s: {r['stages']}")
    print(
        f"  peers: the ingest's own encoder {got['own_encoder_s']} s, plain "
        f"SentenceTransformer.encode {got['plain_encode_s']} s"
    )
    return got


if __name__ == "__main__":
    main()
