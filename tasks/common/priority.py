"""Load and split workers, and the temporary Prefect server, run below the run's own process.

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

Prefect's temporary server (flows/temporary_server.py) runs further down: during a run it
takes the run's logs and events (a few CPU seconds an ingest of the shared corpora), none
of which the run waits for, so on a busy machine it catches up once the run leaves it the
CPU. Same benchmark, the server reniced ten steps, alternating, three rounds: flow 21.6,
20.1, 21.1 s at the run's priority, 20.6, 18.9, 19.9 s ten steps down (docs/performance.md).
"""

from __future__ import annotations

import contextlib
import os

WORKER_NICE = 5
"""How many steps (``nice``) below their parent the load and split workers run."""

SERVER_NICE = 10
"""How many steps below the command the temporary Prefect server runs."""


def lower_priority(steps: int = WORKER_NICE) -> None:
    """Lower this process's CPU priority by ``steps`` (where the OS has ``nice``)."""
    if hasattr(os, "nice"):
        with contextlib.suppress(OSError):
            os.nice(steps)
