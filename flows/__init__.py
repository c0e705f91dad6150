"""docflow's Prefect flows and the command line (``python -m flows`` or ``docflow``)."""
