"""The GPU check: is an ingest as fast as its slowest real part on this machine?

Measured in one process tree (docs/performance.md, "The GPU check"), in two parts that
each fit one device call: ``--part goals`` (steps 1-3) and ``--part comparisons`` (step 4);
``--part all`` runs both, the goals first, so that a run cut short loses a comparison, not
a goal. With ``--budget SECONDS`` a step expected to end past the budget is not started
(``COST``; listed under ``not_run`` with why):

1. ``docflow ingest`` of the corpus as a command, from an empty data dir, on a new
   ``PREFECT_HOME`` (the machine's first run, which also makes Prefect's database): wall
   seconds, the flow's own seconds, the time from process start to the first stored
   batch, the chunks of each batch; and a plain ``SentenceTransformer.encode`` of exactly
   that run's model inputs (float16 and batches of 256 on CUDA, the tokenizer's threads
   on; float32 and 32 on a CPU): T_encode;
2. LangChain's docs job (tests/benchmarks/langchain_job.py) on the same corpus;
3. ``copies`` copies of the corpus whose every paragraph carries its copy's marker (so
   the embedding cache serves none of them; PDFs, whose text cannot be marked, go into
   the first copy only): the ingest's chunks/s against a bare Chroma collection's upsert
   rate of the same rows in the same batches, and T_ingest / T_encode of those model inputs;
4. the comparisons, in this order: the corpus's ingest again (``corpus_again``: every
   later run on the machine), with the store on a ``chroma run`` started on the machine
   (``corpus_server``, ``--chroma-host``: what taking Chroma's writes, which hold the GIL,
   out of the flow's process gains, with a bare collection's upsert rate on that server
   beside it), with the embedded store in the flow's process (``corpus_store_here``,
   ``DOCFLOW_STORE_PROCESS=0``: what the store process, tasks/index/store_process.py,
   gains), ``store`` (``bench_store``'s ways of writing the corpus's Markdown chunks:
   embedded with Chroma's and bulk-load HNSW settings, a ``chroma run`` with 1, 2 and 4
   writers), with the model in the flow's process (``corpus_in_process``: what encoding
   in a child process gains) and with the embedded store's upserts in a pipelined writer
   process that does not wait for them (``corpus_writer``: the most any store process
   could gain, not crash-safe; tests/benchmarks/store_writer.py); the ingests against
   ``corpus_again``.

Goals (issue 28, on an H100 or H200 with 16 cores): corpus wall ≤ 25 s, flow ≤ 18 s, first
stored batch ≤ 12 s after start, wall ≤ 0.6 × LangChain's; copies: chunks/s ≥ 0.8 × bare
Chroma, T_ingest / T_encode ≤ 3. Each is printed with "met" or "NOT met" and written to the
JSON file.

The JSON file is rewritten after each step (a run cut short by its time limit still leaves
what it measured), and each ingest's log is kept beside it (``NAME.corpus.log``,
``NAME.copies.log``, ...: the timeline of its batches). With ``--profile``, and ``py-spy`` on the
PATH, one more ingest of the corpus runs last under ``py-spy record`` (every thread, a
speedscope file beside the JSON): where the time went, for the next change.

Run: ``python -m tests.benchmarks.gpu_check --corpus DIR --out FILE [--part goals]
[--budget 280] [--copies 5] [--skip langchain,copies,again,server,store_here,store,
in_process,writer] [--profile]``; on a device machine through tests/benchmarks/gpu_run.sh.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

GOALS = {
    "wall_s": 25.0,
    "flow_s": 18.0,
    "first_stored_s": 12.0,
    "vs_langchain": 0.6,
    "copies_vs_bare_chroma": 0.8,  # at least
    "copies_vs_encode": 3.0,
    "call_s": 300.0,  # the goals' part in one device call, setup included (issue 28)
}
#: The flow's log line of its first stored batch ("... batch 1/21 stored: ...").
STORED = re.compile(r" batch 1/\d+ stored")
#: The environment of an ingest that encodes in the flow's process (tasks/embed/process.py).
IN_PROCESS = {"DOCFLOW_EMBED_PROCESS": "0"}
#: The environment of an ingest that keeps the embedded store in the flow's process.
STORE_HERE = {"DOCFLOW_STORE_PROCESS": "0"}
#: The command line that ingests with the embedded store's writes in a writer process.
WRITER = "tests.benchmarks.store_writer"


def device() -> str:
    """Return "cuda" when torch sees a GPU, else "cpu"."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def machine() -> str:
    """Return the machine in words: the GPU's name (or CPU) and the core count."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{gpu}, {os.cpu_count()} cores"


def packages() -> dict[str, str]:
    """Return the versions of the parts whose speed the check measures."""
    from importlib import metadata

    names = ("torch", "sentence-transformers", "transformers", "tokenizers", "chromadb", "prefect")
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def run_ingest(
    source: Path,
    data_dir: Path,
    log: Path | None = None,
    prefix: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    options: tuple[str, ...] = (),
    module: str = "flows",
) -> dict[str, Any]:
    """Run ``python -m flows ingest`` as a user would; time it and its first stored batch.

    ``log`` keeps the command's stderr (the flow's log lines); ``prefix`` runs it under
    another command (a profiler); ``env`` adds to its environment, ``options`` to its flags;
    ``module`` runs another module's command line (tests/benchmarks/store_writer.py).
    """
    argv = [*prefix, sys.executable, "-m", module, "ingest", "--source", str(source)]
    argv += ["--data-dir", str(data_dir), "--json", *options]
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    first: list[float] = []  # when the log line of the first stored batch arrived
    err_lines: list[str] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err_lines.append(line)
            if not first and STORED.search(line):
                first.append(time.perf_counter() - started)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    out = proc.stdout.read() if proc.stdout else ""
    proc.wait()
    wall = time.perf_counter() - started
    reader.join()
    if log is not None:
        log.write_text("".join(err_lines))
    if proc.returncode not in (0, 3):
        raise RuntimeError(f"ingest exited {proc.returncode}: {''.join(err_lines)[-2000:]}")
    from tests.benchmarks.store_writer import TIMINGS

    summary = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    writer = [json.loads(line[len(TIMINGS) :]) for line in err_lines if line.startswith(TIMINGS)]
    return {
        **({"writer": writer[-1]} if writer else {}),  # store_writer.py's upserts and waits
        "wall_s": round(wall, 2),
        "flow_s": summary["seconds"],
        "first_stored_s": round(first[0], 2) if first else None,
        "chunks": summary["chunks_written"],
        "from_cache": summary["chunks_from_cache"],
        "stage_seconds": summary["stage_seconds"],
        "batches": batch_rows(data_dir),
    }


def batch_rows(data_dir: Path) -> list[int]:
    """Return the chunks of each batch of the data dir's run (its chunks parts, in order)."""
    from tasks.common.tables import list_parts, read_part

    return [read_part(p, ["chunk_id"]).num_rows for p in list_parts(data_dir, "chunks")]


