"""Prefect deployments of docflow's flows (prefect.yaml for workers, serve.py without)."""
