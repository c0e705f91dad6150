"""Register docflow's deployments (deployments/prefect.yaml) with the configured server.

    docflow deploy        # or: python -m deployments.deploy

Creates the process work pool if it is missing, then runs ``prefect deploy --all`` from the
checkout with ``PROJECT_DIR`` set, so workers run the code of this checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from deployments import PREFECT_FILE, PROJECT_DIR, deployment_specs
from flows.env import apply_defaults
from tasks.common.errors import ConfigError, DocflowError


def pool_names() -> set[str]:
    """Return the work pools the deployments use."""
    return {spec["work_pool"]["name"] for spec in deployment_specs()}


def ensure_pool(name: str) -> bool:
    """Create process work pool ``name`` unless it exists; return whether it was created."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(name)
            return False
        except ObjectNotFound:
            pass
        try:
            client.create_work_pool(WorkPoolCreate(name=name, type="process"))
        except ObjectAlreadyExists:
            return False
        return True


def deploy(project_dir: Path = PROJECT_DIR) -> list[str]:
    """Create the work pool(s) and register every deployment; return their full names.

    Raises:
        ConfigError: If no Prefect server is configured (PREFECT_API_URL).
        DocflowError: If ``prefect deploy`` fails (its output is in the message).
    """
    from prefect.flows import load_flow_from_entrypoint
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        raise ConfigError(
            "deploying needs a Prefect server: start one (prefect server start) and "
            "export PREFECT_API_URL=http://127.0.0.1:4200/api"
        )
    for pool in sorted(pool_names()):
        ensure_pool(pool)
    prefect = Path(sys.executable).with_name("prefect")
    cmd = [str(prefect), "--no-prompt", "deploy", "--all", "--prefect-file", str(PREFECT_FILE)]
    env = {**os.environ, "PROJECT_DIR": str(project_dir.resolve())}
    proc = subprocess.run(
        cmd, cwd=project_dir, env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise DocflowError(f"prefect deploy failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    names = []
    for spec in deployment_specs():
        flow: Any = load_flow_from_entrypoint(str(project_dir / spec["entrypoint"]))
        names.append(f"{flow.name}/{spec['name']}")
    return names


def main() -> None:
    """Deploy and print the deployment names."""
    apply_defaults()
    for name in deploy():
        print(name)


if __name__ == "__main__":
    main()