def model_inputs(data_dir: Path) -> list[str]:
    """Return what the model read for each chunk of the data dir (context block and text)."""
    from tasks.common.documents import model_input
    from tasks.common.tables import list_parts, read_chunks

    return [model_input(c) for p in list_parts(data_dir, "chunks") for c in read_chunks(p)]


@functools.cache
def plain_model(on: str) -> Any:
    """Return the plain SentenceTransformer (fp16 on CUDA), loaded once for every encode."""
    from sentence_transformers import SentenceTransformer

    from tasks.embed.model import resolve_model_path

    model = SentenceTransformer(resolve_model_path("all-MiniLM-L6-v2"), device=on)
    return model.half() if on == "cuda" else model


def plain_encode(texts: list[str], on: str) -> float:
    """Return the seconds of one plain encode of ``texts`` (fp16 and batch 256 on CUDA)."""
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    model = plain_model(on)
    batch = 256 if on == "cuda" else 32
    model.encode(texts[:batch], batch_size=batch)  # warm up
    started = time.perf_counter()
    model.encode(texts, batch_size=batch, normalize_embeddings=True, show_progress_bar=False)
    if on == "cuda":
        import torch

        torch.cuda.synchronize()
    return time.perf_counter() - started


def langchain_job(source: Path, persist: Path) -> dict[str, Any]:
    """Run LangChain's docs job on ``source`` as a command; return its seconds and counts."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.langchain_job", str(source), str(persist)]
        + ["256" if device() == "cuda" else "32"],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds = time.perf_counter() - started
    return {"wall_s": round(seconds, 2), **json.loads(done.stdout.strip().splitlines()[-1])}


def mark(text: str, suffix: str, copy: int) -> str:
    """Return ``text`` with copy ``copy``'s marker in every paragraph (row, for tables)."""
    tag = f"copy {copy}"
    if suffix in (".csv", ".tsv"):
        sep = "\t" if suffix == ".tsv" else ","
        lines = text.splitlines()
        head = [f"{lines[0]}{sep}copy"] if lines else []
        return "\n".join(head + [f"{line}{sep}{tag}" for line in lines[1:]]) + "\n"
    if suffix in (".html", ".htm"):
        return re.sub(r"(<p\b[^>]*>)", rf"\1{tag} ", text, flags=re.I)
    if suffix in (".json", ".jsonl"):
        return text  # structured: its chunks are few; the cache may serve them
    return re.sub(r"\n\s*\n", f"\n\n{tag}\n", text)


