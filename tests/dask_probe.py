"""A flow of trivial tasks on docflow's Dask task runner: which server gets its task runs?

Run in a fresh process, as the CLI runs a flow (``python -c "from tests.dask_probe import
main; main(ADDRESS)"``); it prints the flow run's id. Its task lives here, in an importable
module, so that Dask workers find it by name.
"""

from __future__ import annotations

from prefect import flow, task

from flows import runtime


@task(name="probe")
def probe(x: int) -> int:
    """Return ``x + 1`` (what it returns does not matter: where it reports does)."""
    return x + 1


def main(address: str, n: int = 3) -> None:
    """Run ``n`` probe tasks on the Dask cluster at ``address``; print the flow run id."""

    @flow(name="dask-probe", task_runner=runtime.task_runner(address))
    def probes() -> list[int]:
        return [probe.submit(i).result() for i in range(n)]

    state = probes(return_state=True)
    print(state.state_details.flow_run_id)
