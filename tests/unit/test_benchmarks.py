"""The benchmarks clean up after themselves (each run used to leave ~240 MB in /tmp)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import bench_orchestration as bench
from tests.conftest import CORPORA


class _Server:
    stopped = False

    def stop(self) -> None:
        self.stopped = True


@pytest.mark.parametrize("fails", [False, True])
def test_bench_orchestration_removes_its_scratch_folder(
    fails: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measurements are replaced by writes into the benchmark's folder (the subject is
    where its files go, not what it measures); a failing measurement cleans up too."""
    if not (CORPORA / "markdown").exists():
        pytest.skip("../shared/corpora is absent: the benchmark measures nothing")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    server = _Server()

    def start(home: Path, port: int, logs: Path) -> tuple[_Server, str, float]:
        home.mkdir(parents=True)
        (home / "prefect.db").write_bytes(b"x" * 1000)
        return server, f"http://127.0.0.1:{port}/api", 0.1

    def ingest_times(work: Path, model: str, repeats: int) -> dict[str, Any]:
        (work / f"data-{model}").mkdir()
        if fails:
            raise RuntimeError("a measurement failed")
        return dict.fromkeys(
            ("files", "chunks", "batches", "threads_s", "dask_s", "cluster_start_s"), 1
        ) | {"overhead_s": 0, "overhead_ratio": 1}

    monkeypatch.setattr(bench, "start_prefect_server", start)
    monkeypatch.setattr(bench, "_trigger_to_completed", lambda api, home, work: [1.0])
    monkeypatch.setattr(bench, "_ingest_times", ingest_times)
    if fails:
        with pytest.raises(RuntimeError):
            bench.main()
    else:
        assert bench.main()["trigger_to_completed_s"] == [1.0]
    assert server.stopped and list(tmp_path.iterdir()) == []


def test_bench_plan_measures_the_plan_and_its_peer_over_the_same_files(tmp_path: Path) -> None:
    from tests.benchmarks import bench_plan

    bench_plan.write_corpus(tmp_path / "corpus", 40)
    (tmp_path / "corpus" / "d0" / "skip.bin").write_bytes(b"\0")  # no loader: not planned
    assert bench_plan.bare_walk_and_hash(tmp_path / "corpus") == 41
    assert bench_plan.plan_unchanged(tmp_path / "corpus", tmp_path / "data") == 40


def test_bench_ceiling_judges_by_the_round_of_median_ratio() -> None:
    from tests.benchmarks.bench_ceiling import median_round

    rounds = [{"flow_vs_bare": r, "round": n} for n, r in enumerate((0.9, 0.62, 0.77))]
    assert median_round(rounds)["round"] == 2
    assert median_round(rounds[:1])["round"] == 0
    assert median_round(rounds[:2])["flow_vs_bare"] == 0.62  # the lower middle of two


def test_bench_ceiling_reports_a_pipelined_writer_against_the_bare_collection(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.benchmarks.bench_ceiling import report

    run = {"workers": 2, "flow_s": 18.0, "chunks": 1000, "chunks_per_s": 55.6}
    writer = {"upsert_s": 12.0, "idle_s": 0.5, "requests": 20}
    report(
        {
            "files": 3,
            "megabytes": 1.0,
            "cores": 2,
            "store": "embedded, pipelined writer process",
            "runs": [run | {"stage_seconds": {"store": 2.0}}],
            "best": run | {"writer": writer},
            "bare_chroma_rows_per_s": 100.0,
            "flow_vs_bare": 0.56,
            "rounds_flow_vs_bare": [0.56],
            "batches": [500, 500],
            "largest_batch_vs_median": 1.0,
            "store_rows_per_s": 500.0,
            "store_vs_bare": 5.0,
        }  # fmt: skip
    )
    out = capsys.readouterr().out
    # the bare collection took 1000 rows at 100 rows/s: 10 s, against the writer's 12
    assert "20 upserts took 12.0 s (the bare collection 10.0 s for the same rows: 1.20x)" in out
    assert "waited 0.5 s between them" in out
    store = next(line for line in out.splitlines() if line.startswith("store stage"))
    assert store.endswith("not judged: the stage only queues the upserts")  # not "met"
