"""A first ingest starts what takes seconds first: Prefect's server, then plans before the model.

The store process, which imports Chroma, starts before the run (while the server comes up),
not in its first task, and the run's process never imports Chroma.

A fresh process (the model is loaded once per process, Prefect imported once) runs the
real CLI with no Prefect server configured, so it needs Prefect's temporary server, on a
copy of the harness's database (already migrated: a server that starts in seconds). The
process start, the model's two loading functions and the plan's log line are wrapped to
print a marker first, then do their real work, so the order they ran in can be read from
stderr.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO
from tests.servers import migrated_database

SPY = textwrap.dedent(
    """
    import subprocess
    import sys


    def spy(name, real):
        def wrapper(*args, **kwargs):
            print(f"ORDER {name}", file=sys.stderr, flush=True)
            return real(*args, **kwargs)

        return wrapper


    def wrap_the_flow():
        # imported once the server is under way: importing them imports Prefect
        import flows.narrative as narrative
        import tasks.embed.model as model

        import flows.ingest as ingest

        narrative.planned = spy("planned", narrative.planned)
        real_run = ingest.run_ingest

        def run_ingest(*args, **kwargs):
            from tasks.index import store_process

            child = store_process._child
            started = child is not None and child.alive()
            imported = "chromadb" in sys.modules
            print(
                f"ORDER run store-process={started} chroma-imported={imported}",
                file=sys.stderr, flush=True,
            )
            try:
                return real_run(*args, **kwargs)
            finally:
                imported = "chromadb" in sys.modules
                print(f"ORDER ran chroma-imported={imported}", file=sys.stderr, flush=True)

        ingest.run_ingest = run_ingest
        model.load_onnx = spy("model-loaded", model.load_onnx)
        model.load_model = spy("model-loaded", model.load_model)


    popen_init = subprocess.Popen.__init__


    def started(self, args, *rest, **kwargs):
        popen_init(self, args, *rest, **kwargs)
        if any("uvicorn" in str(a) for a in args):
            imported = "prefect" in sys.modules
            print(f"ORDER server prefect-imported={imported} pid={self.pid}", file=sys.stderr)
            wrap_the_flow()


    subprocess.Popen.__init__ = started

    if __name__ == "__main__":
        from flows.cli import main

        sys.exit(main(sys.argv[1:]))
    """
)


def test_a_first_ingest_starts_the_server_first_and_plans_before_the_model_loads(
    tmp_path: Path,
) -> None:
    source = tmp_path / "docs"
    source.mkdir()
    (source / "a.md").write_text("# Hives\n\nBees cluster in winter below 10 degrees.\n")
    script = tmp_path / "spy.py"
    script.write_text(SPY)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # no server
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    env["DOCFLOW_STORE_PROCESS"] = "1"  # the default on 4 cores or more
    database = migrated_database(tmp_path / "prefect.db")
    if database:
        env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = database
    proc = subprocess.run(
        [sys.executable, str(script), "ingest", "--source", str(source), "--data-dir",
         str(tmp_path / "data"), "--embed-backend", "onnx", "--workers", "0", "--json"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    marks = [line.split()[1:] for line in proc.stderr.splitlines() if line.startswith("ORDER ")]
    order = [mark[0] for mark in marks]
    # one server, started before Prefect was imported; Prefect used it, started no other
    servers = [mark for mark in marks if mark[0] == "server"]
    assert len(servers) == 1 and servers[0][1] == "prefect-imported=False", marks
    assert order.index("server") < order.index("planned"), order
    # and stopped it when the command ended
    pid = int(servers[0][2].removeprefix("pid="))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError(f"the temporary server {pid} outlived the command")
    # the store process (which imports Chroma) started while the server came up, before the
    # run (not in its first task), and every call of the run on the store went to it: this
    # process never imported Chroma
    runs = [mark for mark in marks if mark[0] in ("run", "ran")]
    assert runs == [
        ["run", "store-process=True", "chroma-imported=False"],
        ["ran", "chroma-imported=False"],
    ], marks
    assert json.loads(proc.stdout)["chunks_written"] == 1, proc.stdout
    # the new collection learnt its dimension from the model's files; the model loaded
    # once, for the vectors, after the plan (before this change: first, for the dimension)
    assert order[1:3] == ["run", "planned"], order
    assert "model-loaded" in order, order

    from tasks.index.store import ChromaStore

    meta = ChromaStore.open(tmp_path / "data", "docflow", create=False).metadata()
    assert meta["dimension"] == 384


def ctrl_c_after_first_store(
    tmp_path: Path, batch_files: int, *args: str
) -> subprocess.CompletedProcess[str]:
    """Run ``docflow ARGS`` in a new process group, Ctrl-C'd (SIGINT to the group) after
    its first batch is stored; no Prefect server configured (a temporary one)."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update({"PREFECT_HOME": str(tmp_path / "prefect-home")})
    env.update({"DOCFLOW_BATCH_FILES": str(batch_files)})
    env["DOCFLOW_FAILPOINT"] = "store:after-upsert=interrupt@1"
    database = migrated_database(tmp_path / "prefect.db")
    if database:
        env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = database
    return subprocess.run(
        [sys.executable, "-c", AS_FOREGROUND_JOB, *args],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=600, check=False,
        start_new_session=True,  # its own group, as a terminal's foreground job
    )  # fmt: skip


