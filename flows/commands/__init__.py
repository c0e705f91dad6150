"""The commands of ``docflow``, one module per group (registered by :mod:`flows.cli`)."""