def marked_copies(source: Path, dest: Path, copies: int) -> int:
    """Copy ``source`` ``copies`` times under ``dest``, each paragraph marked; return files.

    A PDF's text cannot be marked, and an unmarked copy would be embedded from the cache:
    PDFs go into the first copy only (their loading is measured once, their vectors never
    come from the cache). Five copies hold about as many chunks as four whole corpora.
    """
    count = 0
    for copy in range(copies):
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            target = dest / f"copy-{copy}" / path.relative_to(source)
            if path.suffix.lower() == ".pdf":
                if copy > 0:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                raw = path.read_bytes()
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:  # legacy encodings: as they are
                    target.write_bytes(raw)
                else:
                    target.write_text(mark(text, path.suffix.lower(), copy), encoding="utf-8")
            count += 1
    return count


def verdicts(r: dict[str, Any]) -> dict[str, str]:
    """Return "met"/"NOT met" for each goal the run measured."""
    out = {}
    for run, prefix in (("corpus", ""), ("corpus_again", "again_")):
        for key in ("wall_s", "flow_s", "first_stored_s"):
            if r.get(run, {}).get(key) is not None:
                out[prefix + key] = "met" if r[run][key] <= GOALS[key] else "NOT met"
        if f"{prefix}vs_langchain" in r:
            ok = r[f"{prefix}vs_langchain"] <= GOALS["vs_langchain"]
            out[f"{prefix}vs_langchain"] = "met" if ok else "NOT met"
    copies = r.get("copies", {})
    if "vs_bare_chroma" in copies:
        ok = copies["vs_bare_chroma"] >= GOALS["copies_vs_bare_chroma"]
        out["copies_vs_bare_chroma"] = "met" if ok else "NOT met"
    if "vs_encode" in copies:
        ok = copies["vs_encode"] <= GOALS["copies_vs_encode"]
        out["copies_vs_encode"] = "met" if ok else "NOT met"
    goals = {"corpus", "langchain", "copies"}
    if r.get("part") == "goals" and goals <= set(r) and "call_s" in r:  # every goal measured
        out["call_s"] = "met" if r["call_s"] <= GOALS["call_s"] else "NOT met"
    return out


