"""Run statistics read back from the tables: the chunk-size histogram of one run.

Computed from the run's ``chunks`` parts (``n_chars``), not from memory, so it describes
exactly what the run wrote, whichever process or machine wrote it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tasks.common.tables import read_table

#: Bins of a histogram (equal widths from 0 to the largest chunk, rounded up).
DEFAULT_BINS = 10


@dataclass(frozen=True, slots=True)
class Histogram:
    """Chunk lengths of one run in equal-width bins: ``counts[i]`` in ``[edges[i], edges[i+1])``.

    The last bin includes its upper edge.
    """

    edges: tuple[int, ...]
    counts: tuple[int, ...]
    total: int
    minimum: int
    median: float
    mean: float
    maximum: int


def run_chunk_lengths(data_dir: Path, run_id: str) -> np.ndarray:
    """Return ``n_chars`` of every chunk the run wrote (empty if it wrote none)."""
    table = read_table(data_dir, "chunks", ["n_chars"], run_id=run_id)
    if "n_chars" not in table.column_names:  # the run wrote no chunks part
        return np.zeros(0, dtype=np.int64)
    return np.asarray(table.column("n_chars").to_numpy(zero_copy_only=False), dtype=np.int64)


def histogram(lengths: np.ndarray, bins: int = DEFAULT_BINS) -> Histogram:
    """Bin ``lengths`` into ``bins`` equal-width bins from 0 to the maximum (rounded up)."""
    if lengths.size == 0:
        return Histogram((), (), 0, 0, 0.0, 0.0, 0)
    top = int(lengths.max())
    width = max(1, math.ceil((top + 1) / bins))
    edges = tuple(i * width for i in range(bins + 1))
    counts, _ = np.histogram(lengths, bins=np.asarray(edges))
    return Histogram(
        edges=edges,
        counts=tuple(int(c) for c in counts),
        total=int(lengths.size),
        minimum=int(lengths.min()),
        median=float(np.median(lengths)),
        mean=round(float(lengths.mean()), 1),
        maximum=top,
    )


def run_histogram(data_dir: Path, run_id: str, bins: int = DEFAULT_BINS) -> Histogram:
    """Return the chunk-size histogram of run ``run_id``."""
    return histogram(run_chunk_lengths(data_dir, run_id), bins)


# --- Prefect edge ---
from prefect import task  # noqa: E402


@task(name="chunk-sizes")
def chunk_sizes_task(data_dir: str, run_id: str) -> Histogram:
    """Read the run's chunk lengths from its ``chunks`` parts and bin them."""
    return run_histogram(Path(data_dir), run_id)
