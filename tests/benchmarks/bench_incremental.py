"""Incremental runs: an unchanged rerun and a warm-cache reingest against the full run.

Targets (issue 5): unchanged rerun ≤ 5% of the full run's time; a reingest of an
unchanged corpus with a warm cache embeds 0 chunks. One process, real model, real Chroma,
../shared/corpora (every file type docflow loads), an empty data dir to start.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from tests.conftest import CORPORA


def main() -> dict[str, Any]:
    """Run full, unchanged and reingest passes and print their times."""
    from flows.ingest import ingest
    from flows.rebuild import reingest
    from tasks.common.config import IngestParams

    if not CORPORA.exists():
        print("../shared/corpora is absent: nothing to measure")
        return {"skipped": True}
    data_dir = Path(tempfile.mkdtemp(prefix="bench-incremental-")) / "data"
    params = IngestParams(source=str(CORPORA), data_dir=str(data_dir))

    rows = []
    for label, run in (
        ("full", ingest),
        ("unchanged rerun", ingest),
        ("reingest (warm cache)", reingest),
    ):
        t = time.perf_counter()
        summary = run(params)
        rows.append((label, time.perf_counter() - t, summary))

    full = rows[0][1]
    print(
        f"{'run':<24}{'seconds':>10}{'× full':>9}{'files':>8}"
        f"{'processed':>10}{'embedded':>10}{'cached':>8}"
    )
    for label, seconds, s in rows:
        print(
            f"{label:<24}{seconds:>10.2f}{seconds / full:>9.3f}{s['files_seen']:>8}"
            f"{s['documents']:>10}{s['chunks_embedded']:>10}{s['chunks_from_cache']:>8}"
        )
    unchanged_ratio = rows[1][1] / full
    print(
        f"unchanged rerun / full = {unchanged_ratio:.3f} (target ≤ 0.05): "
        f"{'met' if unchanged_ratio <= 0.05 else 'NOT met'}"
    )
    print(f"reingest embedded {rows[2][2]['chunks_embedded']} chunks (target 0)")
    return {
        "full_s": full,
        "unchanged_s": rows[1][1],
        "reingest_s": rows[2][1],
        "unchanged_ratio": unchanged_ratio,
        "reingest_embedded": rows[2][2]["chunks_embedded"],
        "chunks": rows[0][2]["chunks_written"],
        "files": rows[0][2]["files_seen"],
    }
