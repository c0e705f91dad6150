"""Stage 1, discover: which files a run reads, and which of them changed.

- :mod:`~tasks.discover.files`: include/exclude globs under a source folder, file
  fingerprints (sha256), and their comparison with the manifest (new, changed, unchanged,
  deleted, retried);
- :mod:`~tasks.discover.plan`: a run's plan (that comparison, in batches), with its Prefect
  task, and the preview of ``ingest --dry-run``;
- :mod:`~tasks.discover.partitions`: date-partitioned sources (``landing/{date:%Y-%m-%d}/``);
- :mod:`~tasks.discover.folder`: a folder as a stream of Documents (discover, then load).
"""

from tasks.discover.files import check_glob, discover
from tasks.discover.folder import lazy_load
from tasks.discover.partitions import partition_dates, partition_folder, partition_params
from tasks.discover.plan import Plan, plan_task

__all__ = [
    "Plan",
    "check_glob",
    "discover",
    "lazy_load",
    "partition_dates",
    "partition_folder",
    "partition_params",
    "plan_task",
]
