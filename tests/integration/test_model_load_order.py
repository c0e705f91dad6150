"""A first ingest plans before the model loads: nothing waits for the model that needs no vectors.

A fresh process (the model is loaded once per process) runs the real CLI; the model's two
loading functions and the plan's log line are wrapped to print a marker first, then do
their real work, so the order they ran in can be read from stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO

SPY = textwrap.dedent(
    """
    import sys

    import flows.narrative as narrative
    import tasks.embed.model as model


    def spy(name, real):
        def wrapper(*args, **kwargs):
            print(f"ORDER {name}", file=sys.stderr, flush=True)
            return real(*args, **kwargs)

        return wrapper


    narrative.planned = spy("planned", narrative.planned)
    model.load_onnx = spy("model-loaded", model.load_onnx)
    model.load_model = spy("model-loaded", model.load_model)

    if __name__ == "__main__":
        from flows.cli import main

        sys.exit(main(sys.argv[1:]))
    """
)


def test_a_first_ingest_plans_before_the_model_loads(tmp_path: Path) -> None:
    source = tmp_path / "docs"
    source.mkdir()
    (source / "a.md").write_text("# Hives\n\nBees cluster in winter below 10 degrees.\n")
    script = tmp_path / "spy.py"
    script.write_text(SPY)
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value() or "")}
    proc = subprocess.run(
        [sys.executable, str(script), "ingest", "--source", str(source), "--data-dir",
         str(tmp_path / "data"), "--embed-backend", "onnx", "--workers", "0", "--json"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    order = [line.split()[1] for line in proc.stderr.splitlines() if line.startswith("ORDER ")]
    # the new collection learnt its dimension from the model's files; the model loaded
    # once, for the vectors, after the plan (before this change: first, for the dimension)
    assert order[0] == "planned", order
    assert "model-loaded" in order, order

    from tasks.index.store import ChromaStore

    meta = ChromaStore.open(tmp_path / "data", "docflow", create=False).metadata()
    assert meta["dimension"] == 384
