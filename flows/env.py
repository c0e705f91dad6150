"""Process defaults docflow needs on an offline machine; applied before Prefect is imported.

Each is a default only (``setdefault``): a value the user exported wins.
"""

from __future__ import annotations

import os
from pathlib import Path

LOGGING_CONFIG = Path(__file__).with_name("prefect-logging.yml")

#: Batch sizes for the server's task-run recorder and event persister, read by the
#: temporary server a command starts (and by any server started with them exported). On
#: SQLite, Prefect's default database, Prefect's own sizes left a backlog after a run of
#: ~1,000 task runs that answered new flow runs with HTTP 503 for 42 s (the client retries
#: after 2, 4, 8, 16, 32 s, then fails); with these, 9-10 s, every task run still recorded
#: (measured in ../shared/docs/prefect-recipe.md, section 11).
SQLITE_SERVER_BATCHES: dict[str, str] = {
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "200",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_READ_BATCH_SIZE": "200",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_BATCH_SIZE": "500",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_READ_BATCH_SIZE": "100",
}

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
    **SQLITE_SERVER_BATCHES,
}


def apply_defaults() -> None:
    """Set every default that the environment does not already set."""
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)
