"""Unit tests for flows/runtime.py: what the flow process takes from where it runs.

The malloc settings are process-wide, so each check runs in a fresh interpreter.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

glibc_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="malloc arenas and malloc_trim are glibc's",
)


def python(code: str, **env: str) -> str:
    """Run ``code`` in a fresh interpreter at the repo root; return its stdout."""
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


@glibc_only
def test_release_memory_gives_freed_heap_back_to_the_system() -> None:
    """Blocks freed below a live one stay resident until trimmed; release_memory trims."""
    out = python(
        """
        import gc
        from tasks.common.memory import release_memory

        def rss_mb():
            with open("/proc/self/statm") as fh:
                return int(fh.read().split()[1]) * 4096 / 2**20

        blocks = [bytearray(100_000) for _ in range(1500)]  # ~150 MB on the heap
        keep = blocks[-1]  # a live block on top: free() alone cannot shrink the heap
        del blocks
        gc.collect()
        before = rss_mb()
        released = release_memory()
        print(released, round(before - rss_mb()), len(keep))
        """
    )
    released, freed_mb, _ = out.split()
    assert released == "True"
    assert int(freed_mb) > 100


@glibc_only
def test_malloc_arenas_are_capped_unless_the_environment_says_otherwise() -> None:
    code = "from tasks.common.memory import limit_malloc_arenas; print(limit_malloc_arenas())"
    assert python(code) == "True"
    assert python(code, MALLOC_ARENA_MAX="8") == "False"  # the operator's value rules


def test_runs_freeze_the_objects_from_before_them_and_the_last_one_unfreezes() -> None:
    """Overlapping runs of one process share the freeze; cyclic garbage made before the
    first is collected again once the last ends."""
    out = python(
        """
        import gc
        from tasks.common.memory import heap_frozen

        class Cycle:
            pass

        def garbage():
            a, b = Cycle(), Cycle()
            a.other, b.other = b, a

        garbage()
        with heap_frozen():
            outer = gc.get_freeze_count()
            found_inside = gc.collect()  # the cycle is frozen: out of the collector's sight
            with heap_frozen():
                garbage()  # made during the runs: collected as usual
                found_inner = gc.collect()
            still = gc.get_freeze_count()
        print(outer > 1000, found_inside, found_inner, still == outer, gc.get_freeze_count())
        print(gc.collect())  # the cycle from before the runs is collected now
        """
    )
    first, second = out.splitlines()
    assert first == "True 0 2 True 0", first
    assert second == "2", second


def test_the_model_warms_up_in_the_background_only_on_a_gpu() -> None:
    from flows.runtime import warm_up_model
    from tasks.embed import model as embed

    assert warm_up_model("all-MiniLM-L6-v2", "torch", cuda=False) is None
    embed._models.clear()
    thread = warm_up_model("all-MiniLM-L6-v2", "torch", cuda=True)
    assert thread is not None and thread.daemon
    thread.join(timeout=120)
    assert any("minilm" in key[0].lower() for key in embed._models)  # loaded, shared


def test_an_unguarded_module_level_call_is_refused(tmp_path: Path) -> None:
    """``refuse_unguarded_main`` looks at the main script's code around the calling line."""

    def run(body: str) -> subprocess.CompletedProcess[str]:
        script = tmp_path / "script.py"
        script.write_text(
            "from flows.runtime import refuse_unguarded_main\n"
            "def start(workers=1):\n"
            "    refuse_unguarded_main(workers)\n" + body,
            encoding="utf-8",
        )
        return subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT)},
            check=False,
        )

    refused = run("start()\n")
    assert refused.returncode == 1 and "script.py:4 starts docflow at its module level" in (
        refused.stderr
    )
    # one interpreter for the calls that pass (each would exit 1 if refused)
    guarded = run(
        'if __name__ == "__main__":\n    start()\n'
        "if '__main__' == __name__:\n    x = 1\n    start()\n"
        "start(0)\n"  # no worker processes: no risk
    )
    assert guarded.returncode == 0, guarded.stderr[-1500:]


def test_a_dask_cluster_without_a_configured_prefect_server_is_refused(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Long-lived Dask workers would report to a temporary server that died with its run."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.cli import main
    from flows.runtime import require_server_for_dask
    from tasks.common.errors import ConfigError

    monkeypatch.delenv("DOCFLOW_DASK_ADDRESS", raising=False)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        require_server_for_dask(None)  # no cluster: nothing to refuse
        with pytest.raises(ConfigError, match="prefect server start"):
            require_server_for_dask("tcp://127.0.0.1:8786")
        monkeypatch.setenv("DOCFLOW_DASK_ADDRESS", "tcp://127.0.0.1:8786")
        with pytest.raises(ConfigError, match="PREFECT_API_URL"):
            require_server_for_dask(None)
        data = tmp_path / "data"
        assert main(["ingest", "--data-dir", str(data)]) == 2  # the env's cluster counts too
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "prefect server start" in err
        assert not data.exists()
    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:4200/api"}):
        require_server_for_dask("tcp://127.0.0.1:8786")  # a configured server: fine