def beside(out: Path, name: str) -> Path:
    """Return the file ``name`` beside ``out`` (``gpu-check.json`` → ``gpu-check.NAME``)."""
    return out.with_name(f"{out.stem}.{name}")


def on_chroma_server(corpus: Path, work: Path, out: Path) -> dict[str, Any]:
    """Ingest ``corpus`` with the store on a ``chroma run`` started here for it.

    Beside it, a bare collection's upsert rate of the same rows in the same batches on the
    same server (``bench_ceiling``'s measure), so the store's share reads as on embedded.
    """
    from tests.benchmarks.bench_ceiling import bare_chroma_rate
    from tests.benchmarks.chroma_server import chroma_server

    with chroma_server(work / "chroma-server", beside(out, "chroma.log")) as (port, start_s):
        options = ("--chroma-host", "127.0.0.1", "--chroma-port", str(port))
        run = run_ingest(corpus, work / "data-server", beside(out, "server.log"), options=options)
        rate = bare_chroma_rate(
            work / "data-server", "docflow", run["batches"], ("127.0.0.1", port)
        )
    run["server_start_s"] = start_s
    run["bare_chroma_rows_per_s"] = round(rate, 1)
    run["flow_vs_bare_chroma"] = round(run["chunks"] / run["flow_s"] / rate, 3)
    return run


def profile(corpus: Path, work: Path, out: Path) -> dict[str, Any] | None:
    """Ingest ``corpus`` once more under ``py-spy record``; None where py-spy is absent."""
    spy = shutil.which("py-spy")
    if spy is None:
        return None
    trace = beside(out, "speedscope.json")
    prefix = (spy, "record", "--subprocesses", "--rate", "50", "--format", "speedscope")
    prefix += ("--output", str(trace), "--")
    run = run_ingest(corpus, work / "profiled-data", beside(out, "profiled.log"), prefix)
    return {"wall_s": run["wall_s"], "flow_s": run["flow_s"], "trace": trace.name}


#: The check's two parts, each step in the order it runs: the goals' measurements (one
#: device call, whose own goal is 5 minutes, setup included) and the comparisons (a second
#: call). The first step of a part always runs: the later ones are measured against it.
PARTS = {
    "goals": ("corpus", "langchain", "copies"),
    "comparisons": ("again", "server", "store_here", "store", "in_process", "writer"),
}
#: What each later step is expected to take, in corpus ingests (the latest one's wall), from
#: the H100's run 2: LangChain's job 0.66 of the ingest, five copies 4.5 with their
#: bare-Chroma upserts and encode (``copies`` is per copy); the server step adds its start
#: and a bare collection on it, the store's six ways took about a minute. A step starts
#: only where this fits the budget left.
COST = {"copies": 0.9, "server": 1.5, "store": 1.5, "profile": 1.5}


