"""What an operator sees: one-line errors, no silent no-ops, runs that explain themselves.

Errors check the exit code, the one ``docflow: error:`` line and that no traceback (nor
Prefect failure report) reaches the terminal: usage errors, found before any flow starts,
run the real CLI in this process; an error inside a run, whose terminal output Prefect's
logging shapes, runs it in a subprocess. Run logs are read back from the Prefect API. Real
Prefect, Chroma, model and files.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

from flows.cli import main
from flows.ingest import ingest
from tasks.common import failpoints
from tasks.common.config import IngestParams
from tasks.common.tables import read_table
from tests import docs
from tests.cli_subprocess import docflow, in_process, one_error_line
from tests.conftest import REPO
from tests.servers import flow_run_events

# --- errors: one line, the documented exit code, no traceback ------------------------------


def test_a_model_that_is_not_on_this_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = in_process(
        capsys, "ingest", "--data-dir", str(tmp_path / "d"), "--model", "nonexistent-model"
    )
    assert proc.returncode == 2
    one_error_line(proc, "model 'nonexistent-model' not found locally", "Hugging Face cache")


def test_the_agentic_splitter_without_an_endpoint_fails_before_any_flow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"DOCFLOW_LLM_BASE_URL": "", "OPENAI_BASE_URL": ""}
    proc = in_process(
        capsys, "ingest", "--data-dir", str(tmp_path / "d"), "--splitter", "agentic", env=env,
        monkeypatch=monkeypatch,
    )  # fmt: skip
    assert proc.returncode == 2
    one_error_line(proc, "agentic splitter needs an OpenAI-compatible endpoint")
    assert "Flow run" not in proc.stderr  # no flow was started
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["ingest", "query", "inspect"])
def test_a_data_dir_that_is_a_file(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "not-a-folder"
    afile.write_text("x", encoding="utf-8")
    args = ["question"] if command == "query" else []
    proc = in_process(capsys, command, *args, "--data-dir", str(afile))
    assert proc.returncode == 2
    one_error_line(proc, f"--data-dir {afile} is a file, not a folder")


def test_a_backfill_that_ends_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = in_process(
        capsys,
        "backfill",
        "--source-template",
        "data/landing/{date:%Y-%m-%d}/",
        "--start",
        "2024-01-05",
        "--end",
        "2024-01-01",
        "--data-dir",
        str(tmp_path / "d"),
    )
    assert proc.returncode == 2
    one_error_line(proc, "end 2024-01-01 is before start 2024-01-05")


def test_a_query_of_a_missing_collection_names_those_that_exist(
    sample_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = in_process(
        capsys, "query", "hello", "--data-dir", str(sample_index), "--collection", "nope"
    )
    assert proc.returncode == 2
    one_error_line(proc, "collection 'nope' not found", "it has docflow")
    # inspect shows the rest of the data dir, and says so too
    proc = in_process(capsys, "inspect", "--data-dir", str(sample_index), "--collection", "nope")
    assert proc.returncode == 0
    assert "collection 'nope' not found" in proc.stdout
    assert f"this data dir ({sample_index}) has docflow" in proc.stdout


def test_an_unknown_setting_suggests_the_known_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "docflow.toml"
    config.write_text("[ingest]\nchunk_sise = 300\n", encoding="utf-8")
    proc = in_process(capsys, "ingest", "--config", str(config), "--data-dir", str(tmp_path / "d"))
    assert proc.returncode == 2
    line = one_error_line(proc)
    assert line == (
        "docflow: error: unknown setting 'chunk_sise' (did you mean 'chunk_size'?) "
        f"(from config file {config})"
    )


@pytest.mark.parametrize("pattern", ["[", "docs/[a-z.md", "notes\\"])
def test_an_invalid_glob_is_a_usage_error(
    pattern: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = in_process(capsys, "ingest", "--data-dir", str(tmp_path / "d"), "--include", pattern)
    assert proc.returncode == 2
    one_error_line(proc, "invalid --include pattern")


def test_an_error_inside_a_run_is_one_line_and_its_logs_keep_the_traceback(
    corpus: Path, warm_data_dir: Path
) -> None:
    proc = docflow(
        "ingest",
        "--source",
        str(corpus),
        "--data-dir",
        str(warm_data_dir),
        env={"DOCFLOW_FAILPOINT": "store:before-upsert=raise@*"},
    )
    assert proc.returncode == 1
    one_error_line(proc, "FailpointError: failpoint store:before-upsert reached")
    [run] = read_table(warm_data_dir, "runs").to_pylist()
    assert run["status"] == "failed" and "store:before-upsert" in run["error"]
    logs = _run_logs(_flow_run_id(proc.stderr))
    assert any("Traceback" in entry.message for entry in logs)  # kept in the run's logs


# --- no silent no-ops ---------------------------------------------------------------------


def test_a_glob_that_matches_nothing_is_a_warning_and_strict_exits_3(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["ingest", "--source", str(corpus), "--data-dir", str(tmp_path / "d")]
    proc = docflow(*base, "--include", "**/*.nomatch", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["files_seen"] == 0
    assert summary["warnings"] == [f"--include '**/*.nomatch' matched no file under {corpus}"]
    assert "WARNING" in proc.stderr and "matched no file" in proc.stderr  # the run's log
    # with files that do match (two), --strict turns the warning into exit code 3
    assert main([*base, "--include", "**/*.nomatch", "--include", "seasons/*.md", "--strict"]) == 3
    assert "warning  --include '**/*.nomatch' matched no file" in capsys.readouterr().out


def test_a_missing_partition_is_a_warning_and_deletes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    shutil.copytree(REPO / "data" / "landing", work / "data" / "landing")
    template = ["--source-template", "data/landing/{date:%Y-%m-%d}/", "--collection", "land"]
    args = ["backfill", *template, "--start", "2024-01-01", "--end", "2024-01-03", "--json"]
    monkeypatch.chdir(work)  # first a dry run, in this process: it plans every partition
    assert main([*args, "--dry-run"]) == 0
    planned = {r["date"]: r for r in json.loads(capsys.readouterr().out)["partitions"]}
    assert not (work / "data" / "state.db").exists()  # and writes nothing
    assert [r["source"] for r in planned["2024-01-01"]["process"]] == [
        "2024-01-01/notes.md",
        "2024-01-01/treatment-log.md",
    ]
    proc = docflow(*args, cwd=work)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["date"]: r for r in json.loads(proc.stdout)["partitions"]}
    assert rows["2024-01-03"]["warnings"] == [
        "source folder data/landing/2024-01-03 does not exist: nothing to ingest, nothing deleted"
    ]
    assert rows["2024-01-03"]["warnings"] == planned["2024-01-03"]["warnings"]
    assert {d: r["files_new"] for d, r in rows.items()} == {
        d: r["files_new"] for d, r in planned.items()
    }
    assert rows["2024-01-01"]["chunks_written"] > 0 and not rows["2024-01-01"]["warnings"]
    # the same commands in the same folder, in this process
    assert main([*args[:-1], "--strict"]) == 3
    capsys.readouterr()
    assert main(["query", "oxalic acid", "--data-dir", "data", "--collection", "land"]) == 0
    assert "2024-01-01/treatment-log.md" in capsys.readouterr().out  # nothing was deleted


# --- runs that explain themselves ---------------------------------------------------------


def _flow_run_id(stderr: str) -> str:
    found = re.search(r"/runs/flow-run/([0-9a-f-]{36})", stderr)
    assert found, stderr[-2000:]
    return found.group(1)


def _run_logs(flow_run_id: str) -> list:  # type: ignore[type-arg]
    with get_client(sync_client=True) as client:
        return client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), limit=200
        )


def test_command_line_runs_send_prefect_heartbeats_only_when_asked(tmp_path: Path) -> None:
    """Two ``docflow clear`` runs in a process where no heartbeat setting is made, then asked.

    Without PREFECT_FLOWS_HEARTBEAT_FREQUENCY the run sends none (each sync flow run would
    end up to 1 s late joining Prefect's heartbeat thread); with it, Prefect's first beat
    at the run's start arrives as usual.
    """
    from prefect.settings import PREFECT_API_URL

    code = (
        "from prefect.client.orchestration import get_client\n"
        "from prefect.client.schemas.filters import FlowFilter, FlowFilterName\n"
        "from prefect.client.schemas.sorting import FlowRunSort\n"
        "from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings\n"
        "from flows.cli import main\n"
        "def last_run():\n"
        "    with get_client(sync_client=True) as client:\n"
        "        clear = FlowFilter(name=FlowFilterName(any_=['clear']))\n"
        "        runs = client.read_flow_runs(\n"
        "            flow_filter=clear, sort=FlowRunSort.START_TIME_DESC, limit=1\n"
        "        )\n"
        "    print('flow run', runs[0].id)\n"
        f"argv = ['clear', '--yes', '--data-dir', {str(tmp_path / 'data')!r}]\n"
        "assert main(argv) == 0\n"
        "last_run()\n"
        "with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: 30}):\n"
        "    assert main(argv) == 0\n"
        "last_run()\n"
    )
    env = {k: v for k, v in os.environ.items() if "HEARTBEAT" not in k}
    env["PREFECT_API_URL"] = str(PREFECT_API_URL.value())
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    quiet, asked = re.findall(r"^flow run (\S+)$", done.stdout, re.MULTILINE)

    def beats(run_id: str) -> int:
        return flow_run_events(run_id, "prefect.flow-run.heartbeat")

    deadline = time.monotonic() + 30
    while not beats(asked) and time.monotonic() < deadline:  # the server persists events
        time.sleep(0.2)
    assert beats(asked) == 1  # sent by the later process, so the earlier one's are in too
    assert beats(quiet) == 0


def test_the_runs_prefect_log_reads_like_the_cli(corpus: Path, warm_data_dir: Path) -> None:
    (corpus / "broken.pdf").write_bytes(b"%PDF-1.4 not really a PDF")
    state = ingest(
        IngestParams(source=str(corpus), data_dir=str(warm_data_dir), batch_files=5),
        return_state=True,
    )
    summary = state.result()
    lines: list[tuple[int, str]] = []
    deadline = time.monotonic() + 30  # run logs reach the API in the background
    while time.monotonic() < deadline:
        logs = _run_logs(str(state.state_details.flow_run_id))
        lines = [(entry.level, entry.message) for entry in logs]
        batches = [m for _, m in lines if re.match(r"batch \d/3 stored: ", m)]
        if len(batches) == 3 and any(m.startswith("completed in ") for _, m in lines):
            break
        time.sleep(0.5)
    planned = [m for _, m in lines if m.startswith("planned 13 files: 13 new")]
    assert planned and "in 3 batches" in planned[0]
    stored = [m for _, m in lines if re.match(r"batch \d/3 stored: ", m)]
    assert len(stored) == 3
    failed = [(lvl, m) for lvl, m in lines if m.startswith("failed: broken.pdf: ")]
    assert failed and failed[0][0] == 30  # a warning
    done = [m for _, m in lines if m.startswith("completed in ")]
    assert done and f"{summary['chunks_written']} chunks written" in done[0]


def test_previously_failed_files_are_retried_not_changed(corpus: Path, warm_data_dir: Path) -> None:
    broken = corpus / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4 not really a PDF")
    params = IngestParams(source=str(corpus), data_dir=str(warm_data_dir))
    assert ingest(params)["files_failed"] == 1
    again = ingest(params)
    assert (again["files_retried"], again["files_changed"], again["files_unchanged"]) == (1, 0, 12)
    broken.write_bytes(b"%PDF-1.4 still not a PDF, but other bytes")
    fixed = ingest(params)
    assert (fixed["files_retried"], fixed["files_changed"]) == (0, 1)


def test_inspect_filters_by_collection_shows_status_and_decodes_json(
    corpus: Path,
    warm_data_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data_dir = warm_data_dir
    ingest(IngestParams(source=str(corpus), data_dir=str(data_dir), collection="one"))
    ingest(IngestParams(source=str(corpus), data_dir=str(data_dir), collection="two"))
    monkeypatch.setattr(failpoints, "_hits", Counter())
    monkeypatch.setenv(failpoints.ENV, "embed:after-encode=raise")
    one = ["--data-dir", str(data_dir), "--collection", "one"]
    assert main(["ingest", "--source", str(corpus), *one, "--full-refresh"]) == 1
    monkeypatch.delenv(failpoints.ENV)
    capsys.readouterr()

    assert main(["inspect", *one, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert {r["collection"] for r in info["runs"]} == {"one"} and len(info["runs"]) == 2
    latest = info["runs"][0]
    assert latest["status"] == "failed" and "embed:after-encode" in latest["error"]
    for run in info["runs"]:
        assert isinstance(run["stage_seconds"], dict)
        assert isinstance(run["failures"], list) and isinstance(run["warnings"], list)

    assert main(["inspect", *one]) == 0
    text = capsys.readouterr().out
    run_lines = [line for line in text.splitlines() if line.startswith("  run ")]
    assert len(run_lines) == 2 and all(" one " in line for line in run_lines)
    assert " failed: " in run_lines[0] and "error: " in run_lines[0]
    assert " completed: " in run_lines[1]


# --- the README and the repository --------------------------------------------------------


def test_the_readme_backfill_command_runs_as_written(tmp_path: Path) -> None:
    found = re.search(r"^    (\.venv/bin/docflow backfill (?:.*\\\n)*.*)$", docs.text(), re.M)
    assert found, "the README (or a docs page) shows a docflow backfill command"
    argv = shlex.split(found.group(1).replace("\\\n", " "))
    assert argv[:2] == [".venv/bin/docflow", "backfill"]
    work = tmp_path / "checkout"  # the command's relative paths, in a copy of the checkout
    shutil.copytree(REPO / "data" / "landing", work / "data" / "landing")
    proc = docflow(*argv[1:], cwd=work)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("2024-01-01  completed  2 files, 2 new or changed")
    assert lines[1].startswith("2024-01-02  completed  1 files, 1 new or changed")


def test_the_readme_server_commands_are_offline_safe() -> None:
    readme = docs.page_containing("Start a server, register the deployments")
    start = readme.index("Start a server, register the deployments")
    block = readme[start : readme.index("prefect server start", start)]
    assert "PREFECT_SERVER_ANALYTICS_ENABLED=false" in block and "PREFECT_HOME" in block


def test_what_docflow_writes_in_the_data_dir_is_ignored_by_git() -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    paths = ["data/locks/docflow.lock", "data/lexical/docflow.sqlite", "data/state.db"]
    ignored = subprocess.run(
        ["git", "check-ignore", *paths], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.split()
    assert ignored == paths
    tracked = subprocess.run(
        ["git", "check-ignore", "data/landing/2024-01-01/notes.md", "data/raw/queen-rearing.md"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert tracked.stdout == ""  # the samples are part of the repository
