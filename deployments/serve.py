"""Serve docflow's flows from one long-running process, without a work pool or worker.

    python -m deployments.serve      # then trigger "ingest/manual-ingest" from the UI

A stub for now: the full set (nightly, manual, reingest, backfill) comes with the
orchestration issue.
"""

from __future__ import annotations

from flows.env import apply_defaults


def main() -> None:
    """Serve the manual ingest deployment until interrupted."""
    apply_defaults()
    from prefect import serve

    from flows.ingest import ingest

    serve(ingest.to_deployment(name="manual-ingest", tags=["docflow"]))


if __name__ == "__main__":
    main()
