"""docflow stages: discover, load, split, embed, store; each a pure core plus a Prefect edge."""