#: ``python -m flows`` with Ctrl-C handled as in a terminal's foreground job. A suite run
#: from a background job (``nohup make test &``) has SIGINT ignored, its children too, and
#: Python then keeps ignoring it: the Ctrl-C tests' runs went on to their end.
AS_FOREGROUND_JOB = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('flows', run_name='__main__', alter_sys=True)"
)


def test_ctrl_c_stops_the_run_in_one_line_and_its_temporary_server_with_it(
    warm_data_dir: Path, tmp_path: Path
) -> None:
    """A terminal's Ctrl-C (SIGINT to the whole foreground group) after the first batch.

    Before, Prefect's temporary server, in the same group, died at once; the command then
    retried it for minutes, the load and split workers printed their own tracebacks, and
    the run ended on ``ConnectError``. Now the server has a session of its own and the
    workers leave Ctrl-C to the command: it records the interruption and stops the server.
    """
    import re

    from tasks.common.tables import read_table

    source = tmp_path / "docs"
    shutil.copytree(REPO / "data" / "raw", source)
    proc = ctrl_c_after_first_store(
        tmp_path, 3, "ingest", "--source", str(source), "--data-dir", str(warm_data_dir),
        "--workers", "2",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "docflow: aborted" in proc.stderr, proc.stderr[-3000:]
    assert "stopped: interrupted (Ctrl-C); " in proc.stderr, proc.stderr[-3000:]
    for noise in ("Traceback", "KeyboardInterrupt", "ConnectError", "Unable to connect"):
        assert noise not in proc.stderr, proc.stderr[-3000:]
    runs = read_table(warm_data_dir, "runs").to_pylist()
    assert [(r["status"], r["error"]) for r in runs] == [("failed", "interrupted (Ctrl-C)")]
    port = re.search(r"temporary server on http://127\.0\.0\.1:(\d+)", proc.stderr)
    assert port, proc.stderr[-3000:]
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        assert port.group(1).encode() not in args, "the temporary server outlived the command"


def test_ctrl_c_stops_a_backfill_without_running_the_days_left(
    warm_data_dir: Path, tmp_path: Path
) -> None:
    """Ctrl-C reaches the backfill's thread only; its pool's exit used to wait for every
    remaining day (a month's backfill ran to its end). Now the days not started are
    cancelled and the one running stops with it."""
    from tasks.common.tables import read_table

    landing = tmp_path / "landing"
    for day in ("2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"):
        shutil.copytree(REPO / "data" / "raw", landing / day)
    proc = ctrl_c_after_first_store(
        tmp_path, 2, "backfill", "--source-template", str(landing / "{date:%F}"),
        "--start", "2026-11-01", "--end", "2026-11-04", "--max-parallel", "1",
        "--data-dir", str(warm_data_dir),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "docflow: aborted" in proc.stderr, proc.stderr[-3000:]
    runs = read_table(warm_data_dir, "runs").to_pylist()
    assert len(runs) == 1, [(r["run_id"], r["status"]) for r in runs]  # the first day only
    assert (runs[0]["status"], runs[0]["error"]) == (
        "failed",
        "the run that started this one stopped (a backfill's Ctrl-C or SIGTERM)",
    )