class Check:
    """One call of the GPU check: its steps, the figures so far, and its time budget.

    ``budget`` is the call's seconds (None: no limit): a step whose expected time
    (``COST`` × the latest corpus ingest's wall) does not fit what is left is not
    started and is listed under ``not_run`` with why, so a call leaves its last seconds
    unspent rather than being cut off in the middle of a step by the machine's limit.
    """

    def __init__(
        self, corpus: Path, copies: int, work: Path, out: Path, budget: float | None = None
    ) -> None:
        self.corpus, self.copies, self.work, self.out = corpus, copies, work, out
        self.budget, self.started = budget, time.perf_counter()
        #: gpu_run.sh's setup before this process (unpacking, installing, compiling)
        self.setup_s = float(os.environ.get("GPU_RUN_SETUP_S", "0"))
        self.on = device()
        out.parent.mkdir(parents=True, exist_ok=True)
        self.result: dict[str, Any] = {
            "machine": machine(),
            "device": self.on,
            "packages": packages(),
        }

    def record(self, key: str, value: Any) -> None:
        """Keep ``value`` under ``key``, print it, and rewrite the JSON file."""
        self.result[key] = value
        print(json.dumps({key: value}), flush=True)
        self.save()

    def save(self) -> None:
        """Rewrite the JSON file: the figures so far, the call's seconds, the verdicts."""
        self.result["setup_s"] = self.setup_s
        self.result["call_s"] = round(self.setup_s + time.perf_counter() - self.started, 1)
        self.result["verdicts"] = verdicts(self.result)
        self.out.write_text(json.dumps(self.result, indent=2))

    def left(self) -> float | None:
        """Return the budget's seconds left (None: no budget)."""
        if self.budget is None:
            return None
        return self.budget - (time.perf_counter() - self.started)

    def fits(self, step: str, reference: float) -> bool:
        """Say whether ``step`` is expected to end within the budget; note it where not."""
        left, needs = self.left(), COST.get(step, 1.0) * reference
        needs *= self.copies if step == "copies" else 1
        if left is None or needs <= left:
            return True
        self.result.setdefault("not_run", {})[step] = f"needs ~{needs:.0f} s, {left:.0f} s left"
        self.save()
        return False

    def run(self, part: str, skip: set[str], with_profile: bool = False) -> dict[str, Any]:
        """Run ``part``'s steps (``all``: both parts) but those in ``skip``; return figures."""
        steps = [s for name in PARTS for s in PARTS[name] if part in (name, "all")]
        steps = [s for s in steps if s not in skip and not (s == "copies" and self.copies < 1)]
        steps += ["profile"] if with_profile else []
        self.result["part"] = part
        for step in steps:  # before a corpus ingest is measured there is nothing to estimate by
            if not self.reference() or self.fits(step, self.reference()):
                getattr(self, f"step_{step}")()
        return self.result

    def reference(self) -> float:
        """Return the seconds of the latest corpus ingest (0 before the first)."""
        run = self.result.get("corpus_again") or self.result.get("corpus") or {}
        return float(run.get("wall_s", 0.0))

    def ingest(self, name: str, **how: Any) -> dict[str, Any]:
        """Ingest the corpus into a new data dir ``data-NAME``; its log beside the JSON."""
        log = beside(self.out, f"{name}.log")
        return run_ingest(self.corpus, self.work / f"data-{name}", log, **how)

    # The goals' steps.
    def step_corpus(self) -> None:
        """The machine's first ingest (it makes Prefect's database) and its plain encode."""
        first = self.ingest("corpus")
        first["encode_s"] = round(plain_encode(model_inputs(self.work / "data-corpus"), self.on), 2)
        self.record("corpus", first)

    def step_langchain(self) -> None:
        """LangChain's docs job on the same corpus, and the corpus ingest's wall against it."""
        job = langchain_job(self.corpus, self.work / "langchain")
        if "corpus" in self.result:
            self.result["vs_langchain"] = round(self.result["corpus"]["wall_s"] / job["wall_s"], 2)
        self.record("langchain", job)

    def step_copies(self) -> None:
        """The marked copies against a bare Chroma collection and a plain encode."""
        self.record("copies", many_copies(self.corpus, self.copies, self.work, self.out, self.on))

    def make_prefect_database(self) -> None:
        """Ingest one file of the corpus, untimed: the migrations of a first run, done."""
        one = next(p for p in sorted(self.corpus.rglob("*.md")) if p.is_file())
        (self.work / "one").mkdir()
        shutil.copyfile(one, self.work / "one" / one.name)
        run_ingest(self.work / "one", self.work / "data-one")
        self.result["prefect_database"] = "made by a one-file ingest before corpus_again"

    # The comparisons' steps, each against ``corpus_again``.
    def step_again(self) -> None:
        """The same ingest in a new process, Prefect's database made: every later run."""
        if prefect_database_made() is False:  # a call of its own on a fresh machine
            self.make_prefect_database()
        again = self.ingest("again")
        if "langchain" in self.result:
            wall = self.result["langchain"]["wall_s"]
            self.result["again_vs_langchain"] = round(again["wall_s"] / wall, 2)
        self.record("corpus_again", again)

    def step_server(self) -> None:
        """The store on a ``chroma run`` (issue 28: measure it against the embedded one)."""
        self.record("corpus_server", on_chroma_server(self.corpus, self.work, self.out))

    def step_store_here(self) -> None:
        """The embedded store in the flow's process: what the store process gains."""
        self.record("corpus_store_here", self.ingest("store-here", env=STORE_HERE))

    def step_store(self) -> None:
        """``bench_store``'s ways of writing: the store's own rate on this machine."""
        self.record("store", store_rates(self.corpus, self.work))

    def step_in_process(self) -> None:
        """The model in the flow's process: what encoding in a child process gains."""
        self.record("corpus_in_process", self.ingest("in-process", env=IN_PROCESS))

    def step_writer(self) -> None:
        """The upserts in a pipelined writer (not crash-safe): the most a store process gains."""
        self.record("corpus_writer", self.ingest("writer", module=WRITER))

    def step_profile(self) -> None:
        """One more ingest under py-spy: where the time went, for the next change."""
        self.record("profiled", profile(self.corpus, self.work, self.out))


