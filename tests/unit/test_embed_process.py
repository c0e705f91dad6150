"""The embedding child process (tasks/embed/process.py), with the real model on the CPU.

On a GPU it is chosen for the torch backends; here ``DOCFLOW_EMBED_PROCESS=1`` forces it.
The child builds the embedder it is given and calls it as the parent would, whatever the
backend: these tests give it the ONNX one, whose child starts in about 1.5 s instead of 6
(no torch import); the torch path's vectors against ``encode`` are
tests/unit/test_token_batches.py's subject.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import numpy as np
import pytest

from tasks.common.errors import EmbedError
from tasks.embed import process
from tasks.embed.model import Embedder
from tests.conftest import REPO
from tests.orphans import survivor_of_killed_parent

TEXTS = ["Bees cluster in winter.", "Varroa mites weaken a colony.", "Honey is stored in combs."]


def child_pids() -> set[int]:
    return {child.process.pid for child in process._children.values() if child.alive()}


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> Iterator[Embedder]:
    monkeypatch.setenv(process.ENV, "1")
    yield Embedder("all-MiniLM-L6-v2", device="cpu", backend="onnx")
    process.stop_all()


def test_which_embedders_encode_in_a_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(process.ENV, raising=False)
    assert process.wanted("cuda", "torch-fp16") and process.wanted("cuda:1", "torch")
    assert not process.wanted("cuda", "onnx") and not process.wanted("cpu", "torch")
    # a device left to pick: the child's to pick where a driver is and a torch backend may run
    assert process.asks_child("auto", cuda=True) and process.asks_child("torch", cuda=True)
    assert not process.asks_child("onnx", cuda=True) and not process.asks_child("auto", cuda=False)
    monkeypatch.setenv(process.ENV, "1")
    assert process.wanted("cpu", "onnx") and process.asks_child("onnx", cuda=False)
    monkeypatch.setenv(process.ENV, "0")
    assert not process.wanted("cuda", "torch-fp16") and not process.asks_child("auto", cuda=True)


def test_the_child_gives_the_vectors_this_process_gives(
    forced: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = forced.embed(TEXTS)
    [pid] = child_pids()
    assert pid != os.getpid()
    assert forced.dimension == 384 and forced.embed([]).shape == (0, 384)
    monkeypatch.setenv(process.ENV, "0")
    local = Embedder("all-MiniLM-L6-v2", device="cpu", backend="onnx").embed(TEXTS)
    assert remote.dtype == np.float32 and remote.shape == local.shape == (3, 384)
    np.testing.assert_allclose(remote, local, atol=1e-5)


def test_a_dead_child_fails_the_batch_in_one_line_and_the_next_batch_starts_another(
    forced: Embedder,
) -> None:
    forced.embed(TEXTS[:1])
    [pid] = child_pids()
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(EmbedError, match=r"^the embedding process died \(signal 9\)$"):
        forced.embed(TEXTS)
    assert forced.embed(TEXTS).shape == (3, 384)
    assert child_pids() and pid not in child_pids()


def test_the_child_ends_when_its_parent_is_killed() -> None:
    script = textwrap.dedent(
        """
        import os, sys, time
        os.environ["DOCFLOW_EMBED_PROCESS"] = "1"
        from tasks.embed import process
        from tasks.embed.model import Embedder

        if __name__ == "__main__":
            Embedder("all-MiniLM-L6-v2", device="cpu", backend="onnx").warm_up()
            [child] = process._children.values()
            print(child.process.pid, flush=True)
            time.sleep(600)
        """
    )
    survivor = survivor_of_killed_parent(script)
    assert survivor is None, f"the embedding process {survivor} outlived its parent"


#: A user's script, unguarded: it embeds at its module level, outside ``if __name__ ==
#: "__main__":``. It makes ``cuda_likely`` say yes, as an NVIDIA driver would (this machine
#: has none), then embeds with the device left to pick: once as is, once with the child forced.
UNGUARDED = """
import json, os, sys
from tasks.embed import model, process

