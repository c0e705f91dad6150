"""Load and split workers run at a lower CPU priority than the run's own process.

The run's process is the end of the pipe: it stores every batch (an embedded Chroma's
upsert keeps about one and a half cores busy with its own threads) and, on a CPU, runs the
model. The workers load and split batches ahead of it, and only what they have ready
when it asks matters. At the same priority, on a machine without spare cores, they take
CPU from the upsert at hand, and every batch's store takes longer. A few steps down
(``nice``), they take what the store and the model leave; where nothing else runs they
get every core as before, and nothing changes on a machine with cores to spare.

Measured with ``python -m tests.benchmarks bench_ceiling`` (2 workers, zero-cost encoder,
2-core machine, alternating, two rounds; docs/performance.md): the same priority 28.9 and
28.9 s, five steps down 27.2 and 27.1 s, ten steps down 34.5 and 28.7 s (there the store
waited up to 2.6 s for a batch the workers had not loaded yet).
"""

from __future__ import annotations

import contextlib
import os

WORKER_NICE = 5
"""How many steps (``nice``) below their parent the load and split workers run."""


def lower_priority() -> None:
    """Lower this process's CPU priority by :data:`WORKER_NICE` (where the OS has ``nice``)."""
    if hasattr(os, "nice"):
        with contextlib.suppress(OSError):
            os.nice(WORKER_NICE)
