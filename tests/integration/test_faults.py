"""Telling the truth under faults, with a real ``chroma run`` shared by two data dirs.

Two data dirs write their own collections to one Chroma server; each command then says
whose a collection is and refuses to write across. Readers leave no files in the data dir
(and work from a read-only mount). Last, the server is stopped: ``inspect`` shows what the
data dir holds and fails in one line, a lexical query still answers, and every ``--json``
failure is one JSON object on stdout. The encoder is the HashEncoder (the subject is what
the commands say, not the vectors); the tests run in file order on the module's server.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks.common.tables import read_table
from tasks.embed.model import register_encoder
from tasks.index.store import ChromaStore, make_client
from tests.cli_subprocess import in_process, one_error_line
from tests.fake_encoder import HashEncoder
from tests.servers import Proc, free_port, start_chroma

MODEL = "hash-faults-64"
TEXTS = {
    "hives.md": "# Hives\n\nA hive holds frames of wax comb where the bees store honey.\n",
    "swarms.md": "# Swarms\n\nIn spring a colony may swarm: the old queen leaves with half "
    "the workers.\n",
    "winter.txt": "Below ten degrees the bees form a winter cluster around the queen.\n",
}


@pytest.fixture(autouse=True)
def _encoder() -> None:
    register_encoder(MODEL, lambda: HashEncoder(64))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="module")
def chroma(workdir: Path) -> Iterator[tuple[Proc, str, int]]:
    port = free_port()
    proc, _ = start_chroma(workdir / "chroma-server", port, workdir)
    yield proc, "127.0.0.1", port
    proc.stop()


@pytest.fixture(scope="module")
def two_data_dirs(chroma: tuple[Proc, str, int], workdir: Path) -> dict[str, Any]:
    """Data dirs ``a`` (collection ``alpha``) and ``b`` (``beta``), both on the server."""
    from flows.cli import main

    _, host, port = chroma
    source = workdir / "corpus"
    source.mkdir()
    for name, text in TEXTS.items():
        (source / name).write_text(text, encoding="utf-8")
    register_encoder(MODEL, lambda: HashEncoder(64))
    dirs = {}
    for tag, collection in (("a", "alpha"), ("b", "beta")):
        data = workdir / tag
        args = ["--source", str(source), "--data-dir", str(data), "--collection", collection]
        server = ["--chroma-host", host, "--chroma-port", str(port), "--model", MODEL]
        assert main(["ingest", *args, *server, "--workers", "0"]) == 0
        dirs[tag] = data
    return {"host": host, "port": port, "source": source, **dirs}


def failure(line: str, code: int) -> dict[str, Any]:
    """Return the JSON object a --json command prints for its error ``line``."""
    return {"error": line.removeprefix("docflow: error: "), "exit_code": code}


def files_of(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def count(where: dict[str, Any], physical: str) -> int:
    return ChromaStore.open(where["a"], physical, where["host"], where["port"]).count()


# -- 3. two data dirs on one Chroma server -----------------------------------------------


def test_a_data_dir_never_reads_another_data_dirs_collection(
    two_data_dirs: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = two_data_dirs["a"], two_data_dirs["b"]
    proc = in_process(capsys, "query", "winter cluster", "--data-dir", str(b), "-k", "1")
    one_error_line(proc, "'docflow' not found in", f"this data dir ({b}) has beta")
    assert "other data dirs' collections there: alpha" in proc.stderr
    assert proc.returncode == 2

    proc = in_process(capsys, "query", "bees", "--data-dir", str(b), "--collection", "alpha")
    line = one_error_line(proc, "'alpha' on", f"belongs to another data dir ({a.resolve()})")
    assert "has beta" in line and "docflow ingest" not in line and proc.returncode == 2

    # the owner answers from it
    proc = in_process(capsys, "query", "winter cluster", "--data-dir", str(a), "-k", "1",
                      "--collection", "alpha", "--json")  # fmt: skip
    assert proc.returncode == 0 and json.loads(proc.stdout)["results"][0]["source"] == "winter.txt"

    proc = in_process(capsys, "inspect", "--data-dir", str(b), "--collection", "beta", "--json")
    info = json.loads(proc.stdout)["collection"]
    assert proc.returncode == 0 and info["count"] == info["lexical_count"] > 0
    assert info["owned"] == {
        "this_data_dir": ["beta"],
        "other_data_dirs": {"alpha": str(a.resolve())},
    }
    proc = in_process(capsys, "inspect", "--data-dir", str(b), "--collection", "alpha")
    assert proc.returncode == 0
    where = f"{two_data_dirs['host']}:{two_data_dirs['port']}"
    assert f"collection 'alpha' on {where} belongs to another data dir ({a.resolve()}); " in (
        proc.stdout
    )
    assert f"  alpha: another data dir's ({a.resolve()})" in proc.stdout


def test_a_write_into_another_data_dirs_collection_is_refused(
    two_data_dirs: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = two_data_dirs["a"], two_data_dirs["b"]
    before = count(two_data_dirs, "alpha")
    where = ["--data-dir", str(b), "--collection", "alpha"]
    for command in (
        ["ingest", "--source", str(two_data_dirs["source"]), "--model", MODEL],
        ["reingest", "--source", str(two_data_dirs["source"]), "--model", MODEL],
        ["restore"],
        ["clear", "--yes"],
    ):
        proc = in_process(capsys, *command, *where, "--json")
        line = one_error_line(proc, "'alpha' on", f"another data dir ({a.resolve()})")
        assert "choose another --collection" in line
        assert proc.returncode == 2, command
        assert json.loads(proc.stdout) == failure(line, 2)
    assert count(two_data_dirs, "alpha") == before  # untouched


# -- 5. readers leave nothing, and read from a read-only mount ------------------------------


def test_query_and_inspect_create_no_file_even_on_a_read_only_mount(
    two_data_dirs: dict[str, Any], workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = two_data_dirs["a"]
    before = files_of(a)
    assert not [f for f in before if f.endswith(("-wal", "-shm"))], before
    where = ["--data-dir", str(a), "--collection", "alpha"]
    for args in (["query", "winter cluster"], ["query", "honey", "--retrieval", "lexical"]):
        assert in_process(capsys, *args, *where).returncode == 0
    assert in_process(capsys, "inspect", *where).returncode == 0
    assert files_of(a) == before

    mount = workdir / "read-only"
    mount.mkdir()
    done = subprocess.run(["mount", "--bind", "-o", "ro", str(a), str(mount)], check=False)
    if done.returncode != 0:
        pytest.skip("no bind mounts here (needs root): the read-only mount part is skipped")
    try:
        with pytest.raises(OSError):
            (mount / "probe").write_text("x")
        where = ["--data-dir", str(mount), "--collection", "alpha"]
        proc = in_process(capsys, "query", "winter cluster", *where, "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["results"][0]["source"] == "winter.txt"
        proc = in_process(capsys, "inspect", *where, "--json")
        assert proc.returncode == 0 and json.loads(proc.stdout)["collection"]["count"] > 0
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_process_keeps_one_client_per_chroma_server(two_data_dirs: dict[str, Any]) -> None:
    """Each store task of a run opens the store: the client made at the first is kept."""
    host, port = two_data_dirs["host"], two_data_dirs["port"]
    first = make_client(host=host, port=port)
    assert make_client(host=host, port=port) is first
    assert ChromaStore.open(two_data_dirs["a"], "alpha", host, port).client is first


# -- 1 and 6. the Chroma server stops ------------------------------------------------------


@pytest.fixture(scope="module")
def server_down(two_data_dirs: dict[str, Any], chroma: tuple[Proc, str, int]) -> dict[str, Any]:
    chroma[0].stop()
    return two_data_dirs


def test_inspect_shows_the_data_dir_and_fails_in_one_line_when_chroma_is_down(
    server_down: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    a, host, port = server_down["a"], server_down["host"], server_down["port"]
    chunks = read_table(a, "chunks").num_rows
    where = ["--data-dir", str(a), "--collection", "alpha"]
    proc = in_process(capsys, "inspect", *where)
    one_error_line(proc, f"the Chroma server {host}:{port} does not answer", "chroma run")
    assert proc.returncode == 1
    assert f"  table chunks      {chunks:>8} rows" in proc.stdout
    assert f"alpha ({host}:{port}): not readable; lexical index {chunks} chunks" in proc.stdout
    assert "0 chunks" not in proc.stdout and "missing" not in proc.stdout

    proc = in_process(capsys, "inspect", *where, "--json")
    info = json.loads(proc.stdout)
    assert proc.returncode == 1 and info["exit_code"] == 1 and "does not answer" in info["error"]
    assert info["collection"]["count"] is None and info["collection"]["unreadable"]
    assert info["collection"]["lexical_count"] == info["tables"]["chunks"]["rows"] == chunks
    assert info["runs"][0]["status"] == "completed"


def test_a_lexical_query_answers_while_chroma_is_down(
    server_down: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    a = server_down["a"]
    where = ["--data-dir", str(a), "--collection", "alpha"]
    proc = in_process(capsys, "query", "winter cluster", *where, "--retrieval", "lexical", "--json")
    assert proc.returncode == 0, proc.stderr
    hits = json.loads(proc.stdout)["results"]
    texts = dict(zip(*read_table(a, "chunks").select(["chunk_id", "text"]).to_pydict().values(),
                     strict=True))  # fmt: skip
    assert hits[0]["source"] == "winter.txt" and hits[0]["text"] == texts[hits[0]["chunk_id"]]
    assert all(h["text"] == texts[h["chunk_id"]] for h in hits)

    proc = in_process(capsys, "query", "winter cluster", *where, "--json")
    line = one_error_line(proc, "does not answer", "--retrieval lexical")
    assert proc.returncode == 1
    assert json.loads(proc.stdout) == failure(line, 1)


def test_json_failures_are_one_object_on_stdout(
    server_down: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    a = server_down["a"]
    proc = in_process(capsys, "query", "bees", "--data-dir", str(a), "-k", "0", "--json")
    assert proc.returncode == 2 and json.loads(proc.stdout)["exit_code"] == 2
    proc = in_process(capsys, "ingest", "--data-dir", str(a), "--collection", "alpha", "--json")
    line = one_error_line(proc, "does not answer")
    assert proc.returncode == 1
    assert json.loads(proc.stdout) == failure(line, 1)


def test_an_unreachable_prefect_server_is_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    port = free_port()  # nothing listens there
    url = f"http://127.0.0.1:{port}/api"
    monkeypatch.setenv("PREFECT_API_URL", url)
    with temporary_settings({PREFECT_API_URL: url}):
        proc = in_process(capsys, "clear", "--yes", "--data-dir", str(tmp_path / "d"), "--json")
    line = one_error_line(
        proc, f"the Prefect server at {url} (PREFECT_API_URL) does not answer",
        f"prefect server start --host 127.0.0.1 --port {port}", "unset PREFECT_API_URL",
    )  # fmt: skip
    assert proc.returncode == 2
    assert json.loads(proc.stdout) == failure(line, 2)
