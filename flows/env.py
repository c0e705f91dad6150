"""Process defaults docflow needs on an offline machine; applied before Prefect is imported.

Each is a default only (``setdefault``): a value the user exported wins.
"""

from __future__ import annotations

import os
from pathlib import Path

LOGGING_CONFIG = Path(__file__).with_name("prefect-logging.yml")

DEFAULTS: dict[str, str] = {
    # no network: never try a model hub, never send telemetry
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
    "ANONYMIZED_TELEMETRY": "False",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    # the temporary server's first start on a fresh PREFECT_HOME can take ~20 s on 2 cores
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    # quiet console: no per-task "Finished" lines, no shutdown tracebacks of the temp server
    "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
    "PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL": "WARNING",
    "PREFECT_LOGGING_SETTINGS_PATH": str(LOGGING_CONFIG),
}


def apply_defaults() -> None:
    """Set every default that the environment does not already set."""
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)