print("module level ran in", os.getpid(), flush=True)
model.cuda_likely = lambda: True
starts = []
start = process.EmbedProcess.__init__
process.EmbedProcess.__init__ = lambda self, *a: starts.append(a) or start(self, *a)
out = {}
for forced in ("", "1"):
    os.environ[process.ENV] = forced
    for _ in range(2):  # a new embedder per batch, as the embed task makes
        embedder = model.Embedder("all-MiniLM-L6-v2")
        vectors = embedder.embed(["a bee", "a hive"])
    out[forced or "auto"] = {
        "starts": len(starts),
        "shape": list(vectors.shape),
        "device": embedder.resolved_device,
        "backend": embedder.backend,
        "children": [c.process.pid for c in process._children.values() if c.alive()],
        "torch": "torch" in sys.modules,
    }
print(json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """Run :data:`UNGUARDED` as a script file (so that it is the ``__main__`` a spawn reruns)."""
    folder = tmp_path_factory.mktemp("unguarded")
    script = folder / "unguarded.py"
    script.write_text(UNGUARDED, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=folder,  # docflow found through the import path, as an installed package is
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_child_does_not_run_the_parents_script_again(
    unguarded: subprocess.CompletedProcess[str],
) -> None:
    """A script that embeds at its module level, unguarded, works and runs once.

    ``multiprocessing``'s spawn runs the main script again in the child (as
    ``__mp_main__``): there this script's embed started a process during the child's
    bootstrap, multiprocessing refused, and the parent's embed failed with "the embedding
    process died (exit code 1)" (what the first version of the child did).
    """
    assert unguarded.returncode == 0, unguarded.stderr[-2000:]
    ran = [line for line in unguarded.stdout.splitlines() if line.startswith("module level")]
    assert ran == [f"module level ran in {ran[0].split()[-1]}"]  # once, in the parent only
    assert len(json.loads(unguarded.stdout.splitlines()[-1])["1"]["children"]) == 1


def test_where_a_child_encodes_it_picks_the_device_and_this_process_never_imports_torch(
    unguarded: subprocess.CompletedProcess[str],
) -> None:
    """With an NVIDIA driver in sight, the device is the child's to pick (torch is imported there).

    The child (a new interpreter, where no driver is) picks the CPU. Then no child is needed
    (ONNX on the CPU): it is stopped and this process encodes. With the child forced, it
    encodes there. Neither way does the parent import torch (5–8 s of its GIL, before).
    """
    assert unguarded.returncode == 0, unguarded.stderr[-2000:]
    got = json.loads(unguarded.stdout.splitlines()[-1])
    assert got["auto"] == {
        "starts": 1,  # one child to pick the device, not one per embedder
        "shape": [2, 384],
        "device": "cpu",
        "backend": "onnx",
        "children": [],
        "torch": False,
    }
    forced = got["1"]
    assert forced["shape"] == [2, 384] and forced["device"] == "cpu" and not forced["torch"]
    assert len(forced["children"]) == 1 and forced["starts"] == 2  # encoded there, one child


#: The child's loop, its work already done (the parent's None waits in the pipe); reports,
#: from the exit handler that runs last, how many objects the collector froze.
ENDING = """
import atexit, gc, multiprocessing, sys
from tasks.embed import process

atexit.register(lambda: print("frozen", gc.get_freeze_count(), file=sys.stderr))
parent, child = multiprocessing.Pipe()
parent.send(None)
process._serve(child, "all-MiniLM-L6-v2", "cpu", "onnx")
print(parent.recv())
"""


def test_the_child_freezes_its_objects_before_the_exit_its_parent_waits_for() -> None:
    """The parent's exit waits for the child's: its teardown would walk torch's objects."""
    done = subprocess.run(
        [sys.executable, "-c", ENDING], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "(384, 'cpu')"  # it loaded the model and answered ready
    frozen = [line for line in done.stderr.splitlines() if line.startswith("frozen ")]
    assert frozen and int(frozen[-1].split()[1]) > 10_000
