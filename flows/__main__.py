"""``python -m flows``: the docflow command line."""

from flows.cli import run

if __name__ == "__main__":
    run()
