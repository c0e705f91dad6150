"""``python -m flows``: the docflow command line."""

from flows.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
