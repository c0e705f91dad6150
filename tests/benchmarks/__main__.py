"""Run every benchmark (or those named): ``python -m tests.benchmarks [bench_x ...]``."""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path

from flows.env import apply_defaults

OUT = Path("bench-results")


def main(argv: list[str]) -> int:
    """Run the selected ``bench_*`` modules and save their results as JSON."""
    apply_defaults()
    names = argv or sorted(
        m.name
        for m in pkgutil.iter_modules([str(Path(__file__).parent)])
        if m.name.startswith("bench_")
    )
    OUT.mkdir(exist_ok=True)
    for name in names:
        module = importlib.import_module(f"tests.benchmarks.{name}")
        print(f"\n=== {name} ===", flush=True)
        result = module.main()
        (OUT / f"{name}.json").write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