def prefect_database_made() -> bool | None:
    """Say whether the ingests' Prefect database exists (None: a server given by URL).

    Read from the environment the ingests inherit (gpu_run.sh sets ``PREFECT_HOME``).
    """
    if os.environ.get("PREFECT_API_URL"):
        return None
    home = os.environ.get("PREFECT_HOME") or Path.home() / ".prefect"
    return (Path(home) / "prefect.db").exists()


def store_rates(corpus: Path, work: Path) -> dict[str, Any]:
    """Run ``bench_store``'s measure on four copies of ``corpus``'s Markdown chunks."""
    from tests.benchmarks.bench_store import corpus_rows, measure

    markdown = corpus / "markdown"
    rows = corpus_rows(4, markdown if markdown.is_dir() else corpus)
    return measure(rows, work / "store")


def many_copies(corpus: Path, copies: int, work: Path, out: Path, on: str) -> dict[str, Any]:
    """Ingest ``copies`` marked copies of ``corpus``; rate it against bare Chroma and encode."""
    from tests.benchmarks.bench_ceiling import bare_chroma_rate

    source = work / "copies"
    marked_copies(corpus, source, copies)
    many = run_ingest(source, work / "copies-data", beside(out, "copies.log"))
    bare = bare_chroma_rate(work / "copies-data", "docflow", many["batches"])
    many["encode_s"] = round(plain_encode(model_inputs(work / "copies-data"), on), 2)
    many["chunks_per_s"] = round(many["chunks"] / many["wall_s"], 1)
    many["bare_chroma_rows_per_s"] = round(bare, 1)
    many["vs_bare_chroma"] = round(many["chunks_per_s"] / bare, 3)
    many["vs_encode"] = round(many["wall_s"] / many["encode_s"], 2)
    return many


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse the options, run the check, print and write its JSON."""
    from flows.env import apply_defaults

    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.gpu_check")
    parser.add_argument("--corpus", type=Path, required=True, help="folder of documents")
    parser.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    parser.add_argument("--copies", type=int, default=5, help="~74k chunks (PDFs once)")
    parser.add_argument(
        "--part",
        choices=[*PARTS, "all"],
        default="all",
        help="goals (the corpus, LangChain's job, the copies), comparisons, or all",
    )
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated: langchain, copies, again, server, store_here, store, "
        "in_process, writer",
    )
    parser.add_argument(
        "--budget", type=float, help="seconds: start no step not expected to end within them"
    )
    parser.add_argument("--profile", action="store_true", help="one more ingest under py-spy")
    args = parser.parse_args(argv)
    apply_defaults()
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    skip = set(filter(None, args.skip.split(",")))
    try:
        check = Check(args.corpus, args.copies, work, args.out, args.budget)
        result = check.run(args.part, skip, args.profile)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
