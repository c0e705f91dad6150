"""docflow's deployments: ``prefect.yaml`` (for a worker) and ``serve.py`` (no worker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The deployment definitions, read by ``prefect deploy``, ``docflow deploy`` and serve.py.
PREFECT_FILE = Path(__file__).with_name("prefect.yaml")
#: The checkout the deployments run from (the worker changes into it before each run).
PROJECT_DIR = Path(__file__).resolve().parents[1]


def deployment_specs() -> list[dict[str, Any]]:
    """Return the ``deployments`` entries of prefect.yaml (YAML anchors resolved)."""
    import yaml

    data = yaml.safe_load(PREFECT_FILE.read_text(encoding="utf-8"))
    specs: list[dict[str, Any]] = data["deployments"]
    return specs
