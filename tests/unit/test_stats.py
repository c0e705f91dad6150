"""Chunk-size histograms read back from a run's chunks table."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from flows.artifacts import artifact_key, histogram_markdown
from tasks.common.documents import Chunk
from tasks.common.stats import histogram, run_histogram
from tasks.common.tables import chunks_table, part_path, write_atomic


def _chunk(i: int, n: int) -> Chunk:
    text = "x" * n
    return Chunk(f"c{i}", "d", "a.md", i, 0, n, text, n, n, (), {})


def test_histogram_bins_cover_every_length() -> None:
    h = histogram(np.array([1, 5, 10, 10, 99]), bins=10)
    assert h.edges[0] == 0 and h.edges[-1] > 99 and len(h.counts) == 10
    assert sum(h.counts) == h.total == 5
    assert (h.minimum, h.median, h.maximum) == (1, 10.0, 99)


def test_empty_run_has_an_empty_histogram(tmp_path: Path) -> None:
    h = run_histogram(tmp_path, "no-such-run")
    assert h.total == 0 and h.counts == ()
    assert "No chunks" in histogram_markdown(h, "no-such-run")


def test_run_histogram_reads_only_that_run(tmp_path: Path) -> None:
    for run, lengths in (("r1", [10, 20, 30]), ("r2", [500])):
        for batch, n in enumerate(lengths):
            table = chunks_table([_chunk(batch, n)])
            write_atomic(table, part_path(tmp_path, "chunks", run, batch))
    h = run_histogram(tmp_path, "r1")
    assert h.total == 3 and h.maximum == 30
    text = histogram_markdown(h, "r1")
    assert "3 chunks" in text and "█" in text


def test_artifact_keys_are_lowercase_slugs() -> None:
    assert artifact_key("ingest-summary", "My_Docs.v2") == "ingest-summary-my-docs-v2"
